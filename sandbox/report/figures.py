"""Figures of a sweep: heatmaps over two swept axes (with the theory's stability boundary where
one applies), learning curves per method with a band over seeds, throughput against staleness,
and ESS / gradient-cosine traces.

Every function takes the results table (:func:`sandbox.sweep.api.load_results`) and, for traces, the
metrics table (:func:`sandbox.sweep.api.load_metrics`), and writes one figure in each of ``formats`` (PNG
and SVG unless told; a sweep's figures follow its base scenario's ``run.figure_formats``). A method
keeps one colour across the figures of a sweep (:func:`group_colors`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from sandbox.base.gc_pause import paused_cyclic_gc
from sandbox.run.plots import DPI, FORMATS, PALETTE, _save, metric_label, plt  # Agg backend, atomic PNG (+ SVG) writes

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
    :mod:`sandbox.run.plots` for up to 8 groups, evenly spaced viridis beyond."""
    if len(labels) <= len(PALETTE):
        return dict(zip(labels, PALETTE))
    cmap = plt.get_cmap("viridis")
    return {label: cmap(i / max(1, len(labels) - 1)) for i, label in enumerate(labels)}


def _subset(groups: list, limit: int = MAX_CURVES) -> tuple[list, str]:
    if len(groups) <= limit:
        return groups, ""
    idx = np.unique(np.linspace(0, len(groups) - 1, limit).round().astype(int))
    return [groups[i] for i in idx], f" (showing {len(idx)} of {len(groups)} combinations)"


SYNC_STYLE = "--"  # the line style of a synchronous reference drawn in another configuration's panel


def _short(key: str) -> str:
    return key.split(".")[-1]


@dataclass
class Layout:
    """How the figures of a sweep show its configurations (combinations of the swept values),
    every one of them (no cap): the colour key (the first categorical swept key, e.g. ``method``;
    without one, the last numeric key) gives one colour per value, the same in every figure
    (Okabe-Ito, :data:`sandbox.run.plots.PALETTE`, for a categorical key; evenly spaced viridis, in
    value order, for a numeric one); the other swept keys (e.g. the lag ``k``) give one panel per
    combination of their values. Keys with one value only name the runs. ``sync`` and ``baseline``
    (from the time-to-target comparison) say which configurations are synchronous and which
    synchronous configuration each one is compared with: a panel without its configurations'
    baselines draws them dashed, in their own colour."""

    keys: list[str]
    color_key: str | None
    facet_keys: list[str]
    values_of: dict[str, tuple]  # configuration label -> its values of ``keys``
    colors: dict[str, object]  # colour-key value as text -> colour
    facets: list[tuple]  # panel values (of ``facet_keys``), in display order
    sync: dict[str, bool] = field(default_factory=dict)
    baseline: dict[str, str | None] = field(default_factory=dict)
    ids: dict[str, list[str]] = field(default_factory=dict)  # configuration label -> its run ids

    @property
    def labels(self) -> list[str]:
        return list(self.values_of)

    def _value(self, label: str, key: str):
        return self.values_of[label][self.keys.index(key)]

    def color_value(self, label: str) -> str:
        return str(self._value(label, self.color_key)) if self.color_key else label

    def color(self, label: str):
        return self.colors.get(self.color_value(label), PALETTE[0])

    def facet(self, label: str) -> tuple:
        return tuple(self._value(label, k) for k in self.facet_keys)

    def facet_title(self, facet: tuple) -> str:
        text = ", ".join(f"{_short(k)} = {v}" for k, v in zip(self.facet_keys, facet)) or "all configurations"
        members = [lb for lb in self.labels if self.facet(lb) == facet]
        if members and all(self.sync.get(lb, False) for lb in members):
            text += " (synchronous)"
        return text

    def members(self, facet: tuple) -> list[str]:
        return [lb for lb in self.labels if self.facet(lb) == facet]

    def references(self, facet: tuple) -> list[str]:
        """The synchronous baselines of a panel's configurations that the panel does not hold."""
        members = self.members(facet)
        out = []
        for lb in members:
            base = self.baseline.get(lb)
            if base and base not in members and base not in out and base in self.values_of:
                out.append(base)
        return out

    def legend_title(self) -> str | None:
        return _short(self.color_key) if self.color_key else None

    def color_handles(self, lw: float = 1.6) -> list:
        from matplotlib.lines import Line2D

        return [Line2D([], [], color=c, lw=lw, label=v) for v, c in self.colors.items()]

    def reference_handle(self):
        from matplotlib.lines import Line2D

        return Line2D([], [], color="0.3", lw=1.0, ls=SYNC_STYLE, label="synchronous baseline\n(dashed, its colour)")


def _sort_values(values: list) -> list:
    try:
        return sorted(values, key=lambda v: float(v))
    except (TypeError, ValueError):
        return values


