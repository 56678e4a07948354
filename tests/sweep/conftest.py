"""Tiny sweeps for the sweep tests: a 6-dimensional delayed quadratic, a few dozen steps."""

from __future__ import annotations

import pytest
from _sweep_tiny import TINY_BASE


@pytest.fixture
def tiny_raw():
    import copy

    return {
        "base": copy.deepcopy(TINY_BASE),
        "seeds": [0, 1],
        "sweep": {"name": "tiny"},
        "grid": {
            "system.staleness.k": [0, 2],
            "algorithm.optimizer.lr": [0.1, 0.5],
        },  # 0.5 < the critical 0.618 at k = 2 (every run converges),
    }


@pytest.fixture
def victims(tmp_path):
    """Files outside a sweep's directory that planted links point at: a run-like directory of someone
    else's files and a plain file; the planted-file and race tests assert they never change."""
    v = tmp_path / "victims"
    (v / "dir").mkdir(parents=True)
    for name in ("summary.json", "error.json", "timing.json", "run.json", "metrics.parquet", "keep.txt"):
        (v / "dir" / name).write_text(f"{name} of someone else\n")
    (v / "victim.txt").write_text("precious\n")
    return v
