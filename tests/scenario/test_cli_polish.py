"""The command line's own surface: --version, flags shown as flags, listings that start without
torch, `sandbox scenario`, and the default run directory of a run with --set overrides."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w
from typer.testing import CliRunner

from sandbox import __version__
from sandbox.cli import app
from sandbox.run.command import MAX_DIR_NAME, default_run_dir

ROOT = Path(__file__).resolve().parents[2]

TINY = {
    "title": "tiny",
    "task": {"name": "quadratic", "dim": 4, "replicas": 1},
    "system": {
        "num_workers": 2,
        "generation_time": {"kind": "constant", "value": 1.0},
        "staleness": {"kind": "fixed_lag", "k": 1},
    },
    "algorithm": {"group_size": 1, "groups_per_step": 1, "optimizer": {"name": "sgd", "lr": 0.1}},
    "run": {"steps": 3, "figures": False, "record_events": False, "eval_every": 3},
}


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_version():
    res = invoke("--version")
    assert res.exit_code == 0 and res.output.startswith(f"sandbox {__version__} ")


@pytest.mark.parametrize("command", [[], ["run"], ["check"], ["sweep"], ["demo"], ["export"], ["import"]])
def test_help_shows_flags_as_flags(command):
    res = invoke(*command, "--help")
    assert res.exit_code == 0
    assert "<bool>" not in res.output  # typer 0.29's rich panels print a value type after every flag
    assert "--help" in res.output


def test_help_flag_lines_name_only_the_flag():
    lines = invoke("run", "--help").output.splitlines()
    quiet = next(ln for ln in lines if "--quiet" in ln)
    assert quiet.split()[:2] == ["-q,", "--quiet"] and quiet.split()[2:4] == ["No", "progress"]


@pytest.mark.parametrize("args", [["demo"], ["--version"], ["--help"]])
def test_listing_commands_never_import_torch(args):
    """`sandbox demo` (the list), --version and --help answer without the seconds-long torch import."""
    code = (
        "import sys\n"
        "from sandbox.cli import app\n"
        "try:\n"
        f"    app({args!r})\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print('TORCH LOADED' if 'torch' in sys.modules else 'no torch')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith("no torch"), res.stdout[-500:]
    if args == ["demo"]:
        assert "stale_alignment" in res.stdout


def test_scenario_prints_the_resolved_scenario_with_overrides(tmp_path):
    path = ROOT / "scenarios" / "fixed_lag.toml"
    res = invoke("scenario", str(path), "--set", "system.staleness.k=3")
    assert res.exit_code == 0, res.output
    data = tomllib.loads(res.output)
    assert data["system"]["staleness"] == {"kind": "fixed_lag", "k": 3}
    assert "steps" in data["run"] and "variants" not in data  # every default explicit


def test_scenario_prints_a_variant_and_refuses_an_unknown_one():
    path = ROOT / "scenarios" / "quickstart.toml"
    raw = tomllib.loads(path.read_text())
    name, overrides = next(iter(raw["variants"].items()))
    res = invoke("scenario", str(path), "--variant", name)
    assert res.exit_code == 0, res.output
    data = tomllib.loads(res.output)
    for dotted, value in overrides.items():
        node = data
        for key in dotted.split("."):
            node = node[key]
        # the printed scenario is resolved: a table the variant sets also shows its fields' defaults
        assert node == value or (isinstance(value, dict) and {k: node[k] for k in value} == value)
    bad = invoke("scenario", str(path), "--variant", "nope")
    assert bad.exit_code == 2 and "unknown variant 'nope'" in bad.output


# ------------------------------------------------------------------------------ default run directory


def test_default_run_dir_names_the_overrides_stably():
    assert default_run_dir("fixed_lag", {}) == Path("runs/fixed_lag")
    one = default_run_dir("fixed_lag", {"system.staleness.k": 16, "algorithm.optimizer.lr": 0.02})
    assert one == Path("runs/fixed_lag+algorithm.optimizer.lr-0.02+system.staleness.k-16")
    assert default_run_dir("fixed_lag", {"algorithm.optimizer.lr": 0.02, "system.staleness.k": 16}) == one  # any order
    assert default_run_dir("fixed_lag", {"system.staleness.k": 15}) != default_run_dir(
        "fixed_lag", {"system.staleness.k": 16}
    )
    assert default_run_dir("x", {"run.writers": ["files", "tensorboard"]}) == Path(
        "runs/x+run.writers-files-tensorboard"
    )


def test_default_run_dir_of_many_overrides_is_short_and_unique():
    many = {f"algorithm.stabilizers.knob_number_{i}": i for i in range(8)}
    name = default_run_dir("fixed_lag", many).name
    assert len(name) <= MAX_DIR_NAME and name.startswith("fixed_lag+algorithm.stabilizers.knob_number_0-0")
    other = default_run_dir("fixed_lag", {**many, "algorithm.stabilizers.knob_number_7": 8}).name
    assert other != name and len(other) == len(name)  # the hash tells them apart


def test_a_run_with_overrides_does_not_replace_the_scenarios_own_run(tmp_path, monkeypatch):
    path = tmp_path / "tiny.toml"
    path.write_text(tomli_w.dumps(TINY))
    monkeypatch.chdir(tmp_path)
    plain = invoke("run", str(path), "-q")
    assert plain.exit_code == 0, plain.output
    assert (tmp_path / "runs" / "tiny" / "summary.json").exists()
    before = (tmp_path / "runs" / "tiny" / "summary.json").read_bytes()
    over = invoke("run", str(path), "-q", "--set", "algorithm.optimizer.lr=0.05")
    assert over.exit_code == 0, over.output
    target = tmp_path / "runs" / "tiny+algorithm.optimizer.lr-0.05"
    assert (target / "summary.json").exists()
    assert "results in runs/tiny+algorithm.optimizer.lr-0.05" in " ".join(over.output.split())
    assert (tmp_path / "runs" / "tiny" / "summary.json").read_bytes() == before
    again = invoke("run", str(path), "-q", "--set", "algorithm.optimizer.lr=0.05")
    assert again.exit_code == 0
    assert "(it replaced the previous run)" in " ".join(again.output.split())  # the same command says it replaced


def test_the_run_table_shows_dropped_work(tmp_path):
    """The run table once hid dropped work (the quickstart's async variant dropped 9% of its groups): a
    'dropped groups' column gives dropped/generated and the share, equal to the jobs table (the full table,
    ``--wide``; the compact default has the essentials and fits 80 columns)."""
    import pandas as pd

    out = tmp_path / "run"
    res = CliRunner().invoke(
        app, ["run", "max_lag_drop", "--out", str(out), "--set", "run.steps=40", "--set", "run.figures=false", "--wide"]
    )
    assert res.exit_code == 0, res.output
    jobs = pd.read_parquet(out / "jobs.parquet")
    dropped, total = int((jobs.dropped_at >= 0).sum()), len(jobs)
    assert dropped > 0  # the scenario drops over-stale groups
    assert "dropped groups" in res.output
    assert f"{dropped}/{total}" in res.output and f"({100 * dropped / total:.0f}%)" in res.output  # a cell may wrap