def build_layout(results: pd.DataFrame, keys: list[str], comparison=None) -> Layout:
    """The :class:`Layout` of a sweep's results table (``keys``: its display keys); ``comparison``
    (:func:`sandbox.sweep.results.time_to_target_comparison`) adds which configurations are
    synchronous and their baselines."""
    keys = [k for k in keys if k in results]
    values_of: dict[str, tuple] = {}
    id_label: dict[str, str] = {}
    if keys:
        for vals, g in results.groupby(keys, sort=False, dropna=False):
            vals = vals if isinstance(vals, tuple) else (vals,)
            label = group_label(keys, vals)
            values_of[label] = vals
            id_label.update({rid: label for rid in g["id"]} if "id" in g else {})
    else:
        values_of["all runs"] = ()
        id_label.update({rid: "all runs" for rid in results.get("id", [])})
    varying = [k for k in keys if results[k].nunique(dropna=False) >= 2]
    numeric = numeric_axes(results, varying)
    categorical = [k for k in varying if k not in numeric]
    color_key = categorical[0] if categorical else (numeric[-1] if numeric else None)
    facet_keys = [k for k in varying if k != color_key]
    colors: dict[str, object] = {}
    if color_key is not None:
        i = keys.index(color_key)
        seen = list(dict.fromkeys(v[i] for v in values_of.values()))
        if color_key in numeric:
            seen = _sort_values(seen)
            cmap = plt.get_cmap("viridis")
            colors = {str(v): cmap(0.9 * j / max(1, len(seen) - 1)) for j, v in enumerate(seen)}
        elif len(seen) <= len(PALETTE):
            colors = {str(v): PALETTE[j] for j, v in enumerate(seen)}
        else:  # more categories than Okabe-Ito has colours
            cmap = plt.get_cmap("tab20")
            colors = {str(v): cmap(j % 20) for j, v in enumerate(seen)}
    idx = [keys.index(k) for k in facet_keys]
    facets = list(dict.fromkeys(tuple(v[i] for i in idx) for v in values_of.values()))
    if len(facet_keys) == 1:
        facets = [(v,) for v in _sort_values([f[0] for f in facets])]
    layout = Layout(keys, color_key, facet_keys, values_of, colors, facets)
    for rid, label in id_label.items():
        layout.ids.setdefault(label, []).append(rid)
    if comparison is not None:
        arm_label = {}
        for arm in comparison.arms:
            mine = {id_label[r] for r in arm.run_ids if r in id_label}
            if len(mine) == 1:
                arm_label[arm.label] = mine.pop()
        for arm in comparison.arms:
            if arm.label in arm_label:
                layout.sync[arm_label[arm.label]] = arm.synchronous
                base = comparison.baseline.get(arm.label)
                layout.baseline[arm_label[arm.label]] = arm_label.get(base) if base else None
    return layout


def _top_title(fig, text: str, fontsize: float = 10) -> None:
    """A figure title above every panel (after ``tight_layout``; the saved figure is cropped to fit
    it), so that it never overlaps the first panel's title in a tall grid."""
    fig.suptitle(text, fontsize=fontsize, y=1.0, va="bottom")


