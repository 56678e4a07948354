"""Figures of ``sandbox plan`` (``docs/plan.md``): throughput and speed-up against the staleness
bound per worker count, the lag distribution of the consumed groups, utilisation and drops, and,
with learning runs, time-to-target and the end-to-end speed-up.

The bound is drawn on a categorical axis (``sync`` for k = 0, then each planned k), one colour per
worker count (the Okabe-Ito palette of :mod:`sandbox.run.plots`, viridis beyond 8 counts); each figure
is written in the base scenario's ``run.figure_formats`` (PNG by default; :func:`sandbox.run.plots._save`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.lines import Line2D

from sandbox.base.outputs import atomic_write, write_json, write_text
from sandbox.report.figures import group_colors
from sandbox.run.plots import PALETTE, _save, plt

PANEL_COLUMNS = 4
"""Worker counts per row of the lag-distribution figure."""


def _bound_axes(plan, *axes) -> None:
    """The staleness-bound x axis shared by every panel: one tick per k ("sync" for 0), its label, a grid."""
    for ax in axes:
        ax.set_xticks(range(len(plan.k_values)))
        ax.set_xticklabels(["sync" if k == 0 else str(k) for k in plan.k_values])
        ax.set_xlabel(_bound_label(plan))
        ax.grid(alpha=0.3)


def _bound_label(plan) -> str:
    field = plan.bound_field.split(" ")[0]
    return f"staleness bound k (versions; sets {field})"


def _series(plan, workers: int, column: str) -> np.ndarray:
    by_k = {r["k_max"]: r.get(column) for r in plan.rows if r["workers"] == workers}
    return np.array([np.nan if by_k.get(k) is None else float(by_k[k]) for k in plan.k_values])


def _colors(plan) -> dict[int, object]:
    return dict(zip(plan.workers, group_colors([str(w) for w in plan.workers]).values()))


def throughput_figure(plan, path: Path) -> None:
    """Samples per second (± 1 standard deviation over seeds) and the speed-up over sync against k."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = _colors(plan)
    x = np.arange(len(plan.k_values))
    for w in plan.workers:
        sd = _series(plan, w, "samples_per_s_sd")
        ax1.errorbar(
            x,
            _series(plan, w, "samples_per_s"),
            yerr=None if np.isnan(sd).all() else np.nan_to_num(sd),
            marker="o",
            capsize=3,
            color=colors[w],
            label=f"{w} workers",
        )
        ax2.errorbar(
            x,
            _series(plan, w, "speedup_vs_sync"),
            yerr=None if np.isnan(sd).all() else np.nan_to_num(_series(plan, w, "speedup_sd")),
            marker="o",
            capsize=3,
            color=colors[w],
            label=f"{w} workers",
        )
    ax2.axhline(1.0, color=PALETTE[-1], lw=0.8, ls=":", label="synchronous")
    ax1.set_ylabel("samples trained on per simulated second")
    ax2.set_ylabel("speed-up over sync, same workers (×)")
    _bound_axes(plan, ax1, ax2)
    ax1.set_ylim(bottom=0)
    ax1.set_title("throughput (mean ± 1 sd over seeds)")
    ax2.set_title("speed-up = sim time of sync / this one (mean ± 1 sd)")
    ax2.legend(fontsize=8, loc="best")
    fig.suptitle(f"{plan.title}: throughput by staleness bound ({plan.steps} steps, {plan.seeds} seeds, system only)")
    fig.tight_layout()
    _save(fig, path, plan.figure_formats)


