"""``sandbox preflight CONFIG --framework F [--quick]``: a bounded set of simulations around an imported
GPU config (:mod:`sandbox.importers`) on a proxy task, one answer per question of issue 31, with an
interval over seeds. Guide: ``docs/preflight.md``.

The plan (:func:`make_plan`) lays out the runs; :func:`estimate_plan` prices them with
:func:`sandbox.budget.estimate` before any runs, and :func:`check_plan` refuses a plan over the budget
naming the option that shrinks it. Seeds are the replicas of one run (``task.replicas`` = seeds,
``run.schedules = "independent"``: replica r is bitwise the separate run of seed ``run.seed + r``,
docs/system.md#independent-schedules).

Verdicts (per cell, over the seeds):

* a seed **collapses** when its replica diverged (a hard limit of the learner) or when its final exact
  expected reward ``eval/expected_reward`` is more than :data:`COLLAPSE_DROP` below that seed's running
  maximum (the reward-collapse rule of the VCPO claim, ``sandbox/claims/vcpo.py``, applied to the exact
  evaluation instead of the batch mean);
* **unsafe**: at least half the seeds collapse; **at risk**: at least one collapses; **safe** otherwise.
  A cell whose mean final reward is more than :data:`REWARD_MARGIN` below the reference cell's (your
  bound at ×1) is marked *slower* (it learns less in the proxy's steps; that is not instability). The collapse rate's interval is Wilson's 95% score interval (Wilson 1927) over the seeds.

Q1's theory overlay is the delayed-gradient-descent critical step (T1, Levin & May 1976;
``theory.delayed_stability.critical_step``): a*(τ) = 2 sin(π/(4τ+2)) for x_{t+1} = x_t − a x_{t−τ}. Only
its *shape* transfers to an Adam-trained policy: the overlay is m*(k) = m₀ · a*(k)/a*(k₀), anchored at the
largest multiplier m₀ measured safe at the smallest bound k₀ of the map.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from theory.delayed_stability import critical_step

from . import progress
from .budget import estimate, format_seconds
from .preflight_system import Facts, SystemPlan, make_system_plan, run_system_plan
from .runner import run_scenario
from .scenario import validate_scenario
from .system.staleness import CONTROLS

COLLAPSE_DROP = 0.2
"""A seed collapses when its final expected reward is this far below its running maximum."""
REWARD_MARGIN = 0.1
"""'at risk' when the mean final reward is this far below the reference cell's."""
QUICK = {"seeds": 4, "steps": 60, "budget": 120.0, "mults": (1.0, 10.0, 100.0, 1000.0), "bound_factors": (1, 4, 16)}
FULL = {"seeds": 8, "steps": 80, "budget": 600.0, "mults": (0.5, 1.0, 4.0, 16.0, 64.0, 256.0, 1000.0), "bound_factors": (1, 2, 4, 8, 16)}
#: Q2's alternatives to the user's correction (scenario correction tables).
ALTERNATIVES: dict[str, dict] = {
    "none": {"name": "none"},
    "tis (sequence, C=8)": {"name": "tis", "level": "sequence", "C": 8.0},
    "m2po_mask": {"name": "m2po_mask"},
}
Q6_STEPS = 20
#: Q5 on the LM proxy (default budget; ``--quick`` keeps the bit-string task): the LM proxy's batch of 8
#: prompts, your group size up to 16, at most 60 steps, every seed a replica with the shared schedule (the
#: lag is fixed at your bound, so the schedule cannot differ between seeds: docs/preflight.md).
LM_Q5 = {"groups_per_step": 8, "max_group_size": 16, "steps": 60}
LM_REPLICA_STEP_S = 0.17
"""Wall seconds per LM replica and step (the shipped lm_mission's 8 x 8 batch: 3 seeds x 7 runs x 200 steps in
about 6 minutes with 2 processes on 2 cores); the budget estimate of the LM counts replicas as batched, so
a preflight prices an LM run at ``max(estimate, this x replicas x steps)``."""
PROXY_NAMES = {"bitstring": "bit-string proxy", "lm": "LM proxy"}
#: Q5's engine when the imported scenario has none: logit noise on the bit-string policy's logits
#: (docs/engines.md#logit_noise); its size is a modelling choice, not a measurement of the user's engine.
Q5_ENGINE = {"name": "logit_noise", "scale": 0.05}
#: Per framework, its own names of the metrics the sandbox computes (docs/engines.md#metrics); the
#: sandbox's ``mismatch/*`` and ``staleness/*`` parts are always reported beside them.
FRAMEWORK_METRICS: dict[str, tuple[str, ...]] = {
    "verl": ("rollout_corr/kl", "rollout_corr/k3_kl", "rollout_corr/log_ppl_abs_diff", "rollout_corr/chi2_token"),
    "verl-vcpo": ("rollout_corr/kl", "rollout_corr/k3_kl", "rollout_corr/log_ppl_abs_diff", "rollout_corr/chi2_token"),
    "trl": ("sampling/sampling_logp_difference/mean", "sampling/importance_sampling_ratio/mean"),
    "prime-rl": ("mismatch_kl/all/mean",),
}
SANDBOX_METRICS = ("mismatch/kl_k3", "staleness/kl_k3", "mismatch/prob_gap_mean", "staleness/prob_gap_mean")
BUCKETS = tuple(f"mismatch/kl_k3_len{i}" for i in range(1, 5))


