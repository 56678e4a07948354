"""``sandbox preflight CONFIG --framework F [--quick]``: a bounded set of simulations around an imported
GPU config (:mod:`sandbox.importers`) on a proxy task, one answer per question, each with an interval
over seeds. Guide: ``docs/preflight.md``.

Proxies: by default Q1, Q2, Q5 and Q6 run on the **LM proxy** (the small transformer of the shipped
``lm_mission`` scenario), the learning runs spread over :data:`PROCESSES` forked processes; ``--quick``
keeps the bit-string proxy (seconds per run) and says so on every answer.

The plan (:func:`make_plan`) lays out the runs; it prices them with :func:`sandbox.scenario.budget.estimate` (and a
measured floor per LM response, :data:`LM_RESPONSE_STEP_S`) and :func:`check_plan` refuses a plan whose
wall time (the busiest process) is over the budget, naming what shrinks it. Seeds are the replicas of one
run (``task.replicas`` = seeds).

**Your point on the map** (:mod:`sandbox.preflight.transfer`): your learning rate, optimizer and model are
mapped to the proxy learning rate with the same per-step relative update size, u = lr / RMS(θ) for Adam; the
map's columns are the proxy's own learning rates (:data:`LM_GRID` × its base rate) plus your point.

**The premise gate** (:func:`premise`): before a learning answer is given, the same proxy and seeds say
whether (a) the proxy learns at your point (the synchronous run's gain over its starting reward has a 95%
interval above :data:`LEARN_FLOOR`) and (b) your bound hurts at all there (synchronous minus uncorrected
final reward, 95% interval above 0, or more collapsed seeds). When either fails the answer is "cannot tell
on this proxy" with the reason, never "safe".

Verdicts (per cell, over the seeds):

* a seed **collapses** when its replica diverged (a hard limit of the learner) or when its final exact
  expected reward ``eval/expected_reward`` is more than min(:data:`COLLAPSE_DROP`, half its best) below that
  seed's running maximum (the reward-collapse rule of the VCPO claim, ``sandbox/claims/vcpo.py``, scaled for
  a proxy whose best reward is small);
* **unsafe**: at least half the seeds collapse; **at risk**: at least one collapses; **safe** otherwise.
  A cell whose mean final reward is more than :data:`REWARD_MARGIN` below the synchronous cell at the same
  learning rate is marked *slower* (it learns less in the proxy's steps; that is not instability). The
  collapse rate's interval is Wilson's 95% score interval (Wilson 1927), inside [0, 1].
* A row of the map whose verdicts are not monotone in the learning rate (a larger rate safe where a smaller
  one is not) has those cells marked ``non_monotone``: read as the noise of a few seeds, with their intervals.

Q1's theory overlay is the delayed-gradient-descent critical step (T1, Levin & May 1976;
``theory.delayed_stability.critical_step``): a*(τ) = 2 sin(π/(4τ+2)) for x_{t+1} = x_t − a x_{t−τ}. Only
its *shape* transfers to an Adam-trained policy: the overlay is lr*(k) = lr₀ · a*(k)/a*(k₀), anchored at the
largest learning rate measured safe at the smallest non-zero bound k₀ of the map.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from sandbox.analysis.collapse import final_and_best, replica_reward_drops
from sandbox.analysis.intervals import t_interval
from sandbox.base import progress
from sandbox.base.processes import forked_map
from sandbox.preflight.system import Facts, SystemPlan, make_system_plan, run_system_plan
from sandbox.preflight.transfer import Transfer
from sandbox.run.runner import run_scenario
from sandbox.scenario.api import validate_scenario
from sandbox.scenario.budget import estimate, format_seconds
from sandbox.system.staleness import CONTROLS
from theory.delayed_stability import critical_step

REWARD_MARGIN = 0.1
"""*slower* when the mean final reward is this far below the synchronous cell's at the same learning rate."""
REWARD_RANGE = (0.0, 1.0)
"""The expected reward of both proxies (bit-string: the fraction of bits right; LM: exact-answer accuracy) lies in [0, 1]."""
LEARN_FLOOR = 0.02
"""The premise: the proxy learns at a point when the 95% interval of the synchronous gain (final minus
starting expected reward, over seeds) lies above this."""
PROCESSES = 2
LEARN_SHARE = 0.6
"""Without --seeds, the learning runs get at most this share of the budget: fewer seeds (not below 3) before a
refusal, the rest for the split of Q3/Q4/Q7 (which shrinks itself to what is left)."""
"""Forked processes the learning runs are spread over (the runs are single-threaded: the same numbers in any)."""
#: --quick: the bit-string proxy (learning rates are multiples of its own: no transfer rule applies to its logit table).
QUICK = {"seeds": 4, "steps": 60, "budget": 120.0, "mults": (1.0, 10.0, 100.0, 1000.0), "bound_factors": (1, 4, 16)}
#: default: the LM proxy; its columns are LM_GRID x the proxy's base learning rate, plus your point.
FULL = {"seeds": 6, "steps": 60, "budget": 600.0, "grid": (0.25, 1.0, 4.0), "bound_factors": (1, 4)}
LM_BATCH = {"groups_per_step": 8, "max_group_size": 16}
"""The LM proxy's batch: 8 prompts x your group size (at most 16)."""
#: Q2's alternatives to the user's correction (scenario correction tables).
ALTERNATIVES: dict[str, dict] = {
    "none": {"name": "none"},
    "tis (sequence, C=8)": {"name": "tis", "level": "sequence", "C": 8.0},
    "m2po_mask": {"name": "m2po_mask"},
}
Q6_STEPS = 20
LM_RESPONSE_STEP_S = 2.5e-3
"""Seconds per LM response per replica per step, evaluation included (measured: 8 replicas x 40 responses x 40
steps of the LM proxy take 22 s of one core, 1.7 ms a response; priced higher to hold the budget); the budget
estimate counts the LM's replicas as batched, so an LM run is priced at ``max(estimate, this x responses)``."""
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
    lr: float = 0.0
    correction: str = ""
    seconds: float = 0.0

    @property
    def key(self) -> tuple[str, str]:
        return (self.question, self.label)


