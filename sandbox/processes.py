"""Worker processes for the parts of the simulator that run in parallel (sweeps, the schedules of
independent replicas), and how they die with the process that started them.

A worker must never outlive the sandbox command that started it: after ``kill -9`` of ``sandbox
sweep`` nothing may go on computing (or writing) for a sweep that is gone. The chain:

- the forkserver (a child of the command) asks Linux for SIGKILL when its parent dies
  (``prctl(PR_SET_PDEATHSIG)``, :func:`die_with_parent`, set when it imports its preload module);
- every process it forks asks the same (its parent is the forkserver) and also starts a thread that
  watches the command's pid (:func:`watch_process`) and ends the process when the command is gone:
  the fallback where there is no ``prctl`` (and for a parent-death signal lost to a race). Once the
  workers are gone the forkserver, which keeps running while any worker holds its "alive" pipe,
  sees the pipe close and exits by itself.

Signals: :func:`terminate_as_interrupt` makes SIGTERM (what schedulers and containers send) act as
Ctrl-C, and :func:`interrupted_by` says which of the two stopped a command (its exit status is 128 +
the signal number).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1
_last_signal: list[int] = []  # the signal that raised the last KeyboardInterrupt of terminate_as_interrupt


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Linux: ``sig`` is sent to this process when its parent (the thread that started it) exits.
    Returns whether it was set (False elsewhere). If the parent is already gone (reparented to init
    or a subreaper before the call) the process exits at once."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except Exception:  # noqa: BLE001 - no libc prctl: the watch thread is the fallback
        return False
    return True


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and not yet reaped by its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: the pid exists
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return True  # no /proc (not Linux): the signal test above is all there is


def watch_process(pid: int, interval: float = 0.5) -> threading.Thread | None:
    """A daemon thread that ends this process (SIGKILL to itself: no cleanup, no result sent) when
    ``pid`` stops running. None when ``pid`` is this process."""
    if pid == os.getpid() or pid <= 1:
        return None

    def watch() -> None:
        while _alive(pid):
            time.sleep(interval)
        os.kill(os.getpid(), signal.SIGKILL)

    t = threading.Thread(target=watch, name=f"sandbox-watch-{pid}", daemon=True)
    t.start()
    return t


_watched: set[int] = set()


def bind_to(pid: int) -> None:
    """This process dies with its parent (:func:`die_with_parent`) and with ``pid`` (the command
    that started the pool: :func:`watch_process`); idempotent."""
    die_with_parent()
    if pid not in _watched:
        _watched.add(pid)
        watch_process(pid)


def _forkserver_setup() -> None:
    """Called in the forkserver when it imports its preload module: it dies with the command that
    started it, and every process it forks dies with the forkserver and with that command."""
    command = os.getppid()
    die_with_parent()

    def in_child() -> None:
        _watched.clear()
        bind_to(command)

    os.register_at_fork(after_in_child=in_child)


def pool_context():
    """forkserver where available: a clean server process (no threads: forking after torch has
    started its thread pools is unsafe) that imports the simulator once and forks each worker from
    it, so workers start in milliseconds instead of re-importing torch; spawn elsewhere. Either way
    the workers die with the command (module docstring)."""
    import multiprocessing as mp

    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["sandbox.sweep._preload"])
        return ctx
    return mp.get_context("spawn")


# ------------------------------------------------------------------------------------------------
# SIGTERM as Ctrl-C
# ------------------------------------------------------------------------------------------------


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Inside the block SIGTERM raises KeyboardInterrupt in the main thread, as Ctrl-C does (the
    command then stops as on Ctrl-C: what it keeps is complete). No-op outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        _last_signal[:] = [signum]
        raise KeyboardInterrupt

    _last_signal.clear()
    prev = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, prev)


def note_signal(signum: int) -> None:
    """Record that ``signum`` (held during a critical section) is the one that stops the command."""
    _last_signal[:] = [signum]


def interrupted_by() -> int:
    """The signal behind the last interruption: SIGTERM when :func:`terminate_as_interrupt` raised
    it, else SIGINT (Ctrl-C)."""
    return _last_signal[0] if _last_signal else int(signal.SIGINT)


def forked_map(calls: "list[Callable[[], T]]") -> "list[T]":
    """``[call() for call in calls]``, every call but the last in a child forked from this process
    (``os.fork``: the child starts with this process's memory, so nothing is sent to it) while the last
    runs here at the same time; each child pickles its result back through a pipe and exits with
    ``os._exit`` (no atexit handlers, no flush of this process's buffers). For CPU work whose result does
    not depend on the process it runs in (``task.eval_processes``: replicas evaluated on two cores).
    A child's exception is raised here; a child that dies without a result (killed, out of memory) has
    its call run here instead. Without ``os.fork`` (Windows) every call runs here, one after the other.
    A child is killed if this process stops waiting for it (Ctrl-C)."""
    if len(calls) <= 1 or not hasattr(os, "fork"):
        return [call() for call in calls]
    import gc
    import pickle

    children: list[tuple[int, int]] = []  # (pid, read end of its pipe)
    try:
        for call in calls[:-1]:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: compute, send, exit without running anything of the parent's
                code = 1
                try:
                    os.close(r)
                    gc.disable()  # a short life: no collection walking (and copying) the parent's heap
                    die_with_parent()
                    try:
                        payload = pickle.dumps((True, call()), protocol=pickle.HIGHEST_PROTOCOL)
                    except BaseException as e:  # noqa: BLE001 - sent to the parent, which raises it
                        payload = pickle.dumps((False, e), protocol=pickle.HIGHEST_PROTOCOL)
                    with os.fdopen(w, "wb") as fh:
                        fh.write(payload)
                    code = 0
                finally:
                    os._exit(code)
            os.close(w)
            children.append((pid, r))
        last = calls[-1]()
        out = []
        for (pid, r), call in zip(children, calls):
            with os.fdopen(r, "rb") as fh:
                data = fh.read()
            os.waitpid(pid, 0)
            children = [c for c in children if c[0] != pid]
            if not data:  # died without a result: compute it here
                out.append(call())
                continue
            ok, value = pickle.loads(data)
            if not ok:
                raise value
            out.append(value)
        return out + [last]
    finally:
        for pid, r in children:  # left waiting (an exception here): stop and reap them
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
            try:
                os.close(r)
            except OSError:
                pass