def _grid(n_rows: int, n_cols: int, width: float, height: float, **kw):
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(width * n_cols, height * n_rows), squeeze=False, dpi=DPI, **kw)
    return fig, axes


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
    # a task whose config gives its Hessian's diagonal (the quadratic oracle), trained by plain SGD
    if scn is None or not hasattr(scn.task, "hessian_diagonal") or scn.algorithm.optimizer.name != "sgd":
        return None
    if getattr(scn.algorithm.optimizer, "momentum", 0.0) not in (0, 0.0, None):
        return None
    if scn.system.staleness.fixed_lag() is None:  # the boundary needs a deterministic lag
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
                    ax.text(
                        j,
                        i,
                        f"{v:.2g}",
                        ha="center",
                        va="center",
                        fontsize=6,
                        color="k" if vcol == "_div" and v < 0.5 else "w",
                    )
        if found is not None and len(ys) >= 2:
            fn, blabel = found
            xf = np.linspace(xs.min(), xs.max(), 200) if len(xs) >= 2 else xs
            px = _positions(xs, xf) if len(xs) >= 2 else np.zeros(1)
            py = _positions(ys, fn(xf))
            ax.plot(px, py, color="cyan" if vcol == "_val" else "k", lw=2, ls="--", label=blabel)
            ax.plot(
                _positions(xs, xs) if len(xs) >= 2 else [0],
                _positions(ys, fn(xs)),
                "o",
                ms=4,
                color="cyan" if vcol == "_val" else "k",
            )
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
def learning_curves(
    metrics: pd.DataFrame,
    results: pd.DataFrame,
    keys: list[str],
    path: Path,
    formats=FORMATS,
    layout: Layout | None = None,
    replicas: dict | None = None,
) -> Figure:
    """Learning curves of every configuration: one row of panels per value of the facet keys
    (:class:`Layout`), against learner steps (left) and simulated time (right), one colour per
    value of the colour key; thick line = mean over seeds, thin lines = each replica of each seed
    (``replicas``: run id -> its :class:`sandbox.analysis.time_to_target.Curves`, each replica on its
    own clock), so that a mean never hides a collapsed replica; without per-replica curves, a band
    min..max over seeds. A panel also draws, dashed, the synchronous baselines of its configurations
    that live in another panel."""
    rcol, mcol, log = reward_metric(results)
    if mcol not in metrics:
        mcol = "loss" if "loss" in metrics else mcol
    layout = layout or build_layout(results, keys)
    groups = dict(_groups(metrics, layout.keys))
    collapsed = _collapsed_by_label(results, layout.keys)
    diverged = _diverged_by_label(results, layout.keys)
    fig, axes = _grid(len(layout.facets), 2, 5.5, 3.2, sharex="col", sharey=True)
    refs_drawn = False
    thin = 0
    for row, facet in zip(axes, layout.facets):
        draw = [(lb, False) for lb in layout.members(facet)] + [(lb, True) for lb in layout.references(facet)]
        for label, is_ref in draw:
            g = groups.get(label)
            if g is None:
                continue
            color = layout.color(label)
            d = g[["id", "step", "time", mcol]].dropna()
            if d.empty:
                continue
            by_step = d.pivot_table(index="step", columns="id", values=mcol)
            mean = by_step.mean(axis=1)
            t = d.groupby("step")["time"].mean().reindex(mean.index)
            style = dict(color=color, lw=1.0, ls=SYNC_STYLE, alpha=0.8) if is_ref else dict(color=color, lw=1.8)
            name = f"{label} (synchronous baseline)" if is_ref else label
            drawn = 0 if is_ref else _replica_lines(row, label, list(by_step.columns), replicas, mcol, color)
            thin += drawn
            for ax, x in zip(row, (mean.index, t)):
                ax.plot(x, mean, label=name, **style)
                if by_step.shape[1] > 1 and not is_ref and not drawn:
                    ax.fill_between(x, by_step.min(axis=1), by_step.max(axis=1), color=color, alpha=0.2, lw=0)
            k_of_r = collapsed.get(label)
            if not is_ref and k_of_r and k_of_r[0] > 0 and len(mean):
                n_div = diverged.get(label, (0, 0))[0]
                row[0].annotate(
                    f"{k_of_r[0]}/{k_of_r[1]} collapsed" + (f" ({n_div} diverged)" if n_div else ""),
                    (mean.index[-1], mean.iloc[-1]),
                    fontsize=7,
                    color=color,
                    textcoords="offset points",
                    xytext=(-4, 4),
                    ha="right",
                )
            refs_drawn |= is_ref
        row[0].set_title(layout.facet_title(facet), fontsize=9, loc="left")
        for ax in row:
            ax.set_ylabel(metric_label(mcol).replace(" [", "\n["), fontsize=8)
            ax.grid(alpha=0.3)
            if log:
                ax.set_yscale("log")
    for ax, xl in zip(axes[-1], ("learner step", "simulated time (s)")):
        ax.set_xlabel(xl)
    handles = layout.color_handles() + ([layout.reference_handle()] if refs_drawn else [])
    if thin:
        from matplotlib.lines import Line2D

        handles += [
            Line2D([], [], color="0.3", lw=1.8, label="mean over seeds"),
            Line2D([], [], color="0.3", lw=0.6, alpha=0.5, label="each replica"),
        ]
    fig.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(1.0, 0.95),
        fontsize=7,
        title=layout.legend_title(),
        title_fontsize=7,
    )
    fig.tight_layout()
    spread = f"thin: each of the {thin} replicas" if thin else "band min..max over seeds"
    _top_title(
        fig,
        f"Learning curves of all {len(layout.labels)} configurations: mean over seeds, {spread}"
        + (f"\n{_replica_count_text(collapsed, diverged)}" if collapsed or diverged else ""),
        fontsize=10,
    )
    _save(fig, path, formats)
    n_seeds = int(results.groupby(keys).size().max()) if keys and len(results) else len(results)
    by = f"; one row per {', '.join(_short(k) for k in layout.facet_keys)}" if layout.facet_keys else ""
    return Figure(
        path.stem,
        path,
        "Learning curves per configuration",
        f"{mcol} against learner steps and simulated time; thick line = mean over {n_seeds} seed(s), "
        + (
            f"thin lines = each of the {thin} replicas (each on its own clock)"
            if thin
            else "band = min..max over seeds"
        )
        + f"{by}; colour: {layout.legend_title() or 'configuration'}"
        f"{'; dashed: the synchronous baseline of the configuration of that colour' if refs_drawn else ''}; "
        f"{_collapsed_caption(collapsed)}.",
    )


def _replica_lines(row, label: str, run_ids: list[str], replicas: dict | None, metric: str, color) -> int:
    """Each replica of each run of a configuration as a thin line against learner steps (``row[0]``)
    and its own simulated clock (``row[1]``), ``gid`` ``replica:<label>:<run id>:<r>`` (in the SVG);
    returns how many were drawn (0: no per-replica curves of ``metric``)."""
    n = 0
    for rid in run_ids:
        c = (replicas or {}).get(rid)
        if c is None or c.metric != metric:
            continue
        for r in range(c.replicas):
            ok = np.isfinite(c.values[:, r])
            if not ok.any():
                continue
            clock = c.clock(r)[0]
            for ax, x in zip(row, (c.step[ok], clock[ok])):
                ax.plot(
                    x,
                    c.values[ok, r],
                    color=color,
                    lw=0.6,
                    alpha=0.35,
                    label="_replica",
                    gid=f"replica:{label}:{rid}:{r}",
                )
            n += 1
    return n


