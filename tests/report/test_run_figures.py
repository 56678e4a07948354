"""The per-run and comparison figures: titles name the scenario and variant, a variant keeps its
colour across figures, SVG beside PNG, integer lag axes, zero gradients on a log axis reported
instead of drawn, and the timeline capped to a readable number of workers."""

from __future__ import annotations

import re
from types import SimpleNamespace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from sandbox.run import plots


def _fake_result(n_workers=4, steps=20, zero_norm_steps=(3, 7), title="demo scenario"):
    rng = np.random.default_rng(0)
    norm = rng.uniform(0.1, 1.0, steps)
    norm[list(zero_norm_steps)] = 0.0
    metrics = pd.DataFrame(
        {
            "step": np.arange(steps),
            "time": np.arange(steps) * 0.5,
            "reward/mean": np.linspace(0, 1, steps),
            "is/ess_ratio": np.full(steps, 0.98),
            "grad/cos_prev": rng.uniform(-0.2, 0.8, steps),
            "grad/norm": norm,
            "staleness/mean": rng.uniform(0, 3, steps),
        }
    )
    n_jobs = 6 * n_workers
    worker = np.arange(n_jobs) % n_workers
    dispatch = (np.arange(n_jobs) // n_workers) * 1.0
    consume = np.where(np.arange(n_jobs) % 5 == 4, -1, np.arange(n_jobs) // n_workers + 1)
    dropped = np.where((np.arange(n_jobs) % 5 == 4) & (np.arange(n_jobs) % 2 == 0), 3, -1)
    jobs = pd.DataFrame(
        {
            "job": np.arange(n_jobs),
            "worker": worker,
            "head_version": np.arange(n_jobs) // n_workers,
            "dispatch_time": dispatch,
            "finish_time": dispatch + 0.9,
            "consume_step": consume,
            "dropped_at": dropped,
        }
    )
    jobs.loc[jobs.consume_step >= 0, "consume_step"] += jobs.worker % 3  # lags 1..3
    events = pd.DataFrame(
        {"kind": ["train_start", "train_end"] * 5, "time": np.repeat(np.arange(5.0), 2) + [0, 0.2] * 5}
    )
    return SimpleNamespace(
        metrics=metrics,
        jobs=jobs,
        events=events,
        status="completed",
        scenario=SimpleNamespace(title=title),
        summary={"staleness_hist": {0: 3, 1: 5, 2: 2}, "staleness_mean": 0.9},
    )


def _svg_text(path):
    return path.with_suffix(".svg").read_text()


def test_every_per_run_figure_is_written_as_png_and_svg_and_names_scenario_and_variant(tmp_path):
    written = plots.default_figures(_fake_result(), tmp_path, label="async+tis", color=plots.PALETTE[2])
    assert [p.name for p in written] == ["learning_curves.png", "staleness_hist.png", "diagnostics.png", "timeline.png"]
    for p in written:
        assert p.stat().st_size > 1000 and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        svg = _svg_text(p)
        assert "demo scenario — async+tis" in svg, p.name
    # the variant's colour is used, and the raw metric names appear in brackets after the words
    assert plots.PALETTE[2].lower() in _svg_text(tmp_path / "learning_curves.png").lower()
    diag = _svg_text(tmp_path / "diagnostics.png")
    assert "ESS / N" in diag and "[is/ess_ratio]" in diag and "[grad/norm]" in diag


def test_zero_gradients_on_the_log_axis_are_counted_not_drawn(tmp_path):
    plots.diagnostics_traces(_fake_result(zero_norm_steps=(3, 7, 9)), tmp_path / "d.png", label="v")
    assert "3 steps with a zero gradient not drawn" in _svg_text(tmp_path / "d.png")
    plots.diagnostics_traces(_fake_result(zero_norm_steps=()), tmp_path / "e.png", label="v")
    assert "zero gradient" not in _svg_text(tmp_path / "e.png")


def test_lag_axes_have_integer_ticks(tmp_path, monkeypatch):
    captured = {}
    monkeypatch.setattr(plots, "_save", lambda fig, path, *_: captured.setdefault(path.name, fig))
    plots.staleness_histogram(_fake_result(), tmp_path / "h.png")
    ticks = captured["h.png"].axes[0].get_xticks()
    assert np.allclose(ticks, np.round(ticks))
    plots.timeline(_fake_result(), tmp_path / "t.png", max_time=10.0)
    colorbar_ax = captured["t.png"].axes[1]
    cticks = colorbar_ax.get_yticks()
    assert list(cticks) == list(range(len(cticks))) and len(cticks) >= 2
    for fig in captured.values():
        plt.close(fig)


def test_timeline_says_what_it_cuts(tmp_path):
    plots.timeline(_fake_result(n_workers=50), tmp_path / "t.png")
    svg = _svg_text(tmp_path / "t.png")
    assert f"workers 0–{plots.TIMELINE_MAX_WORKERS - 1} of 50" in svg
    assert re.search(r"first [0-9.]+ s of [0-9.]+ s", svg)
    assert "dropped (too stale)" in svg and "not consumed before the run ended" in svg
    assert f"worker {plots.TIMELINE_MAX_WORKERS}<" not in svg and f"worker {plots.TIMELINE_MAX_WORKERS - 1}<" in svg


def test_comparison_keeps_variant_colours_titles_and_a_ratio_axis_from_zero(tmp_path, monkeypatch):
    results = {name: _fake_result() for name in ("sync", "async", "async+tis")}
    plots.comparison_figure(results, tmp_path / "comparison.png", title="demo scenario")
    svg = _svg_text(tmp_path / "comparison.png").lower()
    for name, color in plots.variant_colors(results).items():
        assert color.lower() in svg, name
    assert "variants compared: demo scenario" in svg
    captured = {}
    monkeypatch.setattr(plots, "_save", lambda fig, path, *_: captured.setdefault("fig", fig))
    plots.comparison_figure(results, tmp_path / "c2.png")
    fig = captured["fig"]
    (ess_ax,) = [ax for ax in fig.axes if ax.get_title().startswith("ESS / N")]
    assert ess_ax.get_ylim()[0] == 0.0  # a ratio starts at 0: a 2% dip must look like 2%
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)
    assert len(legends) == 1 and [t.get_text() for t in legends[0].texts] == list(results)
    plt.close(captured["fig"])


@pytest.mark.parametrize("n", [1, 8, 9])
def test_variant_colors_follow_the_scenario_order(n):
    labels = [f"v{i}" for i in range(n)]
    colors = plots.variant_colors(labels)
    assert list(colors) == labels and colors["v0"] == plots.PALETTE[0]
    assert len(set(list(colors.values())[:8])) == min(n, 8)


def test_the_garbage_collector_is_off_while_a_figure_is_drawn_and_restored_after(tmp_path, monkeypatch):
    import gc

    seen = []
    monkeypatch.setattr(plots, "_save", lambda fig, path, formats: (seen.append(gc.isenabled()), plt.close(fig)))
    assert gc.isenabled()
    plots.learning_curves(_fake_result(), tmp_path / "lc.png")
    assert seen == [False] and gc.isenabled()
    gc.disable()  # a caller that turned it off keeps it off
    try:
        plots.staleness_histogram(_fake_result(), tmp_path / "sh.png")
        assert seen == [False, False] and not gc.isenabled()
    finally:
        gc.enable()
    monkeypatch.setattr(plots, "_save", lambda fig, path, formats: 1 / 0)
    with pytest.raises(ZeroDivisionError):  # back on after an error too
        plots.timeline(_fake_result(), tmp_path / "tl.png")
    assert gc.isenabled()
    plt.close("all")
