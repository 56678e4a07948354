"""Preflight answers anchored to the user's run: the transfer rule's hand values, the user's learning rate
reaching Q1 on the LM proxy (x1000 gives another answer), the premise gate's "cannot tell" when the proxy
does not learn or does not feel the lag, non-monotone maps marked as noise, synchronous configs answered
at lag 0, and budget messages that never contradict themselves."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sandbox.importers.api import import_config
from sandbox.preflight import questions as P
from sandbox.preflight.transfer import model_rms, params_rms, proxy_rms, transfer, user_learning_rate

ROOT = Path(__file__).resolve().parents[1]
VERL = ROOT / "importers" / "data" / "verl_gsm8k_async.yaml"
VERL_SYNC = ROOT / "importers" / "data" / "verl_reinforce_sync.txt"


def test_transfer_rule_hand_values():
    t = transfer(1e-6, "adamw", (0.02, "src"), 0.06)
    assert t.applicable and math.isclose(t.update_size, 5e-5) and math.isclose(t.proxy_lr, 3e-6)
    sgd = transfer(1e-2, "sgd", (0.02, "src"), 0.06)
    assert not sgd.applicable and "sgd" in sgd.note
    assert model_rms("qwen2.5-7b")[0] == 0.02 and model_rms("deepseek-v3")[0] == 0.006
    assert model_rms(None, 0.05) == (0.05, "--param-rms (given)")
    with pytest.raises(ValueError, match="--param-rms"):
        model_rms(None, -1.0)


def test_params_rms_counts_weight_matrices_only():
    import torch

    p = {"w": torch.full((1, 2, 2), 3.0), "ln": torch.ones(1, 2), "b": torch.zeros(1, 2)}
    assert params_rms(p) == 3.0  # norm gains and biases left out


def test_user_learning_rate_read_from_the_import():
    imp = import_config(VERL, "verl", proxy="lm")
    assert user_learning_rate(imp.rows) == 1e-6
    assert 0.01 < proxy_rms(imp.data) < 0.2


def _outcome(final, start, collapsed=None):
    return {
        "final": list(final),
        "start": list(start),
        "collapsed": list(collapsed or [False] * len(final)),
        "ess": [1.0] * len(final),
        "ess_curve": [],
        "time_to_target": [],
        "steps": 1,
    }


def test_premise_no_learning_is_cannot_tell():
    sync = _outcome([0.20, 0.21, 0.19, 0.20], [0.20, 0.20, 0.20, 0.20])  # no gain over the start
    unc = _outcome([0.10, 0.11, 0.09, 0.10], [0.20] * 4)
    gate = P.premise(sync, unc, 4)
    assert not gate["learns"] and not gate["passed"] and "does not learn" in gate["reason"]


def test_premise_no_lag_cost_is_cannot_tell():
    sync = _outcome([0.50, 0.52, 0.48, 0.51], [0.2] * 4)
    unc = _outcome([0.51, 0.50, 0.49, 0.52], [0.2] * 4)  # same as sync: lag costs nothing
    gate = P.premise(sync, unc, 4)
    assert gate["learns"] and gate["feels_lag"] is False and "does not feel lag 4" in gate["reason"]


def test_premise_passes_when_it_learns_and_lag_hurts():
    sync = _outcome([0.50, 0.52, 0.48, 0.51], [0.2] * 4)
    unc = _outcome([0.30, 0.33, 0.29, 0.31], [0.2] * 4)
    gate = P.premise(sync, unc, 4)
    assert gate["passed"] and gate["lag_cost"][1] > 0
    assert P.premise(sync, None, 0)["passed"]  # lag 0: only learning is asked


def _cell(bound, lr, verdict, collapsed=0, seeds=4):
    return {
        "bound": bound,
        "lr": lr,
        "verdict": verdict,
        "collapsed": collapsed,
        "seeds": seeds,
        "collapse_interval": list(P.wilson(collapsed, seeds)),
    }


def test_non_monotone_cells_are_marked_as_noise():
    cells = [_cell(4, 1e-3, "safe"), _cell(4, 4e-3, "unsafe", 2), _cell(4, 1.6e-2, "safe"), _cell(0, 1e-3, "safe")]
    notes = P.mark_non_monotone(cells)
    assert [c["non_monotone"] for c in cells] == [False, True, True, False]
    assert len(notes) == 1 and "seed noise" in notes[0]


def test_q1_answer_position_and_shrink():
    plan = P.PreflightPlan(
        False, 4, 10, 600.0, 4, "none", "lm", 1e-3, 4e-3, 1.0, transfer=transfer(1e-5, "adam", (0.02, "s"), 0.06)
    )
    cells = [
        _cell(0, 1e-3, "safe"),
        _cell(0, 4e-3, "safe"),
        _cell(0, 1.6e-2, "safe"),
        _cell(4, 1e-3, "safe"),
        _cell(4, 4e-3, "safe"),
        _cell(4, 1.6e-2, "unsafe", 3),
    ]
    ok = {"passed": True, "reason": ""}
    a = P.q1_answer(cells, plan, ok)
    assert a["verdict"] == "safe" and a["position"] == "at the edge of" and math.isclose(a["shrink"], 4.0)
    b = P.q1_answer(cells, plan, {"passed": False, "reason": "the proxy does not learn at your point"})
    assert b["verdict"] == "cannot tell" and "does not learn" in b["reason"]


def test_sync_config_is_answered_at_lag_zero():
    imp = import_config(VERL_SYNC, "verl")
    plan = P.make_plan(imp.data, quick=True, framework="verl")
    assert plan.user_bound == 0
    assert {j.bound for j in plan.jobs if j.question in ("Q2", "Q5")} == {0}
    assert any(j.bound == 0 and j.lr == plan.user_lr for j in plan.jobs if j.question == "Q1")


def test_budget_message_never_contradicts_itself():
    imp = import_config(VERL, "verl")
    plan = P.make_plan(imp.data, quick=True, budget=1.0, seeds=2)
    with pytest.raises(P.PreflightError) as e:
        P.check_plan(plan)
    msg = str(e.value)
    assert "--quick" not in msg.split("; use")[1] and "--seeds" not in msg.split("; use")[1]  # both already given
    plan.budget = plan.seconds * 0.999  # same when rounded to minutes: said in seconds
    with pytest.raises(P.PreflightError) as e:
        P.check_plan(plan)
    head = str(e.value).split("; use")[0]
    assert head.split("estimated at ")[1].split(",")[0] != head.split("budget of ")[1]


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    """The default (LM) preflight shrunk to 2 seeds x 6 steps, one grid column: at the config's learning rate
    and at 1000x it."""
    saved = dict(P.FULL)
    P.FULL.update(seeds=2, steps=6, grid=(1.0,), bound_factors=(1,))
    try:
        out = {}
        for scale in (1.0, 1000.0):
            imp = import_config(VERL, "verl")
            lm = import_config(VERL, "verl", proxy="lm").data
            lr = user_learning_rate(imp.rows) * scale
            point = transfer(lr, "adamw", model_rms("qwen2.5-7b"), proxy_rms(lm))
            plan = P.make_plan(imp.data, quick=False, framework="verl", lm_data=lm, transfer_to=point)
            assert plan.proxy == "lm" and plan.system is None
            out[scale] = P.run_plan(plan)
        return out
    finally:
        P.FULL.clear()
        P.FULL.update(saved)


def test_user_learning_rate_x1000_changes_q1(tiny_lm):
    a, b = tiny_lm[1.0]["Q1"], tiny_lm[1000.0]["Q1"]
    assert math.isclose(b["at"]["lr"] / a["at"]["lr"], 1000.0)
    # the answer is read from a cell measured at the user's own point, which moved with the learning rate
    assert a["user_cell"]["lr"] == a["at"]["lr"] and b["user_cell"]["lr"] == b["at"]["lr"]
    assert a["user_cell"]["final_reward"] != b["user_cell"]["final_reward"]
    assert (a["verdict"], a["reason"], a["user_cell"]["final_reward"]) != (
        b["verdict"],
        b["reason"],
        b["user_cell"]["final_reward"],
    )


def test_lm_preflight_records_transfer_and_premise(tiny_lm):
    res = tiny_lm[1.0]
    assert res["plan"]["proxy"] == "lm" and res["transfer"]["applicable"]
    assert math.isclose(res["transfer"]["proxy_lr"], res["Q1"]["at"]["lr"])
    # at 1e-6 (about 3e-6 on the proxy) six steps cannot teach the proxy anything: never "safe"
    assert not res["premise"]["learns"] and res["Q1"]["verdict"] == "cannot tell"
    assert res["Q2"]["verdict"] == "cannot tell"
    assert res["Q6"]["proxy"] == "lm"
