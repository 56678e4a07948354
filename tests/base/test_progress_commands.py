"""Every long command reports its phases through sandbox.base.progress: the tests record the tasks (a
recording session, which the commands reuse) or draw them on a forced terminal (SANDBOX_PROGRESS=1)
and check the labels, the counts and the ETA column. No timing is measured."""

from __future__ import annotations

import copy

import pytest
import tomli_w
import torch
from typer.testing import CliRunner

from sandbox.base import progress
from sandbox.cli import app
from sandbox.run.runner import run_scenario
from sandbox.scenario.api import validate_scenario

TINY = {
    "task": {"name": "bandit"},
    "system": {"num_workers": 2},
    "run": {"steps": 5, "figures": False, "eval_every": 2},
}


def _labels(rec) -> list[str]:
    return rec.labels()


def test_run_scenario_phases(tmp_path):
    scn = validate_scenario({**TINY, "run": {**TINY["run"], "figures": True, "figure_formats": ["png"]}})
    with progress.recording() as rec:
        run_scenario(scn, tmp_path / "r", label="v")
    labels = _labels(rec)
    assert labels == ["simulating v", "writing v", "figures v"]
    sim = next(iter(rec.tasks.values()))
    assert (sim.count, sim.unit) == (5, "steps")
    assert [u[0] for u in sim.updates] == [1, 2, 3, 4, 5]  # one update per learner step
    assert sim.updates[-1][2].startswith("t=") and "reward=" in sim.updates[-1][2]


def test_minibatch_rows_count_optimizer_steps(tmp_path):
    scn = validate_scenario({**TINY, "algorithm": {"minibatches": 2, "groups_per_step": 2}})
    with progress.recording() as rec:
        res = run_scenario(scn)
    sim = next(iter(rec.tasks.values()))
    assert len(res.metrics) == 5 and [u[0] for u in sim.updates] == [1, 2, 3, 4, 5] and sim.count == 5


def test_lm_warm_start_is_a_labelled_task(tmp_path, monkeypatch):
    from sandbox.tasks.lm import LMTask, LMTaskConfig
    from sandbox.tasks.lm import warmstart as ws

    monkeypatch.setenv("SANDBOX_CACHE_DIR", str(tmp_path / "cache"))
    threads = torch.get_num_threads()
    task = LMTask(
        LMTaskConfig.model_validate(
            dict(
                problem=dict(kind="sort", min_len=2, max_len=4),
                model=dict(d_model=16, n_layers=1, n_heads=2),
                warmstart=dict(max_steps=6, target_accuracy=None, eval_every=3, dev_size=8),
                train_size=32,
                eval_size=8,
                eval_samples=1,
            )
        )
    )
    try:
        with progress.recording() as rec:
            ws.load_or_train(task)  # trained: shown
        with progress.recording() as again:
            ws.load_or_train(task)  # cached: nothing to show
    finally:
        torch.set_num_threads(threads)
    assert _labels(rec) == [ws.LABEL, "warm start: held-out accuracy of the base LM"]
    assert "cached after" in ws.LABEL
    train = next(iter(rec.tasks.values()))
    assert train.count == 6 and train.updates[-1][0] == 6 and any("dev accuracy" in u[2] for u in train.updates)
    assert again.labels() == []


def test_cli_run_variants_with_a_forced_terminal(tmp_path, monkeypatch):
    """stderr shows the labels, the counts and the ETA; stdout is the same as without progress."""
    path = tmp_path / "two.toml"
    path.write_text(tomli_w.dumps(dict(TINY, variants={"a": {}, "b": {"system.num_workers": 3}})))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv(progress.ENV, "1")
    shown = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "o1")])
    assert shown.exit_code == 0, shown.output
    for piece in ("two: variants", "2/2", "ETA", "done"):
        assert piece in shown.stderr, (piece, shown.stderr)
    assert "ETA" not in shown.stdout and "simulating" not in shown.stdout
    monkeypatch.setenv(progress.ENV, "1")
    quiet = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "o2"), "-q"])
    assert quiet.exit_code == 0 and quiet.stderr == ""
    monkeypatch.delenv(progress.ENV)
    piped = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "o3")])  # stderr is not a terminal
    assert piped.exit_code == 0 and piped.stderr == ""
    assert piped.stdout.replace("o3", "o1") == shown.stdout


