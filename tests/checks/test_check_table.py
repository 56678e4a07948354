"""The `sandbox check` table names each point by its check's swept variable (symbol, unit, the
curve it belongs to) and shows one-sided bounds as `≤ bound`, two-sided ones as `± tolerance`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sandbox.checks.api import CHECKS, Point
from sandbox.checks.base import UNDECLARED
from sandbox.checks.report import TABLE_COLUMNS, table_cells
from sandbox.cli import app


def point(x, series="", predicted=1.0, measured=0.9, tolerance=0.2):
    return Point(x, predicted, measured, 0.05, tolerance, True, series=series)


@pytest.mark.parametrize("name", list(CHECKS))
def test_every_check_declares_its_swept_variable(name):
    swept = CHECKS[name].swept
    assert swept is not UNDECLARED and swept.symbol != "x", (
        f"{name}: declare what its run function sweeps with @sweeps(symbol, unit) from sandbox.checks.base "
        "(the table prints it beside every point)"
    )


def test_the_table_has_no_anonymous_x_column():
    assert "x" not in TABLE_COLUMNS and "swept variable" in TABLE_COLUMNS


@pytest.mark.parametrize(
    "name, p, label",
    [
        ("critical_lr", point(4), "τ = 4 versions"),
        ("straggler_cost", point(8), "P = 8 workers"),
        ("straggler_cost", point(1), "P = 1 worker"),
        ("random_lag", point(4, series="mean lag"), "mean lag (timing): P = 4 workers"),
        ("random_lag", point(4, series="mean path"), "mean path (learning): P = 4 workers"),
        ("ess_vs_lag", point(2), "k = 2 versions (fixed lag)"),
        ("gradient_cosine", point(0.92), "η/η_crit = 0.92 (τ = 8)"),
        ("gradient_cosine", point(0.0), "sync: τ = 0, η = 0.3"),
        ("gac_boundary", point(0), "plain SGD (τ = 8)"),
        ("gac_boundary", point(1), "with GAC (τ = 8)"),
        ("minibatch_lag", point(2), "s = 2 optimizer steps into the batch"),
    ],
)
def test_points_are_named_by_symbol_and_unit(name, p, label):
    assert table_cells(CHECKS[name].swept, p)[0] == label


def test_staleness_divergence_says_which_curve_a_point_is_on():
    swept = CHECKS["staleness_divergence"].swept
    sync = table_cells(swept, point(4, series="τ = 0"))[0]
    stale = table_cells(swept, point(4, series="τ = 8"))[0]
    assert sync == "sync (τ = 0): k = 4 steps" and stale == "stale (τ = 8): k = 4 steps"


def test_one_sided_bound_is_shown_as_a_bound():
    swept = CHECKS["async_sgd_bound"].swept
    _, predicted, measured, tolerance = table_cells(
        swept, point(8, predicted=0.30929, tolerance=0.0019, series="bound (upper)")
    )
    assert predicted == "≤ 0.30929" and tolerance == "+ 0.0019"
    # the same check's exact T2-transient prediction is two-sided
    _, predicted, _, tolerance = table_cells(
        swept, point(8, predicted=0.086446, tolerance=0.0019, series="exact (T2 transient)")
    )
    assert predicted == "0.086446" and tolerance == "± 0.0019"
    _, predicted, _, tolerance = table_cells(CHECKS["delayed_variance"].swept, point(1, predicted=0.5, tolerance=0.02))
    assert predicted == "0.5" and tolerance == "± 0.02"
    assert [c.name for c in CHECKS.values() if c.swept.upper_bound] == ["async_sgd_bound"]


def test_cli_table_and_summary_name_the_swept_values(tmp_path):
    res = CliRunner().invoke(app, ["check", "straggler_cost", "minibatch_lag", "--quick", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "swept variable" in res.output and "P = 8 workers" in res.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    by_name = {c["name"]: c for c in summary["checks"]}
    assert (
        "fixed lag k = 1, m = 2, E = 2: s = 3 optimizer steps into the batch"
        in by_name["minibatch_lag"]["swept"]["labels"]
    )
    assert by_name["straggler_cost"]["swept"]["labels"] == ["P = 1 worker", "P = 2 workers", "P = 8 workers"]
    listing = CliRunner().invoke(app, ["check", "--list"])
    assert "critical_lr (T1; sweeps τ [versions])" in " ".join(listing.output.split())
