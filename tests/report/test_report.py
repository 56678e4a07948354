"""Sweep figures and the self-contained HTML report."""

from __future__ import annotations

import re

import numpy as np
import pytest
from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.report.api import sweep_figures, write_report
from sandbox.report.figures import find_boundary
from sandbox.scenario.api import validate_scenario
from sandbox.sweep.api import load_results, parse_sweep, run_sweep

QUAD = {
    "task": {"name": "quadratic", "dim": 8, "eig_min": 0.1, "eig_max": 2.0, "noise_std": 0.05, "replicas": 2},
    "system": {
        "num_workers": 3,
        "generation_time": {"kind": "constant", "value": 1.0},
        "train_time": {"kind": "constant", "value": 0.0},
        "staleness": {"kind": "fixed_lag", "k": 1},
    },
    "algorithm": {"group_size": 1, "groups_per_step": 1, "optimizer": {"name": "sgd", "lr": 0.1}},
    "run": {"steps": 40, "figures": False, "eval_every": 5, "max_loss": 1000.0},
}
BITS = {
    "task": {"name": "bitstring", "horizon": 8, "threshold": 0.75},
    "system": {
        "num_workers": 3,
        "generation_time": {"kind": "exponential", "mean": 1.0},
        "train_time": {"kind": "constant", "value": 0.1},
        "staleness": {"kind": "fixed_lag", "k": 2},
    },
    "algorithm": {"group_size": 4, "groups_per_step": 2, "optimizer": {"name": "adam", "lr": 0.1}},
    "run": {"steps": 12, "figures": False, "eval_every": 3},
}


@pytest.fixture(scope="module")
def quad_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("quad") / "sweep"
    raw = {
        "base": QUAD,
        "seeds": [0],
        "sweep": {"name": "quad", "description": "lag x lr"},
        "grid": {"system.staleness.k": [0, 2, 4], "algorithm.optimizer.lr": [0.05, 0.3, 1.2]},
    }
    run_sweep(parse_sweep(raw), out, workers=1, progress=False)
    return out


@pytest.fixture(scope="module")
def bits_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("bits") / "sweep"
    raw = {
        "base": BITS,
        "seeds": [0, 1],
        "sweep": {"name": "bits"},
        "zip": [
            {
                "method": ["sync", "stale", "stale+tis"],
                "system.staleness": [{"kind": "sync"}, {"kind": "fixed_lag", "k": 2}, {"kind": "fixed_lag", "k": 2}],
                "algorithm.correction": [{"name": "none"}, {"name": "none"}, {"name": "tis", "level": "sequence"}],
            }
        ],
    }
    run_sweep(parse_sweep(raw), out, workers=1, progress=False)
    return out


def _figure_ids(text: str) -> list[str]:
    return re.findall(
        r'<figure id="fig-([^"]+)"><img alt="[^"]*" src="data:image/png;base64,[A-Za-z0-9+/=]{100,}"', text
    )


def _self_contained(text: str) -> None:
    assert "<script" not in text
    assert not re.search(r'(src|href)="(https?:)?//', text)
    assert not re.search(r'src="(?!data:)', text)


def test_quadratic_sweep_report_has_every_figure(quad_sweep):
    path = write_report(quad_sweep)
    text = path.read_text()
    names = _figure_ids(text)
    assert {"heatmap", "learning_curves", "throughput_vs_staleness", "diagnostics"} <= set(names)
    assert sorted(names) == sorted(p.stem for p in (quad_sweep / "figures").glob("*.png"))
    assert text.count("<img") == len(names)
    _self_contained(text)
    df = load_results(quad_sweep)
    for rid in df.id:
        assert rid in text  # the table of runs
    assert "Resolved scenario" in text and "quadratic" in text  # the scenario
    assert "stability boundary" in text  # the theory boundary was drawn over the heatmap


def test_sweep_figures_api(bits_sweep, tmp_path):
    figs = sweep_figures(bits_sweep, tmp_path / "figs")
    assert figs and all(f.path.exists() and f.path.parent == tmp_path / "figs" for f in figs)


def test_bitstring_method_sweep_report(bits_sweep):
    path = write_report(bits_sweep, bits_sweep / "custom.html")
    text = path.read_text()
    names = _figure_ids(text)
    assert "heatmap" not in names  # no two numeric axes
    assert {"learning_curves", "throughput_vs_staleness", "diagnostics", "staleness_hist"} <= set(names)
    assert "stale+tis" in text
    _self_contained(text)


def test_boundary_is_levin_may():
    scn = validate_scenario(QUAD)
    fn, label = find_boundary(scn, "system.staleness.k", "algorithm.optimizer.lr")
    np.testing.assert_allclose(fn(np.array([0.0, 1.0, 8.0])), np.array([2.0, 1.0, 2 * np.sin(np.pi / 34)]) / 2.0)
    assert find_boundary(scn, "system.num_workers", "algorithm.optimizer.lr") is None
    adam = validate_scenario({**QUAD, "algorithm": {**QUAD["algorithm"], "optimizer": {"name": "adam"}}})
    assert find_boundary(adam, "system.staleness.k", "algorithm.optimizer.lr") is None


def test_run_output_report_and_cli(tmp_path):
    from sandbox.run.runner import run_scenario

    scn = validate_scenario({**BITS, "run": {**BITS["run"], "figures": True}})
    run_scenario(scn, tmp_path / "run")
    res = CliRunner().invoke(app, ["report", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "run" / "report.html").read_text()
    figs = sorted(p.stem for p in (tmp_path / "run" / "figures").glob("*.png"))
    assert len(_figure_ids(text)) == len(figs) >= 4
    assert "[task]" in text  # the resolved scenario
    _self_contained(text)
    bad = CliRunner().invoke(app, ["report", str(tmp_path / "nothing")])
    assert bad.exit_code == 2
