"""GAC (arXiv 2603.01501): the consecutive-gradient cosine under staleness, and what GAC does to it.

Scenario: ``scenarios/fixed_lag.toml`` with the ``methods_bitstring`` settings (bit-string H = 32,
GRPO, Adam lr 0.3, no off-policy correction; docs/claims.md#scenario), one run per seed.
Statistic: ``grad/cos_prev`` (cosine between the raw gradient and the previous step's raw gradient,
before any stabilizer) averaged over the steps after the first 16 (the warm-up where a fixed lag
reuses version 0) whose gradient is non-zero (a batch where every group has equal rewards has a
zero GRPO gradient and no defined cosine; a run with no such step gives NaN for that seed). Differences are paired by seed. Rows:

* sync cosine near 0: mean cosine of the synchronous run in [−0.1, 0.1];
* stale cosine persistently higher: cos(fixed lag 16) − cos(sync) > 0.1;
* GAC restores synchronous-like cosine: cos(GAC at lag 16) − cos(sync) < 0.1;
* GAC matches synchronous reward: final expected reward (GAC, lag 16) − (sync) > −0.05;
* mini-batch regime: cos(sync, ``algorithm.epochs = 4``) − cos(sync) > 0.1 (four passes over each
  batch: consecutive gradients share the batch, docs/system.md#mini-batches).
"""

from __future__ import annotations

import numpy as np

from . import _runs as R
from .base import ClaimResult, Curve, Row, band

WARMUP = 16
COS_MARGIN = 0.1
REWARD_MARGIN = 0.05


def _cos(run: R.Run) -> float:
    """Mean cosine over the steps ≥ WARMUP whose gradient is non-zero (a batch whose groups all have
    equal rewards has a zero GRPO gradient, where the cosine is undefined)."""
    cos = np.where(run.metrics["grad/norm"] > 0, run.metrics["grad/cos_prev"], np.nan)[WARMUP:]
    cos = cos[np.isfinite(cos)]
    return float(cos.mean()) if cos.size else float("nan")


VARIANTS = {
    "sync": R.SYNC,
    "fixed lag 16": R.lag(16),
    "GAC, lag 16": {**R.lag(16), **R.GAC},
    "sync, epochs 4": {**R.SYNC, "algorithm.epochs": 4},
}


def run(quick: bool = False, seeds: int = R.FULL_SEEDS) -> ClaimResult:
    cos = {name: R.per_seed(ov, seeds, quick, _cos) for name, ov in VARIANTS.items()}
    reward = {name: R.per_seed(VARIANTS[name], seeds, quick, R.Run.final_reward) for name in ("sync", "GAC, lag 16")}
    result = ClaimResult(
        name="gac_cosine",
        paper="GAC (arXiv 2603.01501)",
        definition=__doc__.split("\n\n", 1)[1].strip(),
        settings={name: R.settings(ov, quick) for name, ov in VARIANTS.items()},
        y_label="consecutive-gradient cosine grad/cos_prev (5-step mean)",
    )
    stat = f"mean grad/cos_prev over steps ≥ {WARMUP} with a non-zero gradient"
    result.rows = [
        Row("sync cosine near 0", stat + " (sync)", cos["sync"], (-COS_MARGIN, COS_MARGIN), "within"),
        Row("stale cosine higher than sync", "cos(lag 16) − cos(sync)", cos["fixed lag 16"] - cos["sync"], COS_MARGIN, ">"),
        Row("GAC restores sync-like cosine", "cos(GAC, lag 16) − cos(sync)", cos["GAC, lag 16"] - cos["sync"], COS_MARGIN, "<"),
        Row("GAC matches sync reward at lag 16", "final expected reward: GAC − sync", reward["GAC, lag 16"] - reward["sync"],
            -REWARD_MARGIN, ">"),
        Row("mini-batch (epochs 4) cosine higher", "cos(sync, E=4) − cos(sync)", cos["sync, epochs 4"] - cos["sync"], COS_MARGIN, ">"),
    ]
    for name, ov in VARIANTS.items():
        runs = R.runs(ov, seeds, quick)
        steps = runs[0].steps
        n = min(len(r.steps) for r in runs)
        per = np.array([R.smooth(r.metrics["grad/cos_prev"][:n]) for r in runs])
        m, lo, hi = band(per)
        result.curves.append(Curve(name, steps[:n].tolist(), m, lo, hi))
    return result