@dataclass
class PreflightPlan:
    """The runs of one preflight: the proxy, the user's bound and point, the jobs and their prices."""

    quick: bool
    seeds: int
    steps: int
    budget: float
    user_bound: int
    user_correction: str
    proxy: str
    proxy_lr: float
    user_lr: float
    """The proxy learning rate of your point (the transfer rule's, times --lr-mult; --quick: proxy rate x --lr-mult)."""
    mult: float
    framework: str = ""
    transfer: Transfer | None = None
    jobs: list[Job] = field(default_factory=list)
    facts: Facts | None = None
    system: SystemPlan | None = None
    processes: int = PROCESSES
    note: str = ""
    """Set when the plan was shrunk to fit its budget (what, from what to what)."""

    @property
    def learning_seconds(self) -> float:
        """Wall seconds of the learning runs: the busiest of the processes they are spread over."""
        return max((sum(j.seconds for j in part) for part in spread(self.jobs, self.processes)), default=0.0)

    @property
    def seconds(self) -> float:
        return self.learning_seconds + (self.system.seconds if self.system else 0.0)

    @property
    def runs(self) -> int:
        """Simulations: the learning runs (each over every seed at once) and the system-only split runs."""
        return len(self.jobs) + (self.system.runs if self.system else 0)


def spread(jobs: list[Job], processes: int) -> list[list[Job]]:
    """The jobs over ``processes`` parts, longest first to the least loaded part (LPT, Graham 1969); empty parts dropped."""
    parts: list[list[Job]] = [[] for _ in range(max(1, processes))]
    load = [0.0] * len(parts)
    for j in sorted(jobs, key=lambda j: -j.seconds):
        i = load.index(min(load))
        parts[i].append(j)
        load[i] += j.seconds
    return [p for p in parts if p]


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


def _scenario_data(
    base: dict, seeds: int, steps: int, staleness: dict, lr: float, correction: dict | None = None
) -> dict:
    d = copy.deepcopy(base)
    d["task"]["replicas"] = seeds
    d["run"]["schedules"] = "independent"
    d["run"]["steps"] = steps
    d["run"]["eval_every"] = min(int(d["run"].get("eval_every", 5)), 5)
    d["system"]["staleness"] = staleness
    # every sample exactly the bound old: a response resumed under newer weights would span versions
    d["system"]["partial_rollouts"] = False
    d["algorithm"]["optimizer"]["lr"] = lr
    if correction is not None:
        d["algorithm"]["correction"] = correction
    return d


