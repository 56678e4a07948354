"""A component the exporters know nothing about (a new objective, correction, stabilizer, staleness
control or delay model, defined here and put into a scenario as a registry entry would) never crashes
an export: every framework writes the rest and reports the component in a "no equivalent" (or, for a
delay model, "sandbox only") row that names it."""

from __future__ import annotations

from typing import ClassVar, Literal

import pytest
from export_cases import SCENARIOS

from sandbox.algorithms.base import MethodConfig
from sandbox.export.api import EXPORTERS, ExportRefused, export_scenario
from sandbox.scenario.api import load_scenario
from sandbox.system.delays.base import Delay
from sandbox.system.staleness.base import ControlConfig


class TemperedISConfig(MethodConfig):
    name: Literal["tempered_is"] = "tempered_is"
    temperature: float = 0.7


class SyntheticObjectiveConfig(MethodConfig):
    name: Literal["synthetic_objective"] = "synthetic_objective"
    tau: float = 0.5


class SyntheticStabilizerConfig(MethodConfig):
    name: Literal["synthetic_stabilizer"] = "synthetic_stabilizer"
    strength: float = 0.1


class SyntheticControlConfig(ControlConfig):
    kind: Literal["synthetic_control"] = "synthetic_control"
    k: int = 2


class SyntheticDelay(Delay):
    kind: Literal["synthetic_delay"] = "synthetic_delay"
    scale: float = 1.0

    def expected(self, tokens: float = 0.0) -> float:
        return self.scale


pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")


def _base(name: str = "quickstart"):
    return load_scenario(SCENARIOS / f"{name}.toml")[0]


def _with(scn, section: str, **update):
    part = getattr(scn, section).model_copy(update=update)
    return scn.model_copy(update={section: part})


CASES = {
    "correction": (
        lambda s: _with(s, "algorithm", correction=TemperedISConfig()),
        "algorithm.correction",
        "tempered_is",
    ),
    "objective": (
        lambda s: _with(s, "algorithm", objective=SyntheticObjectiveConfig()),
        "algorithm.objective",
        "synthetic_objective",
    ),
    "stabilizer": (
        lambda s: _with(s, "algorithm", stabilizers=[SyntheticStabilizerConfig()]),
        "algorithm.stabilizers[0]",
        "synthetic_stabilizer",
    ),
    "staleness": (
        lambda s: _with(s, "system", staleness=SyntheticControlConfig()),
        "system.staleness",
        "synthetic_control",
    ),
}


@pytest.mark.parametrize("framework", sorted(EXPORTERS))
@pytest.mark.parametrize("family", sorted(CASES))
def test_unknown_component_is_a_no_equivalent_row(framework, family):
    make, source, name = CASES[family]
    scn = make(_base())
    exp = export_scenario(scn, framework, allow_partial=True)
    rows = [r for r in exp.plan.gaps() if any(s.strip().startswith(source) for s in r.source.split("+"))]
    assert rows, f"{framework}: no no-equivalent row for the unknown {family} {name!r}"
    assert any(name in r.note or name in str(r.value) for r in rows), rows
    assert "PROMOTION.md" in exp.files and name in exp.files["PROMOTION.md"]
    with pytest.raises(ExportRefused):
        export_scenario(scn, framework)


@pytest.mark.parametrize("framework", sorted(EXPORTERS))
def test_unknown_delay_model_is_sandbox_only(framework):
    scn = _with(
        _base(), "system", generation_time=SyntheticDelay(), train_time=SyntheticDelay(), sync_delay=SyntheticDelay()
    )
    exp = export_scenario(scn, framework, allow_partial=True)
    for key in ("system.generation_time", "system.train_time", "system.sync_delay"):
        row = next(r for r in exp.plan.rows if r.source == key)
        assert row.kind == "sandbox_only" and "synthetic_delay" in str(row.value)