def _diverged_by_label(results: pd.DataFrame, keys: list[str]) -> dict[str, tuple[int, int]]:
    """Per configuration label: (diverged replicas, replicas) summed over its seeds; empty without those columns."""
    if "diverged_replicas" not in results or "replicas" not in results or results.empty:
        return {}
    return {
        label: (int(g["diverged_replicas"].fillna(0).sum()), int(g["replicas"].fillna(0).sum()))
        for label, g in _groups(results, keys)
    }


def _replica_count_text(collapsed: dict[str, tuple[int, int]], diverged: dict[str, tuple[int, int]]) -> str:
    """ "k of R replicas collapsed (d of them diverged)" over every configuration (a diverged replica
    counts as collapsed, docs/time_to_target.md#collapse)."""
    total = sum(v[1] for v in (collapsed or diverged).values())
    d = sum(v[0] for v in diverged.values())
    if not collapsed:
        return f"{d} of {total} replicas diverged"
    k = sum(v[0] for v in collapsed.values())
    return f"{k} of {total} replicas collapsed" + (f" ({d} of them diverged)" if d else "")


def _collapsed_by_label(results: pd.DataFrame, keys: list[str]) -> dict[str, tuple[int, int]]:
    """Per configuration label: (collapsed replicas, replicas) summed over its seeds
    (docs/time_to_target.md#collapse); empty when the results have no such columns."""
    if "collapsed_replicas" not in results or "replicas" not in results or results.empty:
        return {}
    return {
        label: (int(g["collapsed_replicas"].fillna(0).sum()), int(g["replicas"].fillna(0).sum()))
        for label, g in _groups(results, keys)
    }


def _collapsed_caption(collapsed: dict[str, tuple[int, int]]) -> str:
    if not collapsed:
        return "collapsed replicas not recorded"
    bad = {k: v for k, v in collapsed.items() if v[0]}
    total = sum(v[1] for v in collapsed.values())
    if not bad:
        return f"no replica collapsed (0 of {total})"
    return (
        "collapsed replicas (diverged, or final reward < 0.05 with a zero gradient), written at the end of a line: "
        + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in bad.items())
    )


@paused_cyclic_gc()
def throughput_vs_staleness(
    results: pd.DataFrame, keys: list[str], path: Path, formats=FORMATS, layout: Layout | None = None
) -> Figure:
    """What asynchrony buys (throughput) against what it costs (staleness, final outcome). Points
    that share a staleness value (methods run under the same schedule) are spread sideways by a
    small, stated offset and numbered as in the legend, so that none hides another."""
    rcol, _, log = reward_metric(results)
    df = results[results.status != "failed"]
    all_rows = _groups(df, keys)
    layout = layout or build_layout(df, keys)
    colors = {label: layout.color(label) if label in layout.values_of else PALETTE[0] for label, _ in all_rows}
    markers = "osD^v<>PX*"
    marker = {
        label: markers[layout.facets.index(layout.facet(label)) % len(markers)]
        if label in layout.values_of and layout.facet(label) in layout.facets
        else "o"
        for label, _ in all_rows
    }
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
            ax.errorbar(
                x,
                y.mean(),
                yerr=err,
                fmt=marker[label],
                color=colors[label],
                capsize=3,
                label=f"{i + 1}: {label}" if ax is axes[0] else None,
            )
            ax.annotate(
                str(i + 1),
                (x, y.mean()),
                textcoords="offset points",
                xytext=(3, 5 if i % 2 else -11),
                fontsize=7,
                color=colors[label],
            )
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
def diagnostic_traces(
    metrics: pd.DataFrame, keys: list[str], path: Path, smooth: int = 5, formats=FORMATS, layout: Layout | None = None
) -> Figure | None:
    """ESS ratio of the importance weights and cosine of consecutive gradients of every
    configuration: one row of panels per facet (:class:`Layout`), one column per quantity."""
    panels = [c for c in ("is/ess_ratio", "grad/cos_prev") if c in metrics and metrics[c].notna().any()]
    if not panels:
        return None
    layout = layout or build_layout(metrics.drop_duplicates("id") if "id" in metrics else metrics, keys)
    if "grad/cos_prev" in panels and "grad/norm" in metrics and "id" in metrics:
        # the cosine is undefined where this or the previous gradient is zero (e.g. after a GRPO run
        # converged, every group has equal rewards): a gap, never a drawn cosine of 0 (the learner logs
        # NaN there; run directories written by older versions hold a 0, which this mask removes too)
        metrics = metrics.copy()
        prev = metrics.groupby("id")["grad/norm"].shift(1)
        metrics["grad/cos_prev"] = metrics["grad/cos_prev"].where((metrics["grad/norm"] > 0) & (prev > 0))
    groups = dict(_groups(metrics, layout.keys))
    fig, axes = _grid(len(layout.facets), len(panels), 5.0, 2.6, sharex=True, sharey="col")
    for row, facet in zip(axes, layout.facets):
        for ax, c in zip(row, panels):
            for label in layout.members(facet):
                g = groups.get(label)
                if g is None:
                    continue
                by_step = g.pivot_table(index="step", columns="id", values=c)
                if by_step.empty:
                    continue
                mean = by_step.mean(axis=1).rolling(smooth, min_periods=1).mean()
                ax.plot(mean.index, mean, color=layout.color(label), lw=1.2, label=label)
            ax.set_ylabel(metric_label(c).replace(" [", "\n["), fontsize=8)
            ax.grid(alpha=0.3)
            if c == "is/ess_ratio":
                ax.set_ylim(0, 1.05)
            else:
                ax.set_ylim(-1.05, 1.05)
                ax.axhline(0, color="k", lw=0.5)
        row[0].set_title(layout.facet_title(facet), fontsize=9, loc="left")
    for ax in axes[-1]:
        ax.set_xlabel("learner step")
    fig.legend(
        handles=layout.color_handles(lw=1.2),
        loc="upper left",
        bbox_to_anchor=(1.0, 0.95),
        fontsize=7,
        title=layout.legend_title(),
        title_fontsize=7,
    )
    fig.tight_layout()
    _top_title(
        fig,
        f"ESS and gradient-cosine traces of all {len(layout.labels)} configurations (mean over seeds, rolling {smooth})",
        fontsize=10,
    )
    _save(fig, path, formats)
    return Figure(
        path.stem,
        path,
        "ESS and gradient-cosine traces",
        "is/ess_ratio: Kish effective sample size / N of the sequence importance weights (1 = on-policy). "
        "grad/cos_prev: cosine of consecutive gradients (near 0 when fresh, towards 1 when stale gradients align; "
        "a gap where a gradient is zero and the cosine undefined)"
        + (f"; one row per {', '.join(_short(k) for k in layout.facet_keys)}" if layout.facet_keys else "")
        + ".",
    )


