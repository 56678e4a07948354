"""Figures of a sweep: heatmaps over two swept axes (with the theory's stability boundary where
one applies), learning curves per method with a band over seeds, throughput against staleness,
and ESS / gradient-cosine traces.

Every function takes the results table (:func:`sandbox.sweep.load_results`) and, for traces, the
metrics table (:func:`sandbox.sweep.load_metrics`), and writes one figure in each of ``formats`` (PNG
and SVG unless told; a sweep's figures follow its base scenario's ``run.figure_formats``). A method
keeps one colour across the figures of a sweep (:func:`group_colors`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from ..gc_pause import paused_cyclic_gc
from ..plots import DPI, FORMATS, PALETTE, _save, metric_label, plt  # Agg backend, atomic PNG (+ SVG) writes

MAX_CURVES = 10


@dataclass
class Figure:
    name: str  # file stem, unique within a report
    path: Path
    title: str
    caption: str


# ------------------------------------------------------------------------------------------------
# what to plot
# ------------------------------------------------------------------------------------------------


def reward_metric(results: pd.DataFrame) -> tuple[str, str, bool]:
    """(results column, metrics column, log scale): the headline outcome of the runs: the exact
    expected reward when the task has one, else the sampled reward, else the loss (log scale)."""
    for col, mcol, log in (
        ("final_expected_reward", "eval/expected_reward", False),
        ("final_reward", "reward/mean", False),
        ("final_loss", "eval/loss", True),
    ):
        if col in results and results[col].notna().any():
            return col, mcol, log
    return "final_loss", "eval/loss", True


def numeric_axes(results: pd.DataFrame, keys: list[str]) -> list[str]:
    """Swept keys whose values are numbers and take at least two values."""
    out = []
    for k in keys:
        if k not in results or k == "seed":
            continue
        col = results[k]
        if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col) and col.nunique() >= 2:
            out.append(k)
    return out


def group_label(keys: list[str], values) -> str:
    values = values if isinstance(values, tuple) else (values,)
    if len(keys) == 1:
        return str(values[0])
    return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in zip(keys, values))


def _groups(df: pd.DataFrame, keys: list[str]):
    if not keys:
        return [("all runs", df)]
    return [(group_label(keys, v), g) for v, g in df.groupby(keys, sort=False, dropna=False)]


def group_colors(labels: list[str]) -> dict[str, object]:
    """One colour per group, fixed before any figure drops groups: the Okabe-Ito palette of
    :mod:`sandbox.plots` for up to 8 groups, evenly spaced viridis beyond."""
    if len(labels) <= len(PALETTE):
        return dict(zip(labels, PALETTE))
    cmap = plt.get_cmap("viridis")
    return {label: cmap(i / max(1, len(labels) - 1)) for i, label in enumerate(labels)}


def _subset(groups: list, limit: int = MAX_CURVES) -> tuple[list, str]:
    if len(groups) <= limit:
        return groups, ""
    idx = np.unique(np.linspace(0, len(groups) - 1, limit).round().astype(int))
    return [groups[i] for i in idx], f" (showing {len(idx)} of {len(groups)} combinations)"


def _diverged_fraction(df: pd.DataFrame) -> pd.Series:
    if "diverged_replicas" in df and "replicas" in df:
        frac = df["diverged_replicas"] / df["replicas"].where(df["replicas"] > 0)
        return frac.where(df["status"] != "failed")
    return (df["status"] == "diverged").astype(float).where(df["status"] != "failed")


# ------------------------------------------------------------------------------------------------
# theory boundaries
# ------------------------------------------------------------------------------------------------

# A boundary provider looks at the base scenario and the two heatmap axes and returns a function
# x -> y of the stability boundary (in axis units), plus a legend label; or None if it does not apply.
BoundaryProvider = Callable[[object, str, str], "tuple[Callable[[np.ndarray], np.ndarray], str] | None"]
BOUNDARIES: list[BoundaryProvider] = []


def boundary(fn: BoundaryProvider) -> BoundaryProvider:
    BOUNDARIES.append(fn)
    return fn


@boundary
def delayed_sgd_boundary(scn, xkey: str, ykey: str):
    """Levin-May: delayed SGD on a quadratic is stable iff lr < 2 sin(pi/(4k+2)) / lambda_max
    (theory.delayed_stability, T1); applies to the quadratic oracle with plain SGD, fixed lag k."""
    if scn is None or scn.task.name != "quadratic" or scn.algorithm.optimizer.name != "sgd":
        return None
    if getattr(scn.algorithm.optimizer, "momentum", 0.0) not in (0, 0.0, None):
        return None
    if scn.system.staleness.kind not in ("fixed_lag", "sync"):
        return None
    lag, lr = "system.staleness.k", "algorithm.optimizer.lr"
    if {xkey, ykey} != {lag, lr}:
        return None
    from theory.delayed_stability import critical_lr

    lam_max = float(scn.task.hessian_diagonal().amax())
    crit = lambda k: np.asarray(critical_lr(np.asarray(k, dtype=float), lam_max))  # noqa: E731
    label = r"theory: $\eta_{crit}(k) = 2\sin(\pi/(4k+2))/\lambda_{max}$"
    if xkey == lag:
        return crit, label
    # lr on x: the boundary as lag against lr is the inverse; not drawn as a function of x
    return None


def find_boundary(scn, xkey: str, ykey: str):
    for provider in BOUNDARIES:
        try:
            found = provider(scn, xkey, ykey)
        except Exception:  # noqa: BLE001 - a boundary is an annotation, never a failure
            found = None
        if found is not None:
            return found
    return None


# ------------------------------------------------------------------------------------------------
# figures
# ------------------------------------------------------------------------------------------------


def _positions(values: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Map data values to heatmap cell coordinates (cell i is centred at i), interpolating in log
    space when the axis is positive and spans more than a factor 4, linearly otherwise."""
    values = np.asarray(values, dtype=float)
    query = np.asarray(query, dtype=float)
    idx = np.arange(len(values), dtype=float)
    uselog = values.min() > 0 and values.max() / values.min() > 4
    tx = np.log(values) if uselog else values
    tq = np.log(np.clip(query, 1e-300, None)) if uselog else query
    # linear extrapolation half a cell beyond the ends
    slope_lo = (idx[1] - idx[0]) / (tx[1] - tx[0])
    slope_hi = (idx[-1] - idx[-2]) / (tx[-1] - tx[-2])
    out = np.interp(tq, tx, idx)
    out = np.where(tq < tx[0], idx[0] + (tq - tx[0]) * slope_lo, out)
    out = np.where(tq > tx[-1], idx[-1] + (tq - tx[-1]) * slope_hi, out)
    return out


