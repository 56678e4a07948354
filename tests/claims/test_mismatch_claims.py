"""The training-inference mismatch claims (sandbox/claims/mismatch.py, mismatch_presets.py) in quick
mode: well-formed rows and figures, and a wrong simulator (an exact engine where the claim needs a
mismatch, a drift of 0) that flips the verdict the claim rests on."""

from __future__ import annotations

import json
import math
import warnings

import pytest
import torch

from sandbox.claims import _runs
from sandbox.claims import mismatch as M
from sandbox.claims import mismatch_presets as P
from sandbox.claims.api import CLAIMS
from sandbox.claims.base import DIRECTIONS, NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED
from sandbox.claims.report import figure


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    _runs.clear_cache()
    yield
    _runs.clear_cache()
    torch.set_num_threads(previous)


def _well_formed(result, seeds, tmp_path):
    assert result.rows and result.curves
    for row in result.rows:
        assert row.direction in DIRECTIONS
        assert len(row.values) == seeds
        if math.isfinite(row.low):
            assert row.low <= row.mean <= row.high
    json.dumps(result.to_dict())
    figure(result, tmp_path / f"{result.name}.png")
    assert (tmp_path / f"{result.name}.png").stat().st_size > 0


def _row(result, start):
    return next(r for r in result.rows if r.label.startswith(start))


def test_registered():
    for name in ("mismatch_presets", "mismatch_corrections", "mismatch_sync", "mismatch_staleness", "mismatch_drift"):
        assert name in CLAIMS


def test_drift_claim_quick_and_a_zero_drift_flips_it(tmp_path, monkeypatch):
    """Quick (3 seeds, 40 steps): the drifting engine's k3 grows ~4x (reproduced), the static one's
    stays within [0.8, 1.25]. With drift 0 the "drifting" engine is the static one: its growth row is
    not reproduced."""
    ok = CLAIMS["mismatch_drift"].run(quick=True, seeds=3)
    _well_formed(ok, 3, tmp_path)
    assert [r.verdict for r in ok.rows] == [REPRODUCED, REPRODUCED]
    assert [c.label for c in ok.curves] == ["drifting (σ = 0.05 + 0.002 v)", "static (σ = 0.05)"]
    _runs.clear_cache()
    monkeypatch.setattr(M, "DRIFT", (0.05, 0.0))
    broken = CLAIMS["mismatch_drift"].run(quick=True, seeds=3)
    assert broken.rows[0].verdict == NOT_REPRODUCED


def test_exact_engine_fails_the_premise_and_the_corrections_are_not_testable(tmp_path, monkeypatch):
    """With an exact engine in place of the logit noise, the mismatch variants are the exact runs:
    every premise difference is 0 (not reproduced: not below −0.02) and the correction rows are
    'not testable here' (the claims' fourth verdict), their interval and p-value still computed."""
    monkeypatch.setattr(M, "noise", lambda sigma, drift=0.0: {})
    result = CLAIMS["mismatch_corrections"].run(quick=True, seeds=2)
    _well_formed(result, 2, tmp_path)
    premise = [r for r in result.rows if "degrades" in r.label]
    assert len(premise) == 4 and all(r.verdict == NOT_REPRODUCED and r.mean == 0.0 for r in premise)
    fixes = [r for r in result.rows if "restores" in r.label]
    assert len(fixes) == len(M.CORRECTIONS)
    assert all(r.verdict == NOT_TESTABLE and "not testable here" in r.note for r in fixes)
    assert all(r.mean == 0.0 for r in fixes)  # measured, just not judged


def test_sync_claim_quick_and_an_exact_engine_reproduces_sync(tmp_path, monkeypatch):
    """The curve distance to sync is judged against reseeding: the row is σ's distance minus that of the
    synchronous run on other sampling seeds. With an exact engine the σ runs are bitwise sync's: their
    distance is 0, so the row is minus the reseeding distance (never reproduced: reseeding alone moves the
    curve more), the AUC gap is 0 (inside the band), and the null row is the same runs as with the noise."""
    ok = CLAIMS["mismatch_sync"].run(quick=True, seeds=3)
    _well_formed(ok, 3, tmp_path)
    assert "reseeding alone" in _row(ok, "σ=0.3: differs").note
    null = _row(ok, "null: sync reseeded")
    _runs.clear_cache()
    monkeypatch.setattr(M, "noise", lambda sigma, drift=0.0: {})
    same = CLAIMS["mismatch_sync"].run(quick=True, seeds=3)
    for r in same.rows:
        if "differs" in r.label:
            assert r.mean < 0 and r.verdict != REPRODUCED  # exact engine: only minus the reseeding distance
        elif r.label.startswith("null"):
            assert r.values == null.values
        else:
            assert r.mean == 0.0 and r.verdict == REPRODUCED


def test_staleness_claim_separates_mismatch_from_lag(tmp_path, monkeypatch):
    """Quick: ESS/N and the VCPO learning-rate scale fall under mismatch only and under lag only
    (reproduced at 3 seeds); the figure has one bar group per quantity and one colour per source
    (sync, mismatch only, lag only, both). With an exact engine the mismatch-only rows are 0: not reproduced."""
    ok = CLAIMS["mismatch_staleness"].run(quick=True, seeds=3)
    _well_formed(ok, 3, tmp_path)
    assert ok.kind == "grouped" and len(ok.x_ticks) == 2
    assert [c.label for c in ok.curves] == [
        "sync, exact",
        "mismatch only (sync, σ=0.3)",
        "lag only (lag 16, exact)",
        "lag 16 + σ=0.3",
    ]
    for start in (
        "ESS/N falls under mismatch only",
        "ESS/N falls under lag only",
        "VCPO lr scale reacts to mismatch only",
        "VCPO lr scale reacts to lag only",
    ):
        assert _row(ok, start).verdict == REPRODUCED, start
    _runs.clear_cache()
    monkeypatch.setattr(M, "noise", lambda sigma, drift=0.0: {})
    broken = CLAIMS["mismatch_staleness"].run(quick=True, seeds=3)
    for start in ("ESS/N falls under mismatch only", "VCPO lr scale reacts to mismatch only"):
        assert _row(broken, start).verdict == NOT_REPRODUCED, start


def test_presets_claim_verdicts_follow_the_measurement(tmp_path, monkeypatch):
    """The presets claim without the LM runs: measurements equal to every target are reproduced, twice
    the target is not (outside ×1.5), and the appendix table lists every preset."""

    def at(factor):
        def measure(name, seed=0, steps=None):
            out = {k: math.nan for k in ("k3", "gap_mean", "gap_max", "k3_first", "k3_last", "router_flip_frac")}
            for t in P.PRESETS[name].targets:
                out[t.statistic] = t.value * factor * (1 + 0.01 * seed)
            return out

        return measure

    monkeypatch.setattr(P, "measure", at(1.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a measure that does not apply (NaN on every seed) is "—", not a warning
        ok = P.run(quick=True, seeds=3)
    _well_formed(ok, 3, tmp_path)
    assert "| — |" in ok.appendix
    assert all(r.verdict == REPRODUCED for r in ok.rows)
    assert all(name in ok.appendix for name in P.PRESETS)
    monkeypatch.setattr(P, "measure", at(2.0))
    assert all(r.verdict == NOT_REPRODUCED for r in P.run(quick=True, seeds=3).rows)
