"""Default figures of a run: learning curves against simulated time and steps, the staleness
histogram, ESS and gradient-cosine traces, a timeline of the workers and the learner, and the
comparison of a scenario's variants.

Every figure has a title naming what it shows and for which scenario and variant, axis labels in
words with units (the raw metric name in brackets), and one colour per variant taken from the
Okabe-Ito palette (safe for the common colour-vision deficiencies; Okabe & Ito 2008, "Color
Universal Design"), so a variant has the same colour in every figure of a run. Each figure is
written in the formats a run asks for (``run.figure_formats``: PNG by default, SVG beside it for
papers; docs/runs.md); called directly, the functions here write both.
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.colors import BoundaryNorm, ListedColormap  # noqa: E402
from matplotlib.image import imsave  # noqa: E402
from matplotlib.layout_engine import PlaceHolderLayoutEngine  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from sandbox.base.gc_pause import paused_cyclic_gc  # noqa: E402
from sandbox.base.outputs import atomic_write  # noqa: E402

#: Okabe-Ito colours, black last (used for the 8th variant and reference lines).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
# every figure of the project draws its default colour cycle from the same palette
matplotlib.rcParams["axes.prop_cycle"] = matplotlib.cycler(color=list(PALETTE))
#: Formats a figure can be written in, and the default of the functions here: PNG for viewing,
#: SVG for papers. A run writes its ``run.figure_formats`` (by default PNG only).
FORMATS = ("png", "svg")
#: Resolution of the PNGs (dots per inch).
DPI = 110
#: zlib level of the PNGs: 3 encodes about twice as fast as Pillow's default 6 for files about 5%
#: larger (Pillow 13 ``PngImagePlugin``, ``compress_level``).
PNG_COMPRESS_LEVEL = 3
#: The timeline shows at most this many worker rows (the first ones); the title says when it is cut.
TIMELINE_MAX_WORKERS = 32

#: Metric name -> what the axis says (words and unit); the raw name is added in brackets.
METRIC_LABELS = {
    "eval/expected_reward": "expected reward (exact, eval)",
    "reward/mean": "mean reward of the batch",
    "eval/loss": "loss (eval)",
    "loss": "training loss",
    "is/ess_ratio": "ESS / N",
    "grad/cos_prev": "cosine with previous gradient",
    "grad/norm": "gradient norm",
    "staleness/mean": "mean lag (versions)",
    "final_expected_reward": "final expected reward (exact)",
    "final_reward": "final mean reward of the batch",
    "final_loss": "final loss",
}


def metric_label(name: str) -> str:
    """``"ESS / N [is/ess_ratio]"``: the metric in words, then its name as logged."""
    words = METRIC_LABELS.get(name)
    return f"{words} [{name}]" if words else name


def run_formats(scenarios) -> list[str]:
    """The figure formats of a run of several scenarios (a scenario's variants): every format one
    of them asks for in ``run.figure_formats``, in :data:`FORMATS` order."""
    asked = {f for scn in scenarios for f in scn.run.figure_formats}
    return [f for f in FORMATS if f in asked]


def variant_colors(labels) -> dict[str, str]:
    """One palette colour per variant label, in the order given (the scenario's variant order)."""
    return {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(labels)}


def _tight_bbox(fig, renderer):
    """The box ``savefig(..., bbox_inches="tight")`` crops to, in inches and not yet padded,
    measured with ``renderer`` (matplotlib 3.11 ``FigureCanvasBase.print_figure``)."""
    return fig.get_tightbbox(renderer)


#: Pixels between the canvas's border and anything drawn for :func:`_png_crop` to cut the PNG
#: (an antialiased line spills about a pixel past its extent, which the canvas would clip).
EDGE = 2


def _png_crop(fig, tight) -> np.ndarray | None:
    """The pixels ``savefig(..., bbox_inches=box)`` writes, with ``box`` = ``tight`` padded by
    ``savefig.pad_inches``, cut from the figure just drawn on its Agg canvas; ``None`` when
    something drawn comes within ``EDGE`` pixels of the canvas's border or past it (the canvas
    clipped it: only ``savefig`` can draw it whole then). Where the padding
    reaches past the canvas it is the figure's face colour, as in ``savefig``. The cut starts on
    the nearest whole pixel, so the content sits at most half a pixel from where ``savefig`` puts
    it; the size is the one ``savefig`` gives (its Agg renderer truncates the box's pixel size)."""
    buf = np.asarray(fig.canvas.buffer_rgba())
    height, width = buf.shape[:2]
    x0, y0, x1, y1 = (v * fig.dpi for v in tight.extents)
    if x0 < EDGE or y0 < EDGE or x1 > width - EDGE or y1 > height - EDGE:
        return None
    box = tight.padded(plt.rcParams["savefig.pad_inches"])
    w, h = (int(v * fig.dpi + 1e-6) for v in (box.width, box.height))  # 538.9999… is 539 px
    left, top = round(box.x0 * fig.dpi), round(height - box.y0 * fig.dpi - h)
    if left >= 0 and top >= 0 and left + w <= width and top + h <= height:
        return buf[top : top + h, left : left + w]
    out = np.empty((h, w, 4), np.uint8)
    out[:] = np.round(np.array(matplotlib.colors.to_rgba(fig.get_facecolor())) * 255).astype(np.uint8)
    r0, c0 = max(top, 0), max(left, 0)
    r1, c1 = min(top + h, height), min(left + w, width)
    out[r0 - top : r1 - top, c0 - left : c1 - left] = buf[r0:r1, c0:c1]
    return out


def _save(fig, path: Path, formats=FORMATS) -> None:
    """Write the figure as ``path`` with the suffix of each of ``formats`` (a subset of
    :data:`FORMATS`), every file cropped to the same tight box, then close it.

    The PNG is the figure drawn once on its Agg canvas at :data:`DPI` and cropped to the tight box
    measured on that same draw: one draw and one text layout per figure, where ``savefig(...,
    bbox_inches=box)`` would lay the figure out and draw it again at the cropped size (text
    metrics are cached per renderer, so the second renderer measures every label again)."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"figure formats must be a non-empty subset of {list(FORMATS)}, got {list(formats)}")
    if isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):
        # left by tight_layout(); it does nothing, but would make savefig lay the figure out again
        fig.set_layout_engine(None)
    fig.set_dpi(DPI)
    fig.canvas.draw()
    tight = _tight_bbox(fig, fig.canvas.get_renderer())
    bbox = tight.padded(plt.rcParams["savefig.pad_inches"])
    png = {"compress_level": PNG_COMPRESS_LEVEL}
    for fmt in dict.fromkeys(formats):
        target = path.with_suffix(f".{fmt}")
        crop = _png_crop(fig, tight) if fmt == "png" else None
        if crop is not None:
            # what FigureCanvasAgg.print_png writes (matplotlib 3.11), from the cropped pixels
            atomic_write(
                target, lambda p, crop=crop: imsave(p, crop, format="png", origin="upper", dpi=DPI, pil_kwargs=png)
            )
            continue
        # SVG: no creation date and element ids from a fixed salt, so a figure is the same bytes every run
        kwargs = {"pil_kwargs": png} if fmt == "png" else {"metadata": {"Date": None}}
        with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "async-rl-sandbox"}):  # SVG text stays text
            atomic_write(
                target, lambda p, fmt=fmt, kw=kwargs: fig.savefig(p, format=fmt, dpi=DPI, bbox_inches=bbox, **kw)
            )
    plt.close(fig)


def warm_up() -> None:
    """Load what a process's first figure loads (matplotlib's Agg backend, the default font and its
    metrics, Pillow's PNG encoder) by drawing a one-inch figure into memory: called once before
    figures are drawn in forked worker processes (:mod:`sandbox.base.figure_worker`), so that each of them
    does not load it again (about a fifth of a quickstart variant's figure time). Changes no byte of
    any figure: only caches are filled."""
    fig, ax = plt.subplots(figsize=(1, 1), dpi=DPI)
    ax.set_title("warm-up")
    fig.canvas.draw()
    imsave(
        io.BytesIO(),
        np.asarray(fig.canvas.buffer_rgba()),
        format="png",
        origin="upper",
        dpi=DPI,
        pil_kwargs={"compress_level": PNG_COMPRESS_LEVEL},
    )
    plt.close(fig)


def _reward_column(m) -> str:
    for name in ("eval/expected_reward", "reward/mean", "eval/loss", "loss"):
        if name in m and m[name].notna().any():
            return name
    return "loss"


def _name(result, label: str) -> str:
    """``"scenario title — variant"`` (either part alone when the other is empty)."""
    parts = [p for p in (result.scenario.title, label) if p]
    return " — ".join(parts) or "run"


def _replica_zero(result) -> str:
    """ ", replica 0 of R" when each replica ran under its own schedule: the jobs table and the event
    log are then replica 0's (docs/system.md#independent-schedules)."""
    if getattr(getattr(result.scenario, "run", None), "schedules", "shared") != "independent":
        return ""
    replicas = len(result.diverged_at)
    return f"; replica 0's schedule of {replicas}" if replicas > 1 else ""


def replica_lines(ax, result, col: str, x: str, color: str, label: str | None = None) -> int:
    """Each replica's ``col`` as a thin line against ``x`` (``time``: its own clock under independent
    schedules, ``step``), so that a mean over replicas never hides one; returns how many were drawn
    (0 with a single replica or no per-replica values)."""
    rm = {k.replace("/", "__"): v for k, v in (getattr(result, "replica_metrics", None) or {}).items()}
    vals = rm.get(col.replace("/", "__"))
    m = result.metrics
    if vals is None or np.ndim(vals) != 2 or vals.shape[1] < 2 or len(vals) != len(m):
        return 0
    R = vals.shape[1]
    own = rm.get("time") if x == "time" else None
    xs = (
        own if own is not None and np.shape(own) == vals.shape else np.repeat(m[x].to_numpy(dtype=float)[:, None], R, 1)
    )
    for r in range(R):
        ok = np.isfinite(vals[:, r]) & np.isfinite(xs[:, r])
        ax.plot(xs[ok, r], vals[ok, r], lw=0.6, alpha=0.5, color=color, label=label if r == 0 else None)
    return R


def collapsed_note(result) -> str:
    """ "k/R replicas collapsed" from the summary (docs/time_to_target.md#collapse), or ""."""
    s = getattr(result, "summary", None) or {}
    k, R = s.get("collapsed_replicas"), s.get("replicas")
    return f"{k}/{R} replicas collapsed" if k is not None and R and R > 1 else ""


@paused_cyclic_gc()
def learning_curves(result, path: Path, label: str = "", color: str = PALETTE[0], formats=FORMATS) -> None:
    m = result.metrics
    col = _reward_column(m)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True, dpi=DPI)
    for ax, x, xlabel in ((axes[0], "time", "simulated time (s)"), (axes[1], "step", "learner step")):
        d = m[[x, col]].dropna()
        R = replica_lines(ax, result, col, x, color, label="each replica")
        ax.plot(
            d[x],
            d[col],
            lw=1.5,
            color=color,
            label=f"{label or 'run'}: mean of {R} replicas" if R else (label or "run"),
        )
        if col in ("eval/loss", "loss"):
            ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(metric_label(col).replace(" [", "\n["))
    axes[0].legend(fontsize=8, loc="best")
    status = (getattr(result, "summary", None) or {}).get("status", result.status)  # with the growth rule's divergence
    note = collapsed_note(result)
    fig.suptitle(f"Learning curve ({status}{'; ' + note if note else ''})\n{_name(result, label)}", fontsize=10)
    fig.tight_layout()
    _save(fig, path, formats)


@paused_cyclic_gc()
def staleness_histogram(result, path: Path, label: str = "", color: str = PALETTE[0], formats=FORMATS) -> None:
    hist = result.summary.get("staleness_hist", {})
    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=DPI)
    if hist:
        ks = sorted(hist)
        ax.bar(ks, [hist[k] for k in ks], color=color, label=label or "run")
        ax.legend(fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("lag of a consumed group (versions)")
    ax.set_ylabel("groups consumed")
    mean = result.summary.get("staleness_mean", float("nan"))
    ax.set_title(
        f"Staleness of consumed groups (mean lag {mean:.2f} versions{_replica_zero(result)})\n{_name(result, label)}",
        fontsize=9,
    )
    fig.tight_layout()  # the axis label would hang below the canvas: _save could not cut the PNG from one draw
    _save(fig, path, formats)


@paused_cyclic_gc()
def diagnostics_traces(result, path: Path, label: str = "", color: str = PALETTE[0], formats=FORMATS) -> None:
    m = result.metrics
    panels = [c for c in ("is/ess_ratio", "grad/cos_prev", "grad/norm", "staleness/mean") if c in m]
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(7.5, 1.9 * len(panels) + 0.8), sharex=True, squeeze=False, dpi=DPI
    )
    for ax, c in zip(axes[:, 0], panels):
        y = m[c]
        if c == "grad/norm":
            zeros = int((y <= 0).sum())
            y = y.where(y > 0)  # a log axis cannot show a zero gradient: leave a gap and say how many
            ax.set_yscale("log")
            if zeros:
                ax.text(
                    0.99,
                    0.95,
                    f"{zeros} steps with a zero gradient not drawn",
                    transform=ax.transAxes,
                    ha="right",
                    va="top",
                    fontsize=7,
                )
        ax.plot(m["step"], y, lw=1, color=color, label=label or "run")
        if c == "is/ess_ratio":
            ax.set_ylim(0, 1.05)
        elif c == "grad/cos_prev":
            undefined = int(y.isna().sum())
            if undefined:
                ax.text(
                    0.99,
                    0.05,
                    f"{undefined} steps without a defined cosine (no previous or a zero gradient): gaps",
                    transform=ax.transAxes,
                    ha="right",
                    va="bottom",
                    fontsize=7,
                )
            ax.set_ylim(min(-0.1, float(np.nanmin(y)) - 0.05) if y.notna().any() else -0.1, 1.05)
            ax.axhline(0, color="k", lw=0.6)
        ax.set_ylabel(metric_label(c).replace(" [", "\n["), fontsize=8)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8, loc="lower right")
    axes[-1, 0].set_xlabel("learner step")
    fig.suptitle(f"Diagnostics per learner step\n{_name(result, label)}", fontsize=10)
    fig.tight_layout()
    _save(fig, path, formats)


