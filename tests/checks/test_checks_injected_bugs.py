"""The discriminating assertions of issue 16 part 3 fail when the simulator is wrong.

Two simulator bugs are injected into the fixed-lag control (``sandbox/system/staleness/fixed_lag.py``), the
schedule every one of these checks runs on: ``delay_ignored`` makes step t consume version t (the run is
synchronous while the scenario says lag k), ``lag_off_by_one`` makes it consume version t − k + 1. Each test
runs the check's own code at its quick settings, restricted to the point that carries the assertion, and
shows which assertion catches the bug (and, where it matters, that the older assertion alone would not).
"""

from __future__ import annotations

import pytest

from sandbox.checks import bound, ess, fisher, gac
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
