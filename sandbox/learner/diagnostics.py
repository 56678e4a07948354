"""Per-replica gradient diagnostics: flattening per replica and cosines between rows
(importance-sampling monitors live in :mod:`sandbox.algorithms.diagnostics`)."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def flat_per_replica(tensors: list[Tensor], replicas: int) -> Tensor:
    """``(R, P)`` concatenation of tensors whose first dimension indexes replicas (a new tensor)."""
    return torch.cat([t.reshape(replicas, -1) for t in tensors], dim=1)


def flat_view(tensors: list[Tensor], replicas: int) -> Tensor:
    """:func:`flat_per_replica` for reading only: a single contiguous tensor is reshaped in place
    (same layout as the copy, so reductions over it give the same bits) instead of copied."""
    if len(tensors) == 1 and tensors[0].is_contiguous():
        return tensors[0].reshape(replicas, -1)
    return flat_per_replica(tensors, replicas)


def row_norms(x: Tensor) -> Tensor:
    """``(R,)`` Euclidean norm of each row of ``(R, n)``: ``x.norm(dim=1)``, whose ``'fro'`` norm over one
    dimension is ``torch.linalg.vector_norm(x, 2, [1])`` (``torch.functional.norm``, torch 2.x): the same
    kernel called without ``torch.norm``'s Python dispatch (a few µs a call, twice a learner step)."""
    return torch.linalg.vector_norm(x, 2, 1)


def cosine(a: Tensor, b: Tensor, a_norm: Tensor | None = None, b_norm: Tensor | None = None) -> Tensor:
    """``(R,)`` cosine between rows, ``a·b / (‖a‖ ‖b‖)``; NaN where either row is zero (the cosine is
    undefined there: a missing value, never 0, so that means over steps skip it rather than count a
    forced 0); ``a_norm``/``b_norm``: the rows' norms ``x.norm(dim=1)`` when the caller has them already."""
    a_norm = a.norm(dim=1) if a_norm is None else a_norm
    b_norm = b.norm(dim=1) if b_norm is None else b_norm
    denom = a_norm * b_norm
    return torch.where(denom > 0, (a * b).sum(1) / denom.clamp_min(1e-30), torch.full_like(denom, math.nan))