def test_cli_run_records_variant_phases(tmp_path):
    path = tmp_path / "two.toml"
    path.write_text(tomli_w.dumps(dict(TINY, variants={"a": {}, "b": {}})))
    with progress.recording() as rec:
        res = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert _labels(rec) == ["two: variants", "simulating a", "writing a", "simulating b", "writing b"]
    top = next(iter(rec.tasks.values()))
    assert top.count == 2 and top.total > 0 and top.updates[-1][0] == 2  # weighted by the budget estimate


@pytest.mark.parametrize("processes", ["1", "2"])
def test_cli_check_phases(processes):
    """One process shows each check as a phase; with worker processes the checks' phases are theirs (a forked
    worker never draws) and the top task counts the checks as they come back."""
    with progress.recording() as rec:
        res = CliRunner().invoke(app, ["check", "straggler_cost", "minibatch_lag", "--quick", "-j", processes])
    assert res.exit_code == 0, res.output
    labels = _labels(rec)
    assert labels[0] == "theory checks (quick)"
    if processes == "1":
        assert "check straggler_cost" in labels and "check minibatch_lag" in labels
    top = next(iter(rec.tasks.values()))
    assert top.count == 2 and [u[0] for u in top.updates] == [1, 2]


def test_cli_claims_phases(tmp_path):
    with progress.recording() as rec:
        res = CliRunner().invoke(app, ["claims", "--quick", "--only", "m2po", "--seeds", "2", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    labels = _labels(rec)
    assert (
        labels[:2] == ["claims (quick), 2 seeds", "LM context runs"] and "claim m2po" in labels
    )  # m2po also runs in the LM context
    assert any(lab.startswith("simulating") and lab.endswith("runs") for lab in labels), labels  # the batch of runs
    assert labels[-1].startswith("figures")
    top = next(iter(rec.tasks.values()))
    assert top.count == 1 and top.updates[-1][0] == 1


def test_cli_plan_phases(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text(tomli_w.dumps(TINY))
    with progress.recording() as rec:
        res = CliRunner().invoke(
            app, ["plan", str(path), "--workers", "2", "--k-max", "1", "--seeds", "1", "--out", str(tmp_path / "plan")]
        )
    assert res.exit_code == 0, res.output
    labels = _labels(rec)
    assert labels[0].startswith("plan: 2 configurations x 1 seeds") and labels[-1] == "figures and tables"
    top = next(iter(rec.tasks.values()))
    assert top.count == 2 and top.updates[-1][0] == 2


def test_cli_sweep_phases(tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text(tomli_w.dumps({"base": TINY, "sweep": {"name": "sw"}, "grid": {"system.num_workers": [2, 3]}}))
    with progress.recording() as rec:
        res = CliRunner().invoke(app, ["sweep", str(sweep), "--out", str(tmp_path / "out"), "-j", "1"])
    assert res.exit_code == 0, res.output
    labels = _labels(rec)
    assert labels[0] == "sweep sw: runs" and labels.count("simulating") == 2
    top = next(iter(rec.tasks.values()))
    assert top.count == 2 and top.updates[-1][0] == 2


def test_sweep_of_lm_runs_warms_the_base_model_first(tmp_path, monkeypatch):
    """The LM warm start runs once, in the driver, as its own phase before the runs (mission, sweep)."""
    from sandbox.sweep.api import run_sweep
    from sandbox.sweep.spec import parse_sweep
    from sandbox.tasks.lm import warmstart as ws

    monkeypatch.setenv("SANDBOX_CACHE_DIR", str(tmp_path / "cache"))
    lm = {
        "task": {
            "name": "lm",
            "problem": {"kind": "sort", "min_len": 2, "max_len": 3},
            "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
            "warmstart": {"max_steps": 4, "target_accuracy": None, "eval_every": 2, "dev_size": 8},
            "train_size": 32,
            "eval_size": 8,
            "eval_samples": 1,
        },
        "algorithm": {"group_size": 2, "groups_per_step": 1},
        "system": {"num_workers": 1},
        "run": {"steps": 2, "figures": False, "eval_every": 1},
    }
    spec = parse_sweep(
        {"base": copy.deepcopy(lm), "sweep": {"name": "lmsw"}, "seeds": [0, 1]}, source="t", default_name="lmsw"
    )
    threads = torch.get_num_threads()
    try:
        with progress.recording() as rec:
            run_sweep(spec, tmp_path / "out", workers=1, force=True)
    finally:
        torch.set_num_threads(threads)
    labels = _labels(rec)
    assert labels.index(ws.LABEL) < labels.index("sweep lmsw: runs")
    assert labels.count(ws.LABEL) == 1  # the runs find it cached
