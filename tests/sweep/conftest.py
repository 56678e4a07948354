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
        "grid": {"system.staleness.k": [0, 2], "algorithm.optimizer.lr": [0.1, 0.5]},  # 0.5 < the critical 0.618 at k = 2 (every run converges),
    }
