"""Every demo runs with tiny settings, prints its explanation and saves one figure; each exists
as a standalone example script under examples/ (a symbolic link to the module)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.demos.api import DEMOS, example_path, run_demo

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = {"delayed_instability", "stale_alignment", "ess_collapse", "stabilizers", "stragglers"}


def _load_example(name: str):
    path = example_path(name)
    spec = importlib.util.spec_from_file_location(f"example_demo_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_registry_lists_the_demos():
    assert REQUIRED <= set(DEMOS)
    for name, (fn, desc) in DEMOS.items():
        assert callable(fn) and len(desc) > 20, name
    res = CliRunner().invoke(app, ["demo"])
    assert res.exit_code == 0
    for name in DEMOS:
        assert name in res.output


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_example_script_runs_tiny(name, tmp_path, capsys):
    mod = _load_example(name)
    path = mod.main(mod.Config(tiny=True, out=str(tmp_path)))
    assert path.exists() and path.suffix == ".png" and path.stat().st_size > 10_000
    assert list(tmp_path.glob("*.png")) == [path]  # one figure
    out = capsys.readouterr().out
    assert mod.EXPLANATION.splitlines()[0] in out and "figure:" in out


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_example_is_the_demo_module(name):
    """One source: the example is a symbolic link to the packaged demo module, so the readable
    script and the installed demo cannot drift apart."""
    module_file = ROOT / "sandbox" / "demos" / f"{name}.py"
    assert example_path(name).resolve() == module_file.resolve()


def test_cli_demo_runs_one_tiny(tmp_path):
    res = CliRunner().invoke(app, ["demo", "stragglers", "--quick", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "stragglers.png").exists()
    assert CliRunner().invoke(app, ["demo", "nope"]).exit_code == 2


def test_run_demo_api(tmp_path):
    assert run_demo("stragglers", tmp_path, tiny=True) == tmp_path / "stragglers.png"
    with pytest.raises(KeyError):
        run_demo("nope", tmp_path)


@pytest.mark.slow
def test_example_runs_as_a_script(tmp_path):
    res = subprocess.run(
        [sys.executable, str(example_path("delayed_instability")), "--tiny", f"--out={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "delayed_instability.png").exists()
