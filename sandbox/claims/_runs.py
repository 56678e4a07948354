"""The learning runs the claims measure: the shipped ``scenarios/fixed_lag.toml`` (bit-string task,
H = 32, GRPO, Adam) with the settings of ``scenarios/sweeps/methods_bitstring.toml`` (lr 0.3,
evaluation every 5 steps, no correction unless a variant sets one), one :class:`Run` per
(variant, seed).

Runs are deterministic, so a run shared by several claims (the synchronous reference, the
uncorrected k = 16 run) is simulated once per ``sandbox claims`` invocation (:func:`clear_cache`).

The seeds of one variant are simulated together: a contiguous block of seeds s0 … s0 + n − 1 is one
run with ``task.replicas = n``, ``run.seed = s0`` and ``run.schedules = "independent"``, whose
replica r is bitwise the separate run with ``run.seed = s0 + r`` (docs/system.md#independent-schedules).
:func:`split_block` cuts that run into the n per-seed :class:`Run` objects the separate runs give:

* a metrics row of a one-replica run is that replica's value, a non-finite one written as NaN (the
  mean over the live replicas of ``sandbox/learner/trainer.py``), and there is one row per optimizer
  step (several per batch with ``algorithm.minibatches``), as in the batched run;
* a replica that diverged at optimizer step d is frozen and keeps producing rows in the batched run,
  whereas its separate run stops after the row of step d: its rows are cut after that row;
* ``summary["final_expected_reward"]`` is the summary's mean of the last 10% of evaluations
  (``sandbox/run/runner.py``), taken on the cut column.

``tests/claims/test_claims_batched_seeds.py`` holds the split runs equal to the separate ones.

Contexts (:class:`Context`): the runs above are the **bit-string** context (:data:`BITSTRING`), where
uncorrected lag-16 training does not degrade; the learning claims also run in the **LM** context
(:data:`LM`): ``scenarios/lm_mission.toml`` (a 2-layer transformer warm-started on 3-digit addition,
group-normalised REINFORCE, 8 prompts × 8 responses per step) at Adam lr 1e-3, 100 steps (20 with
``--quick``), evaluation every 10 steps, no correction unless a variant sets one. Its learning rate
is the one where synchronous training learns most, chosen on selection run seeds 100 and 101, disjoint
from the claims' run seeds, before any claim row (:mod:`.lm_selection`), and its margin is a third of
that synchronous gain (:attr:`Context.margin`). Its S seeds are the S replicas of ONE run
(``task.replicas = S``, ``run.seed = 0``, the shared schedule: the LM refuses independent schedules,
docs/tasks.md#replicas): each replica is an independent learner from the same base model with its own
samples, but replica r is not the separate run of seed r, and changing S changes every replica's
draws (one sampling stream, drawn in turn). Variants are paired by replica index.

Null runs (:func:`null_runs`, :mod:`.null`): the same variant on other sampling seeds, paired by seed
with the claims' runs: run seed s + :data:`NULL_SEED_OFFSET` in the bit-string context, run seed
:attr:`Context.null_seed` (1) instead of 0 in the LM context."""

from __future__ import annotations

import json
import math
import multiprocessing
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from sandbox.analysis.collapse import collapsed
from sandbox.base import progress
from sandbox.base.errors import ScenarioError
from sandbox.claims.lm_selection import RECORDED, choose
from sandbox.claims.seed_values import SeedValues
from sandbox.run.runner import RunResult, _tail_mean, run_scenario
from sandbox.scenario.api import load_scenario
from sandbox.scenario.shipped import shipped_root

SCENARIO = shipped_root() / "fixed_lag.toml"
BASE_LR = 0.3
"""Adam learning rate of ``scenarios/sweeps/methods_bitstring.toml``."""
FULL_STEPS, QUICK_STEPS = 100, 40
FULL_SEEDS, QUICK_SEEDS = 8, 3

SYNC = {"system.staleness": {"kind": "sync"}}


