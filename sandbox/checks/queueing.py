"""T6: the straggler cost of the simulated cluster (no learning involved).

* ``straggler_cost`` (T6): with P identical Exp(μ) workers under ``sync`` (B = P groups per step,
  no training or sync time), a step lasts the maximum of P exponentials: E = H_P/μ. Steps are
  i.i.d. (memoryless workers restart together), so the SE is the step-time std / √steps.

T7 (Little's law) is not a check: both of its sides came from the same logged jobs, an identity that no
simulator bug could break; it is a unit test of the log (``tests/system/test_queueing_laws.py``).
"""

from __future__ import annotations

import math

import numpy as np

from sandbox.checks.base import CheckResult, Point, sweeps
from sandbox.system.config import SystemConfig
from sandbox.system.timing_only import simulate_timing
from theory.order_statistics import exp_expected_max


@sweeps("P", "workers")
def run_straggler(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    ps = [1, 2, 8] if quick else [1, 2, 4, 8, 16, 32, 64]
    steps = 1500 if quick else 3000
    mu = 2.0
    result = CheckResult(
        name="straggler_cost",
        claim="synchronous step time with P Exp(μ) workers = H_P/μ (expected maximum)",
        x_label="workers P (B = P groups per step)",
        y_label="mean step time (s)",
        justification=f"4·SE over {steps} i.i.d. steps",
        log_x=True,
    )
    for P in ps:
        cfg = SystemConfig(
            num_workers=P,
            generation_time={"kind": "exponential", "mean": 1.0 / mu},
            train_time={"kind": "constant", "value": 0.0},
            staleness={"kind": "sync"},
        )
        res = simulate_timing(cfg, steps, P, seed=P, record_events=False)
        durations = np.diff([0.0] + [r["time"] for r in res.rows])
        measured = float(durations.mean())
        se = float(durations.std(ddof=1) / math.sqrt(len(durations)))
        predicted = perturb * exp_expected_max(P, mu)
        result.points.append(Point(P, predicted, measured, se, 4 * se, abs(measured - predicted) <= 4 * se))
    return result
