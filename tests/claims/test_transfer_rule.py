"""The transfer-rule claim: per-seed critical u is the first grid value where that seed collapses (censored at
twice the largest), rows compare widths paired by seed, and --lm-seeds 0 leaves every row inconclusive."""

from __future__ import annotations

import math

from sandbox.claims import transfer_rule as T
from sandbox.claims.api import CLAIMS
from sandbox.claims.base import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED


def test_not_run_without_lm_seeds():
    res = CLAIMS["transfer_rule"].run(quick=True, seeds=2, lm_seeds=0)
    assert res.rows and all(r.verdict == INCONCLUSIVE and "--lm-seeds 0" in r.note for r in res.rows)


def _fake(monkeypatch, rms: dict, first_collapse: dict):
    """Width w has weight RMS rms[w]; seed s collapses from grid index first_collapse[w][s] on (None: never)."""
    monkeypatch.setattr(T, "base_rms", lambda w: rms[w])
    monkeypatch.setattr(T, "validate_scenario", lambda d, what: d)
    monkeypatch.setattr(T, "run_scenario", lambda d: d)

    def outcomes(d):
        w, lr = d["task"]["model"]["d_model"], d["algorithm"]["optimizer"]["lr"]
        i = min(range(len(T.U_GRID)), key=lambda j: abs(T.U_GRID[j] * rms[w] - lr))
        return [c is not None and i >= c for c in first_collapse[w]]

    monkeypatch.setattr(T, "replica_reward_drops", outcomes)


def test_same_critical_u_different_lr_is_reproduced(monkeypatch):
    rms = {32: 0.4, 64: 0.1, 128: 0.025}  # 16x apart: the critical lr differs by 4 octaves
    _fake(monkeypatch, rms, {w: [2, 2, 2, 3] for w in rms})
    rows = T.run(quick=True, lm_seeds=4).rows
    assert rows[0].verdict == REPRODUCED and math.isclose(rows[0].values[0], 4.0)
    assert [r.verdict for r in rows[1:]] == [REPRODUCED, REPRODUCED]


def test_same_critical_lr_is_not_the_rule(monkeypatch):
    rms = {32: 0.4, 64: 0.1, 128: 0.025}
    # every width collapses at the same learning rate: the critical u differs by the RMS ratio (2 octaves per width)
    _fake(monkeypatch, rms, {32: [0, 0, 0, 0], 64: [2, 2, 2, 2], 128: [4, 4, 4, 4]})
    rows = T.run(quick=True, lm_seeds=4).rows
    assert rows[0].verdict == NOT_REPRODUCED and [r.verdict for r in rows[1:]] == [NOT_REPRODUCED, NOT_REPRODUCED]


def test_never_collapsing_seed_is_censored(monkeypatch):
    rms = {32: 0.1, 64: 0.1, 128: 0.1}
    _fake(monkeypatch, rms, {w: [None, 1] for w in rms})
    _, crit, _ = T.critical(64, 2, 5)
    assert crit == [2 * T.U_GRID[-1], T.U_GRID[1]]