class PreflightError(ValueError):
    """A plan that cannot run (over its budget, or an option out of range); the message names the option."""


@dataclass
class Job:
    question: str
    label: str
    data: dict
    bound: int = 0
    mult: float = 1.0
    correction: str = ""
    seconds: float = 0.0


@dataclass
class Plan:
    quick: bool
    seeds: int
    steps: int
    budget: float
    user_bound: int
    user_correction: str
    lr: float
    mult: float
    framework: str = ""
    jobs: list[Job] = field(default_factory=list)
    facts: Facts | None = None
    system: SystemPlan | None = None

    @property
    def seconds(self) -> float:
        return sum(j.seconds for j in self.jobs) + (self.system.seconds if self.system else 0.0)

    @property
    def runs(self) -> int:
        """Simulations: the learning runs (each over every seed at once) and the system-only split runs."""
        return len(self.jobs) + (self.system.runs if self.system else 0)


def user_bound(staleness: dict) -> int:
    """The user's lag bound in versions, as the scenario's staleness control declares it: 0 when it is
    synchronous, its fixed lag, else its bound when that is a lag (an integer) and 1 otherwise (a
    ratio, or no bound)."""
    control = CONTROLS[staleness.get("kind", "sync")].config.model_validate(staleness)
    if control.is_synchronous():
        return 0
    if (lag := control.fixed_lag()) is not None:
        return lag
    bound = getattr(control, control.bound_field) if control.bound_field else None
    return bound if isinstance(bound, int) else 1


def correction_name(corr: dict) -> str:
    name = corr.get("name", "none")
    extra = ", ".join(f"{k}={v}" for k, v in corr.items() if k != "name")
    return f"{name} ({extra})" if extra else name


def _scenario_data(base: dict, seeds: int, steps: int, staleness: dict, lr: float, correction: dict | None = None) -> dict:
    d = copy.deepcopy(base)
    d["task"]["replicas"] = seeds
    d["run"]["schedules"] = "independent"
    d["run"]["steps"] = steps
    d["run"]["eval_every"] = min(int(d["run"].get("eval_every", 5)), 5)
    d["system"]["staleness"] = staleness
    d["algorithm"]["optimizer"]["lr"] = lr
    if correction is not None:
        d["algorithm"]["correction"] = correction
    return d


def fixed_lag(k: int) -> dict:
    return {"kind": "sync"} if k == 0 else {"kind": "fixed_lag", "k": k}


