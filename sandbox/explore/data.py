"""Running the explorer's grid and reducing each run to the arrays the page draws.

Every float is rounded to 4 significant digits (the page is data: at most a few MB for the default
grid); an undefined value (a cosine with a zero gradient, a step without evaluation) is ``null``,
drawn as a gap. The same grid and seeds give the same dictionary, hence the same page bytes.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import torch

from sandbox.base import progress
from sandbox.explore.grid import (
    ENGINES,
    METHODS,
    TAILS,
    TASKS,
    Grid,
    Point,
    check_grid,
    estimate_grid,
    points,
    scenario,
)
from sandbox.run.runner import RunResult, run_scenario
from sandbox.scenario.budget import format_seconds

DIGITS = 4


def r4(x) -> float | None:
    """``x`` rounded to 4 significant digits; NaN and infinities become ``None`` (JSON null)."""
    x = float(x)
    if not math.isfinite(x):
        return None
    if x == 0.0:
        return 0.0
    return float(f"{x:.{DIGITS}g}")


def series(values) -> list:
    return [r4(v) for v in np.asarray(values, dtype=float)]


def _mean(m: pd.DataFrame, column: str) -> float | None:
    """The mean of a metric over the run's steps; ``None`` when the run has no such metric (the
    quadratic has no importance weights, so no ESS, clip or mask fraction)."""
    if column not in m:
        return None
    x = m[column].dropna()
    return r4(x.mean()) if len(x) else None


def headline(m: pd.DataFrame, score: str = "eval/expected_reward") -> dict:
    """The numbers the page prints for a run (its text alternative), from its metrics table: the
    final score, the means of ESS/N, lag and cosine, and what the method did: its mean LR scale, the
    fraction of tokens clipped (``clip/frac``) or masked (``mask/frac``), the fraction of steps
    skipped and of steps GAC projected (``gac/projected``), and the groups dropped by the staleness control (``system/dropped``, a running count)."""
    ev = m[score].dropna()
    cos = m["grad/cos_prev"].dropna()
    return {
        "final_reward": r4(ev.iloc[-1]) if len(ev) else None,
        "sim_time": r4(m["time"].iloc[-1]),
        "ess_mean": _mean(m, "is/ess_ratio"),
        "staleness_mean": r4(m["staleness/mean"].mean()),
        "cos_mean": r4(cos.mean()) if len(cos) else None,
        "cos_defined": int(len(cos)),
        "lr_scale": _mean(m, "lr/scale"),
        "clip_frac": _mean(m, "clip/frac"),
        "mask_frac": _mean(m, "mask/frac"),
        "skipped_frac": _mean(m, "step/skipped"),
        "projected_frac": _mean(m, "gac/projected"),
        "dropped": int(m["system/dropped"].iloc[-1]) if "system/dropped" in m else 0,  # a running count
    }


def replica_scores(res: RunResult, score: str) -> np.ndarray:
    """The score at the evaluated steps, one column per replica (steps x replicas)."""
    m = res.metrics
    rows = m[score].notna().to_numpy()
    rep = res.replica_metrics.get(score) if res.replica_metrics else None
    if rep is None:  # one replica: its column of the metrics table
        return m[score].to_numpy(dtype=float)[rows][:, None]
    return np.asarray(rep, dtype=float)[rows]


def time_to_target(times, scores: np.ndarray, target: float, higher: bool) -> list:
    """Per replica, the simulated time of the first evaluation at which the score reaches ``target``
    (``>=`` when higher is better, ``<=`` otherwise); ``None`` when it never does within the run."""
    out = []
    for r in range(scores.shape[1]):
        x = scores[:, r]
        hit = np.isfinite(x) & ((x >= target) if higher else (x <= target))
        out.append(r4(times[int(np.argmax(hit))]) if hit.any() else None)
    return out


def reduce_run(res: RunResult, grid: Grid) -> dict:
    """The arrays of one run the page draws."""
    m = res.metrics
    score, _, higher, target, _ = TASKS[grid.task]
    ev = m[["step", "time", score]].dropna()
    reps = replica_scores(res, score)
    hist = res.summary.get("staleness_hist", {}) or {}
    ev_log = res.events
    early = ev_log[ev_log["time"] <= grid.timeline_seconds]
    # per group: the lag it is consumed at (consume step minus the version it was sampled with, as the
    # staleness histogram counts it;
    # -1: not consumed within the run) and when; a dropped group is consumed never
    jobs = res.jobs
    lag_of = {
        int(j): int(c) - int(v) if c >= 0 else -1
        for j, c, v in jobs[["job", "consume_step", "head_version"]].itertuples(index=False)
    }
    consumed_at = {int(j): float(t) for j, t in jobs[["job", "consume_time"]].itertuples(index=False)}
    gen = []  # [worker, start, end, version, lag at consumption, consume time] of the generations in the window
    # keyed by (worker, job): a synchronous step spread over the fleet splits a group into parts on several
    # workers, each with its own dispatch/finish pair (docs/system.md#work-conserving-synchronous-steps)
    starts: dict[tuple[int, int], tuple[float, int]] = {}
    drops = []  # [worker, time, version] of the groups the lag bound dropped in the window
    for t, kind, worker, job, version in early[["time", "kind", "worker", "job", "version"]].itertuples(index=False):
        key = (int(worker), int(job))
        if kind == "dispatch":
            starts[key] = (float(t), int(version))
        elif kind == "finish" and key in starts:
            s, v = starts.pop(key)
            lag = lag_of.get(int(job), -1)
            gen.append([int(worker), r4(s), r4(t), v, lag, r4(consumed_at[int(job)]) if lag >= 0 else None])
        elif kind == "drop":
            drops.append([int(worker), r4(t), int(version)])
    for (w, _job), (s, v) in sorted(starts.items(), key=lambda kv: kv[1][0]):  # still generating at the window's end
        gen.append([w, r4(s), None, v, -1, None])
    train, t0 = [], None
    for t, kind in early[["time", "kind"]].itertuples(index=False):
        if kind == "train_start":
            t0 = float(t)
        elif kind == "train_end" and t0 is not None:
            train.append([r4(t0), r4(t)])
            t0 = None
    out = {
        "step": [int(s) for s in m["step"]],
        "time": series(m["time"]),
        "eval_step": [int(s) for s in ev["step"]],
        "eval_time": series(ev["time"]),
        "reward": series(ev[score]),
        "rep_reward": [series(reps[:, r]) for r in range(reps.shape[1])],
        "ttt": time_to_target(ev["time"].to_numpy(), reps, target, higher),
        # the run's own per-replica flags: the rule of sandbox/analysis/collapse.py (docs/explore.md)
        "collapsed": [bool(c) for c in res.summary["collapsed"]],
        "ess": series(m["is/ess_ratio"]) if "is/ess_ratio" in m else [None] * len(m),
        "cos": series(m["grad/cos_prev"]),
        "staleness": series(m["staleness/mean"]),
        "hist": [[int(k), int(v)] for k, v in sorted(hist.items())],
        "gen": gen,
        "drops": drops,
        "train": train,
        "headline": headline(m, score),
    }
    return out


def theory(grid: Grid) -> dict:
    """The closed forms the page overlays: the delayed-SGD critical step (T1) per lag, and the
    sequence ESS the engine's logit noise leaves at the initial policy (T12)."""
    from theory.delayed_stability import critical_step
    from theory.mismatch_ess import bernoulli_logit_noise, expected_kish_ess_fraction, two_logit_noise_sigma

    ks = list(range(0, max(grid.lags) + 1))
    out: dict = {"critical_step": [[k, r4(critical_step(k))] for k in ks], "ess_init": {}}
    if grid.task != "bitstring":
        return out
    scn = scenario(grid, Point(grid.tails[0], grid.engines[0], grid.lrs[0], "none", None))
    theta = float(scn.task.init_logit)
    n = grid.group_size * grid.groups_per_step
    for name in grid.engines:
        eng = ENGINES[name][0]
        if eng["name"] != "logit_noise":
            continue
        s = float(eng["scale"])
        per_token = bernoulli_logit_noise(theta, two_logit_noise_sigma(s, s))
        s2 = grid.horizon * math.log(per_token["second_moment"])  # log-normal sequence weight: E W^2 = m2^T
        out["ess_init"][name] = {
            "population": r4(math.exp(-s2)),
            "expected_kish": r4(expected_kish_ess_fraction(n, s2)),
            "n": n,
            "s2": r4(s2),
        }
    return out


