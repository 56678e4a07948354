"""Every check fails under a simulator bug it exists to catch (issue 16 part 3, issue 34).

Bugs injected into the fixed-lag control (``sandbox/system/staleness/fixed_lag.py``), the schedule of the
quadratic and bit-string checks: ``delay_ignored`` makes step t consume version t (the run is synchronous
while the scenario says lag k), ``lag_off_by_one`` makes it consume version t − k + 1. Bugs for the checks
whose lag comes from the timing (``random_lag``, ``straggler_cost``): ``delays_ignored`` (every duration is
its distribution's mean), ``lag_ignored`` (the learner applies gradients at its newest weights) and
``weights_one_version_older`` (a lag off by one in the weights a worker gets). Each test runs the check's
own code at its quick settings, where useful restricted to the point that carries the assertion, and shows
which assertion catches the bug (and, where it matters, that the other assertion alone would not).
``minibatch_lag``'s broken learners are in ``test_minibatch_lag_check.py``.
"""

from __future__ import annotations

import pytest
import torch

from sandbox.checks import bound, ess, fisher, gac, random_lag
from sandbox.learner.trainer import OracleLearner
from sandbox.system.cluster import Cluster, WeightStore
from sandbox.system.staleness.fixed_lag import FixedLagControl


def delay_ignored(self):
    step = self.dispatched // self.B
    return step, step


def lag_off_by_one(self):
    step = self.dispatched // self.B
    return step, max(0, step - self.cfg.k + 1)


def by_series(result):
    return {p.series: p for p in result.points}


@pytest.mark.slow
def test_async_sgd_bound_rejects_a_delay_free_simulator(monkeypatch):
    monkeypatch.setattr(bound, "QUICK", {**bound.QUICK, "taus": [8]})
    monkeypatch.setattr(FixedLagControl, "_next", delay_ignored)
    points = by_series(bound.run(quick=True))
    assert points["bound (upper)"].ok  # the loose bound alone cannot tell
    exact = points["exact (T2 transient)"]
    assert not exact.ok and abs(exact.measured - exact.predicted) > 10 * exact.se
    # what it measured is the delay-free prediction at the same η
    assert abs(exact.measured - bound.exact_average(bound.step_size(8, 600), 0, 600)) < 4 * exact.se


@pytest.mark.slow
def test_ess_vs_lag_companion_rejects_a_wrong_lag(monkeypatch):
    monkeypatch.setattr(ess, "QUICK", {**ess.QUICK, "lags": [2]})
    monkeypatch.setattr(FixedLagControl, "_next", lag_off_by_one)
    result = ess.run(quick=True)
    points = by_series(result)
    assert points["E[W²] from the consumed version"].ok  # predicts from what was consumed: blind to the bug
    lag = points["consumed lag"]
    assert not lag.ok and lag.measured == 1.0 and "off the nominal version" in lag.note
    assert not result.passed


@pytest.mark.slow
def test_ess_fisher_rejects_a_wrong_lag(monkeypatch):
    monkeypatch.setattr(fisher, "QUICK", {**fisher.QUICK, "lags": [2]})
    monkeypatch.setattr(FixedLagControl, "_next", lag_off_by_one)
    exact = by_series(fisher.run(quick=True))["Var log W = ΔθᵀFΔθ (exact)"]
    # the batch was generated one version late: about a quarter of the divergence the nominal lag predicts
    assert not exact.ok and exact.measured < 0.5 * exact.predicted


@pytest.mark.slow
def test_gac_boundary_rejects_a_delay_free_simulator(monkeypatch):
    small = {"dim": 20, "steps": 400, "spacing": 0.02, "per_point": 2}
    monkeypatch.setattr(gac, "QUICK", small)
    grid, p, _ = gac.measure([], small)
    assert gac.boundary(grid, p, 2)[0] == pytest.approx(gac.critical_step(gac.TAU), abs=0.02)  # sane when correct
    monkeypatch.setattr(FixedLagControl, "_next", delay_ignored)
    plain = gac.run(quick=True).points[0]
    assert not plain.ok  # synchronous SGD is stable on the whole grid (a*(0) = 2): no boundary


@pytest.mark.slow
def test_async_sgd_bound_rejects_a_lag_off_by_one(monkeypatch):
    """Issue 34: with 64 replicas the off-by-one lag was 2.4 SE from the exact prediction and passed."""
    monkeypatch.setattr(bound, "QUICK", {**bound.QUICK, "taus": [8]})
    monkeypatch.setattr(FixedLagControl, "_next", lag_off_by_one)
    exact = by_series(bound.run(quick=True))["exact (T2 transient)"]
    assert not exact.ok and abs(exact.measured - exact.predicted) > 5 * exact.se
    # what it measured is the lag-7 prediction at the same η
    assert abs(exact.measured - bound.exact_average(bound.step_size(8, 600), 7, 600)) < 4 * exact.se


