"""The component checker (``sandbox.component_check``, in the spirit of Gymnasium's ``check_env``) over
every registered component of every family, and over one synthetic new component per family that
declares nothing beyond its config and implementation, registered at run time as a third-party plugin
(a subprocess: a component registers before the scenario schema is built)."""

from __future__ import annotations

import json
import warnings
from importlib import metadata

import pytest
from plugin_site import COMPONENTS, ROOT, make_plugin_site, python, sandbox_cli
from pydantic import BaseModel

from sandbox.base.registry import PLUGIN_GROUP, Registry
from sandbox.component_check import check_component
from sandbox.components import FAMILIES
from sandbox.export.api import EXPORTERS

REGISTERED = [(family, name) for family, fam in FAMILIES.items() for name in fam.registry.names()]


@pytest.mark.parametrize("family,name", REGISTERED, ids=[f"{f}-{n}" for f, n in REGISTERED])
def test_registered_component_passes_the_checker(family, name, tmp_path):
    """Budget estimate, a short `sandbox run`, `sandbox plan`, `sandbox export` to every framework,
    `sandbox scenario --reference` and its hand-value test: no problem."""
    assert check_component(family, name, tests=ROOT / "tests", workdir=tmp_path) == []


def test_checker_reports_problems():
    assert check_component("nope", "x") and "unknown family" in check_component("nope", "x")[0]
    assert "not registered" in check_component("task", "no_such_task")[0]


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory):
    return make_plugin_site(tmp_path_factory.mktemp("site"))


CHECK_ALL = """
import json, warnings
warnings.simplefilter("error")  # a plugin that fails to load must not pass silently here
from sandbox.components import FAMILIES
from sandbox.component_check import check_component
wanted = json.loads({wanted!r})
out = {{}}
for family, name in wanted.items():
    entry = FAMILIES[family].registry[name]
    out[family] = {{"module": entry.module, "problems": check_component(family, name, workdir={work!r})}}
print("RESULT" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def synthetic_checked(plugin_site, tmp_path_factory):
    """The checker's problems for each synthetic component, found in one fresh process with the plugin."""
    wanted = json.dumps({family: name for family, (name, _) in COMPONENTS.items()})
    res = python(CHECK_ALL.format(wanted=wanted, work=str(tmp_path_factory.mktemp("check"))), plugin_site)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.split("RESULT", 1)[1])


@pytest.mark.parametrize("family", list(COMPONENTS))
def test_synthetic_component_passes_the_checker(family, synthetic_checked):
    """One new component per family, declaring nothing (a staleness control without budget facts, a
    task without a budget shape, a correction reading token versions from the context, ...): the budget
    estimate, `sandbox run`, `sandbox plan` and `sandbox scenario --reference` work (the staleness
    control and the task crashed `sandbox run` before the components carried their knowledge, the
    correction needed core edits). Exports: :func:`test_synthetic_component_exports`."""
    name, module = COMPONENTS[family]
    got = synthetic_checked[family]
    assert got["module"] == f"sandbox_synthetic_plugin.{module}"
    assert [p for p in got["problems"] if not p.startswith("sandbox export")] == [], (family, name)


FRAMEWORKS = list(EXPORTERS)


@pytest.mark.parametrize(
    "family,framework", [pytest.param(f, fw, id=f"{f}-{fw}") for f in COMPONENTS for fw in FRAMEWORKS]
)
def test_synthetic_component_exports(family, framework, synthetic_checked):
    """`sandbox export -f <framework> --allow-partial` maps the new component or writes its "no
    equivalent" row; it never crashes."""
    problems = [p for p in synthetic_checked[family]["problems"] if p.startswith(f"sandbox export -f {framework}:")]
    assert problems == []


