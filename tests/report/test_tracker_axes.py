"""The trackers' settings and x-axes: W&B's mode, project, entity, tags and group from ``run.wandb``, else
the ``WANDB_*`` environment, else offline defaults; simulated time and samples logged with every row and
declared with ``define_metric`` (W&B), and a second and third TensorBoard tag family against them.

Neither wandb nor tensorboard need be installed: stand-in modules record what they are given."""

from __future__ import annotations

import importlib.machinery
import sys
import types

import pandas as pd
import pytest

from sandbox.run.runner import run_scenario
from sandbox.run.writers import Tracking, wandb_settings, x_axes
from sandbox.scenario.api import ScenarioError, validate_scenario

TINY = {
    "task": {"name": "bandit"},
    "system": {"num_workers": 2},
    "run": {"steps": 4, "figures": False, "eval_every": 2, "writers": ["files", "wandb"]},
}
WANDB_ENV = ("WANDB_MODE", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_TAGS", "WANDB_RUN_GROUP")


@pytest.fixture
def clean_env(monkeypatch):
    for name in WANDB_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def fake_wandb(monkeypatch):
    """A ``wandb`` module recording ``init``'s keywords, ``define_metric`` and ``log`` calls."""
    calls = {"init": [], "define": [], "log": []}

    class Run:
        def __init__(self):
            self.summary = {}

        def define_metric(self, name, **kw):
            calls["define"].append((name, kw))

        def log(self, data, step=None):
            calls["log"].append((dict(data), step))

        def finish(self, **kw):
            pass

    def init(**kw):
        calls["init"].append(kw)
        return Run()

    module = types.ModuleType("wandb")
    module.__spec__ = importlib.machinery.ModuleSpec("wandb", None)
    module.init = init
    monkeypatch.setitem(sys.modules, "wandb", module)
    return calls


def test_settings_default_offline_then_environment_then_scenario(clean_env):
    tracking = Tracking(directory=".", name="r", group="quickstart")
    plain = validate_scenario(TINY)
    assert wandb_settings(plain, tracking) == {
        "mode": "offline",
        "project": "async-rl-sandbox",
        "entity": None,
        "tags": None,
        "group": "quickstart",
    }
    env = {
        "WANDB_MODE": "online",
        "WANDB_PROJECT": "p-env",
        "WANDB_ENTITY": "team",
        "WANDB_TAGS": "a, b,",
        "WANDB_RUN_GROUP": "g-env",
    }
    assert wandb_settings(plain, tracking, env) == {
        "mode": "online",
        "project": "p-env",
        "entity": "team",
        "tags": ["a", "b"],
        "group": "g-env",
    }
    mine = validate_scenario(
        {**TINY, "run": {**TINY["run"], "wandb": {"project": "mine", "tags": ["x"], "mode": "disabled"}}}
    )
    got = wandb_settings(mine, tracking, env)
    assert got == {"mode": "disabled", "project": "mine", "entity": "team", "tags": ["x"], "group": "g-env"}


def test_a_bad_wandb_table_names_the_field():
    with pytest.raises(ScenarioError, match=r"run\.wandb\.mode"):
        validate_scenario({**TINY, "run": {**TINY["run"], "wandb": {"mode": "cloud"}}})
    with pytest.raises(ScenarioError, match=r"run\.wandb\.projekt"):
        validate_scenario({**TINY, "run": {**TINY["run"], "wandb": {"projekt": "x"}}})


def test_x_axes_of_a_row():
    assert x_axes({"time": 2.5, "throughput/samples_per_s": 12.4}) == {"sim/time_s": 2.5, "sim/samples": 31.0}
    assert x_axes({"step": 3}) == {}


def test_wandb_run_gets_the_settings_and_simulated_time_and_samples_as_x_axes(tmp_path, clean_env, fake_wandb):
    clean_env.setenv("WANDB_PROJECT", "from-env")
    scn = validate_scenario({**TINY, "run": {**TINY["run"], "wandb": {"entity": "lab", "tags": ["t1"]}}})
    run_scenario(scn, tmp_path / "run")
    (init,) = fake_wandb["init"]
    assert (init["mode"], init["project"], init["entity"], init["tags"]) == ("offline", "from-env", "lab", ["t1"])
    defined = dict(fake_wandb["define"])
    assert "sim/time_s" in defined and "sim/samples" in defined and defined["*"] == {"step_metric": "sim/time_s"}
    metrics = pd.read_parquet(tmp_path / "run" / "metrics.parquet")
    logged = fake_wandb["log"]
    assert [step for _, step in logged] == metrics["step"].tolist()
    for (data, _), (_, m) in zip(logged, metrics.iterrows()):
        assert data["sim/time_s"] == m["time"]
        assert data["sim/samples"] == round(m["throughput/samples_per_s"] * m["time"])
    assert [d["sim/samples"] for d, _ in logged] == sorted(d["sim/samples"] for d, _ in logged)  # a count: never falls


def test_tensorboard_has_tag_families_against_samples_and_simulated_time(tmp_path, monkeypatch):
    scalars: list[tuple[str, float, int]] = []

    class SummaryWriter:
        def __init__(self, log_dir=None, flush_secs=None):
            pass

        def add_scalar(self, tag, value, global_step=None):
            scalars.append((tag, value, global_step))

        def add_text(self, *a, **k):
            pass

        def flush(self):
            pass

        def close(self):
            pass

    tb = types.ModuleType("torch.utils.tensorboard")
    tb.SummaryWriter = SummaryWriter
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", tb)
    from sandbox.run import writers

    monkeypatch.setattr(writers.importlib.util, "find_spec", lambda name: importlib.machinery.ModuleSpec(name, None))
    scn = validate_scenario({**TINY, "run": {**TINY["run"], "writers": ["files", "tensorboard"]}})
    run_scenario(scn, tmp_path / "run")
    metrics = pd.read_parquet(tmp_path / "run" / "metrics.parquet")
    col = "reward/mean"
    by_step = [(v, s) for t, v, s in scalars if t == col]
    by_samples = [(v, s) for t, v, s in scalars if t == f"vs_samples/{col}"]
    by_time = [(v, s) for t, v, s in scalars if t == f"vs_sim_ms/{col}"]
    assert [s for _, s in by_step] == metrics["step"].tolist()
    assert [v for v, _ in by_samples] == [v for v, _ in by_step] == [v for v, _ in by_time]
    assert [s for _, s in by_samples] == [
        round(r * t) for r, t in zip(metrics["throughput/samples_per_s"], metrics["time"])
    ]
    assert [s for _, s in by_time] == [round(t * 1000) for t in metrics["time"]]
