"""Optional TensorBoard / W&B writers: clear errors when missing, files when installed."""

from __future__ import annotations

import pytest

from sandbox.run import writers
from sandbox.run.runner import run_scenario
from sandbox.scenario.api import ScenarioError, validate_scenario

TINY = {
    "task": {"name": "bandit"},
    "system": {"num_workers": 2},
    "run": {"steps": 6, "figures": False, "eval_every": 2},
}


def _scn(names):
    return validate_scenario({**TINY, "run": {**TINY["run"], "writers": names}})


def test_default_is_files_only():
    assert validate_scenario(TINY).run.writers == ["files"]
    with pytest.raises(ScenarioError, match=r"run\.writers"):
        _scn(["csv"])


def test_missing_package_fails_before_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(writers.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(writers.WriterUnavailable, match=r'pip install -c constraints-cpu.txt -e "\.\[tensorboard\]"'):
        run_scenario(_scn(["files", "tensorboard"]), tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.parquet").exists()  # nothing was simulated
    run_scenario(_scn(["files"]), tmp_path / "ok")  # files alone never needs a package
    assert (tmp_path / "ok" / "summary.json").exists()


def test_tensorboard_event_files(tmp_path):
    pytest.importorskip("tensorboard")
    run_scenario(_scn(["files", "tensorboard"]), tmp_path / "run")
    events = list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    acc.Reload()
    assert "reward/mean" in acc.Tags()["scalars"]
    assert len(acc.Scalars("reward/mean")) == 6
    assert (tmp_path / "run" / "summary.json").exists()


def test_wandb_offline_run(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    run_scenario(_scn(["files", "wandb"]), tmp_path / "run")
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*"))
