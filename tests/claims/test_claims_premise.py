"""The premise gate of the learning claims (issue 34): a row whose claim presupposes that stale training
degrades is 'not testable here' where that premise is not reproduced, never 'reproduced'; such rows leave
the Holm family; and the LM context runs end to end at tiny size."""

import math

import pytest
import torch

from sandbox.claims import _runs, m2po, premise, vcpo
from sandbox.claims.base import INCONCLUSIVE, NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, ClaimResult, Row
from sandbox.claims.report import family_holm, markdown, multiplicity_note


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    _runs.clear_cache()
    yield
    _runs.clear_cache()
    torch.set_num_threads(previous)


def _premise(values, context="lm"):
    return Row(premise.LABEL, "lag 16 − sync", values, -0.05, "<", context=context)


def _learns(values, context="lm"):
    return Row(premise.LEARNS_LABEL, "sync gain", values, 3 * 0.05, ">", context=context)


def test_premise_rows_on_hand_values():
    # mean −0.15, s = 0.01, n = 3: upper end −0.15 + 4.303·0.01/√3 = −0.125 < −0.05
    assert _premise([-0.14, -0.15, -0.16]).verdict == REPRODUCED
    assert _premise([0.01, 0.0, -0.01]).verdict == NOT_REPRODUCED  # lower end −0.025 ≥ −0.05
    assert _premise([-0.2, 0.0, -0.1]).verdict == INCONCLUSIVE


def test_a_failed_premise_makes_a_passing_row_not_testable():
    passing = Row("VCPO matches sync", "VCPO − sync", [0.01, 0.0, 0.02], -0.05, ">", context="lm")
    assert passing.verdict == REPRODUCED
    kept = premise.gate(passing, _premise([-0.14, -0.15, -0.16]))  # premise holds: its own verdict, the note says so
    assert (kept.verdict, kept.values, kept.p_value) == (REPRODUCED, passing.values, passing.p_value)
    assert kept.note.startswith("premise verified in lm: uncorrected − sync -0.15 [-0.175, -0.125]")
    for failed in ([0.01, 0.0, -0.01], [-0.2, 0.0, -0.1]):  # not reproduced, inconclusive
        gated = premise.gate(passing, _premise(failed))
        assert gated.verdict == NOT_TESTABLE
        assert "premise not verified in lm" in gated.note
        # the interval and the p-value stay, for information
        assert (gated.mean, gated.low, gated.high, gated.p_value) == (
            passing.mean,
            passing.low,
            passing.high,
            passing.p_value,
        )
    failing = Row("M2PO stable", "M2PO − sync", [-0.3, -0.2, -0.25], -0.05, ">", context="lm")
    assert premise.gate(failing, _premise([0.01, 0.0, -0.01])).verdict == NOT_TESTABLE


def test_the_gate_refuses_another_context_and_rows_refuse_unknown_contexts():
    row = Row("x", "s", [0.0, 0.1], 0.0, ">", context="bitstring")
    with pytest.raises(ValueError, match="context"):
        premise.gate(row, _premise([-0.1, -0.2], context="lm"))
    with pytest.raises(ValueError, match="context"):
        Row("x", "s", [0.0, 0.1], 0.0, ">", context="chess")


def test_lm_seeds_zero_or_at_least_two():
    assert premise.lm_seeds_or_default(None, quick=True) == _runs.LM.quick_seeds
    assert premise.lm_seeds_or_default(None, quick=False) == _runs.LM.full_seeds
    assert [c.name for c, _ in premise.contexts(8, False, 0)] == ["bitstring"]
    assert [(c.name, n) for c, n in premise.contexts(8, False, 3)] == [("bitstring", 8), ("lm", 3)]
    with pytest.raises(ValueError, match="lm_seeds"):
        premise.lm_seeds_or_default(1, quick=False)