def fixed_lag(k: int) -> dict:
    return {"kind": "sync"} if k == 0 else {"kind": "fixed_lag", "k": k}


def _lm_shape(d: dict) -> dict:
    """The LM proxy's batch (:data:`LM_BATCH`) and schedule: 8 prompts x your group size (at most 16), mini-batches
    that divide it, every seed a replica of the shared schedule (``run.schedules = "independent"`` needs fixed-length
    responses; with a fixed lag every seed trains on samples exactly the bound old either way)."""
    a = d["algorithm"]
    a["group_size"] = min(int(a["group_size"]), LM_BATCH["max_group_size"])
    a["groups_per_step"] = LM_BATCH["groups_per_step"]
    if a["groups_per_step"] % int(a.get("minibatches", 1)):
        a["minibatches"] = math.gcd(a["groups_per_step"], int(a["minibatches"]))
    d["run"]["schedules"] = "shared"
    return d


def _lr_label(lr: float, proxy_lr: float) -> str:
    return f"lr={lr:.3g} (×{lr / proxy_lr:.3g})"


def make_plan(
    data: dict,
    quick: bool = True,
    seeds: int | None = None,
    lr_mult: float = 1.0,
    budget: float | None = None,
    framework: str = "",
    facts: Facts | None = None,
    lm_data: dict | None = None,
    transfer_to: Transfer | None = None,
    processes: int = PROCESSES,
) -> PreflightPlan:
    """The runs of a preflight of the imported scenario. ``data``: the config imported on the bit-string proxy
    (``--quick``); ``lm_data``: the same config on the LM proxy (the default's proxy for Q1, Q2, Q5, Q6);
    ``transfer_to``: your point (:func:`sandbox.preflight.transfer.transfer`; None: not placed, the map in
    multiples of the proxy's rate); ``facts``: the cluster facts of Q3/Q4/Q7
    (:func:`sandbox.preflight.system.cluster_facts`; None: not answered)."""
    size = QUICK if quick else FULL
    chosen = seeds is not None
    seeds = int(seeds or size["seeds"])
    if seeds < 2:
        raise PreflightError(f"--seeds: {seeds} is too few for an interval over seeds (at least 2)")
    if seeds > 256:
        raise PreflightError(f"--seeds: {seeds} is more than 256 (each seed is a replica held in memory)")
    if not (lr_mult > 0 and math.isfinite(lr_mult)):
        raise PreflightError(f"--lr-mult: {lr_mult!r} must be a positive number")
    proxy = "bitstring" if quick or lm_data is None else "lm"
    base = data if proxy == "bitstring" else lm_data
    steps = min(int(base["run"]["steps"]), size["steps"])
    k_user = user_bound(base["system"]["staleness"])
    k0 = max(k_user, 1)
    proxy_lr = float(base["algorithm"]["optimizer"]["lr"])
    placed = transfer_to is not None and transfer_to.applicable and proxy == "lm"
    user_lr = (transfer_to.proxy_lr if placed else proxy_lr) * lr_mult
    corr = dict(base["algorithm"].get("correction", {"name": "none"}))
    plan = PreflightPlan(
        quick,
        seeds,
        steps,
        float(budget or size["budget"]),
        k_user,
        correction_name(corr),
        proxy,
        proxy_lr,
        user_lr,
        lr_mult,
        framework,
        transfer_to if proxy == "lm" else None,
        processes=processes,
    )
    shape = _lm_shape if proxy == "lm" else (lambda d: d)
    bounds = sorted({0, k_user, *(k0 * f for f in size["bound_factors"])})
    lrs = sorted({proxy_lr * m for m in (size["grid"] if proxy == "lm" else size["mults"])} | {user_lr})
    for k in bounds:
        for lr in lrs:
            plan.jobs.append(
                Job(
                    "Q1",
                    f"k={k} {_lr_label(lr, proxy_lr)}",
                    shape(_scenario_data(base, seeds, steps, fixed_lag(k), lr)),
                    k,
                    lr,
                    plan.user_correction,
                )
            )
    alts = {f"yours: {plan.user_correction}": corr}
    for name, c in ALTERNATIVES.items():
        if c.get("name") != corr.get("name"):
            alts[name] = c
    for name, c in alts.items():
        plan.jobs.append(
            Job(
                "Q2",
                name,
                shape(_scenario_data(base, seeds, steps, fixed_lag(k_user), user_lr, c)),
                k_user,
                user_lr,
                name,
            )
        )
    q5 = shape(_scenario_data(base, seeds, steps, fixed_lag(k_user), user_lr))
    if q5.get("engine", {}).get("name", "exact") == "exact":
        q5["engine"] = dict(Q5_ENGINE)
    plan.jobs.append(Job("Q5", f"engine {q5['engine']['name']}", q5, k_user, user_lr))
    q6 = {"kind": "max_lag", "k_max": 0, "enforcement": "throttle"}
    q6_steps = min(Q6_STEPS, steps)
    plan.jobs.append(
        Job("Q6", "sync", shape(_scenario_data(base, seeds, q6_steps, {"kind": "sync"}, user_lr)), 0, user_lr)
    )
    plan.jobs.append(Job("Q6", "async k_max=0", shape(_scenario_data(base, seeds, q6_steps, q6, user_lr)), 0, user_lr))
    for j in plan.jobs:
        j.seconds = estimate(validate_scenario(j.data, f"preflight run {j.label}")).seconds
        if j.data["task"]["name"] == "lm":
            a = j.data["algorithm"]
            responses = seeds * j.data["run"]["steps"] * a["groups_per_step"] * a["group_size"]
            j.seconds = max(j.seconds, LM_RESPONSE_STEP_S * responses)
    share = LEARN_SHARE * plan.budget
    if not chosen and plan.learning_seconds > share and seeds > 3:  # fewer seeds before a refusal (the page says so)
        fit = max(3, int(seeds * share / plan.learning_seconds))
        if fit < seeds:
            smaller = make_plan(data, quick, fit, lr_mult, budget, framework, facts, lm_data, transfer_to, processes)
            smaller.note = f"seeds reduced from {seeds} to {fit} to fit the budget (your batch makes each run long)"
            return smaller
    plan.facts = facts
    if facts is not None:
        plan.system = make_system_plan(
            data, facts, quick, k_user, max_seconds=max(0.0, plan.budget - plan.learning_seconds)
        )
    return plan