def compute(grid: Grid, check: bool = True) -> dict:
    """Run every point of ``grid`` (after checking its estimate against the budget) and return the
    page's data: the axes, the labels, each run's arrays keyed by :attr:`Point.key`, the theory."""
    pts = points(grid)
    runs: dict[str, dict] = {}
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with progress.task("explorer: timing the first runs", total=min(2, len(pts)), unit="runs") as task:
            for p in pts[:2]:  # the first absorbs the start-up cost; the second is timed
                t0 = time.perf_counter()
                runs[p.key] = reduce_run(run_scenario(scenario(grid, p)), grid)
                seconds = time.perf_counter() - t0
                task.advance(info=p.key)
        est = (check_grid if check else estimate_grid)(grid, seconds, calibrate=min(1, len(pts) - 1))
        with progress.task(
            f"explorer runs (~{format_seconds(est.seconds)})", weights=est.per_run[2:], unit="runs"
        ) as task:
            for p in pts[2:]:
                runs[p.key] = reduce_run(run_scenario(scenario(grid, p)), grid)
                task.advance(info=p.key)
    finally:
        torch.set_num_threads(previous)
    score, score_label, higher, target, task_label = TASKS[grid.task]
    return {
        "task": grid.task,
        "score": {"column": score, "label": score_label, "higher": higher, "target": target, "log": not higher},
        "task_label": task_label,
        "axes": {
            "tails": list(grid.tails),
            "engines": list(grid.engines),
            "lags": list(grid.lags),
            "lrs": [r4(x) for x in grid.lrs],
            "methods": list(grid.methods),
        },
        "labels": {
            "tails": {k: TAILS[k][1] for k in grid.tails},
            "engines": {k: ENGINES[k][1] for k in grid.engines},
            "methods": {k: METHODS[k][2] for k in grid.methods},
        },
        "setup": {
            "steps": grid.steps,
            "replicas": grid.replicas,
            "horizon": grid.horizon,
            "workers": grid.num_workers,
            "group_size": grid.group_size,
            "groups_per_step": grid.groups_per_step,
            "train_time": grid.train_time,
            "seed": grid.seed,
            "timeline_seconds": grid.timeline_seconds,
            "task": grid.task,
        },
        "runs": runs,
        "theory": theory(grid),
    }


def compute_page(grids) -> dict:
    """The page's data for several tasks, in order (the first is the page's default)."""
    return {"tasks": [compute(g) for g in grids]}