def test_not_testable_rows_leave_the_holm_family():
    """Two tested rows with p = 0.012 and 0.02 and one untestable row with p = 0.001: the family has m = 2
    (0.012 ≤ 0.025/2, then 0.02 ≤ 0.025: both kept); counted in (m = 3) it would keep the untestable row
    and reject 0.02 (0.02 > 0.025/2 after 0.001 ≤ 0.025/3 and 0.012 ≤ 0.025/2)."""
    result = ClaimResult("c", "p", "", {})
    a, b = Row("a", "s", [0.0], 0.0, ">"), Row("b", "s", [0.0], 0.0, ">")
    untestable = Row("u", "s", [0.0], 0.0, ">", cap=NOT_TESTABLE, context="lm")
    a.p_value, b.p_value, untestable.p_value = 0.012, 0.02, 0.001
    a.verdict = b.verdict = REPRODUCED
    result.rows = [a, b, untestable]
    flags = family_holm([(result, 0.0)])
    assert flags[id(a)] and flags[id(b)] and not flags[id(untestable)]
    note = multiplicity_note([(result, 0.0)])
    assert "2 with a p-value" in note and "1 'not testable here'" in note
    md = markdown([(result, 0.0)], "sandbox claims")
    assert "| c: u | LM |" in md and NOT_TESTABLE in md


def test_gated_rows_follow_their_contexts_premise(monkeypatch):
    """m2po's 'stable at lag 16' row on the bit-string context at tiny size: 'not testable here' when the
    premise fails, its own interval's verdict when it holds (the premise replaced by a hand-valued row)."""
    holds = _premise([-0.3, -0.31], context="bitstring")
    fails = _premise([0.0, 0.01], context="bitstring")
    verdicts = {}
    for name, p in (("holds", holds), ("fails", fails)):
        monkeypatch.setattr(m2po, "premise_row", lambda ctx, seeds, quick, p=p: p)
        monkeypatch.setattr(m2po, "learns_row", lambda ctx, seeds, quick: _learns([0.9, 0.95], context="bitstring"))
        rows = {r.label: r for r in m2po.run(quick=True, seeds=2, lm_seeds=0).rows}
        verdicts[name] = rows["stable at lag 16"]
        assert rows["small masked fraction at lag 16"].cap == ""  # not gated
        assert all(r.context == "bitstring" for r in rows.values())
    assert verdicts["fails"].verdict == NOT_TESTABLE
    assert verdicts["holds"].verdict != NOT_TESTABLE and verdicts["holds"].cap == ""
    assert verdicts["holds"].values == verdicts["fails"].values


def test_lm_context_end_to_end_at_tiny_size(monkeypatch):
    """The learning claims with an LM context of 2 replicas × 4 steps (run_claims, as the CLI calls it):
    every learning claim has rows of both contexts, each LM run is the replica of one run (each replica its
    own learner: different rewards), the gated LM rows follow the LM premise, and the premise figure has
    one bar per context."""
    from sandbox.claims.api import CLAIMS
    from sandbox.claims.report import run_claims

    tiny = _runs.Context(**{**_runs.LM.__dict__, "quick_steps": 4, "eval_every": 4})
    monkeypatch.setattr(_runs, "LM", tiny)
    monkeypatch.setitem(_runs.CONTEXTS, "lm", tiny)
    learning = {name: c for name, c in CLAIMS.items() if c.lm_variants}
    assert list(learning) == ["premise", "gac_cosine", "vcpo", "m2po", "composition"]
    lm_runs = {}
    monkeypatch.setattr(
        _runs, "clear_cache", lambda: lm_runs.update({k: v for k, v in _runs._CACHE.items() if isinstance(v, list)})
    )
    results = {r.name: r for r, _ in run_claims(learning, quick=True, seeds=2, lm_seeds=2)}
    # sync, lag 16, VCPO, GAC, M2PO, TIS, GAC + TIS, GAC + VCPO, the null (sync on run seed 1) and VCPO's matched
    # constant-lr control: one run of 2 replicas each
    assert len(lm_runs) == 10
    for runs in lm_runs.values():
        assert len(runs) == 2 and all(len(r.steps) == 4 and math.isfinite(r.final_reward()) for r in runs)
    sync = lm_runs[_runs._replica_key(tiny.settings(_runs.SYNC, True), 2)]
    assert not (sync[0].metrics["reward/mean"] == sync[1].metrics["reward/mean"]).all()
    null = lm_runs[_runs._replica_key(tiny.settings(_runs.null_variant(_runs.SYNC, tiny), True), 2)]
    assert [r.final_reward() for r in null] != [r.final_reward() for r in sync]  # another sampling seed
    scale = sum(r.mean("lr/scale") for r in lm_runs[_runs._replica_key(tiny.settings(vcpo.VCPO_LAG16, True), 2)]) / 2
    assert _runs._replica_key(tiny.settings(vcpo.lm_control_variant(tiny, scale), True), 2) in lm_runs
    assert any(r.label == "VCPO beats matched constant lr" and r.context == "lm" for r in results["vcpo"].rows)
    lm_premise = next(r for r in results["premise"].rows if r.label == premise.LABEL and r.context == "lm")
    lm_learns = next(r for r in results["premise"].rows if r.label == premise.LEARNS_LABEL and r.context == "lm")
    for name, result in results.items():
        assert {r.context for r in result.rows} == {"bitstring", "lm"}, name
        for row in result.rows:
            if row.context == "lm" and "premise not verified" in row.note:
                assert lm_premise.verdict != REPRODUCED and row.verdict == NOT_TESTABLE
            if row.context == "lm" and "premise verified" in row.note:
                assert lm_premise.verdict == REPRODUCED and row.verdict != NOT_TESTABLE
            if row.context == "lm" and "matches sync" in row.label:  # gated by "sync learns" too
                assert row.verdict == NOT_TESTABLE or lm_learns.verdict == REPRODUCED
    assert [len(c.y) for c in results["premise"].curves] == [2, 2]