def make_plan(data: dict, quick: bool = True, seeds: int | None = None, lr_mult: float = 1.0,
              budget: float | None = None, framework: str = "", facts: Facts | None = None,
              lm_data: dict | None = None) -> Plan:
    """The runs of a preflight of the imported scenario ``data`` (its TOML as a dict); ``facts``: the
    cluster facts of Q3/Q4/Q7 (:func:`sandbox.preflight_system.cluster_facts`; None: not answered);
    ``lm_data``: the same config imported on the LM proxy, for Q5 (default budget only; :data:`LM_Q5`)."""
    size = QUICK if quick else FULL
    seeds = int(seeds or size["seeds"])
    if seeds < 2:
        raise PreflightError(f"--seeds: {seeds} is too few for an interval over seeds (at least 2)")
    if not (lr_mult > 0 and math.isfinite(lr_mult)):
        raise PreflightError(f"--lr-mult: {lr_mult!r} must be a positive number")
    steps = min(int(data["run"]["steps"]), size["steps"])
    k_user = user_bound(data["system"]["staleness"])
    k0 = max(k_user, 1)
    lr = float(data["algorithm"]["optimizer"]["lr"])
    corr = dict(data["algorithm"].get("correction", {"name": "none"}))
    plan = Plan(quick, seeds, steps, float(budget or size["budget"]), k_user, correction_name(corr), lr, lr_mult, framework)
    bounds = sorted({k0 * f for f in size["bound_factors"]})
    mults = sorted({*(m * lr_mult for m in size["mults"])})
    for k in bounds:
        for m in mults:
            plan.jobs.append(Job("Q1", f"k={k} lr×{m:g}", _scenario_data(data, seeds, steps, fixed_lag(k), lr * m),
                                 k, m, plan.user_correction))
    alts = {f"yours: {plan.user_correction}": corr}
    for name, c in ALTERNATIVES.items():
        if c.get("name") != corr.get("name"):
            alts[name] = c
    for name, c in alts.items():
        plan.jobs.append(Job("Q2", name, _scenario_data(data, seeds, steps, fixed_lag(k0), lr * lr_mult, c), k0, lr_mult, name))
    if lm_data is not None and not quick:
        q5 = lm_q5_data(lm_data, seeds, k0, lr_mult)
    else:
        q5 = _scenario_data(data, seeds, steps, fixed_lag(k0), lr * lr_mult)
    q5.setdefault("engine", dict(Q5_ENGINE))
    if q5["engine"].get("name", "exact") == "exact":
        q5["engine"] = dict(Q5_ENGINE)
    plan.jobs.append(Job("Q5", f"engine {q5['engine']['name']}", q5, k0, lr_mult))
    q6 = {"kind": "max_lag", "k_max": 0, "enforcement": "throttle"}
    plan.jobs.append(Job("Q6", "sync", _scenario_data(data, seeds, Q6_STEPS, {"kind": "sync"}, lr), 0))
    plan.jobs.append(Job("Q6", "async k_max=0", _scenario_data(data, seeds, Q6_STEPS, q6, lr), 0))
    for j in plan.jobs:
        j.seconds = estimate(validate_scenario(j.data, f"preflight run {j.label}")).seconds
        if j.data["task"]["name"] == "lm":
            j.seconds = max(j.seconds, LM_REPLICA_STEP_S * seeds * j.data["run"]["steps"])
    plan.facts = facts
    if facts is not None:
        plan.system = make_system_plan(data, facts, quick, k_user)
    return plan


def lm_q5_data(lm: dict, seeds: int, k: int, lr_mult: float) -> dict:
    """Q5's run on the LM proxy (:data:`LM_Q5`): your objective, correction and optimizer on the LM task at
    lag ``k`` and the LM proxy's learning rate times ``lr_mult``; seeds as replicas of the shared schedule
    (with a fixed lag every seed trains on samples exactly ``k`` versions old, so sharing the schedule
    changes nothing a seed sees)."""
    a = lm["algorithm"]
    G = min(int(a["group_size"]), LM_Q5["max_group_size"])
    B = LM_Q5["groups_per_step"]
    d = _scenario_data(lm, seeds, min(int(lm["run"]["steps"]), LM_Q5["steps"]), fixed_lag(k), float(a["optimizer"]["lr"]) * lr_mult)
    d["run"]["schedules"] = "shared"
    d["algorithm"]["group_size"], d["algorithm"]["groups_per_step"] = G, B
    if B % int(d["algorithm"].get("minibatches", 1)):
        d["algorithm"]["minibatches"] = math.gcd(B, int(d["algorithm"]["minibatches"]))
    return d