def check_plan(plan: PreflightPlan) -> None:
    """Refuse a plan whose estimate exceeds its budget, naming what shrinks it (never an option already given)."""
    if plan.seconds <= plan.budget:
        return
    shrink = []
    room = plan.budget - (plan.system.seconds if plan.system else 0.0)
    fit = int(plan.seeds * room / plan.learning_seconds) if plan.learning_seconds > 0 and room > 0 else 0
    if plan.seeds > 2:
        shrink.append(f"--seeds {fit}" if 2 <= fit < plan.seeds else f"--seeds {max(2, plan.seeds // 2)}")
    if not plan.quick:
        shrink.append("--quick (the bit-string proxy: fewer seeds, steps and cells)")
    split = (
        f" ({format_seconds(plan.system.seconds)} of it for the split of Q3/Q4/Q7, which --quick shrinks)"
        if plan.system is not None and not plan.quick
        else ""
    )
    est, bud = format_seconds(plan.seconds), format_seconds(plan.budget)
    digits = 0
    while est == bud and digits < 6:  # never "estimated at 2 min, over the budget of 2 min"
        est, bud = f"{plan.seconds:.{digits}f} s", f"{plan.budget:.{digits}f} s"
        digits += 1
    raise PreflightError(
        f"--budget: the plan's {plan.runs} runs are estimated at {est}{split}, over the budget of {bud}; use "
        + (", or ".join(shrink) + ", or " if shrink else "")
        + "raise --budget"
    )


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson's score interval of a proportion k/n (Wilson 1927)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, mid - half), min(1.0, mid + half))


def mean_interval(x: np.ndarray, bounds: tuple[float, float] | None = None) -> tuple[float, float, float]:
    """Mean and its 95% Student t interval over seeds (:func:`sandbox.analysis.intervals.t_interval`), cut to
    ``bounds`` (the range the quantity cannot leave, e.g. a reward in [0, 1])."""
    return t_interval(x, bounds=bounds)


