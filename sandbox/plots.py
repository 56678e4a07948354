"""Default figures of a run: learning curves against simulated time and steps, the staleness
histogram, ESS and gradient-cosine traces, and a timeline of the workers and the learner."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .outputs import atomic_write  # noqa: E402


def _save(fig, path: Path) -> None:
    atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=110, bbox_inches="tight"))
    plt.close(fig)


def _reward_column(m) -> str:
    for name in ("eval/expected_reward", "reward/mean", "eval/loss", "loss"):
        if name in m and m[name].notna().any():
            return name
    return "loss"


def learning_curves(result, path: Path) -> None:
    m = result.metrics
    col = _reward_column(m)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, x, label in ((axes[0], "time", "simulated time (s)"), (axes[1], "step", "learner step")):
        d = m[[x, col]].dropna()
        ax.plot(d[x], d[col], lw=1.5)
        if col == "eval/loss" or col == "loss":
            ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel(col)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{result.scenario.title or 'run'}: {result.status}")
    _save(fig, path)


def staleness_histogram(result, path: Path) -> None:
    hist = result.summary.get("staleness_hist", {})
    fig, ax = plt.subplots(figsize=(5, 3.4))
    if hist:
        ks = sorted(hist)
        ax.bar(ks, [hist[k] for k in ks], color="tab:orange")
    ax.set_xlabel("lag of consumed groups (versions)")
    ax.set_ylabel("groups")
    ax.set_title(f"staleness: mean {result.summary.get('staleness_mean', float('nan')):.2f}")
    _save(fig, path)


def diagnostics_traces(result, path: Path) -> None:
    m = result.metrics
    panels = [c for c in ("is/ess_ratio", "grad/cos_prev", "grad/norm", "staleness/mean") if c in m]
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 1.9 * len(panels)), sharex=True, squeeze=False)
    for ax, c in zip(axes[:, 0], panels):
        ax.plot(m["step"], m[c], lw=1)
        ax.set_ylabel(c, fontsize=8)
        ax.grid(alpha=0.3)
        if c == "grad/norm":
            ax.set_yscale("log")
    axes[-1, 0].set_xlabel("learner step")
    _save(fig, path)


def timeline(result, path: Path, max_time: float | None = None) -> None:
    """Gantt chart: one row per worker (a bar per job, coloured by its lag when consumed) and a
    row for the learner (a bar per training step)."""
    jobs, ev = result.jobs, result.events
    if jobs.empty:
        return
    horizon = max_time or float(jobs.finish_time.max()) * 0.25 or 1.0
    fig, ax = plt.subplots(figsize=(10, 0.35 * (jobs.worker.max() + 3) + 1))
    cmap = plt.get_cmap("viridis")
    lag = (jobs.consume_step - jobs.head_version).where(jobs.consume_step >= 0, other=-1)
    maxlag = max(int(lag.max()), 1)
    for (_, j), lg in zip(jobs.iterrows(), lag):
        if j.dispatch_time > horizon:
            continue
        color = "lightgray" if lg < 0 else cmap(lg / maxlag)
        ax.broken_barh([(j.dispatch_time, j.finish_time - j.dispatch_time)], (j.worker - 0.4, 0.8), color=color, edgecolor="k", lw=0.3)
    starts = ev[ev.kind == "train_start"].time.to_numpy()
    ends = ev[ev.kind == "train_end"].time.to_numpy()
    row = jobs.worker.max() + 1.5
    for s, e in zip(starts, ends):
        if s <= horizon:
            ax.broken_barh([(s, e - s)], (row - 0.4, 0.8), color="tab:red")
    ax.set_yticks(list(range(int(jobs.worker.max()) + 1)) + [row])
    ax.set_yticklabels([f"worker {w}" for w in range(int(jobs.worker.max()) + 1)] + ["learner"])
    ax.set_xlim(0, horizon)
    ax.set_xlabel("simulated time (s); job colour = lag when consumed (grey: dropped/unused)")
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, maxlag))
    fig.colorbar(sm, ax=ax, label="lag")
    _save(fig, path)


def default_figures(result, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    figs = {
        "learning_curves.png": learning_curves,
        "staleness_hist.png": staleness_histogram,
        "diagnostics.png": diagnostics_traces,
        "timeline.png": timeline,
    }
    written = []
    for name, fn in figs.items():
        fn(result, out / name)
        written.append(out / name)
    return written


def comparison_figure(results: dict[str, object], path: Path, smooth: int = 5) -> None:
    """Variants side by side: reward against simulated time and against steps, and the signals
    said to announce trouble (ESS of the sequence weights, consecutive-gradient cosine, gradient
    norm), each smoothed with a rolling mean over ``smooth`` steps."""
    panels = [("is/ess_ratio", "ESS / N", False), ("grad/cos_prev", "cos(g_t, g_t-1)", False), ("grad/norm", "gradient norm", True)]
    fig, axes = plt.subplots(1, 5, figsize=(22, 3.6))
    for name, r in results.items():
        m = r.metrics
        col = _reward_column(m)
        d = m[["time", "step", col]].dropna()
        (line,) = axes[0].plot(d.time, d[col], label=name)
        axes[1].plot(d.step, d[col], color=line.get_color())
        axes[0].set_ylabel(col)
        for ax, (c, label, log) in zip(axes[2:], panels):
            if c in m:
                ax.plot(m.step, m[c].rolling(smooth, min_periods=1).mean(), color=line.get_color(), lw=1)
            ax.set_title(label, fontsize=9)
            if log:
                ax.set_yscale("log")
    axes[0].set_xlabel("simulated time (s)")
    for ax in axes[1:]:
        ax.set_xlabel("learner step")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    _save(fig, path)