@dataclass(frozen=True)
class Context:
    """Where the learning claims run: a shipped scenario and the settings every variant shares."""

    name: str
    """``bitstring`` or ``lm`` (a :class:`~sandbox.claims.base.Row`'s ``context``)."""
    scenario: Path
    lr: float
    eval_every: int
    full_steps: int
    quick_steps: int
    full_seeds: int
    quick_seeds: int
    replica_seeds: bool
    """False: seed s is the run with ``run.seed = s`` (batched bitwise-equally, module docstring); True:
    the S seeds are the S replicas of one shared-schedule run with ``run.seed = 0``."""
    margin: float
    """The margin of a "matches sync" row (final reward − sync > −margin) and the minimum effect of a row
    that claims a method beats another in final reward; the synchronous gain of the context is at least
    3× it (docs/claims.md#contexts-and-the-premise)."""
    null_seed: int
    """Replica-seeds context: the run seed of its null runs (the claims' runs have 0); otherwise unused
    (the null of seed s is seed s + :data:`NULL_SEED_OFFSET`)."""

    def steps(self, quick: bool) -> int:
        return self.quick_steps if quick else self.full_steps

    def settings(self, overrides: dict, quick: bool) -> dict:
        return {
            "algorithm.optimizer.lr": self.lr,
            "run.eval_every": self.eval_every,
            "algorithm.correction": {"name": "none"},
            "run.steps": self.steps(quick),
            "run.figures": False,
            "run.record_events": False,
            **overrides,
        }


REWARD_MARGIN = 0.05
"""The bit-string context's margin (its synchronous run gains about 0.9 over the first evaluation: far above 3×)."""
BITSTRING = Context(
    "bitstring",
    SCENARIO,
    BASE_LR,
    5,
    FULL_STEPS,
    QUICK_STEPS,
    FULL_SEEDS,
    QUICK_SEEDS,
    replica_seeds=False,
    margin=REWARD_MARGIN,
    null_seed=0,
)
LM_SELECTION = choose(RECORDED)
"""The LM context's learning rate and margin, chosen by :func:`.lm_selection.choose` on the recorded selection
measurement (lr 3e-4, sync gain 0.074, margin 0.025)."""
LM_LR = LM_SELECTION.lr
LM = Context(
    "lm",
    shipped_root() / "lm_mission.toml",
    LM_LR,
    10,
    100,
    20,
    4,
    2,
    replica_seeds=True,
    margin=LM_SELECTION.margin,
    null_seed=1,
)
"""The LM context (module docstring): ``--lm-seeds`` replicas (4 by default, 2 with ``--quick``)."""
NULL_SEED_OFFSET = 1000
"""Bit-string null runs: seed s + 1000 (disjoint from the claims' seeds 0 … S − 1 and the GAC search's 100 …)."""
CONTEXTS = {c.name: c for c in (BITSTRING, LM)}


def lag(k: int) -> dict:
    return {"system.staleness": {"kind": "fixed_lag", "k": k}}


TIS = {"algorithm.correction": {"name": "tis", "level": "sequence", "C": 8.0}}
GAC = {"algorithm.stabilizers": [{"name": "gac"}]}
VCPO = {**TIS, "algorithm.stabilizers": [{"name": "vcpo_lr"}]}
M2PO = {"algorithm.correction": {"name": "m2po_mask"}}
GAC_VCPO = {**TIS, "algorithm.stabilizers": [{"name": "gac"}, {"name": "vcpo_lr"}]}
GAC_TIS = {**TIS, **GAC}


@dataclass
class Run:
    """What the claims read from one run: the ``step`` column, the :data:`KEPT` metric columns (NaN
    where not logged) and the summary fields ``status``, ``steps_done`` and ``final_expected_reward``
    (as ``sandbox.run.runner.summarize`` computes them)."""

    steps: np.ndarray
    metrics: dict[str, np.ndarray]
    summary: dict

    def final_reward(self) -> float:
        """Expected reward of the policy (exact, ``eval/expected_reward``), mean of the last 10% of evaluations."""
        return float(self.summary["final_expected_reward"])

    def collapse(self) -> tuple[bool, bool]:
        """(collapsed, diverged): the rule of :func:`sandbox.analysis.collapse.collapsed` on this run
        (diverged, or final reward below its floor with a zero gradient norm over its last logged steps)."""
        diverged = self.summary["status"] == "diverged"
        columns = {k: v[:, None] for k, v in self.metrics.items()}
        return collapsed([0 if diverged else -1], columns)[0], diverged

    def mean(self, name: str, skip: int = 0) -> float:
        a = self.metrics.get(name)
        if a is None:
            return float("nan")
        a = a[skip:]
        a = a[np.isfinite(a)]
        return float(a.mean()) if a.size else float("nan")


