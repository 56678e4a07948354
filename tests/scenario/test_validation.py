"""Bad input gets an error naming the dotted path and what was expected."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.scenario.api import ScenarioError, load_scenario, validate_scenario
from sandbox.scenario.load import parse_overrides

ROOT = Path(__file__).resolve().parents[2]


def problems(data: dict) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        validate_scenario(data)
    return info.value.problems


@pytest.mark.parametrize(
    "data, path, expected",
    [
        ({"task": {"name": "bitstring", "horizn": 8}}, "task.horizn", "unknown key"),
        ({"sytem": {}}, "sytem", "unknown key"),
        ({"task": {"name": "bitstring", "horizon": "long"}}, "task.horizon", "valid integer"),
        ({"system": {"num_workers": 2.5}}, "system.num_workers", "integer"),
        (
            {"system": {"generation_time": {"kind": "constant", "value": -1.0}}},
            "system.generation_time.value",
            "greater than or equal to 0",
        ),
        ({"system": {"sync_delay": {"kind": "exponential", "mean": -0.5}}}, "system.sync_delay.mean", "greater than 0"),
        (
            {"system": {"staleness": {"kind": "max_lag", "k_max": -1}}},
            "system.staleness.k_max",
            "greater than or equal to 0",
        ),
        ({"system": {"staleness": {"kind": "fixed_lag", "k": -2}}}, "system.staleness.k", "greater than or equal to 0"),
        (
            {"system": {"staleness": {"kind": "async_ratio", "alpha": -0.5}}},
            "system.staleness.alpha",
            "greater than or equal to 0",
        ),
        ({"system": {"staleness": {"kind": "bounded"}}}, "system.staleness", "unknown kind 'bounded'"),
        (
            {"system": {"generation_time": {"kind": "uniform", "low": 2.0, "high": 1.0}}},
            "system.generation_time",
            "high must be greater than low",
        ),
        (
            {"system": {"generation_time": {"kind": "lognormal", "median": 1.0, "sigma": 0.0}}},
            "system.generation_time.sigma",
            "greater than 0",
        ),
        (
            {"system": {"generation_time": {"kind": "pareto", "alpha": 0.0}}},
            "system.generation_time.alpha",
            "greater than 0",
        ),
        (
            {"system": {"generation_time": {"kind": "gamma", "shape": -1}}},
            "system.generation_time.shape",
            "greater than 0",
        ),
        (
            {"system": {"generation_time": {"kind": "empirical", "values": []}}},
            "system.generation_time.values",
            "at least 1",
        ),
        (
            {"system": {"generation_time": {"kind": "empirical", "values": [1.0, -2.0]}}},
            "system.generation_time",
            "finite and >= 0",
        ),
        ({"system": {"num_workers": 3, "worker_speeds": [1.0, 0.5]}}, "system", "expected num_workers=3"),
        ({"algorithm": {"group_size": 1, "objective": {"name": "grpo"}}}, "algorithm.group_size", "at least 2"),
        ({"algorithm": {"objective": {"name": "grpq"}}}, "algorithm.objective", "unknown name 'grpq'"),
        ({"algorithm": {"optimizer": {"lr": 0.0}}}, "algorithm.optimizer.lr", "greater than 0"),
        ({"algorithm": {"optimizer": {"betas": [0.9, 1.5]}}}, "algorithm.optimizer.betas", "[0, 1)"),
        ({"task": {"name": "bandit", "num_arms": 3, "arm_means": [0.1, 0.2]}}, "task", "expected num_arms=3"),
        ({"task": {"name": "bandit", "arm_means": [2.0] * 10}}, "task", "[0, 1]"),
        ({"run": {"steps": 0}}, "run.steps", "greater than or equal to 1"),
    ],
)
def test_each_bad_field_is_named_with_what_was_expected(data, path, expected):
    msgs = problems(data)
    assert any(m.startswith(f"{path}:") and expected in m for m in msgs), msgs


def test_override_parsing_and_errors():
    assert parse_overrides(["system.staleness.k_max=4", "run.figures=false", "task.name=bandit", "x.y=[1, 2]"]) == {
        "system.staleness.k_max": 4,
        "run.figures": False,
        "task.name": "bandit",
        "x.y": [1, 2],
    }
    with pytest.raises(ScenarioError, match="dotted.key=value"):
        parse_overrides(["system.num_workers"])


def test_set_overrides_any_field():
    scn, _ = load_scenario(
        ROOT / "scenarios" / "sync.toml",
        ["system.num_workers=3", "algorithm.optimizer.lr=0.5", "system.staleness={kind='max_lag', k_max=7}"],
    )
    assert scn.system.num_workers == 3
    assert scn.algorithm.optimizer.lr == 0.5
    assert scn.system.staleness.kind == "max_lag" and scn.system.staleness.k_max == 7


def test_bad_toml_and_missing_file_are_errors_not_tracebacks(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[task\nname = 1")
    with pytest.raises(ScenarioError, match="not valid TOML"):
        load_scenario(bad)
    with pytest.raises(ScenarioError, match="file not found"):
        load_scenario(tmp_path / "nope.toml")


def test_cli_reports_user_mistakes_without_traceback(tmp_path):
    result = CliRunner().invoke(
        app,
        ["run", str(ROOT / "scenarios" / "sync.toml"), "--set", "system.staleness.k_max=-1", "--out", str(tmp_path)],
    )
    assert result.exit_code == 2
    assert "system.staleness" in result.output and "Traceback" not in result.output


def test_every_shipped_scenario_validates():
    files = sorted((ROOT / "scenarios").glob("*.toml")) + sorted((ROOT / "scenarios" / "published").glob("*.toml"))
    assert len(files) >= 7
    for f in files:
        load_scenario(f)
