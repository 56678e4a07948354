"""Timing-only harness for system tests (no learning)."""

from __future__ import annotations

import numpy as np

from sandbox.system.config import SystemConfig
from sandbox.system.timing_only import simulate_timing


def simulate(steps=300, B=4, seed=0, **system):
    return None, simulate_timing(SystemConfig(**system), steps, B, seed=seed)


def lags(res):
    consumed = [j for j in res.jobs if j.consume_step >= 0]
    return np.array([j.consume_step - j.head_version for j in consumed]), consumed
