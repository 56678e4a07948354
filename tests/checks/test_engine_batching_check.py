"""The engine_batching check (T13, ``docs/theory.md#t13``) fails when the simulator ignores batching.

The injected bug charges every decode step ``a + b`` whatever the number of sequences in flight (an
engine whose step time does not depend on its batch). At ``c = 1`` nothing changes, so that point
still passes; at ``c > 1`` the engine finishes ``(a + b·c)/(a + b)`` times more sequences than T13
predicts and the check must reject every such point, far outside its tolerance.
"""

from __future__ import annotations

import pytest

from sandbox.checks import batching
from sandbox.system.delays.continuous_batching import ContinuousBatchingDelay


def batching_ignored(self, n):
    return self.step_base + self.step_per_sequence


@pytest.mark.slow
def test_engine_batching_check_rejects_an_engine_that_ignores_its_batch(monkeypatch):
    monkeypatch.setattr(ContinuousBatchingDelay, "step_cost", batching_ignored)
    result = batching.run(quick=True)
    assert not result.passed
    for p in result.points:
        if p.x == 1:
            assert p.ok  # one sequence: a + b·1 = a + b, the bug is invisible
        else:
            assert not p.ok and p.measured - p.predicted > 10 * p.se


def test_saturated_engine_measures_what_the_prediction_assumes():
    # the check's scenario keeps exactly c sequences in flight: at c = 4 with fixed lengths of 10 tokens every
    # sequence lives 10 steps of a + 4b = 14 ms, so each batch of 4 ends together every 0.14 s
    cfg = batching.engine_scenario(4, 0.0, 0)
    cfg = cfg.model_copy(
        update={"generation_time": cfg.generation_time.model_copy(update={"length_median": 10.0, "length_sigma": 0.0})}
    )
    from sandbox.system.timing_only import simulate_timing

    res = simulate_timing(cfg, 5, 4, group_size=1, seed=0)
    finish = sorted(j.finish_time for j in res.jobs if j.finish_time == j.finish_time)
    assert finish[:8] == pytest.approx([0.14] * 4 + [0.28] * 4, abs=1e-12)


def test_mean_staleness_of_the_saturated_engine_is_the_closed_form():
    """T13's staleness: with a zero-time learner on B groups of one sequence, the mean dispatch-to-consume
    time in learner steps is (c + (B − 1)/2)/B whatever a and b. SE by batch means over 20 chunks of the
    consumed jobs in dispatch order; tolerance 4·SE."""
    import numpy as np

    from sandbox.system.timing_only import simulate_timing
    from theory.engine_batching import mean_staleness_saturated

    c, B = 16, 4
    res = simulate_timing(batching.engine_scenario(c, 0.0, 0), 1500, B, group_size=1, seed=1, record_events=False)
    jobs = [j for j in res.jobs if j.consume_step >= 0]
    t0, t1 = 0.2 * res.sim_time, 0.9 * res.sim_time
    period = (t1 - t0) / sum(1 for r in res.rows if t0 < r["time"] <= t1)
    stale = np.array([(j.consume_time - j.dispatch_time) / period for j in jobs if t0 < j.consume_time <= t1])
    chunks = np.array([part.mean() for part in np.array_split(stale, 20)])
    se = chunks.std(ddof=1) / np.sqrt(len(chunks))
    predicted = mean_staleness_saturated(c, B)
    assert abs(stale.mean() - predicted) <= 4 * se, (stale.mean(), predicted, se)
    assert abs(stale.mean() - 1.1 * predicted) > 4 * se  # the tolerance is tight enough to tell 10%