_CACHE: dict[str, Run | list[Run]] = {}
KEPT = (
    "grad/norm",
    "reward/mean",
    "eval/expected_reward",
    "is/ess_ratio",
    "grad/cos_prev",
    "lr/scale",
    "mask/frac",
    "staleness/mean",
    "mismatch/kl_k3",
)


def clear_cache() -> None:
    _CACHE.clear()


def settings(overrides: dict, quick: bool, ctx: Context = BITSTRING) -> dict:
    """The full override set of a variant (what docs/claims.md and claims.json record)."""
    return ctx.settings(overrides, quick)


def _key(full_overrides: dict) -> str:
    return json.dumps(full_overrides, sort_keys=True)


def _summary(steps: np.ndarray, metrics: dict[str, np.ndarray], status: str) -> dict:
    """The summary fields of a run that the claims read, as ``sandbox.run.runner.summarize`` computes them."""
    reward = metrics.get("eval/expected_reward")
    return {
        "status": status,
        "steps_done": int(len(steps)),
        "final_expected_reward": _tail_mean(pd.Series(reward)) if reward is not None else math.nan,
    }


def _simulate(full_overrides: dict) -> Run:
    """Load the claims' scenario with the complete override set (seed included) and run it alone."""
    scn, _ = load_scenario(SCENARIO, full_overrides)
    res = run_scenario(scn)
    m = res.metrics
    steps, metrics = m["step"].to_numpy(), {k: m[k].to_numpy(dtype=float) for k in KEPT if k in m}
    return Run(steps, metrics, _summary(steps, metrics, res.status))


def split_block(res: RunResult) -> list[Run]:
    """The per-seed runs of an independent-schedules run: replica r as its separate run would give it
    (the module docstring says how)."""
    steps = res.metrics["step"].to_numpy()
    out = []
    for r, diverged_at in enumerate(res.diverged_at.tolist()):
        rows = len(steps)
        if diverged_at >= 0:  # the separate run stops after the row of its diverging optimizer step
            rows = int(np.searchsorted(steps, diverged_at, side="right"))
            if rows == 0 or steps[rows - 1] != diverged_at:
                raise AssertionError(f"replica {r} diverged at step {diverged_at}, which has no metrics row")
        metrics = {}
        for k in KEPT:
            if k in res.replica_metrics:
                a = res.replica_metrics[k][:rows, r].astype(float)  # a copy
                a[~np.isfinite(a)] = np.nan  # a one-replica row is the mean over the finite values
                metrics[k] = a
        status = "diverged" if diverged_at >= 0 else res.status
        out.append(Run(steps[:rows].copy(), metrics, _summary(steps[:rows], metrics, status)))
    return out


def _simulate_block(seedless: dict, first_seed: int, seeds: int) -> list[Run]:
    """The runs of seeds ``first_seed`` … ``first_seed + seeds − 1`` of one variant (``seedless``: its
    full override set without ``run.seed``), as one independent-schedules run; one seed, or a variant
    that independent schedules cannot replay (e.g. a fixed ``run.system_seed``), runs seed by seed."""
    if seeds > 1:
        try:
            scn, _ = load_scenario(
                SCENARIO, {**seedless, "run.seed": first_seed, "task.replicas": seeds, "run.schedules": "independent"}
            )
        except ScenarioError:
            scn = None
        if scn is not None:
            return split_block(run_scenario(scn))
    return [_simulate({**seedless, "run.seed": s}) for s in range(first_seed, first_seed + seeds)]


def _simulate_block_task(task: tuple[dict, int, int]) -> list[Run]:
    return _simulate_block(*task)