def seed_outcomes(res) -> dict:
    """Per seed (replica): starting and final expected reward, collapse (:mod:`sandbox.analysis.collapse`), mean
    ESS/N; the ESS trajectory (mean over seeds)."""
    ev = res.replica_metrics["eval/expected_reward"]
    ev = ev[~np.isnan(ev).all(1)]
    R = ev.shape[1]
    ends = [final_and_best(ev[:, r]) for r in range(R)]
    ess = res.replica_metrics.get("is/ess_ratio")
    ess_seed = np.nanmean(ess, 0) if ess is not None else np.full(R, np.nan)
    ess_curve = np.nanmean(ess, 1) if ess is not None else np.array([])
    ttt = res.summary.get("time_to_target_replicas") or []
    return {
        "final": [e[1] for e in ends],
        "start": [e[0] for e in ends],
        "collapsed": replica_reward_drops(res),
        "ess": [float(v) for v in ess_seed],
        "ess_curve": [float(v) for v in ess_curve],
        "time_to_target": [None if t is None else float(t) for t in ttt],
        "steps": int(len(res.metrics)),
    }


def verdict(out: dict, reference: float | None) -> dict:
    n, k = len(out["collapsed"]), int(sum(out["collapsed"]))
    lo, hi = wilson(k, n)
    m, mlo, mhi = mean_interval(np.array(out["final"]), REWARD_RANGE)
    gain = np.array(out["final"], float) - np.array(out.get("start", out["final"]), float)
    g, glo, ghi = mean_interval(gain, (-1.0, 1.0))
    if k * 2 >= n:
        v = "unsafe"
    elif k > 0:
        v = "at risk"
    else:
        v = "safe"
    slower = reference is not None and math.isfinite(m) and m < reference - REWARD_MARGIN
    return {
        "verdict": v,
        "slower_than_reference": bool(slower),
        "collapsed": k,
        "seeds": n,
        "collapse_rate": k / n if n else math.nan,
        "collapse_interval": [lo, hi],
        "final_reward": m,
        "final_reward_interval": [mlo, mhi],
        "gain": g,
        "gain_interval": [glo, ghi],
    }


