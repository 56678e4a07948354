"""Claims that can fail: the LM context chosen where synchronous training learns (code, on recorded
selection numbers), margins tied to that gain, minimum effects, and null rows whose noise floor caps a
"beats" row."""

import numpy as np
import pytest
import torch

from sandbox.claims import _runs, lm_selection, m2po, premise
from sandbox.claims.base import INCONCLUSIVE, NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, Row
from sandbox.claims.null import against, noise_floor, null_row


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    _runs.clear_cache()
    yield
    _runs.clear_cache()
    torch.set_num_threads(previous)


def test_the_shipped_lm_context_is_the_selection_choice():
    """The recorded selection (seed 100, null seed 101): lr 3e-4 gains most (+0.074; 1e-4 +0.062, 1e-3 +0.021),
    its margin is a third of that gain, above the reseeding noise floor 0.023; the LM context uses both."""
    chosen = lm_selection.choose(lm_selection.RECORDED)
    assert chosen.lr == _runs.LM.lr == 3e-4
    assert chosen.gain == pytest.approx((0.26171875 - 0.185546875 + 0.259765625 - 0.1875) / 2)
    assert chosen.margin == _runs.LM.margin == pytest.approx(chosen.gain / 3)
    assert chosen.noise_floor == pytest.approx(0.283203125 - 0.259765625) and chosen.margin > chosen.noise_floor
    assert {m.lr: round(m.gain, 3) for m in lm_selection.RECORDED} == {1e-4: 0.062, 3e-4: 0.074, 1e-3: 0.021}


def test_selection_refuses_a_context_where_sync_does_not_learn_above_the_noise():
    # the old context alone (lr 1e-3): gain 0.021, margin 0.007, noise floor 0.021
    old = [m for m in lm_selection.RECORDED if m.lr == 1e-3]
    with pytest.raises(ValueError, match="does not clearly learn"):
        lm_selection.choose(old)
    with pytest.raises(ValueError, match="measured"):
        lm_selection.choose([])


def _holds(label, values, threshold, direction, context):
    return Row(label, "s", values, threshold, direction, context=context)


def test_a_frozen_learner_does_not_match_a_sync_run_that_learns():
    """LM, on the recorded selection replicas: a frozen learner ends at its first evaluation, so frozen − sync
    = −(sync gain). At the old lr 1e-3 the synchronous run hardly learns (+0.037, +0.004) and the old 0.05 margin
    cannot reject a frozen learner; now "sync learns" (gain > margin) does not hold there, so "matches sync" is
    not testable. At the chosen lr 3e-4 the gain is 3× the margin, so frozen − sync (mean −0.074) is below −margin
    and "matches" can never be reproduced, whatever the number of replicas."""
    m = _runs.LM.margin
    degrades = _holds(premise.LABEL, [-0.10, -0.06], -m, "<", "lm")
    for rec in lm_selection.RECORDED:
        frozen_minus_sync = -rec.gains
        learns = Row(premise.LEARNS_LABEL, "gain", rec.gains, m, ">", context="lm")
        matches = premise.gate(
            Row("frozen matches sync", "frozen − sync", frozen_minus_sync, -m, ">", context="lm"), degrades, learns
        )
        assert matches.verdict != REPRODUCED
        if rec.lr == 1e-3:
            old = Row("frozen matches sync (old margin)", "frozen − sync", frozen_minus_sync, -0.05, ">", context="lm")
            assert old.verdict != NOT_REPRODUCED  # the old margin could not reject a frozen learner
            assert learns.verdict != REPRODUCED and matches.verdict == NOT_TESTABLE
        if rec.lr == 3e-4:
            assert frozen_minus_sync.mean() < -m  # the row's interval is centred below its threshold: never reproduced


def test_a_frozen_learner_fails_stable_at_lag_16_on_the_bitstring_task(monkeypatch):
    """A real run: M2PO replaced by a frozen learner (lr 1e-12) with both premises holding is 'not reproduced'
    on "stable at lag 16" (its final reward stays at the base model's, sync's reaches ~1)."""
    monkeypatch.setattr(m2po, "M2PO_LAG16", {**m2po.M2PO_LAG16, "algorithm.optimizer.lr": 1e-12})  # M2PO, frozen
    monkeypatch.setattr(
        m2po, "premise_row", lambda ctx, seeds, quick: _holds(premise.LABEL, [-0.3, -0.31], -0.05, "<", ctx.name)
    )
    rows = {r.label: r for r in m2po.run(quick=True, seeds=2, lm_seeds=0).rows}
    assert rows["stable at lag 16"].verdict == NOT_REPRODUCED
    assert rows["stable at lag 16"].mean < -0.5


def test_a_row_below_its_minimum_effect_is_not_reproduced():
    """VCPO's lr scale 'reacting' by 4e-8: reproduced against '> 0', not reproduced against the minimum effect."""
    from sandbox.claims import mismatch

    tiny = [4e-8, 4.1e-8, 3.9e-8, 4.05e-8]
    assert Row("lr scale reacts (old)", "1 − scale", tiny, 0.0, ">").verdict == REPRODUCED
    assert Row("lr scale reacts", "1 − scale", tiny, mismatch.MIN_EFFECT, ">").verdict == NOT_REPRODUCED


def test_the_noise_floor_caps_a_beats_row_and_marks_a_matches_row():
    null = null_row("sync reseeded", "Δ", [0.03, -0.02, 0.01, -0.015], 0.026, "lm")
    floor = noise_floor(null)
    assert floor == pytest.approx(max(abs(null.low), abs(null.high))) and floor > 0.03
    beats = Row("beats", "Δ", [0.028, 0.029, 0.0285, 0.0282], 0.026, ">", context="lm")
    assert beats.verdict == REPRODUCED  # its own interval is above the minimum effect ...
    capped = against(beats, null, beats=True)
    assert (
        capped.verdict == INCONCLUSIVE and "within the noise floor" in capped.note
    )  # ... but reseeding moves it as much
    far = Row("beats", "Δ", [0.2, 0.21, 0.19, 0.2], 0.026, ">", context="lm")
    assert against(far, null, beats=True).verdict == REPRODUCED
    matches = Row("matches", "Δ", [0.0, 0.01, -0.005, 0.002], -0.026, ">", context="lm")
    kept = against(matches, null, beats=False)
    assert kept.verdict == REPRODUCED and "within the noise floor" in kept.note
    with pytest.raises(ValueError, match="context"):
        against(far, null_row("x", "Δ", [0.0, 0.1], 0.026, "bitstring"), beats=True)
    assert np.isnan(noise_floor(null_row("x", "Δ", [0.0], 0.026, "lm")))
