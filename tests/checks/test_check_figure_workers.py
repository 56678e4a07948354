"""``sandbox check --out DIR`` draws each check's figure in a worker process forked when the check ends
(``sandbox/base/figure_worker.py``): the files are those drawn in the command's own process, byte for byte."""

from __future__ import annotations

from typer.testing import CliRunner

from sandbox.checks.api import CHECKS
from sandbox.checks.report import run_checks, write_report
from sandbox.cli import app

NAMES = ("straggler_cost", "minibatch_lag")


def test_the_figures_drawn_by_the_workers_are_the_in_process_ones(tmp_path):
    res = CliRunner().invoke(app, ["check", *NAMES, "--quick", "--out", str(tmp_path / "cli")])
    assert res.exit_code == 0, res.output
    write_report(run_checks({n: CHECKS[n] for n in NAMES}, True), tmp_path / "ref", True, False)
    cli, ref = tmp_path / "cli", tmp_path / "ref"
    files = sorted(p.name for p in cli.iterdir())
    assert files == sorted(p.name for p in ref.iterdir())
    figures = [f for f in files if f != "summary.json"]
    assert figures == sorted(f"{n}.{ext}" for n in NAMES for ext in ("png", "svg"))
    for name in figures:
        assert (cli / name).read_bytes() == (ref / name).read_bytes(), name
