"""The shipped ``promote`` scenario exports as is: each of its variants to the frameworks its
description names, without --allow-partial (exit 0), and every export passes that framework's own
checks. Together its asynchronous variants reach every framework, and no single one can: the
frameworks' fixed behaviours conflict (docs/promotion.md#a-scenario-every-framework-takes). A change
to an exporter that breaks this portability fails here; one that lifts a conflict fails
``test_the_conflicts_are_the_documented_ones``, so that the scenario and the docs are updated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.export.api import EXPORTERS, ExportRefused, Given, export_scenario
from sandbox.scenario.api import load_scenario, variant_scenarios

ROOT = Path(__file__).resolve().parents[2]
PROMOTE = ROOT / "scenarios" / "promote.toml"

# variant -> the frameworks that take it as is (the scenario's description and docs/promotion.md say the same)
PORTABLE = {
    "sync": {"verl", "trl", "openrlhf", "areal"},
    "async": {"verl", "trl", "areal"},
    "async-reinforce": {"verl", "verl-vcpo", "openrlhf"},
    "async-drop": {"verl", "prime-rl"},
}
CASES = [(v, fw) for v, fws in PORTABLE.items() for fw in sorted(fws)]

# (variant, framework) -> scenario fields the framework refuses: the documented conflict (among others)
CONFLICTS = {
    ("sync", "verl-vcpo"): {"algorithm.objective.aggregation"},
    ("sync", "prime-rl"): {"system.staleness"},
    ("async", "verl-vcpo"): {"algorithm.objective.aggregation"},
    ("async", "openrlhf"): {"algorithm.objective.eps_low + algorithm.objective.eps_high"},
    ("async", "prime-rl"): {"system.staleness.enforcement"},
    ("async-reinforce", "trl"): {"algorithm.objective"},
    ("async-reinforce", "areal"): {"algorithm.objective.aggregation"},
    ("async-reinforce", "prime-rl"): {"system.staleness.enforcement", "algorithm.objective.name"},
    ("async-drop", "verl-vcpo"): {"system.staleness.enforcement + system.staleness.queue_capacity"},
    ("async-drop", "trl"): {"algorithm.objective.normalize_std"},
    ("async-drop", "openrlhf"): {"system.staleness.enforcement + system.staleness.queue_capacity"},
    ("async-drop", "areal"): {"system.staleness.enforcement + system.staleness.queue_capacity"},
}


def _variants():
    scn, raw = load_scenario(PROMOTE)
    return variant_scenarios(scn, raw)


def _validate(framework: str, files: dict[str, str], wheel) -> list[str]:
    """The framework's own schema check (the validators of test_<framework>.py)."""
    from sandbox.export.validate import WHEELS, validate

    if framework == "trl":
        pytest.importorskip("trl")
    return validate(framework, files, wheel(framework) if framework in WHEELS else None)


def test_the_table_covers_the_scenario_and_every_framework():
    assert sorted(PORTABLE) == sorted(_variants())
    asynchronous = [v for v in PORTABLE if v != "sync"]
    assert set().union(*(PORTABLE[v] for v in asynchronous)) == set(EXPORTERS)
    assert sorted(CONFLICTS) == sorted((v, fw) for v in PORTABLE for fw in EXPORTERS if fw not in PORTABLE[v])


@pytest.mark.parametrize("variant, framework", CASES)
def test_variant_exports_as_is_and_passes_the_framework_checks(variant, framework, wheel, tmp_path):
    out = tmp_path / "out"
    done = CliRunner().invoke(
        app, ["export", str(PROMOTE), "--variant", variant, "-f", framework, "--lr", "1e-6", "--out", str(out)]
    )
    assert done.exit_code == 0, done.output
    files = {p.name: p.read_text() for p in out.iterdir() if p.name != "export.json"}
    assert json.loads((out / "export.json").read_text())["partial"] is False
    assert _validate(framework, files, wheel) == []


@pytest.mark.parametrize("variant, framework", sorted(CONFLICTS))
def test_the_conflicts_are_the_documented_ones(variant, framework):
    with pytest.raises(ExportRefused) as refused:
        export_scenario(_variants()[variant], framework, given=Given(lr=1e-6))
    assert CONFLICTS[(variant, framework)] <= {r.source for r in refused.value.rows}
