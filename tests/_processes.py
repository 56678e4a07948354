"""Helpers of the tests that start real ``sandbox`` processes and signal them (tests/sweep,
tests/report): the command line, its environment, polling with a deadline, and a process group's
live members read from /proc."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SANDBOX = [sys.executable, "-c", "from sandbox.cli import main; main()"]


def repo_env(**extra) -> dict:
    """This environment with the repository first on ``PYTHONPATH``, plus ``extra``."""
    out = dict(os.environ)
    out["PYTHONPATH"] = str(ROOT) + os.pathsep + out.get("PYTHONPATH", "")
    out.update(extra)
    return out


def poll(cond, timeout: float, step: float = 0.1):
    """``cond()`` once it is truthy, or its last value after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(step)
    return cond()


def group_pids(pgid: int) -> set[int]:
    """Live (non-zombie) processes of a process group, from /proc."""
    pids = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            pids.add(int(d))
    return pids


def kill_group(pgid: int) -> None:
    """SIGKILL every live member of a process group (a test's cleanup, whatever it left running)."""
    for pid in group_pids(pgid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
