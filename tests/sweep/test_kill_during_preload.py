"""``kill -9`` of ``sandbox sweep -j 2`` while the forkserver is still preloading torch (issue 42,
finding 7): the forkserver, the resource tracker and any worker are gone within a few seconds, and
no run starts afterwards. Before the fix the server only asked for the parent-death signal after
its 8-12 s of imports, kept importing after the command died, then forked a worker for it."""

from __future__ import annotations

import copy
import subprocess
import time
from pathlib import Path

import pytest
import tomli_w
from _processes import SANDBOX, group_pids, kill_group, poll, repo_env
from _sweep_tiny import TINY_BASE

pytestmark = pytest.mark.slow


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("delay", [0.0, 1.0])
def test_kill_9_while_the_forkserver_preloads_leaves_nothing(tmp_path, delay):
    base = copy.deepcopy(TINY_BASE)
    base["run"]["steps"] = 2000
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        tomli_w.dumps({"base": base, "seeds": [0, 1], "grid": {"system.staleness.k": [0, 1]}, "sweep": {"name": "k9"}})
    )
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [*SANDBOX, "sweep", str(sweep), "--out", str(out), "-j", "2", "-q"],
        env=repo_env(),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        server = poll(lambda: [p for p in group_pids(proc.pid) if "forkserver" in _cmdline(p)], timeout=240, step=0.02)
        assert server, "the forkserver never started"
        time.sleep(delay)
        started = list(out.glob("runs/**/run.json"))
        proc.kill()
        proc.wait(timeout=30)
        left = poll(lambda: not group_pids(proc.pid), timeout=5, step=0.05)
        assert left, f"alive 5 s after kill -9: {[_cmdline(p)[:80] for p in group_pids(proc.pid)]}"
        time.sleep(1.0)
        assert list(out.glob("runs/**/run.json")) == started  # no run began after the command died
    finally:
        kill_group(proc.pid)
