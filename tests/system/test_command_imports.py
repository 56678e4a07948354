"""The heavy modules a command does not use stay unimported (issue 48): a figures-off ``sandbox run``
imports neither matplotlib, nor ``torch._dynamo`` (torch's optimizers import it on construction:
``sandbox/learner/optim.py: without_dynamo``), nor sympy (an explicit backward gradient imports it:
``Learner._optimizer_step``); ``sandbox scenario`` imports no matplotlib and no ``torch._dynamo``.
Each command runs in a fresh interpreter that prints ``sorted(sys.modules)`` afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RUNNER = """
import contextlib, io, json, sys
from sandbox.cli import app
with contextlib.redirect_stdout(io.StringIO()):
    try:
        app(sys.argv[1:], standalone_mode=False)
    except SystemExit as exc:
        if exc.code:
            raise
print(json.dumps(sorted(sys.modules)))
"""


def _modules_after(*args: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, *args], capture_output=True, text=True, cwd=ROOT, timeout=600, check=False
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


def test_scenario_imports_no_plotting_or_dynamo():
    modules = _modules_after("scenario")
    assert "sandbox.scenario" in modules
    assert _heavy(modules) == set()
