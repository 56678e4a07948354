"""Trackers are streamed: every metrics row reaches the writers as the learner produces it, before
the run ends; they are finished (summary) just before summary.json, and aborted when the run fails.
The fake writer is registered the way the real ones are (writers.REGISTRY) and needs neither wandb
nor tensorboard; the real ones are checked when installed (skipped otherwise)."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomli_w
from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.run import writers
from sandbox.run.runner import run_scenario
from sandbox.scenario.api import validate_scenario

TINY = {
    "task": {"name": "bandit"},
    "system": {"num_workers": 2},
    "run": {"steps": 6, "figures": False, "eval_every": 2},
}


def _scn(names, **run):
    return validate_scenario({**TINY, "run": {**TINY["run"], "writers": names, **run}})


@pytest.fixture
def fake(monkeypatch):
    """A writer registered as 'wandb' (no package needed) that records what it gets, and when."""
    seen: dict = {"events": [], "trackings": []}

    class Fake:
        def __init__(self, scenario, tracking):
            seen["trackings"].append(tracking)
            self.dir = Path(tracking.directory)

        def log(self, row):
            seen["events"].append(("log", int(row["step"]), (self.dir / "summary.json").exists()))

        def finish(self, result):
            seen["events"].append(("finish", result.status, (self.dir / "metrics.parquet").exists()))

        def abort(self):
            seen["events"].append(("abort",))

    monkeypatch.setitem(writers.REGISTRY, "wandb", writers.WriterSpec(None, Fake))
    return seen


def test_rows_are_streamed_step_by_step(tmp_path, fake):
    order = []
    res = run_scenario(
        _scn(["files", "wandb"]), tmp_path / "run", on_step=lambda row: order.append(("step", int(row["step"])))
    )
    logs = [e for e in fake["events"] if e[0] == "log"]
    assert [e[1] for e in logs] == list(res.metrics["step"])  # every row, in order
    assert not any(e[2] for e in logs)  # no summary.json yet when each row arrived
    assert [k for _, k in order] == [e[1] for e in logs]
    assert fake["events"][-1] == ("finish", "completed", True)  # finished after the parquet files, before summary.json
    assert (tmp_path / "run" / "summary.json").exists()


def test_streaming_is_interleaved_with_the_simulation(tmp_path, fake):
    """A hook after the writers sees, at step k, that the writer already holds step k and not k + 1."""
    holds = []
    run_scenario(
        _scn(["files", "wandb"]),
        tmp_path / "run",
        on_step=lambda row: holds.append((int(row["step"]), [e[1] for e in fake["events"] if e[0] == "log"])),
    )
    for k, logged in holds:
        assert logged == list(range(k + 1))


def test_writer_is_aborted_and_nothing_kept_when_the_run_fails(tmp_path, fake):
    def boom(row):
        if row["step"] == 2:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        run_scenario(_scn(["files", "wandb"]), tmp_path / "run", on_step=boom)
    assert fake["events"][-1] == ("abort",)
    assert [e[1] for e in fake["events"] if e[0] == "log"] == [0, 1, 2]
    assert not (tmp_path / "run" / "summary.json").exists()
    assert not list((tmp_path / "run").glob(".staging-*"))  # the stage was removed


def test_the_numbers_do_not_depend_on_the_trackers(tmp_path, fake):
    with_trackers = run_scenario(_scn(["files", "wandb"]), tmp_path / "a")
    without = run_scenario(_scn(["files"]), tmp_path / "b")
    assert with_trackers.metrics.equals(without.metrics)
    assert with_trackers.jobs.equals(without.jobs)


def test_tensorboard_has_rows_before_the_run_ends(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    seen = {}

    def peek(row):
        if row["step"] == 3:  # mid-run: the event file already holds the first row (flushed at once)
            acc = EventAccumulator(str(next((tmp_path / "run").glob(".staging-*")) / "tensorboard"))
            acc.Reload()
            seen["steps"] = (
                [e.step for e in acc.Scalars("reward/mean")] if "reward/mean" in acc.Tags()["scalars"] else []
            )

    run_scenario(_scn(["files", "tensorboard"]), tmp_path / "run", on_step=peek)
    assert seen["steps"] and seen["steps"][0] == 0
    acc = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("reward/mean")] == list(range(6))


def test_wandb_offline_names_and_groups(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-dir"))
    real_init, runs = wandb.init, []

    def init(**kw):
        run = real_init(**kw)
        runs.append((run.name, run.group))
        return run

    monkeypatch.setattr(wandb, "init", init)
    path = tmp_path / "mission.toml"
    path.write_text(
        tomli_w.dumps(
            dict(
                TINY,
                title="shared title",
                run={**TINY["run"], "writers": ["files", "wandb"]},
                variants={"sync": {}, "lagged": {"system.num_workers": 3}},
            )
        )
    )
    res = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out"), "-q"])
    assert res.exit_code == 0, res.output
    assert sorted(runs) == [("lagged", "mission"), ("sync", "mission")]
    for variant in ("sync", "lagged"):
        assert list((tmp_path / "out" / variant / "wandb").glob("offline-run-*"))