def difference_interval(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """mean(a - b) and its 95% Student t interval over the seeds, paired: seed r of both runs starts from the same
    weights and streams, so the per-seed difference removes what the seeds share."""
    d = np.asarray(a, float) - np.asarray(b, float)
    return t_interval(d[np.isfinite(d)])


def premise(sync: dict, uncorrected: dict | None, bound: int) -> dict:
    """The premise gate at your point (module docstring): does the proxy learn there, and does your bound hurt?
    ``sync``, ``uncorrected``: :func:`seed_outcomes` of the synchronous and the uncorrected run at your bound."""
    g, glo, ghi = mean_interval(np.array(sync["final"], float) - np.array(sync["start"], float), (-1.0, 1.0))
    learns = bool(math.isfinite(glo) and glo > LEARN_FLOOR)
    out = {
        "learns": learns,
        "sync_gain": [g, glo, ghi],
        "learn_floor": LEARN_FLOOR,
        "bound": bound,
        "feels_lag": None,
        "lag_cost": [math.nan] * 3,
    }
    reason = (
        ""
        if learns
        else (
            f"the proxy does not learn at your point: the synchronous gain over its start is {g:.3g} "
            f"[{glo:.3g}, {ghi:.3g}], not above the floor {LEARN_FLOOR:g}"
        )
    )
    feels = True
    if bound > 0:
        cost = difference_interval(sync["final"], uncorrected["final"])
        more_collapsed = sum(uncorrected["collapsed"]) - sum(sync["collapsed"]) >= max(1, len(sync["collapsed"]) // 2)
        feels = bool((math.isfinite(cost[1]) and cost[1] > 0) or more_collapsed)
        out.update(feels_lag=feels, lag_cost=list(cost))
        if learns and not feels:
            reason = (
                f"the proxy does not feel lag {bound} at your point: synchronous minus uncorrected final reward "
                f"{cost[0]:.3g} [{cost[1]:.3g}, {cost[2]:.3g}] (an interval that reaches 0), and no more seeds collapse"
            )
    out.update(passed=learns and feels, reason=reason)
    return out


def mark_non_monotone(cells: list[dict]) -> list[str]:
    """Mark cells where a larger learning rate at the same bound is safe while a smaller one is not (a map that
    is not monotone in the learning rate: read as seed noise). Returns one note per such pair."""
    notes = []
    for k in sorted({c["bound"] for c in cells}):
        row = sorted((c for c in cells if c["bound"] == k), key=lambda c: c["lr"])
        for i, lo in enumerate(row):
            for hi in row[i + 1 :]:
                if lo["verdict"] != "safe" and hi["verdict"] == "safe":
                    lo["non_monotone"] = hi["non_monotone"] = True
                    notes.append(
                        f"k={k}: lr {lo['lr']:.3g} {lo['verdict']} ({lo['collapsed']}/{lo['seeds']}, rate "
                        f"[{lo['collapse_interval'][0]:.2f}, {lo['collapse_interval'][1]:.2f}]) but lr {hi['lr']:.3g} "
                        f"safe ({hi['collapsed']}/{hi['seeds']}): the intervals overlap, read as seed noise"
                    )
    for c in cells:
        c.setdefault("non_monotone", False)
    return notes


def largest_safe(cells: list[dict], bound: int) -> float | None:
    """The largest learning rate of the row ``bound`` below which every measured cell is safe, or None."""
    best = None
    for c in sorted((c for c in cells if c["bound"] == bound), key=lambda c: c["lr"]):
        if c["verdict"] != "safe":
            break
        best = c["lr"]
    return best


def q1_answer(cells: list[dict], plan: PreflightPlan, gate: dict) -> dict:
    """Q1: where your point sits in the region the proxy found safe at your bound, how much that region shrinks
    from synchronous training to your bound, and the verdict — "cannot tell" when the point is not placed or the
    premise fails."""
    k = plan.user_bound
    row = sorted((c for c in cells if c["bound"] == k), key=lambda c: c["lr"])
    user = next(c for c in row if c["lr"] == plan.user_lr)
    nxt = next((c for c in row if c["lr"] > plan.user_lr), None)
    if user["verdict"] == "unsafe":
        position = "outside"
    elif user["verdict"] == "at risk" or (nxt is not None and nxt["verdict"] != "safe"):
        position = "at the edge of"
    else:
        position = "inside"
    s0, sk = largest_safe(cells, 0), largest_safe(cells, k)
    if k == 0:
        shrink, shrink_note = 1.0, "your run is synchronous: no staleness, the region is the synchronous one"
    elif s0 is None:
        shrink, shrink_note = math.nan, "no learning rate of the map is safe even synchronously"
    elif sk is None:
        lo = min(c["lr"] for c in cells if c["bound"] == k)
        shrink, shrink_note = math.inf, f"more than {s0 / lo:.3g}x: no learning rate of the map is safe at your bound"
    else:
        shrink = s0 / sk
        shrink_note = (
            f"{shrink:.3g}x (largest safe rate {s0:.3g} synchronously, {sk:.3g} at k={k}; the grid's steps "
            f"bound the resolution)"
        )
        if shrink < 1:
            shrink_note += (
                ": larger at your bound than synchronously, a map not monotone in the bound at these seeds, "
                "read as noise (a lag slows the proxy's progress, which can delay a collapse past its steps)"
            )
    if plan.proxy != "lm" or plan.transfer is None or not plan.transfer.applicable:
        why = (
            "--quick runs the bit-string proxy, whose logit table starts at zero: there is no relative update size "
            "to match, so your learning rate is not placed (the map is in multiples of the proxy's own rate); run "
            "without --quick"
            if plan.proxy != "lm"
            else (plan.transfer.note if plan.transfer is not None else "no learning rate in your config to place")
        )
        verdict_, reason = "cannot tell", why
    elif not gate["passed"]:
        verdict_, reason = "cannot tell", gate["reason"]
    else:
        verdict_, reason = user["verdict"], ""
    return {
        "verdict": verdict_,
        "reason": reason,
        "position": position,
        "user_cell": user,
        "shrink": shrink,
        "shrink_note": shrink_note,
        "largest_safe_sync": s0,
        "largest_safe_at_your_bound": sk,
    }


def _bitwise(ma, mb) -> tuple[bool, list[str]]:
    """Whether two runs' metrics tables are bitwise equal (same columns, same float bits), and where not."""
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
        out[name] = {
            "first_quarter": fin(first),
            "last_quarter": fin(last),
            "band_low": [float(v) for v in lo],
            "band_high": [float(v) for v in hi],
        }
    return out


def _reduce(job: Job, res, framework: str):
    """What the answers read of one run, small enough to send back from a forked process."""
    if job.question == "Q5":
        return {
            "framework_metrics": _ranges(res, FRAMEWORK_METRICS.get(framework, ())),
            "sandbox_metrics": _ranges(res, SANDBOX_METRICS),
            "length_buckets": _ranges(res, BUCKETS),
        }
    if job.question == "Q6":
        return {"metrics": res.metrics, "final": float(res.summary["final_expected_reward"])}
    return seed_outcomes(res)


def _run_part(jobs: list[Job], framework: str, advance) -> dict:
    out = {}
    for j in jobs:
        res = run_scenario(validate_scenario(j.data, f"preflight run {j.label}"))
        out[j.key] = _reduce(j, res, framework)
        if advance is not None:
            advance(j)
    return out


def run_jobs(plan: PreflightPlan, advance=None) -> dict:
    """Every learning run of the plan, spread over ``plan.processes`` forked processes (:func:`spread`; this
    process runs the last part and reports progress for its own runs, the others' when they return). Each run is
    single-threaded and seeded by its scenario alone, so its numbers do not depend on the process it ran in."""
    parts = spread(plan.jobs, plan.processes)
    results = forked_map(
        [(lambda p=p: _run_part(p, plan.framework, None)) for p in parts[:-1]]
        + [lambda: _run_part(parts[-1], plan.framework, advance)]
    )
    done = {}
    for part, got in zip(parts, results):
        done.update(got)
        if advance is not None and part is not parts[-1]:
            for j in part:
                advance(j)
    return done


def run_plan(plan: PreflightPlan) -> dict:
    """Run every job of the plan (progress with an ETA from the estimates) and reduce them to the answers."""
    t0 = time.perf_counter()
    sysw = plan.system.weights() if plan.system else []
    system = None
    with progress.task("preflight", weights=[j.seconds for j in plan.jobs] + sysw, unit="runs") as task:
        done = run_jobs(plan, lambda j: task.advance(1, f"{j.question} {j.label}"))
        if plan.system is not None:
            system = run_system_plan(plan.system, lambda label: task.advance(1, f"Q3/Q4/Q7 {label}"))
    wall = time.perf_counter() - t0
    k = plan.user_bound
    q1_jobs = [j for j in plan.jobs if j.question == "Q1"]
    sync_final = {j.lr: mean_interval(np.array(done[j.key]["final"]))[0] for j in q1_jobs if j.bound == 0}
    cells = []
    for j in q1_jobs:
        o = done[j.key]
        cells.append(
            {
                "bound": j.bound,
                "lr": j.lr,
                "lr_multiplier": j.lr / plan.proxy_lr,
                "update_size": (j.lr / plan.transfer.proxy_rms if plan.transfer is not None else None),
                "your_point": j.lr == plan.user_lr,
                **verdict(o, sync_final.get(j.lr) if j.bound else None),
                "ess_mean": float(np.nanmean(o["ess"])),
            }
        )
    noise = mark_non_monotone(cells)
    q2_jobs = [j for j in plan.jobs if j.question == "Q2"]
    q2 = []
    for j in q2_jobs:
        o = done[j.key]
        tt = [t for t in o["time_to_target"] if t is not None]
        q2.append(
            {
                "correction": j.label,
                **verdict(o, sync_final.get(plan.user_lr)),
                "ess_curve": o["ess_curve"],
                "ess_mean": mean_interval(np.array(o["ess"]), (0.0, 1.0)),
                "time_to_target": mean_interval(np.array(tt), (0.0, math.inf)) if tt else [math.nan] * 3,
                "reached": len(tt),
            }
        )
    mark_slower(q2)
    sync_user = done[next(j.key for j in q1_jobs if j.bound == 0 and j.lr == plan.user_lr)]
    uncorrected = None
    if k > 0:
        if plan.user_correction == "none":
            uncorrected = done[next(j.key for j in q1_jobs if j.bound == k and j.lr == plan.user_lr)]
        else:
            uncorrected = done[next(j.key for j in q2_jobs if j.label == "none")]
    gate = premise(sync_user, uncorrected, k)
    q1 = q1_answer(cells, plan, gate)
    k_map = min((c["bound"] for c in cells if c["bound"] > 0), default=1)
    anchor = largest_safe(cells, k_map)
    bounds = sorted({c["bound"] for c in cells if c["bound"] > 0})
    theory_curve = [[b, anchor * critical_step(b) / critical_step(k_map)] for b in bounds] if anchor else []
    yours = q2[0]
    q2_verdict = yours["verdict"] + (", slower" if yours["slower"] else "")
    if q1["verdict"] == "cannot tell" and q1["reason"] == gate.get("reason"):
        q2_verdict = "cannot tell"
    q5_job = next(j for j in plan.jobs if j.question == "Q5")
    q6s, q6a = done[("Q6", "sync")], done[("Q6", "async k_max=0")]
    same, diffs = _bitwise(q6s["metrics"], q6a["metrics"])
    transfer_ = plan.transfer.as_dict() if plan.transfer is not None else None
    return {
        "plan": {
            "quick": plan.quick,
            "proxy": plan.proxy,
            "seeds": plan.seeds,
            "steps": plan.steps,
            "runs": len(plan.jobs),
            "processes": plan.processes,
            "estimated_s": plan.seconds,
            "wall_s": wall,
            "budget_s": plan.budget,
            "user_bound": k,
            "user_correction": plan.user_correction,
            "lr_multiplier": plan.mult,
            "proxy_lr": plan.proxy_lr,
            "your_proxy_lr": plan.user_lr,
            "note": plan.note,
        },
        "transfer": transfer_,
        "premise": gate,
        "Q1": {
            **q1,
            "at": {"bound": k, "lr": plan.user_lr, "lr_multiplier": plan.user_lr / plan.proxy_lr},
            "cells": cells,
            "non_monotone": noise,
            "theory_boundary": theory_curve,
        },
        "Q2": {
            "verdict": q2_verdict,
            "reason": gate["reason"] if q2_verdict == "cannot tell" else "",
            "bound": k,
            "lr": plan.user_lr,
            "lr_multiplier": plan.user_lr / plan.proxy_lr,
            "rows": q2,
        },
        "Q5": {
            "verdict": "ranges",
            "bound": k,
            "lr": plan.user_lr,
            "lr_multiplier": plan.user_lr / plan.proxy_lr,
            "engine": q5_job.data["engine"],
            "proxy": q5_job.data["task"]["name"],
            "steps": q5_job.data["run"]["steps"],
            "staleness_gap": k > 0,
            "batch": [q5_job.data["algorithm"]["groups_per_step"], q5_job.data["algorithm"]["group_size"]],
            **done[q5_job.key],
        },
        "Q6": {
            "bitwise_equal": same,
            "differing_metrics": diffs,
            "steps": len(q6s["metrics"]),
            "proxy": plan.proxy,
            "final_sync": q6s["final"],
            "final_async0": q6a["final"],
        },
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
        r["slower"] = bool(
            r is not fastest
            and (r["reached"] < fastest["reached"] or (math.isfinite(lo) and math.isfinite(f_hi) and lo > f_hi))
        )
        r["fastest"] = fastest["correction"]
        t, tf = r["time_to_target"][0], fastest["time_to_target"][0]
        r["slower_by"] = t / tf - 1 if math.isfinite(t) and math.isfinite(tf) and tf > 0 else math.nan


def system_answers(plan: PreflightPlan, system: dict | None) -> dict:
    """Q3, Q4, Q7 from the timing-model runs, or 'not answered' naming the missing cluster facts."""
    if system is not None:
        return {
            "Q3": {
                **system["Q3"],
                "facts": system["facts"],
                "seeds": system["seeds"],
                "steps": system["steps"],
                "bound": system["bound"],
                "control": system["control"],
                "note": system.get("note", ""),
            },
            "Q4": system["Q4"],
            "Q7": system["Q7"],
        }
    missing = plan.facts.missing if plan.facts is not None else ["the cluster facts (--gpus, --model)"]
    why = (
        "not answered: it needs " + " and ".join(missing) + "; the timing model of `sandbox plan --gpus N` "
        "(docs/plan.md#gpu-split) then sizes the split, the speed-up and the drop bias"
    )
    return {q: {"verdict": "not answered", "why": why, "missing": missing} for q in ("Q3", "Q4", "Q7")}
