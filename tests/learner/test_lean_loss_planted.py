"""The lean bandit run's loss path (the policy loss's call plan, the mask-free aggregation of one-token
responses, the group-mean baseline) computes with the methods and functions of the model, looked up as the
generic path looks them up: a bug planted in any one of them before a run changes that run's numbers; the
loss's decision of what to compute is made once per run."""

from __future__ import annotations

import numpy as np
import pytest

import sandbox.algorithms.advantages as advantages
import sandbox.algorithms.objectives.reinforce as reinforce
import sandbox.algorithms.policy_loss as policy_loss
from sandbox.algorithms.objectives.base import Surrogate
from sandbox.learner.trainer import PolicyLearner
from sandbox.run.runner import _result, prepare_run
from sandbox.scenario.api import validate_scenario


def lean_bandit():
    """The benchmark's kind of run, small: one replica, one-token groups, synchronous, lean metrics."""
    scn = validate_scenario(
        {
            "task": {"name": "bandit", "num_arms": 6, "replicas": 1},
            "system": {"num_workers": 4, "staleness": {"kind": "sync"}},
            "algorithm": {
                "group_size": 4,
                "groups_per_step": 2,
                "objective": {"name": "reinforce", "baseline": "group_mean"},
            },
            "run": {"steps": 12, "seed": 5, "figures": False, "eval_every": 3, "metrics": "lean"},
        }
    )
    _, learner, cluster = prepare_run(scn)
    return _result(scn, cluster.run(scn.run.steps), learner).metrics


def _shifted_advantages(real):
    def planted(*args):
        adv, metrics = real(*args)
        return adv + 0.25, metrics

    return planted


def _doubled_surrogate(real):
    return lambda *args: Surrogate(2.0 * real(*args).per_token, None)


def _tripled(real):
    return lambda *args: 3.0 * real(*args)


def _shifted(real):
    return lambda *args: real(*args) + 0.25


PLANTED = {
    "PolicyLoss.advantages": (policy_loss.PolicyLoss, "advantages", _shifted_advantages),
    "Reinforce.advantages": (reinforce.Reinforce, "advantages", _shifted_advantages),
    "group_mean_baseline": (advantages, "group_mean_baseline", _shifted),
    "Reinforce.surrogate": (reinforce.Reinforce, "surrogate", _doubled_surrogate),
    "reinforce_surrogate": (reinforce, "reinforce_surrogate", _doubled_surrogate),
    "aggregate": (policy_loss, "aggregate", _tripled),
    "_loss_input": (PolicyLearner, "_loss_input", None),
}


@pytest.mark.parametrize("name", list(PLANTED))
def test_a_bug_in_what_the_lean_loss_calls_changes_the_run(monkeypatch, name):
    clean = lean_bandit()
    owner, attribute, bug = PLANTED[name]
    real = getattr(owner, attribute)
    if bug is None:  # the loss input with every reward doubled

        def bug(real):
            def planted(*args, **kwargs):
                inp = real(*args, **kwargs)
                inp.rewards = inp.rewards * 2.0
                return inp

            return planted

    monkeypatch.setattr(owner, attribute, bug(real))
    planted = lean_bandit()
    assert list(planted.columns) == list(clean.columns)
    changed = [
        c for c in clean.columns if not np.array_equal(planted[c].to_numpy(), clean[c].to_numpy(), equal_nan=True)
    ]
    assert {"loss", "loss/pg", "loss/total"} <= set(changed), changed
    monkeypatch.undo()
    again = lean_bandit()
    for c in clean.columns:
        assert np.array_equal(again[c].to_numpy(), clean[c].to_numpy(), equal_nan=True), c


def test_a_lean_run_plans_its_loss_once(monkeypatch):
    """One decision per run: every step of the lean run takes the plan of its first call."""
    made = []
    init = policy_loss._CallPlan.__init__

    def counted(self, *args):
        made.append(args)
        init(self, *args)

    monkeypatch.setattr(policy_loss._CallPlan, "__init__", counted)
    steps = len(lean_bandit())
    assert steps == 12 and len(made) == 1
