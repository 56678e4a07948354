"""Whether a replica's run collapsed, from its evaluation curve: the rule ``sandbox preflight`` and the
``transfer_rule`` claim share (docs/preflight.md#the-plan-its-estimate-and-its-budget).

A replica **collapses** when it diverged (a hard limit of the learner) or when its final expected reward (the
mean of the last 10% of its evaluations) is more than min(:data:`COLLAPSE_DROP`, half its best) below its best:
the reward-collapse rule of the VCPO claim (``sandbox/claims/vcpo.py``) scaled for a task whose best reward is
small.
"""

from __future__ import annotations

import math

import numpy as np

COLLAPSE_DROP = 0.2
"""A replica collapses when its final expected reward is min(this, half its best) below its running maximum."""


def final_and_best(curve: np.ndarray) -> tuple[float, float, float]:
    """(start, final, best) of one replica's evaluation curve (NaN rows skipped): the first evaluation, the mean
    of the last 10% of evaluations, the maximum."""
    col = np.asarray(curve, float)
    col = col[np.isfinite(col)]
    if not len(col):
        return math.nan, math.nan, math.nan
    n = max(1, int(len(col) * 0.1))
    return float(col[0]), float(col[-n:].mean()), float(col.max())


def collapsed(curve: np.ndarray, diverged: bool) -> bool:
    """The collapse rule (module docstring) for one replica's evaluation curve."""
    _, final, best = final_and_best(curve)
    drop = min(COLLAPSE_DROP, 0.5 * best) if math.isfinite(best) else COLLAPSE_DROP
    return bool(diverged or not math.isfinite(final) or final < best - drop)


def replica_collapses(res) -> list[bool]:
    """Per replica of a run result: whether it collapsed, from ``eval/expected_reward`` and ``diverged_at``."""
    ev = res.replica_metrics["eval/expected_reward"]
    ev = ev[~np.isnan(ev).all(1)]
    return [collapsed(ev[:, r], res.diverged_at[r] >= 0) for r in range(ev.shape[1])]
