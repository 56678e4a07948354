"""The process primitives of :mod:`sandbox.base.processes`, with real processes: :func:`die_with_parent`
against a parent already gone (the kernel would never send the signal: the process ends at once) and
against a live one (the signal comes when it exits); :func:`fork_call`'s handle (value, exception,
a killed child named with its signal, ``kill``) and its SIGINT policy. :func:`forked_map` is tested with
the LM evaluation it serves (tests/lm/test_lm_replicas.py), the figure workers in tests/report."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from _processes import repo_env

from sandbox.base.processes import ChildLost, ForkedError, fork_call

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

# A middle process forks a grandchild and exits; the grandchild prints what it sees on the stdout it
# shares with the middle one (this test's pipe: EOF once both are gone).
GRANDCHILD = """
import os, signal, sys, time
from sandbox.base.processes import die_with_parent
mode = sys.argv[1]
r, w = os.pipe()
middle = os.getpid()
if os.fork():
    os.close(w)
    if mode == "alive":
        os.read(r, 1)  # the grandchild has asked for its signal: exit now
    os._exit(0)
os.close(r)
if mode != "alive":
    while os.getppid() == middle:  # reparented once the middle process is gone
        time.sleep(0.01)
    print("reparented", flush=True)
print("set", die_with_parent(signal.SIGKILL, parent=None if mode == "unchecked" else middle), flush=True)
if mode == "alive":
    os.write(w, b"x")
time.sleep(0.5 if mode == "unchecked" else 60)
print("survived", flush=True)
"""


def _grandchild(mode: str) -> tuple[str, float]:
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", GRANDCHILD, mode], env=repo_env(), stdout=subprocess.PIPE, text=True, timeout=50
    ).stdout
    return out, time.monotonic() - t0


@linux
def test_die_with_parent_ends_the_process_at_once_when_the_expected_parent_is_already_gone():
    out, took = _grandchild("late")
    assert out == "reparented\n"  # SIGKILL inside the call: nothing printed after it
    assert took < 40  # not the 60 s sleep
    # the control: without the expected parent nothing is checked and the process lives on
    assert _grandchild("unchecked")[0] == "reparented\nset True\nsurvived\n"


@linux
def test_die_with_parent_set_while_the_parent_lives_signals_when_it_exits():
    out, took = _grandchild("alive")
    assert out == "set True\n" and took < 40  # killed when the middle process exited, not after 60 s


def _value():
    return {"pid": os.getpid(), "big": b"x" * 300_000}  # more than a pipe's buffer


class _Odd(Exception):
    def __init__(self, a, b):  # its args do not rebuild it: it does not unpickle
        super().__init__(f"odd {a}/{b}")


def _raise_odd():
    raise _Odd(1, 2)


def _raise_value():
    raise ValueError("from the child")


def _die():
    os.kill(os.getpid(), signal.SIGKILL)


def _exit_3():
    os._exit(3)


def _interrupted_after_a_while():
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C as it reaches the process group
    time.sleep(0.2)
    return "went on"


def test_fork_call_returns_raises_and_names_how_a_child_ended():
    child = fork_call(_value, what="x")
    got = child.result()
    assert got["pid"] == child.pid != os.getpid() and got["big"] == b"x" * 300_000
    assert child.reaped
    with pytest.raises(ValueError, match="^from the child$"):
        fork_call(_raise_value).result()
    with pytest.raises(ForkedError, match="^_Odd: odd 1/2$"):
        fork_call(_raise_odd).result()
    with pytest.raises(ChildLost, match=r"^was killed by signal 9 \(SIGKILL; out of memory\?\)$"):
        fork_call(_die).result()
    with pytest.raises(ChildLost, match="^exited with status 3 without a result$"):
        fork_call(_exit_3).result()


def test_fork_call_kill_stops_and_reaps_the_child(tmp_path):
    late = tmp_path / "late"
    child = fork_call(lambda: (time.sleep(30), late.write_text("late")))
    child.kill()
    assert child.reaped
    with pytest.raises(ChildProcessError):
        os.waitpid(child.pid, os.WNOHANG)  # reaped
    child.kill()  # again: a no-op
    time.sleep(0.3)
    assert not late.exists()


def test_fork_call_sigint_policy():
    """``ignore_interrupt=True`` (the figure workers): Ctrl-C is the parent's, the call goes on; else the
    child keeps the inherited handler (Python's: KeyboardInterrupt), which comes back as itself."""
    assert fork_call(_interrupted_after_a_while, ignore_interrupt=True).result() == "went on"
    with pytest.raises(KeyboardInterrupt):
        fork_call(_interrupted_after_a_while).result()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_interruption_inside_a_weakref_callback_is_not_lost(sig):
    """A signal whose KeyboardInterrupt is raised inside a weakref callback (where Python can only print
    "Exception ignored") still stops the block, and is reported as the signal it was."""
    import weakref

    from sandbox.base.processes import interrupted_by, terminate_as_interrupt

    class Obj:
        pass

    def callback(_ref):
        os.kill(os.getpid(), sig)
        for _ in range(10_000):  # the handler runs here, inside the callback
            pass

    with pytest.raises(KeyboardInterrupt):
        with terminate_as_interrupt():
            obj = Obj()
            ref = weakref.ref(obj, callback)  # noqa: F841 - kept alive so the callback runs
            del obj
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                time.sleep(0.001)
    assert interrupted_by() == sig