def check_plan(plan: Plan) -> None:
    """Refuse a plan whose estimate exceeds its budget, naming what shrinks it."""
    if plan.seconds > plan.budget:
        shrink = ("--seeds 2" if plan.quick else "--quick (fewer seeds, steps and cells), or --seeds 4")
        split = (f" ({format_seconds(plan.system.seconds)} of it for the split of Q3/Q4/Q7, which --quick shrinks)"
                 if plan.system is not None else "")
        raise PreflightError(
            f"--budget: the plan's {plan.runs} runs are estimated at {format_seconds(plan.seconds)}{split}, over the budget of "
            f"{format_seconds(plan.budget)}; use {shrink}, or raise --budget")


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson's score interval of a proportion k/n (Wilson 1927)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, mid - half), min(1.0, mid + half))


def mean_interval(x: np.ndarray) -> tuple[float, float, float]:
    """Mean and its 95% normal interval (mean ± 1.96 s/√n) over seeds."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return (math.nan, math.nan, math.nan)
    m = float(x.mean())
    h = 1.96 * float(x.std(ddof=1)) / math.sqrt(len(x)) if len(x) > 1 else math.nan
    return (m, m - h, m + h)


def seed_outcomes(res) -> dict:
    """Per seed (replica): final expected reward, collapse, mean ESS/N; the ESS trajectory (mean over seeds)."""
    ev = res.replica_metrics["eval/expected_reward"]
    rows = ~np.isnan(ev).all(1)
    ev = ev[rows]
    R = ev.shape[1]
    final, collapsed = [], []
    for r in range(R):
        col = ev[:, r]
        col = col[np.isfinite(col)]
        n = max(1, int(len(col) * 0.1))
        f = float(col[-n:].mean()) if len(col) else math.nan
        peak = float(col.max()) if len(col) else math.nan
        final.append(f)
        collapsed.append(bool(res.diverged_at[r] >= 0 or not math.isfinite(f) or f < peak - COLLAPSE_DROP))
    ess = res.replica_metrics.get("is/ess_ratio")
    ess_seed = np.nanmean(ess, 0) if ess is not None else np.full(R, np.nan)
    ess_curve = np.nanmean(ess, 1) if ess is not None else np.array([])
    ttt = res.summary.get("time_to_target_replicas") or []
    return {"final": final, "collapsed": collapsed, "ess": [float(v) for v in ess_seed],
            "ess_curve": [float(v) for v in ess_curve], "time_to_target": [None if t is None else float(t) for t in ttt],
            "steps": int(len(res.metrics))}


def verdict(out: dict, reference: float | None) -> dict:
    n, k = len(out["collapsed"]), int(sum(out["collapsed"]))
    lo, hi = wilson(k, n)
    m, mlo, mhi = mean_interval(np.array(out["final"]))
    if k * 2 >= n:
        v = "unsafe"
    elif k > 0:
        v = "at risk"
    else:
        v = "safe"
    slower = reference is not None and math.isfinite(m) and m < reference - REWARD_MARGIN
    return {"verdict": v, "slower_than_reference": bool(slower), "collapsed": k, "seeds": n, "collapse_rate": k / n if n else math.nan,
            "collapse_interval": [lo, hi], "final_reward": m, "final_reward_interval": [mlo, mhi]}


def _bitwise(a, b) -> tuple[bool, list[str]]:
    """Whether two runs' metrics tables are bitwise equal (same columns, same float bits), and where not."""
    ma, mb = a.metrics, b.metrics
    diffs = []
    for c in sorted(set(ma.columns) | set(mb.columns)):
        if c not in ma or c not in mb:
            diffs.append(f"{c} (only in one run)")
            continue
        x, y = ma[c].to_numpy(), mb[c].to_numpy()
        if x.shape != y.shape or not np.array_equal(x, y, equal_nan=True):
            diffs.append(c)
    return (not diffs, diffs)


