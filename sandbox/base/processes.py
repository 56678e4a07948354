"""Worker processes for the parts of the simulator that run in parallel (sweeps, the schedules of
independent replicas), and how they die with the process that started them.

A worker must never outlive the sandbox command that started it: after ``kill -9`` of ``sandbox
sweep`` nothing may go on computing (or writing) for a sweep that is gone. The chain:

- the forkserver (a child of the command) asks Linux for SIGKILL when its parent dies
  (``prctl(PR_SET_PDEATHSIG)``, :func:`die_with_parent`), first thing, before its slow preload
  (``sandbox.base._forkserver``), and ends at once if the command died before it could ask (its parent is
  no longer the pid the command left in the environment);
- every process it forks asks the same (its parent is the forkserver) and also starts a thread that
  watches the command's pid (:func:`watch_process`) and ends the process when the command is gone:
  the fallback where there is no ``prctl`` (and for a parent-death signal lost to a race). Once the
  workers are gone the forkserver, which keeps running while any worker holds its "alive" pipe,
  sees the pipe close and exits by itself.

A call in a forked child (:func:`fork_call`, its handle :class:`Forked`): one ``os.fork`` whose child
inherits this process's memory and sends the call's value or exception back through a pipe; the
figure workers (:mod:`sandbox.base.figure_worker`) and :func:`forked_map` are built on it.

Signals: :func:`terminate_as_interrupt` makes SIGTERM (what schedulers and containers send) act as
Ctrl-C, and :func:`interrupted_by` says which of the two stopped a command (its exit status is 128 +
the signal number).
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1
_last_signal: list[int] = []  # the signal that raised the last KeyboardInterrupt of terminate_as_interrupt


def die_with_parent(sig: int = signal.SIGKILL, parent: int | None = None) -> bool:
    """Linux: ``sig`` is sent to this process when its parent (the thread that started it) exits
    (``prctl(PR_SET_PDEATHSIG)``). Returns whether it was set (False elsewhere). ``parent``: the pid
    the caller expects as its parent (read before the fork); if the parent is already another one (the
    expected one exited before the call and this process was reparented to init or a subreaper, so
    the kernel will never send ``sig``) ``sig`` is sent at once, as it would have been had the parent
    exited just after the call: with SIGKILL the process ends here. Without ``parent`` there is no
    such check (``os.getppid()`` read after the reparenting names the new parent)."""
    done = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            done = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
        except Exception:  # noqa: BLE001 - no libc prctl: the watch thread is the fallback
            done = False
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), sig)
    return done


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


COMMAND_PID_ENV = "SANDBOX_POOL_COMMAND_PID"
"""Set by :func:`pool_context` in the command before its forkserver starts: the pid the server must
die with. Read from the environment, not from ``os.getppid()``, because a command killed before the
server asked for the parent-death signal has already made init (or a subreaper) the server's parent."""


def _forkserver_setup() -> None:
    """Called in the forkserver first thing, when it imports ``sandbox.base._forkserver`` (before the slow
    preload): it dies with the command that started it, and every process it forks dies with the
    forkserver and with that command. A command already gone is found by comparing the parent with
    the pid the command left in the environment (:data:`COMMAND_PID_ENV`): the server ends at once,
    before it accepts the worker requests still queued on its socket."""
    try:
        command = int(os.environ.get(COMMAND_PID_ENV, ""))
    except ValueError:
        command = os.getppid()
    die_with_parent(parent=command)  # the command already gone (or gone between these lines): ends here

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
        os.environ[COMMAND_PID_ENV] = str(os.getpid())  # inherited by the server it starts
        ctx.set_forkserver_preload(["sandbox.base._forkserver", "sandbox.sweep._preload"])  # the binding first: light
        return ctx
    return mp.get_context("spawn")


# ------------------------------------------------------------------------------------------------
# SIGTERM as Ctrl-C
# ------------------------------------------------------------------------------------------------


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Inside the block SIGTERM raises KeyboardInterrupt in the main thread, as Ctrl-C does (the
    command then stops as on Ctrl-C: what it keeps is complete). No-op outside the main thread.

    An interruption raised where Python cannot propagate it (a weakref callback or ``__del__`` that
    runs when the signal lands) reaches ``sys.unraisablehook`` and would be lost, the command running
    on; inside the block the same signal is sent again 50 ms later, to be raised where the command can
    stop."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        _last_signal[:] = [signum]
        raise KeyboardInterrupt

    def deliver_again(unraisable):
        if not isinstance(unraisable.exc_value, KeyboardInterrupt):
            return prev_hook(unraisable)
        # Sent a moment later from a thread: raised now it would land in this hook and be lost again.
        resend = threading.Timer(0.05, os.kill, (os.getpid(), interrupted_by()))
        resend.daemon = True
        resend.start()

    _last_signal.clear()
    prev = signal.signal(signal.SIGTERM, handler)
    prev_hook, sys.unraisablehook = sys.unraisablehook, deliver_again
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, prev)
        sys.unraisablehook = prev_hook


def note_signal(signum: int) -> None:
    """Record that ``signum`` (held during a critical section) is the one that stops the command."""
    _last_signal[:] = [signum]


def interrupted_by() -> int:
    """The signal behind the last interruption: SIGTERM when :func:`terminate_as_interrupt` raised
    it, else SIGINT (Ctrl-C)."""
    return _last_signal[0] if _last_signal else int(signal.SIGINT)


# A call in a forked child (os.fork): the figure workers (sandbox.base.figure_worker) and forked_map
# ------------------------------------------------------------------------------------------------


class ChildLost(RuntimeError):
    """A forked call's child ended without a whole result; the message says how ("was killed by signal 9 (SIGKILL; ...)")."""


