"""Plugins load lazily: a registry resolves its family's entry points when the family is first used, so a
plugin module may be imported before anything else (what a plugin's own tests do first) or after the
scenario model, and the project's tests run with plugins off (``tests/conftest.py``)."""

from __future__ import annotations

import os

import pytest
from plugin_site import COMPONENTS, PACKAGE, make_plugin_site, python

from sandbox.tasks import Task
from sandbox.tasks.bandit import BanditConfig, BanditTask


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory):
    site = make_plugin_site(tmp_path_factory.mktemp("site"), extra_entries="task:six_tokens = six_token_task\n")
    (site / "six_token_task.py").write_text(SIX_TOKEN_TASK)
    return site


SIX_TOKEN_TASK = '''
from typing import Literal
from sandbox.tasks import TASKS
from sandbox.tasks.bandit import BanditConfig, BanditTask
from sandbox.tasks.base import BudgetShape

class SixTokenConfig(BanditConfig):
    """Six tokens per response (a test plugin)."""
    name: Literal["six_tokens"] = "six_tokens"

@TASKS.register(SixTokenConfig)
class SixTokenTask(BanditTask):
    @classmethod
    def budget_shape(cls, cfg):
        return BudgetShape("toy", 6, None, cfg.num_arms, 4)
'''

FIRST_IMPORT = """
import json, warnings
warnings.simplefilter("error")  # no "registered no ..." warning for the module being imported
import {package}.{module} as plugin
from sandbox.components import FAMILIES
from sandbox.scenario.model import Scenario
registry = FAMILIES[{family!r}].registry
assert {name!r} in registry.names(), registry.names()
assert {name!r} in json.dumps(Scenario.model_json_schema())  # the schema, built after, holds it
assert registry[{name!r}].impl.__module__ == plugin.__name__
print("OK")
"""


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(COMPONENTS))
def test_importing_a_plugin_module_first_works(family, plugin_site):
    name, module = COMPONENTS[family]
    res = python(FIRST_IMPORT.format(package=PACKAGE, module=module, family=family, name=name), plugin_site)
    assert res.returncode == 0 and "OK" in res.stdout, res.stderr[-3000:]


def test_a_plugin_may_register_after_the_scenario_model_is_imported(plugin_site):
    """Registration order is free until a scenario is validated (the first use of the schema)."""
    code = (
        "import os; os.environ['SANDBOX_PLUGINS'] = '0'\n"  # no entry point: the explicit import registers it
        "import json, sandbox.cli, sandbox.scenario\n"
        f"import {PACKAGE}.synthetic_control\n"
        "from sandbox.scenario.model import Scenario\n"
        "s = Scenario.model_validate({'system': {'staleness': {'kind': 'synthetic_control'}}})\n"
        "print('OK', s.system.staleness.kind)\n"
        "from sandbox.system.staleness import CONTROLS, ControlConfig\n"
        "from typing import Literal\n"
        "class Late(ControlConfig):\n"
        "    kind: Literal['late'] = 'late'\n"
        "try:\n"
        "    CONTROLS.register(Late, object)\n"
        "except RuntimeError as e:\n"
        "    print('LATE', e)\n"
    )
    res = python(code, plugin_site)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "OK synthetic_control" in res.stdout
    late = res.stdout.split("LATE", 1)[1]
    assert "after the scenario schema was built" in late and "entry point" in late and "staleness:late" in late


def test_the_project_tests_run_with_plugins_off(plugin_site):
    assert os.environ.get("SANDBOX_PLUGINS") == "0"  # tests/conftest.py
    code = (
        "import os; os.environ['SANDBOX_PLUGINS'] = '0'\n"
        "from sandbox.components import FAMILIES\n"
        "print(sorted(n for f in FAMILIES.values() for n in f.registry.names()))"
    )
    res = python(code, plugin_site)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "synthetic" not in res.stdout and "six_tokens" not in res.stdout and "bandit" in res.stdout


def test_export_asks_the_task_for_its_response_length(plugin_site):
    """A six-token plugin task is told six tokens, not a bandit arm's one token."""
    code = (
        "from sandbox.export.common import response_length_hint\n"
        "from sandbox.scenario.model import Scenario\n"
        "print('HINT', response_length_hint(Scenario.model_validate({'task': {'name': 'six_tokens'}})))"
    )
    res = python(code, plugin_site)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "HINT exactly 6 tokens" in res.stdout


def test_response_length_hints_of_the_shipped_tasks():
    from sandbox.export.common import response_length_hint
    from sandbox.scenario.model import Scenario

    hint = {
        name: response_length_hint(Scenario.model_validate({"task": {"name": name}}))
        for name in ("bandit", "bitstring", "quadratic", "gym", "lm")
    }
    assert hint == {
        "bandit": "one token (a bandit arm)",
        "bitstring": "16 tokens (bit-string horizon)",
        "quadratic": "no tokens (a gradient oracle)",
        "gym": "episodes of up to the environment's step limit",
        "lm": "a few characters (synthetic arithmetic answers)",
    }

    class SixTokens(BanditTask):  # not registered: the hint is the task's own
        @classmethod
        def response_length(cls, cfg):
            return 6, True

    assert SixTokens.response_length_hint(BanditConfig()) == "exactly 6 tokens"
    assert Task.response_length_hint.__func__(SixTokens, BanditConfig()) == "exactly 6 tokens"