@paused_cyclic_gc()
def heatmaps(results: pd.DataFrame, xkey: str, ykey: str, path: Path, scenario=None, formats=FORMATS) -> Figure:
    """Final outcome and divergence over two swept axes (mean over seeds and any other axis)."""
    col, _, log = reward_metric(results)
    df = results[results.status != "failed"].copy()
    df["_div"] = _diverged_fraction(df)
    df["_val"] = np.log10(df[col].clip(lower=1e-12)) if log else df[col]
    xs = np.sort(df[xkey].unique())
    ys = np.sort(df[ykey].unique())
    found = find_boundary(scenario, xkey, ykey)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.3), dpi=DPI)
    panels = (
        ("_val", f"log10 {col}" if log else col, "viridis_r" if log else "viridis", None),
        ("_div", "diverged fraction of replicas", "Reds", (0.0, 1.0)),
    )
    for ax, (vcol, label, cmap, lim) in zip(axes, panels):
        grid = df.pivot_table(index=ykey, columns=xkey, values=vcol, aggfunc="mean").reindex(index=ys, columns=xs)
        arr = grid.to_numpy(dtype=float)
        finite = arr[np.isfinite(arr)]
        vmin, vmax = lim if lim else ((finite.min(), finite.max()) if finite.size else (0, 1))
        im = ax.imshow(arr, origin="lower", aspect="auto", cmap=cmap, vmin=vmin, vmax=vmax)
        fig.colorbar(im, ax=ax, label=label)
        ax.set_xticks(range(len(xs)), [f"{v:g}" for v in xs])
        ax.set_yticks(range(len(ys)), [f"{v:g}" for v in ys])
        ax.set_xlabel(xkey)
        ax.set_ylabel(ykey)
        if arr.size <= 120:
            for (i, j), v in np.ndenumerate(arr):
                if np.isfinite(v):
                    ax.text(j, i, f"{v:.2g}", ha="center", va="center", fontsize=6, color="k" if vcol == "_div" and v < 0.5 else "w")
        if found is not None and len(ys) >= 2:
            fn, blabel = found
            xf = np.linspace(xs.min(), xs.max(), 200) if len(xs) >= 2 else xs
            px = _positions(xs, xf) if len(xs) >= 2 else np.zeros(1)
            py = _positions(ys, fn(xf))
            ax.plot(px, py, color="cyan" if vcol == "_val" else "k", lw=2, ls="--", label=blabel)
            ax.plot(_positions(xs, xs) if len(xs) >= 2 else [0], _positions(ys, fn(xs)), "o", ms=4,
                    color="cyan" if vcol == "_val" else "k")
            ax.set_ylim(-0.5, len(ys) - 0.5)
            ax.legend(loc="upper right", fontsize=7, framealpha=0.8)
    fig.suptitle(f"{col} and divergence over {xkey} x {ykey}", fontsize=10)
    fig.tight_layout()
    _save(fig, path, formats)
    caption = (
        f"Left: {col} (mean over seeds{' and other axes' if len(numeric_axes(results, list(results.columns))) > 2 else ''}"
        f"{', log10' if log else ''}). Right: fraction of replicas that diverged."
    )
    if found is not None:
        caption += " Dashed: the theory's stability boundary (stable below it)."
    return Figure(path.stem, path, f"Heatmap: {xkey} x {ykey}", caption)


