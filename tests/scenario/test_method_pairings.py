"""What load accepts must run: for every registered (objective, correction) pair, the scenario is
accepted at load time exactly when the policy loss can be built from it, and a refused pair names
``algorithm.correction`` (a ``tba`` objective with a correction once passed ``sandbox scenario`` and
crashed at run start). Variants are held to the same rule."""

from __future__ import annotations

import pytest

from sandbox.algorithms import CORRECTIONS, OBJECTIVES, build_policy_loss
from sandbox.base.errors import ScenarioError
from sandbox.scenario.api import validate_scenario, variant_scenarios

PAIRS = [(o, c) for o in OBJECTIVES.names() for c in CORRECTIONS.names()]


def _scenario(objective: str, correction: str) -> dict:
    return {
        "task": {"name": "bitstring", "horizon": 4},
        "algorithm": {"group_size": 4, "objective": {"name": objective}, "correction": {"name": correction}},
    }


@pytest.mark.parametrize("objective, correction", PAIRS)
def test_load_accepts_a_pair_exactly_when_the_loss_builds(objective, correction):
    try:
        scn = validate_scenario(_scenario(objective, correction))
    except ScenarioError as exc:
        assert any(p.startswith("algorithm") for p in exc.problems), exc.problems
        if any(p.startswith("algorithm.correction: ") for p in exc.problems):
            # refused for the pairing: building the loss from the same configs must fail too
            obj = OBJECTIVES[objective].config(name=objective)
            cor = CORRECTIONS[correction].config(name=correction)
            with pytest.raises(ValueError):
                build_policy_loss(obj, cor)
        return
    build_policy_loss(scn.algorithm.objective, scn.algorithm.correction)


def test_some_pairs_are_refused_and_the_message_names_the_rule():
    with pytest.raises(ScenarioError) as info:
        validate_scenario(_scenario("tba", "tis"))
    assert info.value.problems == [
        "algorithm.correction: tba is valid off-policy without importance weights; use correction 'none' (got 'tis')"
    ]


def test_a_variant_with_an_impossible_pair_is_refused_at_load_time():
    data = _scenario("grpo", "none")
    data["variants"] = {
        "ok": {},
        "bad": {"algorithm.objective": {"name": "tba"}, "algorithm.correction": {"name": "tis"}},
    }
    with pytest.raises(ScenarioError) as info:
        scn = validate_scenario(data)
        variant_scenarios(scn, data)
    assert "tba is valid off-policy without importance weights" in str(info.value.problems)