@paused_cyclic_gc()
def _parts_as_jobs(jobs, ev):
    """The jobs table with a group split over several workers (a work-conserving synchronous step,
    docs/system.md#work-conserving-synchronous-steps) replaced by one row per part, from the event log's
    ``dispatch``/``finish`` pairs (same job id, the part's worker); the jobs table itself when no group
    was split."""
    import pandas as pd

    if ev is None or ev.empty:
        return jobs
    disp = ev[ev.kind == "dispatch"]
    if len(disp) <= len(jobs):
        return jobs
    fin = ev[ev.kind == "finish"][["worker", "job", "time"]].rename(columns={"time": "finish_time"})
    parts = disp[["worker", "job", "time"]].rename(columns={"time": "dispatch_time"})
    # the n-th dispatch of a (worker, job) pairs with its n-th finish (a worker may run two parts of a group)
    parts["n"] = parts.groupby(["worker", "job"]).cumcount()
    fin["n"] = fin.groupby(["worker", "job"]).cumcount()
    parts = parts.merge(fin, on=["worker", "job", "n"], how="left").drop(columns="n")
    rest = jobs.drop(columns=["worker", "dispatch_time", "finish_time"])
    return pd.merge(parts, rest, on="job", how="left")


def timeline(result, path: Path, max_time: float | None = None, label: str = "", formats=FORMATS) -> None:
    """Gantt chart: one row per worker (a bar per job, or per part of a split group, coloured by its lag when consumed; hatched
    when it was dropped, white when it was never consumed before the run ended) and a row for the
    learner (a bar per training step). It shows the first quarter of the run (or ``max_time``
    seconds) and at most :data:`TIMELINE_MAX_WORKERS` workers; the title says so."""
    jobs, ev = result.jobs, result.events
    if jobs.empty:
        return
    jobs = _parts_as_jobs(jobs, ev)
    end = float(jobs.finish_time.max())
    horizon = max_time or end * 0.25 or 1.0
    n_workers = int(jobs.worker.max()) + 1
    shown = min(n_workers, TIMELINE_MAX_WORKERS)
    j = jobs[(jobs.dispatch_time <= horizon) & (jobs.worker < shown)]
    consumed = (j.consume_step >= 0).to_numpy()
    dropped = (~consumed) & (j.dropped_at.fillna(-1) >= 0).to_numpy()
    lag = (j.consume_step - j.head_version).to_numpy()
    maxlag = int(max(lag[consumed].max() if consumed.any() else 0, 1))

    # discrete colours: one per integer lag, so the colour bar's ticks are the lags themselves
    cmap = ListedColormap(plt.get_cmap("viridis")(np.linspace(0, 1, maxlag + 1)))
    norm = BoundaryNorm(np.arange(-0.5, maxlag + 1.5), cmap.N)
    x0, x1 = j.dispatch_time.to_numpy(), j.finish_time.to_numpy()
    y = j.worker.to_numpy()
    boxes = np.stack(
        [
            np.stack([x0, y - 0.4], 1),
            np.stack([x1, y - 0.4], 1),
            np.stack([x1, y + 0.4], 1),
            np.stack([x0, y + 0.4], 1),
        ],
        1,
    )
    fig, ax = plt.subplots(figsize=(10, 0.3 * (shown + 2) + 1.6), dpi=DPI)
    faces = np.where(consumed[:, None], cmap(norm(np.where(consumed, lag, 0)))[:, :4], 1.0)
    faces[dropped] = matplotlib.colors.to_rgba("#bbbbbb")
    ax.add_collection(PolyCollection(boxes[~dropped], facecolors=faces[~dropped], edgecolors="k", linewidths=0.3))
    if dropped.any():
        ax.add_collection(
            PolyCollection(boxes[dropped], facecolors=faces[dropped], edgecolors="k", linewidths=0.3, hatch="///")
        )
    starts = ev[ev.kind == "train_start"].time.to_numpy()
    ends = ev[ev.kind == "train_end"].time.to_numpy()[: len(starts)]
    keep = starts[: len(ends)] <= horizon
    row = shown + 0.5
    s, e = starts[: len(ends)][keep], ends[keep]
    learner = np.stack(
        [
            np.stack([s, np.full_like(s, row - 0.4)], 1),
            np.stack([e, np.full_like(s, row - 0.4)], 1),
            np.stack([e, np.full_like(s, row + 0.4)], 1),
            np.stack([s, np.full_like(s, row + 0.4)], 1),
        ],
        1,
    )
    ax.add_collection(PolyCollection(learner, facecolors=PALETTE[5], edgecolors="none"))
    ax.set_yticks(list(range(shown)) + [row])
    ax.set_yticklabels([f"worker {w}" for w in range(shown)] + ["learner (training)"], fontsize=8)
    ax.set_xlim(0, horizon)
    ax.set_ylim(-0.8, row + 1.9)  # the top band holds the legend
    ax.set_xlabel("simulated time (s)")
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=norm)
    cb = fig.colorbar(sm, ax=ax, ticks=range(maxlag + 1), pad=0.01)
    cb.set_label("lag when consumed (versions)")
    ax.legend(
        handles=[
            Patch(facecolor="#bbbbbb", edgecolor="k", hatch="///", label="dropped (too stale)"),
            Patch(facecolor="white", edgecolor="k", label="not consumed before the run ended"),
        ],
        loc="upper right",
        ncol=2,
        fontsize=8,
        framealpha=0.9,
    )
    cut = f"first {horizon:.3g} s of {end:.3g} s"
    if shown < n_workers:
        cut += f", workers 0–{shown - 1} of {n_workers}"
    cut += _replica_zero(result)
    ax.set_title(f"Timeline of jobs and training steps ({cut})\n{_name(result, label)}", fontsize=10)
    _save(fig, path, formats)