@paused_cyclic_gc()
def learning_curves(metrics: pd.DataFrame, results: pd.DataFrame, keys: list[str], path: Path,
                    formats=FORMATS) -> Figure:
    """Learning curves per combination of the swept values: mean over seeds, band = min..max."""
    rcol, mcol, log = reward_metric(results)
    if mcol not in metrics:
        mcol = "loss" if "loss" in metrics else mcol
    all_groups = _groups(metrics, keys)
    colors = group_colors([label for label, _ in all_groups])
    groups, note = _subset(all_groups)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), dpi=DPI)
    for label, g in groups:
        color = colors[label]
        d = g[["id", "step", "time", mcol]].dropna()
        if d.empty:
            continue
        by_step = d.pivot_table(index="step", columns="id", values=mcol)
        mean = by_step.mean(axis=1)
        axes[0].plot(mean.index, mean, color=color, lw=1.5, label=label)
        if by_step.shape[1] > 1:
            axes[0].fill_between(mean.index, by_step.min(axis=1), by_step.max(axis=1), color=color, alpha=0.2, lw=0)
        t = d.groupby("step")["time"].mean().reindex(mean.index)
        axes[1].plot(t, mean, color=color, lw=1.5)
        if by_step.shape[1] > 1:
            axes[1].fill_between(t, by_step.min(axis=1), by_step.max(axis=1), color=color, alpha=0.2, lw=0)
    for ax, xl in zip(axes, ("learner step", "simulated time (s)")):
        ax.set_xlabel(xl)
        ax.set_ylabel(metric_label(mcol).replace(" [", "\n["))
        ax.grid(alpha=0.3)
        if log:
            ax.set_yscale("log")
    axes[0].legend(fontsize=7, title=", ".join(k.split(".")[-1] for k in keys) or None, title_fontsize=7)
    fig.suptitle(f"Learning curves per method: mean over seeds, band min..max{note}", fontsize=10)
    fig.tight_layout()
    _save(fig, path, formats)
    n_seeds = int(results.groupby(keys).size().max()) if keys and len(results) else len(results)
    return Figure(
        path.stem,
        path,
        "Learning curves per method",
        f"{mcol} against learner steps and simulated time; line = mean over {n_seeds} seed(s), band = min..max over seeds{note}.",
    )