class ForkedError(RuntimeError):
    """A forked call's exception that does not pickle, named: "<type>: <message>"."""


def fork_call(call: Callable[[], Any], what: str = "", ignore_interrupt: bool = False) -> Forked:
    """Start ``call()`` in a child forked from this process (it starts with this process's memory:
    nothing is sent to it); its handle at once, ``what`` naming it in the caller's messages. The child
    dies with this process (:func:`die_with_parent` against this pid, :func:`watch_process` where there
    is no parent-death signal), never scans this process's objects (``gc.freeze``: a collection would
    copy every page it touches), writes through fresh ``sys.stdout``/``sys.stderr`` objects (a lock of
    the inherited ones may have been held by another thread at the fork), pickles the call's value or
    exception into a pipe and leaves with ``os._exit`` (no exit handler, no buffer of this process
    written twice). ``ignore_interrupt``: it ignores SIGINT (Ctrl-C reaches the whole process group:
    this process decides) and takes SIGTERM's default action; else it keeps the handlers it inherits."""
    parent = os.getpid()
    for stream in (sys.stdout, sys.stderr):  # nothing of this process's pending output is in the child
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    read, write = os.pipe()
    try:
        pid = os.fork()
    except BaseException:
        os.close(read)
        os.close(write)
        raise
    if pid == 0:
        code = 70
        try:
            os.close(read)
            if ignore_interrupt:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            die_with_parent(signal.SIGKILL, parent=parent)
            watch_process(parent)
            gc.freeze()
            sys.stdout = open(os.dup(1), "w", buffering=1, errors="backslashreplace")  # noqa: SIM115
            sys.stderr = open(os.dup(2), "w", buffering=1, errors="backslashreplace")  # noqa: SIM115
            try:
                data, code = pickle.dumps((True, call()), pickle.HIGHEST_PROTOCOL), 0
            except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
                data, code = _pickled_error(exc), 1
            view = memoryview(data)
            while view:
                view = view[os.write(write, view) :]
            os.close(write)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(write)
    return Forked(pid, read, what)


def _pickled_error(exc: BaseException) -> bytes:
    """``(False, exc)`` pickled; an exception that does not pickle or unpickle (an ``__init__`` taking
    other arguments fails only there) as a :class:`ForkedError`."""
    exc.__traceback__ = None
    try:
        data = pickle.dumps((False, exc), pickle.HIGHEST_PROTOCOL)
        pickle.loads(data)
        return data
    except Exception:  # noqa: BLE001 - any exception is sent, as one the parent can raise
        return pickle.dumps((False, ForkedError(f"{type(exc).__name__}: {exc}")), pickle.HIGHEST_PROTOCOL)


class Forked:
    """A call running in a forked child (:func:`fork_call`): :meth:`result` waits for it, :meth:`kill`
    stops it; either reaps the child (then :meth:`kill` is a no-op)."""

    def __init__(self, pid: int, fd: int, what: str = ""):
        self.pid, self.what, self.reaped = pid, what, False
        self._fd: int | None = fd  # read end of the pipe the child writes its outcome into

    def result(self) -> Any:
        """The call's value; its exception raised as itself (a :class:`ForkedError` when it does not
        pickle); :class:`ChildLost`, saying how the child ended, when there is no whole result."""
        chunks = []
        while chunk := os.read(self._fd, 1 << 16):
            chunks.append(chunk)
        status = self._reap()
        if not chunks:
            raise ChildLost(_ended(status))
        try:
            ok, value = pickle.loads(b"".join(chunks))
        except Exception:  # noqa: BLE001 - a message cut short: the child died writing it
            raise ChildLost("ended while reporting") from None
        if ok:
            return value
        raise value

    def kill(self) -> None:
        """SIGKILL the child (nothing more is computed or written) and reap it."""
        if not self.reaped:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._reap()

    def _reap(self) -> int | None:
        """Close the pipe, ``waitpid`` (PEP 475 retries it after a signal); the status, None when already reaped."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
        status = None
        if not self.reaped:  # marked once waitpid returned (an interrupted wait leaves it to kill)
            try:
                status = os.waitpid(self.pid, 0)[1]
            except ChildProcessError:  # reaped elsewhere
                pass
            self.reaped = True
        return status


def _ended(status: int | None) -> str:
    if status is None:
        return "ended unseen"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"was killed by signal {sig} ({name}" + ("; out of memory?)" if sig == signal.SIGKILL else ")")
    return f"exited with status {os.WEXITSTATUS(status)} without a result"


def forked_map(calls: list[Callable[[], T]]) -> list[T]:
    """``[call() for call in calls]``, every call but the last in a child (:func:`fork_call`; it keeps
    this process's signal handlers) while the last runs here at the same time. For CPU work whose
    result does not depend on the process it runs in (``task.eval_processes``: replicas evaluated on
    two cores). A child's exception is raised here; a child with no result to give (killed, out of
    memory, an exception that does not pickle) has its call run here instead. Without ``os.fork``
    (Windows) every call runs here, one after the other. A child is killed and reaped if this process
    stops waiting for it (Ctrl-C, an exception)."""
    if len(calls) <= 1 or not hasattr(os, "fork"):
        return [call() for call in calls]
    children: list[Forked] = []
    try:
        for call in calls[:-1]:
            children.append(fork_call(call))
        last = calls[-1]()
        out = []
        for child, call in zip(children, calls):
            try:
                out.append(child.result())
            except (ChildLost, ForkedError):  # no result to give: compute it here
                out.append(call())
        return out + [last]
    finally:
        for child in children:  # a no-op for those waited for
            child.kill()