def _arm_layout(arms, layout: Layout | None) -> tuple[dict, dict, list[str]]:
    """Per time-to-target arm its colour and panel, and the panel titles: with a sweep's
    :class:`Layout`, the configuration's colour-key colour and facet (an arm is matched to its
    configuration by its run ids); otherwise one panel, one palette colour per arm."""
    if layout is None:
        return group_colors([a.label for a in arms]), {a.label: 0 for a in arms}, [""]
    id_label = {}
    for label in layout.labels:
        id_label.update({rid: label for rid in layout.ids.get(label, [])})
    colors, panel_of, used = {}, {}, []
    for arm in arms:
        mine = next((id_label[r] for r in arm.run_ids if r in id_label), None)
        facet = layout.facet(mine) if mine else None
        colors[arm.label] = layout.color(mine) if mine else "0.5"
        if facet not in used:
            used.append(facet)
        panel_of[arm.label] = facet
    order = [f for f in layout.facets if f in used] + [f for f in used if f not in layout.facets]
    panel_of = {a: order.index(f) for a, f in panel_of.items()}
    return colors, panel_of, [layout.facet_title(f) if f is not None else "" for f in order]


@paused_cyclic_gc()
def time_to_target_figure(
    comparison, path: Path, limit: int = MAX_CURVES, formats=FORMATS, layout: Layout | None = None
) -> Figure | None:
    """Headline metric against simulated time per configuration (each run: the mean over its
    replicas of the smoothed per-replica curves), the target level as a dashed line and each
    configuration's mean time-to-target marked on it (docs/time_to_target.md). ``comparison``: a
    :class:`sandbox.analysis.time_to_target.Comparison`. None when no target level could be set."""
    from sandbox.analysis.time_to_target import plot_series, replica_series

    with_target = [a for a in comparison.arms if a.runs and comparison.levels.get(a.label, (None,))[0] is not None]
    # a diverged configuration reaches no target (docs/time_to_target.md): named in the title, not drawn
    diverged = [a for a in with_target if a.diverged]
    arms = [a for a in with_target if not a.diverged]
    if not arms:
        return None
    colors, panel_of, titles = _arm_layout(arms, layout)  # every configuration; a sweep: one panel per facet
    note = ""
    fig, panels = _grid(len(titles), 1, 9, 4.6 if len(titles) == 1 else 3.4, sharex=True, sharey=True)
    panels = panels[:, 0]
    levels = sorted({comparison.levels[a.label][0] for a in arms})
    metric = arms[0].runs[0].metric
    higher = arms[0].runs[0].higher_is_better
    replica_lines = 0
    drawn: list[np.ndarray] = []
    for arm in arms:
        ax = panels[panel_of[arm.label]]
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
        thin = [(c.seed, r, t, z) for c in arm.runs for r, t, z in replica_series(c)]
        if len(thin) > 1:  # thin: every replica of every seed on its own clock (a mean never hides one)
            for seed, r, t, z in thin:
                ax.plot(t, z, color=color, lw=0.6, alpha=0.3, label="_replica", gid=f"replica:{arm.label}:{seed}:{r}")
            replica_lines += len(thin)
        if len(series) == 1:
            ax.plot(*series[0], color=color, lw=1.8, label=f"{arm.label}: {text}")
        else:  # thick: the mean of the seeds' curves on a common time grid (up to the shortest run)
            grid = np.linspace(max(t[0] for t, _ in series), min(t[-1] for t, _ in series), 200)
            ax.plot(
                grid,
                np.mean([np.interp(grid, t, z) for t, z in series], axis=0),
                color=color,
                lw=1.8,
                label=f"{arm.label}: {text}",
            )
        if ttt is not None:
            ax.plot([ttt], [level], marker="o", ms=8, color=color, markeredgecolor="k", zorder=5)
            ax.axvline(ttt, color=color, lw=0.8, ls=":", zorder=1)
    rule = comparison.levels[arms[0].label][1]
    if len(levels) == 1:
        title = f"Time to target: {metric} {rule}"
    else:  # each configuration has its own target (its own synchronous baseline's): dashed in its colour
        title = (
            f"Time to target: {metric} {'≥' if higher else '≤'} each configuration's own target "
            f"({len(levels)} targets, from each one's synchronous baseline)"
        )
    values = np.concatenate(drawn + [np.asarray(levels, dtype=float)])
    values = values[np.isfinite(values)]
    log_scale = bool(not higher and values.size and values.min() > 0)  # a loss spans decades, as in a run's curve
    for i, (ax, panel_title) in enumerate(zip(panels, titles)):
        if len(levels) == 1:
            ax.axhline(levels[0], color="k", lw=1.2, ls="--", zorder=2)
            ax.plot([], [], color="k", ls="--", label=f"target {levels[0]:.3g}")
        else:
            for arm in (a for a in arms if panel_of[a.label] == i):
                ax.axhline(comparison.levels[arm.label][0], color=colors[arm.label], lw=0.9, ls="--", zorder=2)
            ax.plot([], [], color="grey", ls="--", label="targets: each configuration's own (dashed, its colour)")
        if log_scale:
            ax.set_yscale("log")
        spread = "thick: mean over replicas, thin: each" if replica_lines else "mean over replicas"
        ax.set_ylabel(f"{metric}\n(smoothed; {spread})" + ("" if higher else "\nlower is better"), fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
        if panel_title:
            ax.set_title(panel_title, fontsize=9, loc="left")
    panels[-1].set_xlabel("simulated time (s)")
    if diverged:
        names = "; ".join(a.label for a in diverged[:4]) + (
            f" and {len(diverged) - 4} more" if len(diverged) > 4 else ""
        )
        title += f"\nnot drawn, diverged (reach no target): {names}"
    fig.tight_layout()
    _top_title(fig, title + note, fontsize=9)
    _save(fig, path, formats)
    seeds = max(len(a.runs) for a in arms)
    return Figure(
        path.stem,
        path,
        "Time to target",
        f"{metric} against simulated time: the mean over replicas of each replica's centred running mean over "
        f"{arms[0].runs[0].target.window} steps"
        + (f"; thin lines: each of the {replica_lines} replicas on its own clock" if replica_lines else "")
        + ("; thick: the mean over seeds" if seeds > 1 else "")
        + ". Dashed: the "
        "target; dots and dotted lines: each configuration's mean time to reach it (every replica crossing it). "
        "The legend gives it and the end-to-end speed-up against the synchronous baseline. Configurations that "
        "diverged, and those whose synchronous baseline diverged (no target), are not drawn.",
    )


def replica_curves(out: Path, run_ids) -> dict:
    """Run id -> its per-replica curves (:meth:`sandbox.analysis.time_to_target.Curves.from_run_dir`) for
    the figures' thin lines; a run whose files cannot be read is left out (drawn through its mean only)."""
    from sandbox.analysis.time_to_target import Curves
    from sandbox.sweep.results import run_dir

    found = {}
    for rid in run_ids:
        try:
            curves = Curves.from_run_dir(run_dir(out, rid))
        except (OSError, ValueError, KeyError):
            continue
        if curves is not None:
            found[rid] = curves
    return found


def sweep_figures(out: str | Path, fig_dir: str | Path | None = None) -> list[Figure]:
    """All figures of a sweep directory (written into ``fig_dir``, default ``<out>/figures``)."""
    from sandbox.sweep.api import load_metrics, load_results, read_manifest
    from sandbox.sweep.spec import display_keys

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
    from sandbox.sweep.results import load_time_to_target, time_to_target_comparison

    comparison = time_to_target_comparison(out)
    layout = build_layout(done, keys, comparison)
    num = numeric_axes(done, [k for g in manifest["axes"] if len(g) == 1 for k in g])
    if len(num) >= 2:
        figs.append(heatmaps(done, num[0], num[1], fig_dir / "heatmap.png", scenario, formats))
    replicas = replica_curves(out, done["id"])
    figs.append(
        learning_curves(metrics, done, keys, fig_dir / "learning_curves.png", formats, layout=layout, replicas=replicas)
    )
    if layout.keys:
        ttt_table = load_time_to_target(out) if comparison is not None else None
        figs.append(summary_figure(done, ttt_table, layout, fig_dir / "summary.png", formats, replicas=replicas))
    if "staleness_mean" in done and "throughput_samples_per_s" in done:
        figs.append(
            throughput_vs_staleness(done, keys, fig_dir / "throughput_vs_staleness.png", formats, layout=layout)
        )
    trace = diagnostic_traces(metrics, keys, fig_dir / "diagnostics.png", formats=formats, layout=layout)
    if trace is not None:
        figs.append(trace)
    hist = staleness_histograms(done, keys, fig_dir / "staleness_hist.png", formats, layout=layout)
    if hist is not None:
        figs.append(hist)
    ttt = (
        time_to_target_figure(comparison, fig_dir / "time_to_target.png", formats=formats, layout=layout)
        if comparison is not None
        else None
    )
    if ttt is not None:
        figs.append(ttt)
    return figs


@paused_cyclic_gc()
def staleness_histograms(
    results: pd.DataFrame, keys: list[str], path: Path, formats=FORMATS, layout: Layout | None = None
) -> Figure | None:
    """Distribution of the lag of consumed rollouts of every configuration (summed over seeds):
    one panel per facet (:class:`Layout`), one bar colour per value of the colour key."""
    if "staleness_hist" not in results:
        return None
    layout = layout or build_layout(results, keys)
    groups = dict(_groups(results, layout.keys))
    hists: dict[str, dict[int, int]] = {}
    for label in layout.labels:
        total: dict[int, int] = {}
        g = groups.get(label)
        for text in g["staleness_hist"].dropna() if g is not None else []:
            for k, v in json.loads(text).items():
                total[int(k)] = total.get(int(k), 0) + int(v)
        hists[label] = total
    if not any(hists.values()):
        return None
    fig, axes = _grid(len(layout.facets), 1, 9, 2.6, sharex=True)
    for ax, facet in zip(axes[:, 0], layout.facets):
        members = layout.members(facet)
        width = 0.8 / max(1, len(members))
        for i, label in enumerate(members):
            h = hists[label]
            if not h:
                continue
            ks = np.array(sorted(h))
            n = np.array([h[k] for k in ks], dtype=float)
            ax.bar(
                ks + (i - (len(members) - 1) / 2) * width,
                n / n.sum(),
                width=width,
                color=layout.color(label),
                label=label,
            )
        ax.set_ylabel("fraction of\nconsumed groups", fontsize=8)
        ax.set_title(layout.facet_title(facet), fontsize=9, loc="left")
        ax.grid(alpha=0.3, axis="y")
    axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[-1, 0].set_xlabel("lag of a consumed group (versions)")
    fig.legend(
        handles=layout.color_handles(lw=6),
        loc="upper left",
        bbox_to_anchor=(1.0, 0.95),
        fontsize=7,
        title=layout.legend_title(),
        title_fontsize=7,
    )
    fig.tight_layout()
    _top_title(fig, f"Staleness distribution of all {len(layout.labels)} configurations, all seeds pooled", fontsize=10)
    _save(fig, path, formats)
    return Figure(
        path.stem,
        path,
        "Staleness distributions",
        "Lag of every consumed rollout group, all seeds pooled"
        + (f"; one panel per {', '.join(_short(k) for k in layout.facet_keys)}" if layout.facet_keys else "")
        + ".",
    )


@paused_cyclic_gc()
def summary_figure(
    results: pd.DataFrame,
    ttt: pd.DataFrame | None,
    layout: Layout,
    path: Path,
    formats=FORMATS,
    replicas: dict | None = None,
) -> Figure:
    """A dot plot of every configuration for any swept keys: the final outcome (mean over seeds with
    its 95% Student t-interval) and the time to target (mean with its 95% bootstrap interval,
    ``load_time_to_target``), the facet keys' values on x and one dot colour per value of the colour
    key, dodged sideways; small dots: each replica's final value (``replicas``: run id -> its
    :class:`sandbox.analysis.time_to_target.Curves`), so that a mean never hides a collapsed replica. A
    configuration that does not reach the target in every replica is an open marker at the top of its
    panel, named in the legend."""
    from scipy import stats

    rcol, _, log = reward_metric(results)
    groups = dict(_groups(results, layout.keys))
    facets = layout.facets
    xticks = [", ".join(f"{_short(k)}={v}" for k, v in zip(layout.facet_keys, f)) or "all" for f in facets]
    colour_values = list(layout.colors) or [None]
    width = 0.7 / max(1, len(colour_values))
    panels = [("final", metric_label(rcol))]
    ttt_by_label: dict[str, dict] = {}
    if ttt is not None and len(ttt) and "time_to_target" in ttt:
        for _, r in ttt.iterrows():
            vals = tuple(r[k] for k in layout.keys) if all(k in ttt for k in layout.keys) else None
            label = group_label(layout.keys, vals) if vals is not None else r.get("configuration")
            ttt_by_label[str(label)] = r.to_dict()
        panels.append(("ttt", "time to target (simulated s)"))
    panel_w = max(4.5, 0.35 * len(facets) * len(colour_values) + 2.0)
    # side by side while narrow, one above the other when wide
    fig, axes = (
        _grid(1, len(panels), panel_w, 4.0) if panel_w <= 7.5 else _grid(len(panels), 1, min(16.0, panel_w), 3.6)
    )
    axes = axes.reshape(1, -1)
    missed_drawn = False
    replica_dots, units = 0, set()
    for ax, (kind, ylabel) in zip(axes[0], panels):
        top = []
        points = []
        for label in layout.labels:
            facet = layout.facet(label)
            j = colour_values.index(layout.color_value(label)) if layout.color_key else 0
            x = facets.index(facet) + (j - (len(colour_values) - 1) / 2) * width
            if kind == "final":
                g = groups.get(label)
                y = g[rcol].dropna().to_numpy(dtype=float) if g is not None and rcol in g else np.array([])
                if not y.size:
                    continue
                m = float(y.mean())
                half = float(stats.t.ppf(0.975, y.size - 1) * y.std(ddof=1) / np.sqrt(y.size)) if y.size > 1 else 0.0
                lo, hi = m - half, m + half
            else:
                r = ttt_by_label.get(label)
                if r is None:
                    continue
                m = r.get("time_to_target")
                if m is None or not np.isfinite(float(m)):
                    points.append((x, None, None, None, label))
                    continue
                m = float(m)
                lo = float(r["time_to_target_ci_low"]) if r.get("time_to_target_ci_low") is not None else m
                hi = float(r["time_to_target_ci_high"]) if r.get("time_to_target_ci_high") is not None else m
            points.append((x, m, lo, hi, label))
            top.append(hi)
            if kind == "final":
                finals, unit = _replica_finals(groups.get(label), replicas, rcol)
                units.add(unit)
                if finals.size:
                    ax.plot(
                        np.full(finals.size, x + 0.12 * width),
                        finals,
                        ".",
                        ms=3,
                        color=layout.color(label),
                        alpha=0.6,
                        ls="none",
                        gid=f"replica-finals:{label}",
                    )
                    replica_dots += finals.size
        ymax = max(top) if top else 1.0
        for x, m, lo, hi, label in points:
            color = layout.color(label)
            if m is None:  # never reached in every replica: an open marker at the top
                ax.plot([x], [ymax * 1.08], marker="^", ms=7, mfc="none", mec=color, mew=1.5, ls="none")
                missed_drawn = True
                continue
            ax.errorbar([x], [m], yerr=[[max(0.0, m - lo)], [max(0.0, hi - m)]], fmt="o", color=color, capsize=3, ms=5)
        ax.set_xticks(range(len(facets)), xticks, fontsize=8)
        ax.set_xlim(-0.6, len(facets) - 0.4)
        ax.set_ylabel(ylabel.replace(" [", "\n["), fontsize=8)
        ax.set_xlabel(", ".join(_short(k) for k in layout.facet_keys) or "")
        ax.grid(alpha=0.3)
        if kind == "final" and log:
            ax.set_yscale("log")
        ax.set_title(
            "final value: mean, 95% t-interval over seeds"
            + (f"; small dots: each {' or '.join(sorted(units))}" if replica_dots else "")
            if kind == "final"
            else "time to target: mean, 95% bootstrap interval",
            fontsize=8,
        )
    handles = layout.color_handles(lw=0)
    for h in handles:
        h.set_marker("o")
    if missed_drawn:
        from matplotlib.lines import Line2D

        handles.append(
            Line2D([], [], ls="none", marker="^", mfc="none", mec="0.3", label="target not reached\nin every replica")
        )
    fig.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(1.0, 0.92),
        fontsize=7,
        title=layout.legend_title(),
        title_fontsize=7,
    )
    names = " x ".join(_short(k) for k in layout.facet_keys + ([layout.color_key] if layout.color_key else []))
    fig.tight_layout()
    _top_title(fig, f"Summary over {names or 'the sweep'}: all {len(layout.labels)} configurations", fontsize=10)
    _save(fig, path, formats)
    return Figure(
        path.stem,
        path,
        f"Summary: {names}",
        f"Per configuration: {rcol} (mean over seeds, 95% Student t-interval)"
        + (
            "; time to target (mean over seeds and replicas, 95% bootstrap interval; open triangles: not "
            "reached in every replica)"
            if len(panels) > 1
            else ""
        )
        + f". x: {', '.join(_short(k) for k in layout.facet_keys) or 'all runs'}; colour: {layout.legend_title() or 'configuration'}.",
    )


