"""Collapsed replicas: the replicas a mean over replicas would hide.

A replica has **collapsed** when it diverged (``diverged_at >= 0``: a hard limit or the growth rule,
``docs/time_to_target.md#divergence``), or when its final reward is below :data:`FLOOR` while its
gradient norm is exactly zero over the last :data:`WINDOW` logged steps: the policy sits at a dead end
where every group has equal rewards (GRPO's advantages vanish), so it will never learn again. A
replica that solved the task also has a zero gradient, hence the floor. The final reward is the tail
mean (last 10% of the logged evaluations) of ``eval/expected_reward``, or ``reward/mean`` without
evaluations; a run without a reward (a loss) counts divergence only (``docs/time_to_target.md#collapse``).

**Preflight's rule** (:func:`reward_dropped`, shared by ``sandbox preflight`` and the ``transfer_rule`` claim,
docs/preflight.md): a replica collapses when it diverged or when its final expected reward (the mean of the last
10% of its evaluations) is more than min(:data:`COLLAPSE_DROP`, half its best) below its best — the
reward-collapse rule of the VCPO claim (``sandbox/claims/vcpo.py``) scaled for a task whose best reward is small.
It catches a run that learned and then fell; the rule above catches a run that is dead.
"""

from __future__ import annotations

import math

import numpy as np

FLOOR = 0.05
"""A final reward below this, with a zero gradient norm, is a collapse (rewards in [0, 1])."""
WINDOW = 10
"""Logged steps over which the gradient norm must be exactly zero."""
REWARD_KEYS = ("eval__expected_reward", "reward__mean")
"""Per-replica reward arrays of ``replicas.npz`` / ``RunResult.replica_metrics``, in order of preference."""


def _tail_mean(column: np.ndarray, frac: float = 0.1) -> float:
    x = column[np.isfinite(column)]
    if not len(x):
        return math.nan
    return float(x[-max(1, int(len(x) * frac)) :].mean())


def collapsed(diverged_at, replica_metrics: dict[str, np.ndarray]) -> list[bool]:
    """Per replica, whether it collapsed (module docstring). ``replica_metrics``: ``(steps, R)`` arrays
    keyed by metric (``eval/expected_reward``, ``grad/norm``, ...; or as in ``replicas.npz``, ``/`` as ``__``)."""
    at = [int(s) for s in diverged_at]
    replica_metrics = {k.replace("/", "__"): v for k, v in replica_metrics.items()}  # a run's keys or replicas.npz's
    reward = next((replica_metrics[k] for k in REWARD_KEYS if k in replica_metrics), None)
    grad = replica_metrics.get("grad__norm")
    out = []
    for r, d in enumerate(at):
        if d >= 0:
            out.append(True)
            continue
        if reward is None or grad is None or reward.ndim != 2 or r >= reward.shape[1]:
            out.append(False)
            continue
        g = grad[:, r][np.isfinite(grad[:, r])][-WINDOW:]
        dead = len(g) >= WINDOW and bool(np.all(g == 0.0))
        out.append(dead and _tail_mean(reward[:, r]) < FLOOR)
    return out


def cell(k: int | None, replicas: int | None) -> str:
    """``k/R`` for a table ("-" when unknown)."""
    return "-" if k is None or not replicas else f"{k}/{replicas}"


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


def reward_dropped(curve: np.ndarray, diverged: bool) -> bool:
    """Preflight's collapse rule (module docstring) for one replica's evaluation curve."""
    _, final, best = final_and_best(curve)
    drop = min(COLLAPSE_DROP, 0.5 * best) if math.isfinite(best) else COLLAPSE_DROP
    return bool(diverged or not math.isfinite(final) or final < best - drop)


def replica_reward_drops(res) -> list[bool]:
    """Per replica of a run result: whether it collapsed by preflight's rule, from ``eval/expected_reward`` and ``diverged_at``."""
    ev = res.replica_metrics["eval/expected_reward"]
    ev = ev[~np.isnan(ev).all(1)]
    return [reward_dropped(ev[:, r], res.diverged_at[r] >= 0) for r in range(ev.shape[1])]