def _blocks(pairs: Iterable[tuple[dict, int]], quick: bool) -> list[tuple[dict, int, int]]:
    """The uncached ``(overrides, seed)`` pairs as ``(seedless overrides, first seed, seeds)`` blocks:
    per variant (in order of first appearance), its uncached seeds cut into runs of consecutive seeds."""
    variants: dict[str, tuple[dict, set[int]]] = {}
    for overrides, seed in pairs:
        seedless = settings(overrides, quick)
        if _key({**seedless, "run.seed": seed}) not in _CACHE:
            variants.setdefault(_key(seedless), (seedless, set()))[1].add(int(seed))
    blocks = []
    for seedless, seeds in variants.values():
        ordered = sorted(seeds)
        start = 0
        for i in range(1, len(ordered) + 1):
            if i == len(ordered) or ordered[i] != ordered[i - 1] + 1:
                blocks.append((seedless, ordered[start], i - start))
                start = i
    return blocks


def _store(block: tuple[dict, int, int], results: list[Run]) -> None:
    seedless, first_seed, seeds = block
    for seed, result in zip(range(first_seed, first_seed + seeds), results, strict=True):
        _CACHE[_key({**seedless, "run.seed": seed})] = result


def run(overrides: dict, seed: int, quick: bool) -> Run:
    """One run of the claims' scenario with ``overrides`` and ``run.seed = seed`` (cached)."""
    ov = {**settings(overrides, quick), "run.seed": seed}
    key = _key(ov)
    if key not in _CACHE:
        _CACHE[key] = _simulate(ov)
    return _CACHE[key]


def _worker_init() -> None:
    torch.set_num_threads(1)


def prefetch(pairs: Iterable[tuple[dict, int]], quick: bool, workers: int = 1) -> int:
    """Simulate the not-yet-cached runs among the ``(overrides, seed)`` pairs so that :func:`run`
    finds them in the cache; returns how many runs were simulated.

    The seeds of one variant are simulated in blocks of consecutive seeds, each one batched run
    (:func:`_simulate_block`). ``workers > 1`` distributes the blocks over that many spawned
    processes with one torch thread each (as the ``sandbox claims`` command uses). Every run is
    deterministic and independent of the others, so the cached numbers are bitwise those of the
    separate runs whatever ``workers`` is (``tests/claims/test_gac_search.py``,
    ``tests/claims/test_claims_batched_seeds.py``)."""
    blocks = _blocks(pairs, quick)
    if not blocks:
        return 0
    runs = sum(seeds for _, _, seeds in blocks)
    where = f" in {min(workers, len(blocks))} processes" if workers > 1 else ""
    with progress.task(
        f"simulating {runs} runs{where}", weights=[seeds for _, _, seeds in blocks], unit="batches"
    ) as bar:
        if workers <= 1:
            for block in blocks:
                _store(block, _simulate_block(*block))
                bar.advance()
        else:
            with multiprocessing.get_context("spawn").Pool(min(workers, len(blocks)), initializer=_worker_init) as pool:
                for block, results in zip(blocks, pool.imap(_simulate_block_task, blocks, chunksize=1)):
                    _store(block, results)
                    bar.advance()
    return sum(seeds for _, _, seeds in blocks)


def _replica_key(seedless: dict, seeds: int) -> str:
    return _key({"run.seed": 0, **seedless, "task.replicas": seeds})


def _simulate_replicas(task: tuple[str, dict, int]) -> list[Run]:
    """The S per-replica runs of one shared-schedule run of a replica-seeds context (module docstring)."""
    ctx_name, seedless, seeds = task
    ctx = CONTEXTS[ctx_name]
    scn, _ = load_scenario(ctx.scenario, {"run.seed": 0, **seedless, "task.replicas": seeds})
    return split_block(run_scenario(scn))


def prefetch_replicas(variants: Iterable[dict], seeds: int, quick: bool, ctx: Context, workers: int = 1) -> int:
    """Simulate the uncached variants of a replica-seeds context (one run of ``seeds`` replicas each),
    ``workers > 1`` of them at a time in spawned processes with one torch thread each (each run is
    deterministic: the numbers do not depend on ``workers``); returns how many runs were simulated."""
    todo, seen = [], set()
    for ov in variants:
        seedless = ctx.settings(ov, quick)
        key = _replica_key(seedless, seeds)
        if key not in _CACHE and key not in seen:
            seen.add(key)
            todo.append((ctx.name, seedless, seeds))
    if not todo:
        return 0
    where = f" in {min(workers, len(todo))} processes" if workers > 1 else ""
    with progress.task(
        f"simulating {len(todo)} {ctx.name} runs of {seeds} replicas{where}", total=len(todo), unit="runs"
    ) as bar:
        if workers <= 1:
            done = map(_simulate_replicas, todo)
            for task, results in zip(todo, done):
                _CACHE[_replica_key(task[1], seeds)] = results
                bar.advance()
        else:
            with multiprocessing.get_context("spawn").Pool(min(workers, len(todo)), initializer=_worker_init) as pool:
                for task, results in zip(todo, pool.imap(_simulate_replicas, todo, chunksize=1)):
                    _CACHE[_replica_key(task[1], seeds)] = results
                    bar.advance()
    return len(todo)