def staleness_figure(plan, path: Path) -> None:
    """Per worker count, the fraction of consumed groups at each lag, one line per k."""
    n = len(plan.workers)
    cols = min(n, PANEL_COLUMNS)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols + 0.8, 3.2 * rows + 0.6), squeeze=False, sharey=True)
    k_colors = dict(zip(plan.k_values, group_colors([str(k) for k in plan.k_values]).values()))
    lag_max = max((max(h) for h in plan.lag_histograms.values() if h), default=0)
    for i, w in enumerate(plan.workers):
        ax = axes[i // cols][i % cols]
        for j, k in enumerate(plan.k_values):
            hist = plan.lag_histograms.get(f"w={w},k={k}", {})
            total = sum(hist.values())
            if not total:
                continue
            lags = np.arange(lag_max + 1)
            frac = np.array([hist.get(int(lag), 0) / total for lag in lags])
            # a small horizontal offset per k keeps coinciding points apart
            ax.plot(
                lags + (j - (len(plan.k_values) - 1) / 2) * 0.06,
                frac,
                marker="o",
                ms=4,
                lw=1.2,
                color=k_colors[k],
                label="sync" if k == 0 else f"k = {k}",
            )
        ax.set_title(f"{w} workers", fontsize=10)
        ax.set_xlabel("lag of a consumed group (versions)")
        ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if i % cols == 0:
            ax.set_ylabel("fraction of consumed groups")
    for i in range(n, rows * cols):
        axes[i // cols][i % cols].set_visible(False)
    axes[0][cols - 1].legend(fontsize=8, title="bound", title_fontsize=8, loc="upper right")
    fig.suptitle(f"{plan.title}: lag distribution (step − head version) by staleness bound, all seeds")
    fig.tight_layout()
    _save(fig, path, plan.figure_formats)


def utilisation_figure(plan, path: Path) -> None:
    """Busy fraction of workers (solid) and learner (dashed), and the dropped fraction, against k."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = _colors(plan)
    x = np.arange(len(plan.k_values))
    for w in plan.workers:
        ax1.plot(x, _series(plan, w, "util_workers"), marker="o", color=colors[w], label=f"{w} workers")
        ax1.plot(x, _series(plan, w, "util_learner"), marker="s", ls="--", color=colors[w])
        ax2.plot(x, _series(plan, w, "dropped_fraction"), marker="o", color=colors[w], label=f"{w} workers")
    ax1.set_ylabel("busy fraction of simulated time")
    ax1.set_ylim(0, 1.05)
    ax1.set_title("utilisation: rollout workers (solid), learner (dashed)")
    ax2.set_ylabel("dropped / (dropped + consumed) groups")
    ax2.set_ylim(bottom=0, top=max(0.05, float(np.nanmax([r["dropped_fraction"] for r in plan.rows] + [0])) * 1.15))
    ax2.set_title("groups dropped as over-stale")
    _bound_axes(plan, ax1, ax2)
    handles, labels = ax1.get_legend_handles_labels()
    handles += [
        Line2D([], [], color=PALETTE[-1], marker="o", label="rollout workers"),
        Line2D([], [], color=PALETTE[-1], marker="s", ls="--", label="learner"),
    ]
    ax1.legend(handles=handles, fontsize=7, loc="center right")
    ax2.legend(fontsize=8, loc="best")
    fig.suptitle(f"{plan.title}: utilisation and drops by staleness bound (mean over {plan.seeds} seeds)")
    fig.tight_layout()
    _save(fig, path, plan.figure_formats)


def time_to_target_figure(plan, path: Path) -> None:
    """Time to target (with its interval) and the end-to-end speed-up over sync (solid, with its
    interval) next to the throughput speed-up (dashed), against k."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = _colors(plan)
    x = np.arange(len(plan.k_values))
    for w in plan.workers:
        for ax, col in ((ax1, "time_to_target"), (ax2, "speedup_end_to_end")):
            y = _series(plan, w, col)
            lo, hi = _series(plan, w, f"{col}_ci_low"), _series(plan, w, f"{col}_ci_high")
            err = np.vstack([np.nan_to_num(y - lo), np.nan_to_num(hi - y)])
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, color=colors[w], label=f"{w} workers: end to end")
        ax2.plot(
            x,
            _series(plan, w, "speedup_vs_sync"),
            ls="--",
            marker="x",
            color=colors[w],
            alpha=0.8,
            label=f"{w} workers: throughput",
        )
    ax2.axhline(1.0, color=PALETTE[-1], lw=0.8, ls=":", label="synchronous")
    ax1.set_ylabel("simulated seconds to the target")
    ax1.set_ylim(bottom=0)
    ax1.set_title("time to target (mean, 95% bootstrap interval)")
    ax2.set_ylabel("speed-up over sync, same workers (×)")
    ax2.set_title("end to end (solid) vs samples per second (dashed)")
    _bound_axes(plan, ax1, ax2)
    ax2.legend(fontsize=7, ncol=2, loc="best")
    level = next((r.get("target_level") for r in plan.rows if r.get("target_level") is not None), None)
    target = f"target {level:.3g}" if level is not None else "no target"
    fig.suptitle(f"{plan.title}: learning runs ({plan.learn_seeds} seeds, {target}; missing points: not reached)")
    fig.tight_layout()
    _save(fig, path, plan.figure_formats)


def plan_figures(plan, out: Path) -> list[Path]:
    """Every figure of the plan into ``out``; returns the PNG paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "throughput.png", out / "staleness.png", out / "utilisation.png"]
    throughput_figure(plan, paths[0])
    staleness_figure(plan, paths[1])
    utilisation_figure(plan, paths[2])
    if plan.learned:
        paths.append(out / "time_to_target.png")
        time_to_target_figure(plan, paths[3])
    return paths


def write_plan(plan, stage: Path) -> None:
    """``plan.csv`` (one row per configuration, full precision), ``plan.json`` (the same rows, the
    settings, the column definitions and the lag histograms), ``scenario.toml`` (the base scenario
    resolved) and ``figures/`` into ``stage`` (each file atomically)."""
    write_text(stage / "scenario.toml", plan.scenario_toml)
    atomic_write(stage / "plan.csv", lambda p: plan.frame().to_csv(p, index=False, lineterminator="\n"))
    plan_figures(plan, stage / "figures")
    write_json(stage / "plan.json", plan.to_json())


def split_figure(split, path: Path) -> None:
    """``sandbox plan --gpus N`` (``sandbox.plan.split``): samples trained per second (mean,
    95% t-interval over seeds) and the mean lag against the GPUs given to the trainer, one colour per
    per-engine concurrency; the best split is ringed."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    concurrency = sorted({r["concurrency"] for r in split.rows})
    colors = dict(zip(concurrency, group_colors([str(c) for c in concurrency]).values()))
    for c in concurrency:
        rows = sorted((r for r in split.rows if r["concurrency"] == c), key=lambda r: r["trainer_gpus"])
        x = np.array([r["trainer_gpus"] for r in rows], dtype=float)
        y = np.array([r["samples_per_s"] for r in rows], dtype=float)
        lo = np.array([r["samples_per_s_low"] for r in rows], dtype=float)
        hi = np.array([r["samples_per_s_high"] for r in rows], dtype=float)
        err = None if np.isnan(lo).all() else np.nan_to_num(np.vstack([y - lo, hi - y]))
        label = f"{c} sequences per engine"
        ax1.errorbar(x, y, yerr=err, marker="o", capsize=3, color=colors[c], label=label)
        ax2.plot(x, [r["lag_mean"] for r in rows], marker="o", color=colors[c], label=label)
    best = split.best
    if best:
        ax1.plot(
            [best["trainer_gpus"]],
            [best["samples_per_s"]],
            "o",
            ms=16,
            mfc="none",
            mec=PALETTE[-1],
            mew=1.5,
            label=f"best: {best['trainer_gpus']} trainer GPUs, {best['concurrency']} per engine",
        )
    for ax in (ax1, ax2):
        ax.set_xlabel(f"GPUs training (of {split.options.gpus}; the rest serve rollouts)")
        ax.set_xticks(sorted({r["trainer_gpus"] for r in split.rows}))
        ax.grid(alpha=0.3)
    ax1.set_ylim(bottom=0)
    ax1.set_ylabel("responses trained on per simulated second")
    ax2.set_ylabel("mean lag of consumed groups (versions)")
    ax1.set_title("throughput (mean, 95% CI over seeds)")
    ax2.set_title("staleness")
    ax1.legend(fontsize=8, loc="upper left")
    fig.suptitle(
        f"{split.title}: trainer/rollout split of {split.options.gpus} x {split.options.gpu}, "
        f"{split.options.model} ({split.steps} steps, {split.seeds} seeds, system only)",
        fontsize=10,
    )
    fig.tight_layout()
    _save(fig, path, split.figure_formats)


def write_split(split, stage: Path) -> None:
    """``split.csv`` (one row per configuration), ``split.json`` (rows, settings, per-seed throughputs,
    the best split) and ``figures/split.png`` into ``stage``."""
    atomic_write(stage / "split.csv", lambda p: split.frame().to_csv(p, index=False, lineterminator="\n"))
    (stage / "figures").mkdir(parents=True, exist_ok=True)
    split_figure(split, stage / "figures" / "split.png")
    write_json(stage / "split.json", split.to_json())
