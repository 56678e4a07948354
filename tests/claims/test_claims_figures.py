"""Claims in quick mode give values, and their figures cannot mislead: an undefined cosine is a gap
(not a cosine of 0) and a band never leaves the quantity's possible range (issue 27)."""

import math

import numpy as np
import pytest

from sandbox.claims import _runs
from sandbox.claims.api import CLAIMS
from sandbox.claims.base import band
from sandbox.claims.gac import VARIANTS, defined_cosine


@pytest.fixture(scope="module")
def gac_quick():
    _runs.clear_cache()
    yield CLAIMS["gac_cosine"].run(quick=True, seeds=3, lm_seeds=0)
    _runs.clear_cache()


def test_gac_quick_claim_has_a_value_in_every_row(gac_quick):
    for row in gac_quick.rows:
        assert row.seeds == 3, (row.label, row.values, row.note)
        assert math.isfinite(row.low) and math.isfinite(row.high), row.label


def test_gac_cosine_figure_has_gaps_where_the_gradient_is_zero(gac_quick):
    curves = {c.label: c for c in gac_quick.curves}
    sync_runs = _runs.runs(VARIANTS["sync"], 3, quick=True)
    norms = np.array([r.metrics["grad/norm"] for r in sync_runs])
    converged = np.flatnonzero((norms == 0).all(axis=0))
    converged = converged[converged > 20]  # after convergence: every seed has a zero gradient
    assert converged.size > 5
    y = np.asarray(curves["sync"].y, dtype=float)
    assert np.isnan(y[converged]).all(), y[converged]  # a gap, never a drawn cosine of 0
    for r in sync_runs:
        cos = defined_cosine(r)
        assert np.isnan(cos[r.metrics["grad/norm"] == 0]).all()


def test_claim_bands_stay_in_the_quantity_range(gac_quick):
    for c in gac_quick.curves:
        lo, hi = np.asarray(c.low, dtype=float), np.asarray(c.high, dtype=float)
        assert np.nanmin(lo) >= -1.0 and np.nanmax(hi) <= 1.0, c.label
    vcpo = CLAIMS["vcpo"].run(quick=True, seeds=3, lm_seeds=0)
    for c in vcpo.curves:
        lo, hi = np.asarray(c.low, dtype=float), np.asarray(c.high, dtype=float)
        assert np.nanmin(lo) >= 0.0 and np.nanmax(hi) <= 1.0, c.label


def test_band_clips_to_bounds_and_keeps_gaps():
    per = np.array([[0.9, np.nan, 0.1], [1.0, np.nan, -0.1], [0.2, np.nan, 0.0]])
    m, lo, hi = band(per, bounds=(0.0, 1.0))
    assert max(hi) <= 1.0 and min(x for x in lo if math.isfinite(x)) >= 0.0
    assert math.isnan(m[1]) and math.isnan(lo[1]) and math.isnan(hi[1])
