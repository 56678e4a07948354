"""The heavy modules a command does not use stay unimported (issue 48): a figures-off ``sandbox run``
imports neither matplotlib, nor ``torch._dynamo`` (torch's optimizers import it on construction:
``sandbox/learner/optim.py: without_dynamo``), nor sympy (an explicit backward gradient imports it:
``Learner._optimizer_step``); ``sandbox scenario``, ``sandbox list`` and ``sandbox plan`` import no torch at all
(the method modules bind torch at first use: ``sandbox/base/lazy_torch.py``) and no matplotlib (``plan`` writes its
figures in a forked child: ``sandbox/plan/command.py: _write_outputs``). Each command runs in a fresh interpreter that prints ``sorted(sys.modules)`` afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scenarios" / "quickstart.toml"

RUNNER = """
import contextlib, importlib, io, json, os, sys
for name in filter(None, os.environ.get("PRELOAD", "").split(",")):
    importlib.import_module(name)
from sandbox.cli import app
with contextlib.redirect_stdout(io.StringIO()):
    try:
        app(sys.argv[1:], standalone_mode=False)
    except SystemExit as exc:
        if exc.code:
            raise
print(json.dumps(sorted(sys.modules)))
"""


def _modules_after(*args: str, preload: str = "") -> set[str]:
    """The modules loaded after ``sandbox <args>`` in a fresh interpreter that first imports ``preload``
    (comma-separated module names)."""
    env = {**os.environ, "PRELOAD": preload}
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def _heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] in ("matplotlib", "sympy") or m.startswith("torch._dynamo")}


def test_a_figures_off_run_imports_no_plotting_dynamo_or_sympy(tmp_path):
    modules = _modules_after(
        "run",
        str(ROOT / "scenarios" / "quickstart.toml"),
        "--set",
        "run.steps=6",
        "--set",
        "run.figures=false",
        "--out",
        str(tmp_path / "run"),
        "-q",
    )
    assert list((tmp_path / "run").glob("*/summary.json"))  # it did train (one folder per variant)
    assert "torch.optim" in modules  # the learner built its optimizer
    assert _heavy(modules) == set()


@pytest.mark.parametrize(
    "args",
    [("scenario",), ("scenario", str(QUICKSTART)), ("scenario", "lm_mission"), ("list",)],
    ids=["key-reference", "resolved-file", "resolved-lm-scenario", "list"],
)
def test_scenario_and_list_import_no_torch_or_plotting(args):
    modules = _modules_after(*args)
    # every method module did load (the registries: the scenario model's unions, the list of names)
    assert "sandbox.tasks.lm.task" in modules and "sandbox.algorithms.stabilizers.gac" in modules
    assert "torch" not in modules
    assert _heavy(modules) == set()


def _plan(out: Path, *extra: str, preload: str = "") -> set[str]:
    args = ("plan", str(QUICKSTART), "--workers", "2,4", "--k-max", "0,1", "--seeds", "2", "--steps", "8")
    return _modules_after(*args, *extra, "--out", str(out), "-q", preload=preload)


def test_plan_imports_no_torch_or_plotting(tmp_path):
    modules = _plan(tmp_path / "plan")
    figures = sorted(p.name for p in (tmp_path / "plan" / "figures").iterdir())
    assert (tmp_path / "plan" / "plan.csv").is_file() and "throughput.png" in figures  # its child drew them
    assert "sandbox.plan.capacity" in modules and "sandbox.system.cluster" in modules
    assert "torch" not in modules
    assert not _heavy(modules), _heavy(modules)


def test_the_gpu_split_plan_imports_no_torch_or_plotting(tmp_path):
    modules = _modules_after("plan", str(QUICKSTART), "--gpus", "8", "--out", str(tmp_path / "split"), "-q")
    assert (tmp_path / "split" / "split.csv").is_file() and (tmp_path / "split" / "figures" / "split.png").is_file()
    assert "sandbox.plan.split" in modules
    assert "torch" not in modules
    assert not _heavy(modules), _heavy(modules)


def test_the_plan_without_torch_is_the_plan_with_torch(tmp_path):
    """torch imported before the command (as in a process that trained first) changes no byte of the plan."""
    without = _plan(tmp_path / "without")
    with_torch = _plan(tmp_path / "with", preload="torch")
    assert "torch" not in without and "torch" in with_torch
    for name in ("plan.csv", "plan.json", "figures/throughput.png"):
        assert (tmp_path / "without" / name).read_bytes() == (tmp_path / "with" / name).read_bytes(), name
