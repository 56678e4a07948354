"""The learning runs the claims measure: the shipped ``scenarios/fixed_lag.toml`` (bit-string task,
H = 32, GRPO, Adam) with the settings of ``scenarios/sweeps/methods_bitstring.toml`` (lr 0.3,
evaluation every 5 steps, no correction unless a variant sets one), one run per seed.

Runs are deterministic, so a run shared by several claims (the synchronous reference, the
uncorrected k = 16 run) is simulated once per ``sandbox claims`` invocation (:func:`clear_cache`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

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


def run(overrides: dict, seed: int, quick: bool) -> Run:
    """One run of the claims' scenario with ``overrides`` and ``run.seed = seed`` (cached)."""
    ov = {**settings(overrides, quick), "run.seed": seed}
    key = json.dumps(ov, sort_keys=True)
    if key not in _CACHE:
        scn, _ = load_scenario(SCENARIO, ov)
        res = run_scenario(scn)
        m = res.metrics
        _CACHE[key] = Run(m["step"].to_numpy(), {k: m[k].to_numpy(dtype=float) for k in KEPT if k in m}, res.summary)
    return _CACHE[key]


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
