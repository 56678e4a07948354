"""The learning runs the claims measure: the shipped ``scenarios/fixed_lag.toml`` (bit-string task,
H = 32, GRPO, Adam) with the settings of ``scenarios/sweeps/methods_bitstring.toml`` (lr 0.3,
evaluation every 5 steps, no correction unless a variant sets one), one run per seed.

Runs are deterministic, so a run shared by several claims (the synchronous reference, the
uncorrected k = 16 run) is simulated once per ``sandbox claims`` invocation (:func:`clear_cache`)."""

from __future__ import annotations

import json
import multiprocessing
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import torch

from ..runner import run_scenario
from ..scenario import load_scenario

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "fixed_lag.toml"
BASE_LR = 0.3
"""Adam learning rate of ``scenarios/sweeps/methods_bitstring.toml``."""
FULL_STEPS, QUICK_STEPS = 100, 40
FULL_SEEDS, QUICK_SEEDS = 8, 3

SYNC = {"system.staleness": {"kind": "sync"}}


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
    """What the claims read from one run: per-step metric arrays (NaN where not logged) and the summary."""

    steps: np.ndarray
    metrics: dict[str, np.ndarray]
    summary: dict

    def final_reward(self) -> float:
        """Expected reward of the policy (exact, ``eval/expected_reward``), mean of the last 10% of evaluations."""
        return float(self.summary["final_expected_reward"])

    def mean(self, name: str, skip: int = 0) -> float:
        a = self.metrics.get(name)
        if a is None:
            return float("nan")
        a = a[skip:]
        a = a[np.isfinite(a)]
        return float(a.mean()) if a.size else float("nan")


_CACHE: dict[str, Run] = {}
KEPT = ("grad/norm", "reward/mean", "eval/expected_reward", "is/ess_ratio", "grad/cos_prev", "lr/scale", "mask/frac", "staleness/mean")


def clear_cache() -> None:
    _CACHE.clear()


def settings(overrides: dict, quick: bool) -> dict:
    """The full override set of a variant (what docs/claims.md and claims.json record)."""
    return {"algorithm.optimizer.lr": BASE_LR, "run.eval_every": 5, "algorithm.correction": {"name": "none"},
            "run.steps": QUICK_STEPS if quick else FULL_STEPS, "run.figures": False, "run.record_events": False,
            **overrides}


def _key(full_overrides: dict) -> str:
    return json.dumps(full_overrides, sort_keys=True)


def _simulate(full_overrides: dict) -> Run:
    """Load the claims' scenario with the complete override set (seed included) and run it."""
    scn, _ = load_scenario(SCENARIO, full_overrides)
    res = run_scenario(scn)
    m = res.metrics
    return Run(m["step"].to_numpy(), {k: m[k].to_numpy(dtype=float) for k in KEPT if k in m}, res.summary)


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
    finds them in the cache; returns how many were simulated.

    ``workers > 1`` runs them in that many spawned processes with one torch thread each (as the
    ``sandbox claims`` command uses). Every run is deterministic and independent of the others, so the
    cached numbers are bitwise those :func:`run` computes in this process (checked by
    ``tests/claims/test_gac_search.py``). ``workers <= 1`` simply calls :func:`run` on each pair."""
    pairs = list(pairs)
    if workers <= 1:
        before = len(_CACHE)
        for overrides, seed in pairs:
            run(overrides, seed, quick)
        return len(_CACHE) - before
    todo: dict[str, dict] = {}
    for overrides, seed in pairs:
        full = {**settings(overrides, quick), "run.seed": seed}
        key = _key(full)
        if key not in _CACHE:
            todo.setdefault(key, full)
    if not todo:
        return 0
    with multiprocessing.get_context("spawn").Pool(min(workers, len(todo)), initializer=_worker_init) as pool:
        for key, result in zip(todo, pool.imap(_simulate, todo.values(), chunksize=1)):
            _CACHE[key] = result
    return len(todo)


def runs(overrides: dict, seeds: int, quick: bool) -> list[Run]:
    return [run(overrides, s, quick) for s in range(seeds)]


def per_seed(overrides: dict, seeds: int, quick: bool, stat) -> np.ndarray:
    return np.array([stat(r) for r in runs(overrides, seeds, quick)], dtype=float)


def smooth(a: np.ndarray, window: int = 5) -> np.ndarray:
    """Trailing moving average over the finite values (NaN steps are skipped, not zeroed)."""
    out = np.full(len(a), np.nan)
    for i in range(len(a)):
        w = a[max(0, i - window + 1): i + 1]
        w = w[np.isfinite(w)]
        if w.size:
            out[i] = w.mean()
    return out
