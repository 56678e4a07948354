"""Hand values of the statistics the part-3 checks compute (no simulator): the binomial boundary estimate
of ``gac_boundary``, its finite-horizon band, and the consumed-lag companion of ``ess_vs_lag``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sandbox.checks import ess, gac
from theory.delayed_stability import critical_step, spectral_radius


def test_boundary_estimate_and_binomial_se():
    grid = np.array([0.10, 0.11, 0.12, 0.13, 0.14])
    # sharp: the midpoint of the switching cell, no sampling error
    b, se = gac.boundary(grid, np.array([0.0, 0.0, 1.0, 1.0, 1.0]), per_point=8)
    assert (b, se) == pytest.approx((0.115, 0.0))
    # smooth: b = a0 − Δ/2 + Δ Σ(1 − p) = 0.095 + 0.01·(1 + 0.75 + 0.25) and SE = Δ √(Σ p(1−p)/(n−1))
    p = np.array([0.0, 0.25, 0.75, 1.0, 1.0])
    b, se = gac.boundary(grid, p, per_point=8)
    assert b == pytest.approx(0.115)
    assert se == pytest.approx(0.01 * math.sqrt((0.1875 + 0.1875) / 7))
    # not bracketed by the grid
    assert math.isnan(gac.boundary(grid, np.array([0.0, 0.0, 0.0, 0.0, 0.5]), 8)[0])
    assert math.isnan(gac.boundary(grid, np.array([0.125, 1.0, 1.0, 1.0, 1.0]), 8)[0])


def test_horizon_band_is_where_the_critical_mode_doubles_over_the_run():
    band, steps, a_star = gac.horizon_band(2000), 2000, critical_step(gac.TAU)
    assert 0 < band < 0.002
    assert spectral_radius(a_star + band, gac.TAU) ** steps == pytest.approx(2.0, rel=1e-3) or spectral_radius(
        a_star - band, gac.TAU
    ) ** -steps == pytest.approx(2.0, rel=1e-3)
    assert gac.horizon_band(8000) < band  # longer runs see slower growth


def test_consumed_lag_point():
    steps, k = 6, 2
    nominal = np.maximum(0, np.arange(steps) - k)[:, None, None] * np.ones((1, 3, 4), dtype=int)
    good = ess.lag_point(k, nominal, perturb=1.0)
    assert good.ok and good.measured == 2.0 and good.note.startswith("0 of 72")
    late = nominal.copy()
    late[4, 1, 2] += 1  # one response of one replica one version too new
    bad = ess.lag_point(k, late, perturb=1.0)
    assert not bad.ok and bad.note.startswith("1 of 72")
    assert not ess.lag_point(k, nominal, perturb=1.1).ok
    assert ess.lag_point(0, np.arange(steps)[:, None, None] * np.ones((1, 2, 2), dtype=int), 1.0).ok
