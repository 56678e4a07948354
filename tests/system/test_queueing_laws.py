"""Timing against exact queueing results (docs/theory.md#t6, docs/theory.md#t7)."""

from __future__ import annotations

import numpy as np
import pytest
from _sim import simulate


@pytest.mark.component("staleness", "sync")
@pytest.mark.component("delay", "exponential")
@pytest.mark.parametrize("P,mu", [(4, 1.0), (8, 2.0)])
def test_sync_step_time_matches_expected_maximum(P, mu):
    """P identical Exp(μ) workers, B = P groups per step, no train or sync time: each step lasts
    max of P exponentials, E = H_P/μ (order statistics). Tolerance 4 standard errors of the mean
    over independent steps (steps are i.i.d. here: memoryless workers all restart together)."""
    steps = 3000
    _, res = simulate(
        steps=steps,
        B=P,
        num_workers=P,
        generation_time={"kind": "exponential", "mean": 1.0 / mu},
        train_time={"kind": "constant", "value": 0.0},
        staleness={"kind": "sync"},
    )
    durations = np.diff([0.0] + [r["time"] for r in res.rows])
    harmonic = sum(1.0 / j for j in range(1, P + 1))
    se = durations.std(ddof=1) / np.sqrt(steps)
    assert abs(durations.mean() - harmonic / mu) < 4 * se
    assert abs(durations.mean() - 1.0 / mu) > 10 * se  # and not the mean of one job: the straggler cost is real


@pytest.mark.parametrize(
    "staleness",
    [
        {"kind": "max_lag", "k_max": 3, "enforcement": "throttle"},
        {"kind": "async_ratio", "alpha": 2.0},
        {"kind": "fixed_lag", "k": 2},
    ],
)
def test_littles_law_for_dispatched_but_unconsumed_work(staleness):
    """Time-average number of groups in the pipeline (dispatched, not yet consumed) equals the
    arrival rate times the mean sojourn time, over a window after warm-up (sample-path identity
    up to edge effects; 1% tolerance). Also mean fractional staleness = L / B (T7)."""
    cluster, res = simulate(
        steps=1500,
        B=4,
        num_workers=10,
        generation_time={"kind": "lognormal", "median": 1.0, "sigma": 0.7},
        train_time={"kind": "constant", "value": 0.2},
        staleness=staleness,
    )
    jobs = [j for j in res.jobs if j.consume_step >= 0]
    t0, t1 = 0.2 * res.sim_time, 0.8 * res.sim_time
    # L: integral of the in-system count over [t0, t1] / length, clipping each interval.
    area = sum(max(0.0, min(j.consume_time, t1) - max(j.dispatch_time, t0)) for j in jobs)
    L = area / (t1 - t0)
    arrivals = [j for j in jobs if t0 <= j.dispatch_time < t1]
    lam = len(arrivals) / (t1 - t0)
    W = np.mean([j.consume_time - j.dispatch_time for j in arrivals])
    assert L == pytest.approx(lam * W, rel=0.01)
    step_time = (t1 - t0) / sum(1 for r in res.rows if t0 <= r["time"] < t1)
    frac_staleness = np.mean([(j.consume_time - j.dispatch_time) / step_time for j in arrivals])
    assert frac_staleness == pytest.approx(L / 4, rel=0.02)
