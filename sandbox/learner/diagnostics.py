"""Per-replica gradient diagnostics: flattening per replica and cosines between rows
(importance-sampling monitors live in :mod:`sandbox.algorithms.diagnostics`)."""

from __future__ import annotations

import torch
from torch import Tensor


def flat_per_replica(tensors: list[Tensor], replicas: int) -> Tensor:
    """``(R, P)`` concatenation of tensors whose first dimension indexes replicas."""
    return torch.cat([t.reshape(replicas, -1) for t in tensors], dim=1)


def cosine(a: Tensor, b: Tensor) -> Tensor:
    """``(R,)`` cosine between rows (0 where either row is zero)."""
    denom = a.norm(dim=1) * b.norm(dim=1)
    return torch.where(denom > 0, (a * b).sum(1) / denom.clamp_min(1e-30), torch.zeros_like(denom))
