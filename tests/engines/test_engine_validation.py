"""A kind the task cannot support is a load-time error naming engine.name and the task."""

from __future__ import annotations

import pytest

from sandbox.base.errors import ScenarioError
from sandbox.scenario.api import validate_scenario


@pytest.mark.parametrize(
    "engine,task,needle",
    [
        ({"name": "logit_noise", "scale": 0.1}, {"name": "quadratic"}, "task 'quadratic' does not"),
        ({"name": "processed_logprobs"}, {"name": "quadratic"}, "hands its sampling logits to the engine"),
        ({"name": "precision"}, {"name": "bandit"}, "evaluate at another precision (the lm task); task 'bandit'"),
        ({"name": "routing"}, {"name": "bitstring"}, "mixture-of-experts layer"),
    ],
)
def test_unsupported_kind_names_the_field_and_the_task(engine, task, needle):
    with pytest.raises(ScenarioError) as info:
        validate_scenario({"task": task, "engine": engine}, "t")
    text = str(info.value)
    assert f"engine.name: '{engine['name']}'" in text and needle in text


def test_unknown_kind_and_bad_knobs_are_clear_errors():
    with pytest.raises(ScenarioError, match="engine"):
        validate_scenario({"engine": {"name": "vllm"}}, "t")
    with pytest.raises(ScenarioError, match="engine.scale"):
        validate_scenario({"task": {"name": "bandit"}, "engine": {"name": "logit_noise", "scale": -1.0}}, "t")
    with pytest.raises(ScenarioError, match="dof: only used with tail = 'student_t'"):
        validate_scenario({"task": {"name": "bandit"}, "engine": {"name": "logit_noise", "dof": 4}}, "t")
    with pytest.raises(ScenarioError, match="engine.top_p"):
        validate_scenario({"task": {"name": "bandit"}, "engine": {"name": "processed_logprobs", "top_p": 0.0}}, "t")