def test_exporters_load_only_when_asked_for():
    import subprocess
    import sys

    code = (
        "import sys; from sandbox.export.api import EXPORTERS; names = sorted(EXPORTERS); "
        "loaded = lambda: sorted(m for m in sys.modules if m.startswith('sandbox.frameworks.') and "
        "m.endswith('.export')); "
        "before = loaded(); EXPORTERS['openrlhf']; print(names, before, loaded())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == (
        "['areal', 'openrlhf', 'prime-rl', 'trl', 'verl', 'verl-vcpo'] [] ['sandbox.frameworks.openrlhf.export']"
    ), out


def _tempered_for_verl(plan, source, cfg):
    plan.converted(
        f"{source}.name + {source}.temperature",
        f"{cfg.name}, {cfg.temperature:g}",
        "algorithm.rollout_correction.rollout_is",
        "token",
        "a made-up mapping, for the test",
    )


class CarriedISConfig(TemperedISConfig):
    export_mappings: ClassVar[dict] = {"verl": _tempered_for_verl}


class CarriedStabilizerConfig(SyntheticStabilizerConfig):
    export_mappings: ClassVar[dict] = {
        "verl": lambda plan, source, cfg: plan.implicit(source, cfg.name, "a no-op here")
    }


def test_a_component_carries_its_own_mapping():
    scn = _with(_base(), "algorithm", correction=CarriedISConfig(), stabilizers=[CarriedStabilizerConfig()])
    exp = export_scenario(scn, "verl", allow_partial=True)
    assert not [r for r in exp.plan.gaps() if r.source.startswith(("algorithm.correction", "algorithm.stabilizers"))]
    # the mapping replaced the stand-in's (correction 'none') rows and keys
    assert exp.plan.settings["algorithm.rollout_correction.rollout_is"] == "token"
    assert [r.kind for r in exp.plan.rows if r.source.startswith("algorithm.correction")] == ["converted"]
    # another framework: the engine's row
    gaps = export_scenario(scn, "areal", allow_partial=True).plan.gaps()
    assert any(r.source == "algorithm.correction" and "tempered_is" in r.note for r in gaps)


def _validate(framework, exports, wheel):
    """The framework's own schema check of each export (problems per export; AReaL's in one child process)."""
    from sandbox.export.validate import WHEELS, validate
    from sandbox.frameworks.areal.validation import validate_many

    if framework == "trl":
        pytest.importorskip("trl")
    if framework == "areal":
        return validate_many(exports, wheel("areal"))
    return [validate(framework, f, wheel(framework) if framework in WHEELS else None) for f in exports]


@pytest.mark.parametrize("framework", sorted(EXPORTERS))
def test_exports_with_unknown_components_pass_the_frameworks_checks(framework, wheel):
    exports = [export_scenario(make(_base()), framework, allow_partial=True).files for make, _, _ in CASES.values()]
    assert _validate(framework, exports, wheel) == [[]] * len(exports)


@pytest.mark.parametrize(
    "module, table",
    [
        ("verl", "CORRECTION_GAPS"),
        ("verl_vcpo", "CORRECTION_GAPS"),
        ("trl", "_CORRECTION_MAPPED"),
        ("openrlhf", "NOT_IN_OPENRLHF"),
        ("areal", "CORRECTION_GAPS"),
        ("prime_rl", "_CORRECTION_GAPS"),
    ],
)
def test_the_framework_table_decides_what_it_maps(monkeypatch, module, table):
    """A registered correction that a framework's table leaves out falls to the engine's row, never a KeyError."""
    import importlib

    mod = importlib.import_module(f"sandbox.frameworks.{module}.export")
    monkeypatch.delitem(getattr(mod, table), "opsm")
    scn = load_scenario(SCENARIOS / "quickstart.toml", overrides={"algorithm.correction": {"name": "opsm"}})[0]
    framework = next(name for name in EXPORTERS if EXPORTERS[name].__module__ == mod.__name__)
    gaps = export_scenario(scn, framework, allow_partial=True).plan.gaps()
    assert any(
        r.source == "algorithm.correction" and "has no mapping for the sandbox's correction 'opsm'" in r.note
        for r in gaps
    )
