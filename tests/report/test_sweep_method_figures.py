"""The shipped lag x method sweep (scenarios/sweeps/lag_methods_bitstring.toml, shortened): its
figures draw every configuration (no cap that drops the uncorrected baseline at lag 16), one
Okabe-Ito colour per method in every panel and figure, one panel per lag; a lag x method summary
figure; and ``load_time_to_target`` has one column per swept key (issue 27). The figures are read
from their matplotlib objects, not from pixels."""

from __future__ import annotations

from itertools import product
from pathlib import Path

import pytest
from matplotlib.colors import to_hex

import sandbox.report.figures as F
from sandbox.run.plots import PALETTE
from sandbox.sweep.api import load_time_to_target, run_sweep
from sandbox.sweep.spec import load_sweep

SWEEP = Path(__file__).resolve().parents[2] / "scenarios" / "sweeps" / "lag_methods_bitstring.toml"
LAGS, METHODS = (0, 4, 16), ("none", "tis", "gac", "vcpo_lr")
COLOR = {m: PALETTE[i].lower() for i, m in enumerate(METHODS)}
CONFIGS = {f"k={k}, method={m}" for k, m in product(LAGS, METHODS)}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("lagmethods") / "sweep"
    run_sweep(load_sweep(SWEEP, ["run.steps=30"]), out, workers=1, progress=False)
    return out


@pytest.fixture(scope="module")
def drawn(sweep, tmp_path_factory):
    """{figure stem: matplotlib Figure} of every sweep figure, kept open."""
    figs = {}
    real = F._save

    def keep(fig, path, formats=F.FORMATS):
        figs[Path(path).stem] = fig
        real(fig, path, formats)

    mp = pytest.MonkeyPatch()
    mp.setattr(F, "_save", keep)
    try:
        F.sweep_figures(sweep, tmp_path_factory.mktemp("figs"))
    finally:
        mp.undo()
    return figs


def _titles(fig) -> str:
    return " ".join(
        [fig._suptitle.get_text() if fig._suptitle else ""]
        + [ax.get_title(loc) for ax in fig.axes for loc in ("left", "center")]
    )


def _lines(ax, with_refs=False):
    """{label: colour} of the labelled lines of an axes (configuration curves)."""
    out = {}
    for line in ax.get_lines():
        label = line.get_label()
        if label.startswith("_") or label.startswith("target"):
            continue
        if "(synchronous baseline)" in label and not with_refs:
            continue
        out[label.split(":")[0]] = to_hex(line.get_color())
    return out


def _method(label: str) -> str:
    return label.split("method=")[1].split(" ")[0]


def _check_panels(fig, panel_axes, curves_in):
    seen = {}
    for lag, ax in zip(LAGS, panel_axes):
        lines = curves_in(ax)
        assert set(lines) == {f"k={lag}, method={m}" for m in METHODS}, (lag, sorted(lines))
        assert ax.get_title(loc="left").startswith(f"k = {lag}")
        for label, color in lines.items():
            assert color == COLOR[_method(label)], (label, color)  # one colour per method, every panel
        seen.update(lines)
    assert set(seen) == CONFIGS  # every combination, the baseline at lag 16 included
    assert "showing" not in _titles(fig)


def test_learning_curves_draw_every_configuration_one_panel_per_lag(drawn):
    fig = drawn["learning_curves"]
    rows = [ax for ax in fig.axes if ax.get_title(loc="left")]  # the left panel of each row (against steps)
    _check_panels(fig, rows, _lines)
    # the synchronous reference (k = 0 of the same method) is drawn, dashed, in the lag 4 and 16 panels
    for ax in rows[1:]:
        refs = {lb: c for lb, c in _lines(ax, with_refs=True).items() if "synchronous baseline" in lb}
        assert {lb.split(" (")[0] for lb in refs} == {f"k=0, method={m}" for m in METHODS}
    legend = {t.get_text() for t in fig.legends[0].get_texts()}
    assert set(METHODS) <= legend


def test_diagnostics_draw_every_configuration(drawn):
    fig = drawn["diagnostics"]
    rows = [ax for ax in fig.axes if ax.get_title(loc="left")]
    _check_panels(fig, rows, _lines)


def test_time_to_target_draws_every_configuration(drawn):
    fig = drawn["time_to_target"]
    _check_panels(fig, fig.axes, _lines)


def test_summary_figure_has_every_configuration(drawn):
    fig = drawn["summary"]
    final = fig.axes[0]
    dots = [line for line in final.get_lines() if line.get_marker() == "o"]
    colours = [to_hex(line.get_color()) for line in dots]
    assert len(colours) == len(CONFIGS)
    lo, hi = final.get_xlim()
    for line in dots:  # each dot near its lag's tick (0, 1, 2), inside the axes
        x = float(line.get_xdata()[0])
        assert lo < x < hi and abs(x - round(x)) < 0.4
    assert sorted(colours) == sorted(COLOR[m] for _, m in product(LAGS, METHODS))
    assert [t.get_text() for t in final.get_xticklabels()] == [f"k={k}" for k in LAGS]
    assert len(fig.axes) == 2 and "time to target" in fig.axes[1].get_title()


def test_same_colour_per_method_in_every_figure(drawn):
    for name in ("learning_curves", "diagnostics", "time_to_target"):
        for ax in drawn[name].axes:
            for label, color in _lines(ax).items():
                assert color == COLOR[_method(label)], (name, label)


def test_load_time_to_target_has_one_column_per_swept_key(sweep):
    t = load_time_to_target(sweep)
    for key in ("system.staleness.k", "method", "algorithm.correction", "algorithm.stabilizers"):
        assert key in t.columns
    assert len(t) == len(CONFIGS)
    assert (
        {f"k={k}, method={m}" for k, m in zip(t["system.staleness.k"], t["method"])}
        == set(t["configuration"])
        == CONFIGS
    )
