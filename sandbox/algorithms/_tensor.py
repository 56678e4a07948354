"""Shape helpers shared by the losses: group views, masked sums and the four aggregation modes.

Every function reduces over the trailing ``(N, T)`` or ``(N,)`` dimensions only, so any number of
leading replica dimensions passes through untouched (``docs/methods/objectives.md#aggregation``).
"""

from __future__ import annotations

import functools
from typing import Literal

from sandbox.base.lazy_torch import lazy_import

torch = lazy_import("torch", globals())
Tensor = lazy_import("torch:Tensor", globals())

Aggregation = Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"]


def group_view(x: Tensor, group_size: int) -> Tensor:
    """``(..., N)`` → ``(..., N // G, G)``; groups are contiguous blocks of ``G`` along ``N``."""
    n = x.shape[-1]
    if group_size < 1 or n % group_size != 0:
        raise ValueError(f"N={n} responses cannot be split into groups of group_size={group_size}")
    return x.reshape(*x.shape[:-1], n // group_size, group_size)


def ungroup(x: Tensor) -> Tensor:
    """Inverse of :func:`group_view`."""
    return x.reshape(*x.shape[:-2], x.shape[-2] * x.shape[-1])


def seq_sum(x: Tensor, fmask: Tensor) -> Tensor:
    """``Σ_t m_{i,t} x_{i,t}``: ``(..., N, T)`` → ``(..., N)``."""
    return (x * fmask).sum(-1)


def seq_len(fmask: Tensor) -> Tensor:
    """Number of valid tokens per response, ``(..., N)`` (float)."""
    return fmask.sum(-1)


def seq_mean(x: Tensor, fmask: Tensor) -> Tensor:
    """``(1/|y_i|) Σ_t m x``: ``(..., N, T)`` → ``(..., N)`` (0 for empty responses)."""
    return seq_sum(x, fmask) / seq_len(fmask).clamp_min(1.0)


def token_mean(x: Tensor, fmask: Tensor) -> Tensor:
    """Mean over all valid tokens of the batch: ``(..., N, T)`` → ``(...)``."""
    return (x * fmask).sum((-2, -1)) / fmask.sum((-2, -1)).clamp_min(1.0)


def aggregate(per_token: Tensor, fmask: Tensor | None, mode: Aggregation, max_len: int | None = None) -> Tensor:
    """Turn per-token losses ``ℓ_{i,t}`` into one loss per replica (``docs/methods/objectives.md#aggregation``).

    * ``token_mean``: ``Σ m ℓ / Σ m`` (DAPO, CISPO, verl default);
    * ``seq_mean_token_mean``: ``(1/B) Σ_i Σ_t m ℓ / Σ_t m`` (GRPO, GSPO, VCPO);
    * ``seq_mean_token_sum``: ``(1/B) Σ_i Σ_t m ℓ`` (REINFORCE on the sequence log-prob);
    * ``seq_mean_token_sum_norm``: ``Σ m ℓ / (B · L_const)`` with ``L_const = max_len`` or the
      padded length ``T`` when ``max_len`` is None (Dr.GRPO).

    ``fmask = None``: every token valid (a mask of ones). ``seq_mean_token_sum`` then sums ``ℓ`` itself, the
    values and gradient of ``ℓ · 1.0``; the other modes take the mask of ones. With one position per response
    (``T = 1``) in one contiguous block that is one mean over ``(N, 1)``: torch sums a dimension of one as
    ``0 + x`` (``x``, and −0.0 as +0.0) and reduces the contiguous ``N × 1`` values as it reduces the contiguous
    ``N`` sums, so the mean over both dimensions is ``sum(-1).mean(-1)`` to the bit, values and gradient, with
    one autograd node instead of two (a strided view is reduced in another order: it takes the two steps).
    """
    if fmask is None:
        if mode == "seq_mean_token_sum":
            if per_token.shape[-1] == 1 and per_token.is_contiguous():
                return per_token.mean((-2, -1))
            return per_token.sum(-1).mean(-1)
        fmask = torch.ones_like(per_token)
    n = per_token.shape[-2]
    if mode == "token_mean":
        return token_mean(per_token, fmask)
    if mode == "seq_mean_token_mean":
        return seq_mean(per_token, fmask).mean(-1)
    if mode == "seq_mean_token_sum":
        return seq_sum(per_token, fmask).mean(-1)
    if mode == "seq_mean_token_sum_norm":
        length = float(max_len if max_len is not None else per_token.shape[-1])
        return (per_token * fmask).sum((-2, -1)) / (n * length)
    raise ValueError(f"unknown aggregation mode {mode!r}")


def masked_frac(flag: Tensor, fmask: Tensor) -> Tensor:
    """Fraction of valid tokens where ``flag`` holds, per replica."""
    return token_mean(as_float(flag, fmask.dtype), fmask)


def float_flag(compare, a: Tensor, b: Tensor) -> Tensor:
    """``compare(a, b)`` (``torch.gt``, ``torch.lt`` …) as 1.0 / 0.0 in ``a``'s dtype: written by the
    comparison itself, which on CPU costs a fraction of a bool result and its conversion."""
    return compare(a, b, out=torch.empty(0, dtype=a.dtype, device=a.device))  # resized to the broadcast shape


def as_float(flag: Tensor, dtype: torch.dtype) -> Tensor:
    """A bool tensor as 0/1 in ``dtype``, read through its bytes: torch's CPU conversion from bool is
    several times slower than from uint8, and a bool is stored as the byte 0 or 1 (same numbers)."""
    return (flag.view(torch.uint8) if flag.dtype == torch.bool else flag).to(dtype)


def replica_sum(x: Tensor, replica_dims: int) -> Tensor:
    """Sum over every dimension after the first ``replica_dims`` (scalar if ``replica_dims == 0``)."""
    dims = tuple(range(replica_dims, x.dim()))
    return x.sum(dims) if dims else x


def replica_view(scale: Tensor | float, like: Tensor, replica_dims: int) -> Tensor | float:
    """Reshape a per-replica tensor ``(R...)`` so it broadcasts against ``like`` ``(R..., *shape)``."""
    if not isinstance(scale, Tensor) or replica_dims == 0:
        return scale
    return scale.reshape(*scale.shape, *([1] * (like.dim() - scale.dim())))


def as_tensor(x, like: Tensor) -> Tensor:
    """Float tensor on ``like``'s device/dtype."""
    return torch.as_tensor(x, dtype=like.dtype, device=like.device)


@functools.cache
def _maximum_function() -> type:
    """The autograd function of :func:`maximum`, defined at its first use: it subclasses
    ``torch.autograd.Function``, and this module loads without torch."""

    class _Maximum(torch.autograd.Function):
        """``torch.maximum`` with torch's own gradient, ``where(a == b, g/2, g)`` masked to 0 where the
        other input is larger, computed with that shared ``where`` once instead of once per input."""

        @staticmethod
        def forward(ctx, a: Tensor, b: Tensor) -> Tensor:
            ctx.save_for_backward(a, b)
            return torch.maximum(a, b)

        @staticmethod
        def backward(ctx, grad: Tensor):
            a, b = ctx.saved_tensors
            shared = torch.where(a == b, grad / 2, grad)
            grad_a = shared.masked_fill(a < b, 0) if ctx.needs_input_grad[0] else None
            grad_b = shared.masked_fill_(a > b, 0) if ctx.needs_input_grad[1] else None
            return grad_a, grad_b

    return _Maximum


_FUSED_MAXIMUM_MIN_SIZE = 1 << 14
"""Below this many elements the Python backward costs more than the passes it saves."""


def maximum(a: Tensor, b: Tensor) -> Tensor:
    """Element-wise maximum of two tensors of one shape and dtype, with the values and gradients of
    ``torch.maximum`` to the bit and a backward of fewer full-size passes; other inputs (broadcast,
    mixed dtypes, no gradient, small) go to ``torch.maximum`` itself."""
    if (
        a.shape != b.shape
        or a.dtype != b.dtype
        or not (a.requires_grad or b.requires_grad)
        or a.numel() < _FUSED_MAXIMUM_MIN_SIZE
    ):
        return torch.maximum(a, b)
    return _maximum_function().apply(a, b)
