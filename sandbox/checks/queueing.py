"""T6 and T7: timing laws of the simulated cluster (no learning involved).

* ``straggler_cost`` (T6): with P identical Exp(μ) workers under ``sync`` (B = P groups per step,
  no training or sync time), a step lasts the maximum of P exponentials: E = H_P/μ. Steps are
  i.i.d. (memoryless workers restart together), so the SE is the step-time std / √steps.
* ``littles_law`` (T7): for the dispatched-but-unconsumed pipeline, the mean fractional staleness
  (dispatch-to-consume time in units of the step period) equals L/B, L the time-averaged number
  in the pipeline (Little's law, sample-path form; theory.littles_law). Both sides come from the
  same logged jobs; the 1% tolerance covers the window's edge effects.
"""

from __future__ import annotations

import math

import numpy as np

from theory.littles_law import littles_law, mean_fractional_staleness
from theory.order_statistics import exp_expected_max

from ..system.config import SystemConfig
from ..system.timing_only import simulate_timing
from .base import CheckResult, Point, sweeps


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


@sweeps("k_max", "versions")
def run_littles_law(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    lags = [1, 4] if quick else [0, 1, 2, 4, 8]
    steps = 600 if quick else 3000
    B = 4
    result = CheckResult(
        name="littles_law",
        claim="mean fractional staleness of the pipeline = L/B (Little's law)",
        x_label="k_max (AReaL-style admission, log-normal generation)",
        y_label="mean staleness (steps)",
        justification="1% relative: edge effects of a finite window (sample-path identity)",
    )
    for k in lags:
        cfg = SystemConfig(
            num_workers=12,
            generation_time={"kind": "lognormal", "median": 1.0, "sigma": 0.7},
            train_time={"kind": "constant", "value": 0.2},
            staleness={"kind": "max_lag", "k_max": k, "enforcement": "throttle"},
        )
        res = simulate_timing(cfg, steps, B, seed=k, record_events=False)
        jobs = [j for j in res.jobs if j.consume_step >= 0]
        dispatch = np.array([j.dispatch_time for j in jobs])
        consume = np.array([j.consume_time for j in jobs])
        t0, t1 = 0.2 * res.sim_time, 0.9 * res.sim_time
        little = littles_law(dispatch, consume, t0, t1)
        step_period = (t1 - t0) / sum(1 for r in res.rows if t0 < r["time"] <= t1)
        done = (consume > t0) & (consume <= t1)
        measured = float(np.mean((consume[done] - dispatch[done]) / step_period))
        predicted = perturb * mean_fractional_staleness(little.L, B)
        tol = 0.01 * predicted
        result.points.append(Point(k, predicted, measured, 0.0, tol, abs(measured - predicted) <= tol))
    return result