def test_plugin_runs_through_the_cli(plugin_site, tmp_path):
    """The installed plugin's components, all six in one scenario, through the real `sandbox run`, then
    `sandbox export` (the framework whose exporter crashed on a new correction) and `sandbox scenario
    --reference`, each a fresh process that finds the plugin by its entry points."""
    scenario = tmp_path / "plugin.toml"
    scenario.write_text("""
[task]
name = "synthetic_task"
num_arms = 4
[system]
num_workers = 2
generation_time = { kind = "synthetic_delay" }
train_time = { kind = "constant", value = 0.1 }
staleness = { kind = "synthetic_control" }
[algorithm]
group_size = 4
groups_per_step = 2
objective = { name = "synthetic_objective" }
correction = { name = "synthetic_correction", gamma = 0.8 }
stabilizers = [{ name = "synthetic_stabilizer" }]
[run]
steps = 3
eval_every = 1
""")
    run = sandbox_cli(["run", str(scenario), "--out", str(tmp_path / "run"), "-q"], plugin_site)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    metrics = (tmp_path / "run").rglob("metrics*")
    assert any(metrics), sorted(p.name for p in (tmp_path / "run").rglob("*"))
    # every plugin component exported as is: mapped or a "no equivalent" row (the export engine's fallback)
    exp = sandbox_cli(
        ["export", str(scenario), "-f", "areal", "--allow-partial", "--out", str(tmp_path / "areal")], plugin_site
    )
    assert exp.returncode == 0, exp.stdout[-2000:] + exp.stderr[-3000:]
    assert "synthetic_correction" in (tmp_path / "areal" / "PROMOTION.md").read_text()
    ref = sandbox_cli(["scenario", "--reference"], plugin_site)
    assert ref.returncode == 0, ref.stderr[-2000:]
    for name, _ in COMPONENTS.values():
        assert name in ref.stdout


def test_without_the_plugin_its_components_are_unknown():
    res = sandbox_cli(["list", "staleness"], ROOT)
    assert res.returncode == 0 and "synthetic_control" not in res.stdout


# -- the plugin protocol, in this process with a registry of its own ------------------------------------


class _EP:
    """A stand-in for an ``importlib.metadata.EntryPoint``."""

    def __init__(self, name, load):
        self.name, self.value, self._load = name, f"fake:{name}", load

    def load(self):
        return self._load()


def _config(name):
    return type(f"C_{name}", (BaseModel,), {"__annotations__": {"name": str}, "name": name})


def test_union_loads_plugins_before_it_closes_registration(monkeypatch):
    monkeypatch.delenv("SANDBOX_PLUGINS", raising=False)
    reg = Registry("gadget", plugins="gadget")
    reg.register(_config("builtin"), object)
    order = []

    def load():
        order.append("plugin loaded")
        reg.register(_config("from_plugin"), object)

    def broken():
        raise ImportError("missing dependency")

    eps = [_EP("gadget:from_plugin", load), _EP("gadget:broken", broken), _EP("other:thing", lambda: 1 / 0)]
    monkeypatch.setattr(metadata, "entry_points", lambda group=None: [e for e in eps if group == PLUGIN_GROUP])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lazy = reg.union()
        assert order == []  # a placeholder: nothing loads until pydantic builds a model from it
        union = reg.closed_union()
    assert order == ["plugin loaded"] and reg.names() == ["builtin", "from_plugin"]
    assert "from_plugin" in str(union) and "LazyUnion(gadget)" in str(lazy)
    assert any("gadget:broken" in str(w.message) and "missing dependency" in str(w.message) for w in caught)
    with pytest.raises(RuntimeError, match="registered after the scenario schema was built.*entry point"):
        reg.register(_config("too_late"), object)
    assert reg.load_plugins() == []  # once


def test_plugins_can_be_switched_off(monkeypatch):
    reg = Registry("gadget", plugins="gadget")
    reg.register(_config("builtin"), object)
    monkeypatch.setattr(metadata, "entry_points", lambda group=None: [_EP("gadget:x", lambda: 1 / 0)])
    monkeypatch.setenv("SANDBOX_PLUGINS", "0")
    reg.closed_union()
    assert reg.names() == ["builtin"]


def test_every_family_loads_its_plugins():
    assert sorted(f.registry.plugins for f in FAMILIES.values()) == sorted(FAMILIES)