@pytest.mark.slow
def test_gac_boundary_fails_when_the_boundary_is_outside_the_grid(monkeypatch):
    """Issue 34: a GAC boundary the grid does not bracket (measured NaN, SE inf) passed as inf ≤ inf."""
    small = {"dim": 20, "steps": 400, "spacing": 0.02, "per_point": 2}
    monkeypatch.setattr(gac, "QUICK", small)
    real = gac.measure

    def gac_never_diverges(stabilizers, cfg):  # the GAC map stable on the whole grid: no boundary inside it
        grid, p, projected = real(stabilizers, cfg)
        return (grid, p * 0.0, projected) if stabilizers else (grid, p, projected)

    monkeypatch.setattr(gac, "measure", gac_never_diverges)
    plain, with_gac = gac.run(quick=True).points
    assert plain.ok and gac.math.isnan(with_gac.measured) and with_gac.se == float("inf")
    assert not with_gac.ok and "no boundary inside the grid" in with_gac.note


# ------------------------------------------------------------------ random_lag: the lag comes from the timing
def delays_ignored(self, name, tokens=0, speed=1.0):
    """Every duration is its distribution's mean: the timing ignores the delay distributions."""
    return getattr(self.cfg, name).expected(tokens) / speed


def lag_ignored(original):
    """The learner applies the gradient at its current weights instead of the one the worker computed at
    the job's (stale) version; the versions stay stamped correctly."""

    def compute_loss(self, step, jobs, context=None):
        for job in jobs:
            fresh = self.task.gradient(self.params, job.payload.num_responses, torch.Generator().manual_seed(0), step)
            job.payload.grad = fresh.grad
        return original(self, step, jobs, context)

    return compute_loss


def weights_one_version_older(self, version):
    """The worker gets the weights one version older than the version it is stamped with."""
    return self.snapshots[max(version - 1, 0)]


def _random_lag_points(monkeypatch):
    monkeypatch.setattr(random_lag, "QUICK", {"workers": [4], "runs": 20})
    return by_series(random_lag.run(quick=True))


@pytest.mark.slow
def test_random_lag_rejects_ignored_delays(monkeypatch):
    assert all(p.ok for p in _random_lag_points(monkeypatch).values())  # sane when correct, at this size
    monkeypatch.setattr(Cluster, "_draw", delays_ignored)
    points = _random_lag_points(monkeypatch)
    assert not points["mean lag"].ok and not points["mean path"].ok


@pytest.mark.slow
def test_random_lag_rejects_an_ignored_lag(monkeypatch):
    monkeypatch.setattr(OracleLearner, "compute_loss", lag_ignored(OracleLearner.compute_loss))
    points = _random_lag_points(monkeypatch)
    assert points["mean lag"].ok  # the versions are stamped right: the timing series cannot see it
    path = points["mean path"]
    assert not path.ok and abs(path.measured - path.predicted) > 10 * path.se


@pytest.mark.slow
def test_random_lag_rejects_a_lag_off_by_one(monkeypatch):
    monkeypatch.setattr(WeightStore, "get", weights_one_version_older)
    monkeypatch.setattr(WeightStore, "prune", lambda self, oldest_needed: None)  # keep the version the bug reads
    points = _random_lag_points(monkeypatch)
    assert points["mean lag"].ok and not points["mean path"].ok


# ------------------------------------------------------------ the fixed-lag quadratic checks and the straggler cost
@pytest.mark.slow
@pytest.mark.parametrize("name", ["critical_lr", "delayed_variance", "gradient_cosine", "staleness_divergence"])
def test_fixed_lag_quadratic_checks_reject_a_delay_free_simulator(monkeypatch, name):
    """Issue 34: each check fails under a simulator bug it exists to catch. With the delay ignored, every
    point with a delay fails and every point without one (τ = 0, the synchronous reference) still passes."""
    from sandbox.checks.api import CHECKS

    monkeypatch.setattr(FixedLagControl, "_next", delay_ignored)
    result = CHECKS[name].run(quick=True)
    delayed = [p for p in result.points if not (p.x == 0 or p.series == "τ = 0")]
    reference = [p for p in result.points if p not in delayed]
    assert delayed and not any(p.ok for p in delayed)
    assert reference and all(p.ok for p in reference)


@pytest.mark.slow
def test_straggler_cost_rejects_ignored_delays(monkeypatch):
    """Every job taking its mean time removes the straggler: P > 1 fails, P = 1 (no straggler) passes."""
    from sandbox.checks.api import CHECKS

    monkeypatch.setattr(Cluster, "_draw", delays_ignored)
    points = {p.x: p for p in CHECKS["straggler_cost"].run(quick=True).points}
    assert points[1].ok and not points[2].ok and not points[8].ok
