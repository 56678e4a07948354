"""Collapsed replicas: the replicas a mean over replicas would hide.

A replica has **collapsed** when it diverged (``diverged_at >= 0``: a hard limit or the growth rule,
``docs/time_to_target.md#divergence``), or when its final reward is below :data:`FLOOR` while its
gradient norm is exactly zero over the last :data:`WINDOW` logged steps: the policy sits at a dead end
where every group has equal rewards (GRPO's advantages vanish), so it will never learn again. A
replica that solved the task also has a zero gradient, hence the floor. The final reward is the tail
mean (last 10% of the logged evaluations) of ``eval/expected_reward``, or ``reward/mean`` without
evaluations; a run without a reward (a loss) counts divergence only (``docs/time_to_target.md#collapse``).
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
    return float(x[-max(1, int(len(x) * frac)):].mean())


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