def _ranges(res, names: tuple[str, ...]) -> dict:
    """Per metric: the range over seeds of each seed's mean in the first and the last quarter of the
    steps, and the per-step band (min and max over seeds)."""
    out = {}
    for name in names:
        a = res.replica_metrics.get(name)
        if a is None:
            continue
        n = a.shape[0]
        q = max(1, n // 4)
        with warnings.catch_warnings():  # an all-NaN slice (a length bucket the task never fills) is NaN, said as such
            warnings.simplefilter("ignore", RuntimeWarning)
            first, last = np.nanmean(a[:q], 0), np.nanmean(a[-q:], 0)
            lo, hi = np.nanmin(a, 1), np.nanmax(a, 1)
        fin = lambda x: [float(np.nanmin(x)), float(np.nanmax(x))] if np.isfinite(x).any() else None  # noqa: E731
        out[name] = {"first_quarter": fin(first), "last_quarter": fin(last),
                     "band_low": [float(v) for v in lo], "band_high": [float(v) for v in hi]}
    return out


def run_plan(plan: Plan) -> dict:
    """Run every job of the plan (progress with an ETA from the estimates) and reduce them to the answers."""
    done: dict[tuple[str, str], Any] = {}
    t0 = time.perf_counter()
    sysw = plan.system.weights() if plan.system else []
    system = None
    with progress.task("preflight", weights=[j.seconds for j in plan.jobs] + sysw, unit="runs") as task:
        for j in plan.jobs:
            scn = validate_scenario(j.data, f"preflight run {j.label}")
            res = run_scenario(scn)
            done[(j.question, j.label)] = res if j.question in ("Q5", "Q6") else seed_outcomes(res)
            task.advance(1, f"{j.question} {j.label}")
        if plan.system is not None:
            system = run_system_plan(plan.system, lambda label: task.advance(1, f"Q3/Q4/Q7 {label}"))
    wall = time.perf_counter() - t0
    k0 = max(plan.user_bound, 1)
    q1_jobs = [j for j in plan.jobs if j.question == "Q1"]
    ref_job = next(j for j in q1_jobs if j.bound == k0 and j.mult == plan.mult)
    ref = verdict(done[("Q1", ref_job.label)], None)["final_reward"]
    cells = []
    for j in q1_jobs:
        o = done[("Q1", j.label)]
        cells.append({"bound": j.bound, "lr_multiplier": j.mult, **verdict(o, ref), "ess_mean": float(np.nanmean(o["ess"]))})
    bounds = sorted({c["bound"] for c in cells})
    safe_at_k0 = [c["lr_multiplier"] for c in cells if c["bound"] == bounds[0] and c["verdict"] == "safe"]
    anchor = max(safe_at_k0) if safe_at_k0 else None
    theory_curve = ([[k, anchor * critical_step(k) / critical_step(bounds[0])] for k in bounds] if anchor else [])
    user_cell = next(c for c in cells if c["bound"] == k0 and c["lr_multiplier"] == plan.mult)
    q2 = []
    for j in plan.jobs:
        if j.question == "Q2":
            o = done[("Q2", j.label)]
            tt = [t for t in o["time_to_target"] if t is not None]
            q2.append({"correction": j.label, **verdict(o, ref), "ess_curve": o["ess_curve"],
                       "ess_mean": mean_interval(np.array(o["ess"])),
                       "time_to_target": mean_interval(np.array(tt)) if tt else [math.nan] * 3,
                       "reached": len(tt)})
    mark_slower(q2)
    yours = q2[0]
    q5_job = next(j for j in plan.jobs if j.question == "Q5")
    q5_res = done[("Q5", q5_job.label)]
    sync, asy = done[("Q6", "sync")], done[("Q6", "async k_max=0")]
    same, diffs = _bitwise(sync, asy)
    return {
        "plan": {"quick": plan.quick, "seeds": plan.seeds, "steps": plan.steps, "runs": len(plan.jobs),
                 "estimated_s": plan.seconds, "wall_s": wall, "budget_s": plan.budget,
                 "user_bound": plan.user_bound, "user_correction": plan.user_correction, "lr_multiplier": plan.mult},
        "Q1": {"verdict": user_cell["verdict"], "at": {"bound": k0, "lr_multiplier": plan.mult}, "user_cell": user_cell,
               "cells": cells, "theory_boundary": theory_curve,
               "largest_safe_multiplier_at_your_bound": max([c["lr_multiplier"] for c in cells
                                                             if c["bound"] == k0 and c["verdict"] == "safe"], default=None)},
        "Q2": {"verdict": yours["verdict"] + (", slower" if yours["slower"] else ""), "bound": k0, "lr_multiplier": plan.mult, "rows": q2},
        "Q5": {"verdict": "ranges", "bound": k0, "lr_multiplier": plan.mult, "engine": q5_job.data["engine"],
               "proxy": q5_job.data["task"]["name"], "steps": q5_job.data["run"]["steps"],
               "batch": [q5_job.data["algorithm"]["groups_per_step"], q5_job.data["algorithm"]["group_size"]],
               "framework_metrics": _ranges(q5_res, FRAMEWORK_METRICS.get(plan.framework, ())),
               "sandbox_metrics": _ranges(q5_res, SANDBOX_METRICS), "length_buckets": _ranges(q5_res, BUCKETS)},
        "Q6": {"bitwise_equal": same, "differing_metrics": diffs, "steps": Q6_STEPS,
               "final_sync": float(sync.summary["final_expected_reward"]),
               "final_async0": float(asy.summary["final_expected_reward"])},
        **system_answers(plan, system),
    }


def mark_slower(rows: list[dict]) -> None:
    """Q2's *slower* mark: "safe" only says no seed collapsed. The fastest row is the one reaching the target on
    the most seeds, then with the smallest mean time to target; a row is slower when it reaches the target on
    fewer seeds than the fastest, or its time-to-target interval lies wholly above the fastest's."""
    def key(r):
        t = r["time_to_target"][0]
        return (-r["reached"], t if math.isfinite(t) else math.inf)

    fastest = min(rows, key=key)
    f_hi = fastest["time_to_target"][2]
    for r in rows:
        lo = r["time_to_target"][1]
        r["slower"] = bool(r is not fastest and (r["reached"] < fastest["reached"]
                                                 or (math.isfinite(lo) and math.isfinite(f_hi) and lo > f_hi)))
        r["fastest"] = fastest["correction"]
        t, tf = r["time_to_target"][0], fastest["time_to_target"][0]
        r["slower_by"] = t / tf - 1 if math.isfinite(t) and math.isfinite(tf) and tf > 0 else math.nan


def system_answers(plan: Plan, system: dict | None) -> dict:
    """Q3, Q4, Q7 from the timing-model runs, or 'not answered' naming the missing cluster facts."""
    if system is not None:
        return {"Q3": {**system["Q3"], "facts": system["facts"], "seeds": system["seeds"], "steps": system["steps"],
                       "bound": system["bound"], "control": system["control"]},
                "Q4": system["Q4"], "Q7": system["Q7"]}
    missing = plan.facts.missing if plan.facts is not None else ["the cluster facts (--gpus, --model)"]
    why = ("not answered: it needs " + " and ".join(missing) + "; the timing model of `sandbox plan --gpus N` "
           "(docs/plan.md#gpu-split) then sizes the split, the speed-up and the drop bias")
    return {q: {"verdict": "not answered", "why": why, "missing": missing} for q in ("Q3", "Q4", "Q7")}