def runs(overrides: dict, seeds: int, quick: bool, ctx: Context = BITSTRING) -> list[Run]:
    """The runs of seeds 0 … ``seeds`` − 1 of one variant (the uncached ones simulated as one batch; in
    a replica-seeds context, the ``seeds`` replicas of one run)."""
    if ctx.replica_seeds:
        prefetch_replicas([overrides], seeds, quick, ctx)
        return _CACHE[_replica_key(ctx.settings(overrides, quick), seeds)]  # type: ignore[return-value]
    prefetch([(overrides, s) for s in range(seeds)], quick)
    return [run(overrides, s, quick) for s in range(seeds)]


def null_variant(overrides: dict, ctx: Context) -> dict:
    """The override set of a replica-seeds context's null run of a variant (run seed :attr:`Context.null_seed`)."""
    return {**overrides, "run.seed": ctx.null_seed}


def null_runs(overrides: dict, seeds: int, quick: bool, ctx: Context = BITSTRING) -> list[Run]:
    """The runs of a variant on other sampling seeds, paired by index with :func:`runs`: seeds
    s + :data:`NULL_SEED_OFFSET` (bit-string), or the ``seeds`` replicas of the run with run seed
    :attr:`Context.null_seed` (a replica-seeds context)."""
    if ctx.replica_seeds:
        return runs(null_variant(overrides, ctx), seeds, quick, ctx)
    first = NULL_SEED_OFFSET
    prefetch([(overrides, s) for s in range(first, first + seeds)], quick)
    return [run(overrides, s, quick) for s in range(first, first + seeds)]


def with_collapse(rs: list[Run], stat) -> SeedValues:
    """``stat`` of each run, with which of them collapsed and diverged (:mod:`.seed_values`)."""
    flags = [r.collapse() for r in rs]
    return SeedValues(np.array([stat(r) for r in rs], dtype=float), [c for c, _ in flags], [d for _, d in flags])


def paired_with_collapse(first: list[Run], second: list[Run], stat) -> SeedValues:
    """``stat(a, b)`` of each pair of runs of one seed, a seed flagged when either run collapsed or diverged."""
    a, b = with_collapse(first, lambda r: 0.0), with_collapse(second, lambda r: 0.0)
    values = np.array([stat(x, y) for x, y in zip(first, second)], dtype=float)
    return SeedValues(values, a.collapsed | b.collapsed, a.diverged | b.diverged)


def per_seed(overrides: dict, seeds: int, quick: bool, stat, ctx: Context = BITSTRING) -> SeedValues:
    """``stat`` of each seed's run, with which of those runs collapsed and diverged (:mod:`.seed_values`:
    a row built from these values shows them in its "collapsed k/R" column)."""
    return with_collapse(runs(overrides, seeds, quick, ctx), stat)


def null_per_seed(overrides: dict, seeds: int, quick: bool, stat, ctx: Context = BITSTRING) -> SeedValues:
    """As :func:`per_seed`, on the variant's null runs (:func:`null_runs`: other sampling seeds)."""
    return with_collapse(null_runs(overrides, seeds, quick, ctx), stat)


def smooth(a: np.ndarray, window: int = 5) -> np.ndarray:
    """Trailing moving average over the finite values (NaN steps are skipped, not zeroed)."""
    out = np.full(len(a), np.nan)
    for i in range(len(a)):
        w = a[max(0, i - window + 1) : i + 1]
        w = w[np.isfinite(w)]
        if w.size:
            out[i] = w.mean()
    return out
