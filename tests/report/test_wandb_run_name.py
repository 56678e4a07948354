"""The offline W&B run is named after the variant (``sandbox run`` of a scenario with variants, grouped
by the scenario's name), else the scenario's title or, without one, after the directory the run ends
up in, never after the staging directory it is written into (``.staging-*``); a sweep's runs are named
by their swept values and grouped by the sweep.

wandb need not be installed: a stand-in module records what ``wandb.init`` is given."""

from __future__ import annotations

import importlib.machinery
import sys
import types
from pathlib import Path

import pytest
import tomli_w
from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.run.runner import run_scenario
from sandbox.run.writers import run_name
from sandbox.scenario.api import validate_scenario

TINY = {
    "task": {"name": "bandit"},
    "system": {"num_workers": 2},
    "run": {"steps": 4, "figures": False, "eval_every": 2, "writers": ["files", "wandb"]},
}


@pytest.fixture
def fake_wandb(monkeypatch):
    """A ``wandb`` module whose ``init`` records its keyword arguments."""
    inits: list[dict] = []

    class Run:
        summary: dict = {}

        def log(self, *a, **k):
            pass

        def finish(self, **kw):
            pass

    def init(**kw):
        inits.append(kw)
        run = Run()
        run.summary = {}
        return run

    module = types.ModuleType("wandb")
    module.__spec__ = importlib.machinery.ModuleSpec("wandb", None)  # find_spec finds it in sys.modules
    module.init = init
    monkeypatch.setitem(sys.modules, "wandb", module)
    return inits


def test_run_name_skips_staging_directories():
    untitled = validate_scenario(TINY)
    assert untitled.title == ""
    assert run_name(untitled, Path("runs/exp/.staging-abc123")) == "exp"
    assert run_name(untitled, Path("runs/exp/.staging-abc/variant-a/.staging-def")) == "variant-a"
    assert run_name(untitled, Path("runs/exp/.staging-abc/.staging-def")) == "exp"
    assert run_name(untitled, Path("runs/exp")) == "exp"
    titled = validate_scenario({**TINY, "title": "my title"})
    assert run_name(titled, Path("runs/exp/.staging-abc")) == "my title"


def test_untitled_run_is_named_after_its_directory(tmp_path, fake_wandb):
    run_scenario(validate_scenario(TINY), tmp_path / "my-run")
    assert [kw["name"] for kw in fake_wandb] == ["my-run"]
    assert (tmp_path / "my-run" / "summary.json").exists()
    assert Path(fake_wandb[0]["dir"]).name.startswith(".staging-")  # written in the stage, named after the target


def test_cli_variants_are_named_by_variant_and_grouped_by_scenario(tmp_path, fake_wandb):
    data = dict(TINY, title="one title for all", variants={"a/b": {"system.num_workers": 3}, "plain": {}})
    path = tmp_path / "tiny.toml"
    path.write_text(tomli_w.dumps(data))
    res = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out"), "-q"])
    assert res.exit_code == 0, res.output
    assert sorted(kw["name"] for kw in fake_wandb) == ["a/b", "plain"]  # not the shared title
    assert {kw["group"] for kw in fake_wandb} == {"tiny"}


def test_single_run_of_the_cli_is_grouped_by_scenario(tmp_path, fake_wandb):
    path = tmp_path / "solo.toml"
    path.write_text(tomli_w.dumps(TINY))
    res = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out"), "-q"])
    assert res.exit_code == 0, res.output
    assert [(kw["name"], kw["group"]) for kw in fake_wandb] == [("out", "solo")]


def test_sweep_runs_are_named_by_values_and_grouped_by_sweep(tmp_path, fake_wandb):
    from sandbox.sweep.api import run_sweep
    from sandbox.sweep.spec import parse_sweep

    spec = parse_sweep(
        {"base": TINY, "sweep": {"name": "tw"}, "grid": {"system.num_workers": [2, 3]}, "seeds": [0]},
        source="test",
        default_name="tw",
    )
    run_sweep(spec, tmp_path / "sw", workers=1, progress=False, force=True)
    assert sorted(kw["name"] for kw in fake_wandb) == ["num_workers=2 seed=0", "num_workers=3 seed=0"]
    assert {kw["group"] for kw in fake_wandb} == {"tw"}