def _replica_finals(runs: pd.DataFrame | None, replicas: dict | None, rcol: str) -> tuple[np.ndarray, str]:
    """Each replica's final value (the mean of its last 10% of measurements) over the runs of one
    configuration, from their per-replica curves; without them for every run, each run's own final
    value (``rcol``). Returns the values and what one is ("replica" or "seed")."""
    if runs is None or rcol not in runs:
        return np.array([]), "seed"
    from sandbox.analysis.time_to_target import HEADLINE

    metric = {final: m for m, final, _ in HEADLINE}.get(rcol)
    curves = [(replicas or {}).get(rid) for rid in runs["id"]] if "id" in runs else [None]
    if all(c is not None and c.metric == metric for c in curves):
        finals, unit = np.array([v for c in curves for v in c.unit_finals()], dtype=float), "replica"
    else:
        finals, unit = runs[rcol].to_numpy(dtype=float), "seed"
    return finals[np.isfinite(finals)], unit


def _base_scenario(out: Path):
    from sandbox.scenario.load import ScenarioError, read_toml, validate_scenario

    try:
        return validate_scenario(read_toml(out / "base.toml"))
    except (ScenarioError, OSError):
        return None


__all__ = [
    "BOUNDARIES",
    "Figure",
    "Layout",
    "build_layout",
    "boundary",
    "delayed_sgd_boundary",
    "diagnostic_traces",
    "find_boundary",
    "heatmaps",
    "learning_curves",
    "numeric_axes",
    "reward_metric",
    "staleness_histograms",
    "summary_figure",
    "sweep_figures",
    "throughput_vs_staleness",
    "time_to_target_figure",
]
