"""Unknown keys get a did-you-mean from the keys valid at that place, and a problem that a --set
override causes is blamed on the override, not on the scenario file."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.scenario.api import ScenarioError, load_scenario, validate_scenario

ROOT = Path(__file__).resolve().parents[2]
FIXED_LAG = ROOT / "scenarios" / "fixed_lag.toml"


def problem(data: dict) -> str:
    with pytest.raises(ScenarioError) as info:
        validate_scenario(data)
    (only,) = info.value.problems
    return only


@pytest.mark.parametrize(
    "data, expected",
    [
        ({"sytem": {}}, "sytem: unknown key; did you mean 'system'?"),
        ({"system": {"num_worker": 2}}, "system.num_worker: unknown key; did you mean 'num_workers'?"),
        (
            {"system": {"staleness": {"kind": "max_lag", "kmax": 2}}},
            "system.staleness.kmax: unknown key; did you mean 'k_max'?",
        ),
        (
            {"algorithm": {"stabilizers": [{"name": "gac", "cthr": 0.1}]}},
            "algorithm.stabilizers[0].cthr: unknown key; did you mean 'c_thr'?",
        ),
        (
            {"task": {"name": "lm", "model": {"backend": "hf", "pth": "x"}}},
            "task.model.pth: unknown key; did you mean 'path'?",
        ),
        (
            {"task": {"name": "lm", "problem": {"kind": "addition", "digit": 2}}},
            "task.problem.digit: unknown key; did you mean 'digits'?",
        ),
    ],
)
def test_unknown_key_suggests_the_closest_valid_key_at_its_level(data, expected):
    assert problem(data).startswith(expected)


def test_a_key_of_another_kind_names_that_kind():
    msg = problem({"system": {"staleness": {"kind": "max_lag", "k": 2}}})
    assert msg.startswith("system.staleness.k: unknown key for kind = 'max_lag' ('k' is a key of kind = 'fixed_lag')")
    assert "k_max" in msg  # the keys that are valid here


def test_no_close_key_lists_the_valid_keys():
    msg = problem({"run": {"zzzz": 1}})
    assert msg.startswith("run.zzzz: unknown key; expected one of steps, seed,") and "docs/scenario-reference.md" in msg


def test_an_override_is_blamed_for_its_own_problem():
    with pytest.raises(ScenarioError) as info:
        load_scenario(FIXED_LAG, ["system.k=16", "run.steps=3"])
    assert str(info.value).startswith(f"invalid override --set system.k=16 (applied to {FIXED_LAG}):")
    assert info.value.problems[0].startswith("system.k: unknown key")


def test_an_override_that_switches_the_kind_is_blamed():
    with pytest.raises(ScenarioError) as info:
        load_scenario(FIXED_LAG, ["system.staleness.kind=max_lag"])
    assert info.value.source == f"override --set system.staleness.kind=max_lag (applied to {FIXED_LAG})"


def test_file_problems_stay_on_the_file(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[system]\nnum_worker = 2\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, ["run.steps=3"])
    assert info.value.source == str(path)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, ["run.stepz=3"])
    assert info.value.source == f"{path} with override --set run.stepz=3"
    file_problem, override_problem = info.value.problems
    assert file_problem.startswith("system.num_worker") and "[from" not in file_problem
    assert override_problem.startswith("run.stepz: unknown key; did you mean 'steps'?")
    assert override_problem.endswith("[from --set run.stepz=3]")


def test_cli_error_names_the_override():
    res = CliRunner().invoke(app, ["run", str(FIXED_LAG), "--set", "system.staleness.kk=3"])
    assert res.exit_code == 2
    text = " ".join(res.output.split())
    assert f"error: invalid override --set system.staleness.kk=3 (applied to {FIXED_LAG}):" in text
    assert "did you mean 'k'?" in text


def test_overrides_given_as_a_dict_are_named_as_toml():
    with pytest.raises(ScenarioError) as info:
        load_scenario(FIXED_LAG, {"system.staleness.kind": "max_lag"})
    assert info.value.source == f'override --set system.staleness.kind="max_lag" (applied to {FIXED_LAG})'


SWEEP = ROOT / "scenarios" / "sweeps" / "methods_bitstring.toml"


def test_sweep_override_is_blamed_and_said_once():
    res = CliRunner().invoke(app, ["sweep", str(SWEEP), "--set", "system.num_workers=-3"])
    assert res.exit_code == 2
    text = " ".join(res.output.split())
    assert f"error: invalid override --set system.num_workers=-3 (applied to {SWEEP}):" in text
    # every run of the sweep has the same problem: it is said once, not once per run
    assert text.count("system.num_workers: Input should be greater than or equal to 1") == 1
    assert "[all 21 runs]" in text


def test_sweep_file_problem_stays_on_the_file(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text(f'base = "{FIXED_LAG}"\nseeds = [0, 1]\n[set]\n"system.num_worker" = 2\n')
    from sandbox.sweep.spec import load_sweep

    with pytest.raises(ScenarioError) as info:
        load_sweep(path, ["run.steps=3"])
    assert info.value.source == str(path)
    (only,) = info.value.problems
    assert only.startswith("[all 2 runs] system.num_worker: unknown key; did you mean 'num_workers'?")


def test_export_override_is_blamed(tmp_path):
    res = CliRunner().invoke(
        app, ["export", "-f", "verl", str(FIXED_LAG), "--set", "system.num_workers=-3", "--out", str(tmp_path / "x")]
    )
    assert res.exit_code == 2
    text = " ".join(res.output.split())
    assert f"invalid override --set system.num_workers=-3 (applied to {FIXED_LAG})" in text
    assert not (tmp_path / "x").exists()


def test_a_dotted_kind_switch_suggests_replacing_the_whole_table():
    with pytest.raises(ScenarioError) as info:
        load_scenario(FIXED_LAG, ["system.staleness.kind=max_lag"])
    (msg,) = info.value.problems
    assert msg.endswith("to switch kind, replace the whole table: --set 'system.staleness={kind = \"max_lag\", ...}'")
    # and the suggested form works
    scenario, _ = load_scenario(FIXED_LAG, ['system.staleness={kind = "max_lag", k_max = 4}'])
    assert scenario.system.staleness.kind == "max_lag" and scenario.system.staleness.k_max == 4


@pytest.mark.parametrize(
    "data, expected",
    [
        (
            {"algorithm": {"correction": {"name": "tiss"}}},
            "algorithm.correction: unknown name 'tiss'; did you mean 'tis'?",
        ),
        (
            {"system": {"staleness": {"kind": "max_lagg"}}},
            "system.staleness: unknown kind 'max_lagg'; did you mean 'max_lag'?",
        ),
        ({"task": {"name": "bandits"}}, "task: unknown name 'bandits'; did you mean 'bandit'?"),
    ],
)
def test_an_unknown_component_name_suggests_the_closest_registered_one(data, expected):
    msg = problem(data)
    assert msg.startswith(expected), msg
    assert "expected one of" in msg


def test_a_far_name_gets_no_suggestion_but_the_list():
    msg = problem({"algorithm": {"correction": {"name": "zzzz"}}})
    assert "did you mean" not in msg and "'tis'" in msg
