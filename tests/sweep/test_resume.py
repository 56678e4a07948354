"""Kill a running `sandbox sweep` and run it again: finished runs are not recomputed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import tomli_w
from _sweep_tiny import TINY_BASE

from sandbox.sweep.api import load_results


def _summaries(out: Path) -> dict[str, int]:
    return {p.parent.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*/summary.json")}


def test_killed_sweep_resumes(tmp_path):
    base = dict(TINY_BASE, run=dict(TINY_BASE["run"], steps=150))
    sweep = {
        "base": base,
        "seeds": [0, 1, 2],
        "sweep": {"name": "killme", "workers": 1},
        "grid": {"system.staleness.k": [0, 1, 2]},
    }
    path = tmp_path / "sweep.toml"
    path.write_text(tomli_w.dumps(sweep))
    out = tmp_path / "out"
    cmd = [sys.executable, "-c", "from sandbox.cli import app; app()", "sweep", str(path), "--out", str(out), "-q"]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while not _summaries(out) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert _summaries(out), (
            f"no run finished: {proc.poll()} {proc.stdout.read() if proc.poll() is not None else ''}"
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the sweep and any worker it started
        proc.wait()
    before = _summaries(out)
    assert 1 <= len(before) < 9, "the sweep should have been killed part way"
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    after = _summaries(out)
    assert len(after) == 9
    for rid, mtime in before.items():
        assert after[rid] == mtime, f"run {rid} was recomputed"
    assert f"{9 - len(before)} runs computed, {len(before)} already done" in " ".join(res.stdout.split())
    df = load_results(out)
    assert len(df) == 9 and set(df.status) == {"completed"}