@paused_cyclic_gc()
def throughput_vs_staleness(results: pd.DataFrame, keys: list[str], path: Path, formats=FORMATS) -> Figure:
    """What asynchrony buys (throughput) against what it costs (staleness, final outcome). Points
    that share a staleness value (methods run under the same schedule) are spread sideways by a
    small, stated offset and numbered as in the legend, so that none hides another."""
    rcol, _, log = reward_metric(results)
    df = results[results.status != "failed"]
    all_rows = _groups(df, keys)
    colors = group_colors([label for label, _ in all_rows])
    rows, note = _subset(all_rows, 24)
    xs = np.array([g["staleness_mean"].mean() for _, g in rows], dtype=float)
    finite = xs[np.isfinite(xs)]
    span = float(finite.max() - finite.min()) if finite.size > 1 else 0.0
    width = 0.04 * span if span > 0 else 0.08  # the sideways spread of one cluster of equal x
    offsets = np.zeros(len(xs))
    close = 0.01 * span if span > 0 else 1e-9
    order = np.argsort(xs, kind="stable")
    clusters: list[list[int]] = []
    for i in order:
        if clusters and abs(xs[i] - xs[clusters[-1][0]]) <= close:
            clusters[-1].append(int(i))
        else:
            clusters.append([int(i)])
    for members in clusters:
        if len(members) > 1:
            for j, i in enumerate(sorted(members)):
                offsets[i] = (j - (len(members) - 1) / 2) * width / max(1, len(members) - 1) * 2
    dodged = any(len(m) > 1 for m in clusters)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=DPI)
    for i, (label, g) in enumerate(rows):
        x = xs[i] + offsets[i]
        for ax, ycol in zip(axes, ("throughput_samples_per_s", rcol)):
            y = g[ycol]
            err = [[max(0.0, y.mean() - y.min())], [max(0.0, y.max() - y.mean())]] if len(y) > 1 else None
            ax.errorbar(x, y.mean(), yerr=err, fmt="o", color=colors[label], capsize=3,
                        label=f"{i + 1}: {label}" if ax is axes[0] else None)
            ax.annotate(str(i + 1), (x, y.mean()), textcoords="offset points", xytext=(3, 5 if i % 2 else -11), fontsize=7,
                        color=colors[label])
    axes[0].set_ylabel("throughput (samples / simulated s)")
    axes[1].set_ylabel(metric_label(rcol).replace(" [", "\n["))
    if log:
        axes[1].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("mean staleness of consumed rollouts (versions)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, ncol=2 if len(rows) > 8 else 1)
    spread = f"; points at the same staleness spread sideways by up to ±{width:.2g} versions" if dodged else ""
    fig.suptitle(f"Throughput and outcome against staleness{note}{spread}", fontsize=10)
    fig.tight_layout()
    _save(fig, path, formats)
    return Figure(
        path.stem,
        path,
        "Throughput against staleness",
        "Left: what asynchrony buys (samples per simulated second). Right: what it costs (final outcome). "
        f"Points: mean over seeds, bars: min..max{note}. Points sharing a staleness value are spread "
        "sideways and numbered as in the legend.",
    )


@paused_cyclic_gc()
def diagnostic_traces(metrics: pd.DataFrame, keys: list[str], path: Path, smooth: int = 5,
                      formats=FORMATS) -> Figure | None:
    """ESS ratio of the importance weights and cosine of consecutive gradients, per method."""
    panels = [c for c in ("is/ess_ratio", "grad/cos_prev") if c in metrics and metrics[c].notna().any()]
    if not panels:
        return None
    all_groups = _groups(metrics, keys)
    colors = group_colors([label for label, _ in all_groups])
    groups, note = _subset(all_groups)
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 2.8 * len(panels)), sharex=True, squeeze=False, dpi=DPI)
    for ax, c in zip(axes[:, 0], panels):
        for label, g in groups:
            color = colors[label]
            by_step = g.pivot_table(index="step", columns="id", values=c)
            mean = by_step.mean(axis=1).rolling(smooth, min_periods=1).mean()
            ax.plot(mean.index, mean, color=color, lw=1.2, label=label)
        ax.set_ylabel(metric_label(c).replace(" [", "\n["), fontsize=8)
        ax.grid(alpha=0.3)
        if c == "is/ess_ratio":
            ax.set_ylim(0, 1.05)
        else:
            ax.axhline(0, color="k", lw=0.5)
    axes[0, 0].legend(fontsize=7, ncol=2 if len(groups) > 5 else 1)
    axes[-1, 0].set_xlabel("learner step")
    fig.suptitle(f"ESS and gradient-cosine traces (mean over seeds, rolling {smooth}){note}", fontsize=10)
    fig.tight_layout()
    _save(fig, path, formats)
    return Figure(
        path.stem,
        path,
        "ESS and gradient-cosine traces",
        "is/ess_ratio: Kish effective sample size / N of the sequence importance weights (1 = on-policy). "
        "grad/cos_prev: cosine of consecutive gradients (near 0 when fresh, towards 1 when stale gradients align).",
    )