@paused_cyclic_gc()
def mismatch_split(result, path: Path, label: str = "", formats=FORMATS) -> None:
    """Off-policyness of the learner's ratio split into the engine's mismatch (π_v vs μ) and staleness
    (π_θ vs π_v) per learner step: per-token k3 KL and mean token-probability gap, and the mismatch
    k3 KL per response-length bucket over the run (``docs/engines.md#metrics``)."""
    m = result.metrics
    parts = (
        ("mismatch", "mismatch: sampler version π_v vs engine μ", PALETTE[5]),
        ("staleness", "staleness: learner π_θ vs sampler version π_v", PALETTE[0]),
    )
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.9), dpi=DPI, gridspec_kw={"width_ratios": [1.2, 1.2, 0.8]})
    for ax, key, ylabel in (
        (axes[0], "kl_k3", "per-token k3 KL (nats)"),
        (axes[1], "prob_gap_mean", "mean |p − p'| of sampled tokens"),
    ):
        zeros = []
        for prefix, name, color in parts:
            col = f"{prefix}/{key}"
            if col in m:
                y = m[col].where(m[col] > 0)  # a log axis cannot show 0: a gap, and a note below
                ax.plot(m["step"], y, lw=1.3, color=color, label=name)
                n0 = int((m[col] <= 0).sum())
                if n0:
                    zeros.append(f"{prefix} = 0 at {n0} of {int(m[col].notna().sum())} steps (not drawn)")
        if zeros:
            ax.text(0.01, 0.02, "\n".join(zeros), transform=ax.transAxes, ha="left", va="bottom", fontsize=7)
        if key == "kl_k3" and "rollout_corr/k3_kl" in m:
            ax.plot(
                m["step"],
                m["rollout_corr/k3_kl"].where(m["rollout_corr/k3_kl"] > 0),
                lw=1.0,
                ls="--",
                color=PALETTE[7],
                label="total: π_θ vs μ (verl rollout_corr/k3_kl)",
            )
        ax.set_yscale("log")
        ax.set_xlabel("learner step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    buckets = [f"mismatch/kl_k3_len{j}" for j in range(1, 5)]
    ax = axes[2]
    if all(b in m for b in buckets):
        vals = [float(np.nanmean(m[b])) if m[b].notna().any() else float("nan") for b in buckets]
        ax.bar(range(4), vals, color=PALETTE[5], label="mismatch, mean over steps")
        for j, v in enumerate(vals):
            if not np.isfinite(v):
                ax.text(j, 0, "no\nresponses", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(4), ["≤ 1/4", "1/4–1/2", "1/2–3/4", "> 3/4"])
        ax.legend(fontsize=7, loc="upper left")
    ax.set_xlabel("response length (fraction of the longest)")
    ax.set_ylabel("per-token k3 KL (nats)")
    ax.grid(alpha=0.3, axis="y")
    engine = getattr(getattr(result.scenario, "engine", None), "name", "?")
    fig.suptitle(f"Mismatch vs staleness in the learner's ratio (engine {engine})\n{_name(result, label)}", fontsize=10)
    fig.tight_layout()
    _save(fig, path, formats)


def default_figures(result, out: Path, label: str = "", color: str | None = None, formats=FORMATS) -> list[Path]:
    """Draw the four per-run figures (five with a rollout engine that is not exact: :func:`mismatch_split`) into ``out`` in each of ``formats`` (a run passes its
    ``run.figure_formats``); ``label`` names the variant in titles and legends and ``color`` is its
    colour in the run's :func:`comparison_figure`. Returns the PNG paths."""
    out.mkdir(parents=True, exist_ok=True)
    color = color or PALETTE[0]
    written = []
    for name, fn, kw in (
        ("learning_curves.png", learning_curves, {"color": color}),
        ("staleness_hist.png", staleness_histogram, {"color": color}),
        ("diagnostics.png", diagnostics_traces, {"color": color}),
        ("timeline.png", timeline, {}),
    ):
        fn(result, out / name, label=label, formats=formats, **kw)
        written.append(out / name)
    if "mismatch/kl_k3" in result.metrics:  # an engine that is not exact (docs/engines.md#metrics)
        mismatch_split(result, out / "mismatch.png", label=label, formats=formats)
        written.append(out / "mismatch.png")
    return written


@paused_cyclic_gc()
def comparison_figure(
    results: dict[str, object], path: Path, smooth: int = 5, title: str = "", formats=FORMATS
) -> None:
    """Variants side by side: reward against simulated time and against steps, and the signals
    said to announce trouble (ESS of the sequence weights, consecutive-gradient cosine, gradient
    norm), each smoothed with a rolling mean over ``smooth`` steps. Ratios (ESS / N) start at 0 so
    that a small dip looks small; the cosine axis includes 0."""
    panels = [
        ("is/ess_ratio", "ESS / N", "lin"),
        ("grad/cos_prev", "cosine with previous gradient", "lin"),
        ("grad/norm", "gradient norm", "log"),
    ]
    colors = variant_colors(results)
    fig, grid = plt.subplots(2, 3, figsize=(15, 7.6), dpi=DPI)
    axes = [grid[0, 0], grid[0, 1], grid[1, 0], grid[1, 1], grid[1, 2]]  # grid[0, 2] holds the legend
    col = "loss"
    for name, r in results.items():
        m = r.metrics
        col = _reward_column(m)
        d = m[["time", "step", col]].dropna()
        replica_lines(axes[0], r, col, "time", colors[name])
        replica_lines(axes[1], r, col, "step", colors[name])
        note = collapsed_note(r)
        axes[0].plot(d.time, d[col], label=f"{name} ({note})" if note else name, color=colors[name])
        axes[1].plot(d.step, d[col], color=colors[name])
        for ax, (c, _, scale) in zip(axes[2:], panels):
            if c in m:
                y = m[c].where(m[c] > 0) if scale == "log" else m[c]
                ax.plot(m.step, y.rolling(smooth, min_periods=1).mean(), color=colors[name], lw=1)
    axes[0].set_ylabel(metric_label(col).replace(" [", "\n["))
    axes[0].set_title("reward against simulated time (mean; thin: each replica)", fontsize=9)
    axes[1].set_title("reward against learner steps (mean; thin: each replica)", fontsize=9)
    axes[0].set_xlabel("simulated time (s)")
    for ax, (c, words, scale) in zip(axes[2:], panels):
        ax.set_title(f"{words} (rolling mean of {smooth} steps)", fontsize=9)
        ax.set_ylabel(metric_label(c), fontsize=8)
        if scale == "log":
            ax.set_yscale("log")
    axes[2].set_ylim(0, 1.05)
    axes[3].set_ylim(top=1.05)
    if axes[3].get_ylim()[0] > -0.1:
        axes[3].set_ylim(bottom=-0.1)
    axes[3].axhline(0, color="k", lw=0.6)
    for ax in axes[1:]:
        ax.set_xlabel("learner step")
    for ax in axes:
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    grid[0, 2].axis("off")
    grid[0, 2].legend(handles, labels, loc="center", fontsize=10, title="variant", title_fontsize=10)
    fig.suptitle(f"Variants compared: {title}" if title else "Variants compared", fontsize=12)
    fig.tight_layout()
    _save(fig, path, formats)
