"""Ctrl-C in `sandbox sweep`: exit status 130 and one line saying what was kept, never click's
"Aborted!" (exit 1) or a traceback; while the sweep file loads nothing was written."""

from __future__ import annotations

import copy
import subprocess
import sys

import tomli_w
from _sweep_tiny import TINY_BASE
from typer.testing import CliRunner

import sandbox.sweep.api
from sandbox.cli import app


def _sweep_file(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text(
        tomli_w.dumps(
            {"base": copy.deepcopy(TINY_BASE), "grid": {"system.staleness.k": [0, 1]}, "sweep": {"name": "ctrlc"}}
        )
    )
    return path


def _interrupt(*a, **k):
    raise KeyboardInterrupt


def test_ctrl_c_while_the_sweep_file_loads(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox.sweep.api, "load_sweep", _interrupt)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["sweep", str(_sweep_file(tmp_path)), "--out", str(out)])
    assert res.exit_code == 130, res.output
    assert "interrupted: nothing was kept" in res.output
    assert "Aborted" not in res.output and "Traceback" not in res.output
    assert not out.exists()


def test_ctrl_c_while_runs_run_keeps_the_finished_ones(tmp_path, monkeypatch):
    import sandbox.sweep.execute as execute

    real = execute.execute_run
    calls = []

    def second_interrupted(rid, *a, **k):
        calls.append(rid)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(rid, *a, **k)

    monkeypatch.setattr(execute, "execute_run", second_interrupted)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["sweep", str(_sweep_file(tmp_path)), "--out", str(out), "-j", "1", "-q"])
    assert res.exit_code == 130, res.output
    assert f"interrupted: finished runs are kept in {out}; run the same command to resume" in " ".join(
        res.output.split()
    )
    assert "Aborted" not in res.output
    assert [p.parent.name for p in (out / "runs").glob("*/summary.json")] == [calls[0]]


def test_ctrl_c_during_the_sweep_imports_in_a_real_process(tmp_path):
    """Ctrl-C as the sweep machinery is imported (the first thing `sandbox sweep` does): the real
    exception path, through typer and click, in a fresh interpreter."""
    code = (
        "import sys\n"
        "class Stop:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'sandbox.sweep.spec':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Stop())\n"
        "from sandbox.cli import app\n"
        "app()\n"
    )
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "-c", code, "sweep", str(_sweep_file(tmp_path)), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 130, res.stdout + res.stderr
    assert "interrupted: nothing was kept" in res.stdout
    assert "Aborted" not in res.stdout + res.stderr and "Traceback" not in res.stdout + res.stderr
    assert not out.exists()