def test_gac_restores_is_not_testable_without_a_stale_cosine_rise(monkeypatch):
    """'GAC restores sync-like cosine' on hand values (the runs replaced): with the stale cosine 0.3 above
    sync's and GAC's back at 0.02 below sync's, 'reproduced'; with the stale cosine only 0.01 above sync's
    (no rise to restore), 'not testable here' although GAC's cosine is 0.08 below the uncorrected one's (more
    than the minimum effect 0.05) and within 0.1 of sync's."""
    import numpy as np

    from sandbox.claims import gac

    def rows(stale_rise):
        cos = {"sync": [0.03, 0.02, 0.04], "fixed lag 16": [0.03 + stale_rise, 0.02 + stale_rise, 0.04 + stale_rise]}
        # GAC 0.08 below the uncorrected run (flat) or back at 0.02 below sync (risen)
        cos["GAC, lag 16"] = [v - 0.08 for v in cos["fixed lag 16"]] if stale_rise < 0.1 else [0.01, 0.0, 0.02]

        def per_seed(ov, seeds, quick, stat, ctx=None):
            name = next(n for n, v in gac.VARIANTS.items() if v == ov)
            return np.array([0.2, 0.2, 0.2]) if stat is _runs.Run.final_reward else np.array(cos[name])

        monkeypatch.setattr(gac.R, "per_seed", per_seed)
        monkeypatch.setattr(
            gac, "premise_row", lambda ctx, seeds, quick: _premise([-0.14, -0.15, -0.16], context=ctx.name)
        )
        monkeypatch.setattr(gac, "learns_row", lambda ctx, seeds, quick: _learns([0.1, 0.11, 0.12], context=ctx.name))
        zero = Row("null: x", "s", [0.0, 0.001, -0.001], (-0.05, 0.05), "within", context="lm")
        monkeypatch.setattr(gac, "reward_null", lambda ctx, seeds, quick: zero)
        # the reseeded sync runs: a cosine of 0.03, a null within ±0.025
        monkeypatch.setattr(gac.R, "null_per_seed", lambda ov, seeds, quick, stat, ctx: np.full(seeds, 0.03))
        return {r.label: r for r in gac._rows(_runs.LM, 3, True, gac.LM_NAMES)}

    risen = rows(0.3)
    assert risen["stale cosine higher than sync"].verdict == REPRODUCED
    assert risen["GAC cosine below uncorrected"].verdict == REPRODUCED
    assert risen["GAC restores sync-like cosine"].verdict == REPRODUCED
    flat = rows(0.01)
    assert flat["stale cosine higher than sync"].verdict == NOT_REPRODUCED
    assert flat["GAC cosine below uncorrected"].verdict == REPRODUCED  # GAC 0.08 below the uncorrected run
    assert flat["GAC restores sync-like cosine"].verdict == NOT_TESTABLE
    assert "no stale cosine rise to restore" in flat["GAC restores sync-like cosine"].note