@paused_cyclic_gc()
def time_to_target_figure(comparison, path: Path, limit: int = MAX_CURVES, formats=FORMATS) -> Figure | None:
    """Headline metric against simulated time per configuration (each run: the mean over its
    replicas of the smoothed per-replica curves), the target level as a dashed line and each
    configuration's mean time-to-target marked on it (docs/time_to_target.md). ``comparison``: a
    :class:`sandbox.analysis.time_to_target.Comparison`. None when no target level could be set."""
    from ..analysis.time_to_target import plot_series

    with_target = [a for a in comparison.arms if a.runs and comparison.levels.get(a.label, (None,))[0] is not None]
    # a diverged configuration reaches no target (docs/time_to_target.md): named in the title, not drawn
    diverged = [a for a in with_target if a.diverged]
    arms = [a for a in with_target if not a.diverged]
    if not arms:
        return None
    colors = group_colors([a.label for a in arms])
    arms, note = _subset(arms, limit)
    fig, ax = plt.subplots(figsize=(9, 4.6), dpi=DPI)
    levels = sorted({comparison.levels[a.label][0] for a in arms})
    metric = arms[0].runs[0].metric
    higher = arms[0].runs[0].higher_is_better
    drawn: list[np.ndarray] = []
    for arm in arms:
        color = colors[arm.label]
        level = comparison.levels[arm.label][0]
        row = comparison.config_fields(arm.label)
        ttt = row["time_to_target"]
        sp = row["speedup_vs_sync"]
        reached, units = (int(x) for x in row["reached_units"].split("/"))
        text = f"{ttt:.3g} s" if ttt is not None else f"missed by {units - reached} of {units} replicas"
        if sp is not None and not arm.synchronous:
            text += f", {sp:.2f}× vs {row['baseline']}"
        elif arm.synchronous:
            text += ", synchronous baseline"
        series = [plot_series(c) for c in arm.runs]
        series = [(t, z) for t, z in series if len(t)]
        if not series:
            continue
        drawn.extend(z for _, z in series)
        if len(series) == 1:
            ax.plot(*series[0], color=color, lw=1.6, label=f"{arm.label}: {text}")
        else:  # thin: each seed; thick: their mean on a common time grid (up to the shortest run)
            for t, z in series:
                ax.plot(t, z, color=color, lw=0.7, alpha=0.3)
            grid = np.linspace(max(t[0] for t, _ in series), min(t[-1] for t, _ in series), 200)
            ax.plot(grid, np.mean([np.interp(grid, t, z) for t, z in series], axis=0), color=color, lw=1.8,
                    label=f"{arm.label}: {text}")
        if ttt is not None:
            ax.plot([ttt], [level], marker="o", ms=8, color=color, markeredgecolor="k", zorder=5)
            ax.axvline(ttt, color=color, lw=0.8, ls=":", zorder=1)
    if len(levels) == 1:
        ax.axhline(levels[0], color="k", lw=1.2, ls="--", zorder=2)
        ax.plot([], [], color="k", ls="--", label=f"target {levels[0]:.3g}")
        rule = comparison.levels[arms[0].label][1]
        title = f"Time to target: {metric} {rule}"
    else:  # each configuration has its own target (its own synchronous baseline's): dashed in its colour
        for arm in arms:
            ax.axhline(comparison.levels[arm.label][0], color=colors[arm.label], lw=0.9, ls="--", zorder=2)
        ax.plot([], [], color="grey", ls="--", label="each configuration's target (its colour)")
        title = (f"Time to target: {metric} {'≥' if higher else '≤'} each configuration's own target "
                 f"({len(levels)} targets, from each one's synchronous baseline)")
    values = np.concatenate(drawn + [np.asarray(levels, dtype=float)])
    values = values[np.isfinite(values)]
    if not higher and values.size and values.min() > 0:  # a loss spans decades, as in the run's learning curve
        ax.set_yscale("log")
    if diverged:
        names = "; ".join(a.label for a in diverged[:4]) + (f" and {len(diverged) - 4} more" if len(diverged) > 4 else "")
        title += f"\nnot drawn, diverged (reach no target): {names}"
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel(f"{metric} (smoothed; mean over replicas)" + ("" if higher else "\nlower is better"))
    ax.set_title(title + note, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    _save(fig, path, formats)
    seeds = max(len(a.runs) for a in arms)
    return Figure(
        path.stem,
        path,
        "Time to target",
        f"{metric} against simulated time: the mean over replicas of each replica's centred running mean over "
        f"{arms[0].runs[0].target.window} steps{'; thin lines: each seed, thick: their mean' if seeds > 1 else ''}. Dashed: the "
        "target; dots and dotted lines: each configuration's mean time to reach it (every replica crossing it). "
        "The legend gives it and the end-to-end speed-up against the synchronous baseline. Configurations that "
        "diverged, and those whose synchronous baseline diverged (no target), are not drawn.",
    )


def sweep_figures(out: str | Path, fig_dir: str | Path | None = None) -> list[Figure]:
    """All figures of a sweep directory (written into ``fig_dir``, default ``<out>/figures``)."""
    from ..sweep import load_metrics, load_results, read_manifest
    from ..sweep.spec import display_keys

    out = Path(out)
    fig_dir = Path(fig_dir) if fig_dir else out / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(out)
    results = load_results(out)
    metrics = load_metrics(out)
    keys = [k for k in display_keys(manifest["axes"]) if k in results.columns]
    done = results[results.status.isin(["completed", "diverged"])]
    figs: list[Figure] = []
    if done.empty:
        return figs
    scenario = _base_scenario(out)
    formats = scenario.run.figure_formats if scenario is not None else FORMATS
    num = numeric_axes(done, [k for g in manifest["axes"] if len(g) == 1 for k in g])
    if len(num) >= 2:
        figs.append(heatmaps(done, num[0], num[1], fig_dir / "heatmap.png", scenario, formats))
    figs.append(learning_curves(metrics, done, keys, fig_dir / "learning_curves.png", formats))
    if "staleness_mean" in done and "throughput_samples_per_s" in done:
        figs.append(throughput_vs_staleness(done, keys, fig_dir / "throughput_vs_staleness.png", formats))
    trace = diagnostic_traces(metrics, keys, fig_dir / "diagnostics.png", formats=formats)
    if trace is not None:
        figs.append(trace)
    hist = staleness_histograms(done, keys, fig_dir / "staleness_hist.png", formats)
    if hist is not None:
        figs.append(hist)
    from ..sweep.results import time_to_target_comparison

    comparison = time_to_target_comparison(out)
    ttt = time_to_target_figure(comparison, fig_dir / "time_to_target.png", formats=formats) if comparison is not None else None
    if ttt is not None:
        figs.append(ttt)
    return figs


@paused_cyclic_gc()
def staleness_histograms(results: pd.DataFrame, keys: list[str], path: Path, formats=FORMATS) -> Figure | None:
    """Distribution of the lag of consumed rollouts per method (summed over seeds)."""
    if "staleness_hist" not in results:
        return None
    all_groups = _groups(results, keys)
    colors = group_colors([label for label, _ in all_groups])
    groups, note = _subset(all_groups, 8)
    hists = []
    for label, g in groups:
        total: dict[int, int] = {}
        for text in g["staleness_hist"].dropna():
            for k, v in json.loads(text).items():
                total[int(k)] = total.get(int(k), 0) + int(v)
        hists.append((label, total))
    if not any(h for _, h in hists):
        return None
    fig, ax = plt.subplots(figsize=(9, 3.4), dpi=DPI)
    width = 0.8 / max(1, len(hists))
    for i, (label, h) in enumerate(hists):
        if not h:
            continue
        ks = np.array(sorted(h))
        n = np.array([h[k] for k in ks], dtype=float)
        ax.bar(ks + (i - (len(hists) - 1) / 2) * width, n / n.sum(), width=width, color=colors[label], label=label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("lag of a consumed group (versions)")
    ax.set_ylabel("fraction of consumed groups")
    ax.set_title(f"Staleness distribution per method, all seeds pooled{note}", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    _save(fig, path, formats)
    return Figure(path.stem, path, "Staleness distributions", f"Lag of every consumed rollout group, all seeds pooled{note}.")


def _base_scenario(out: Path):
    from ..scenario.load import ScenarioError, read_toml, validate_scenario

    try:
        return validate_scenario(read_toml(out / "base.toml"))
    except (ScenarioError, OSError):
        return None


__all__ = [
    "BOUNDARIES",
    "Figure",
    "boundary",
    "delayed_sgd_boundary",
    "diagnostic_traces",
    "find_boundary",
    "heatmaps",
    "learning_curves",
    "numeric_axes",
    "reward_metric",
    "staleness_histograms",
    "sweep_figures",
    "throughput_vs_staleness",
    "time_to_target_figure",
]
