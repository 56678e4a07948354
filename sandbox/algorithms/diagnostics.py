"""Importance-sampling monitors (``docs/methods/corrections.md#tis``, ``docs/methods/stabilizers.md#vcpo_lr``;
``docs/theory.md#t8``).

All are computed without gradient from the *unclipped* full ratio ``ρ = π_θ/μ`` and reduce over the
trailing ``(N, T)`` (or ``(N,)``) dims only."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from sandbox.algorithms._tensor import seq_sum
from sandbox.base.lazy_torch import lazy_import

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())


def ess_ratio_from_log_weights(log_w: Tensor) -> Tensor:
    """``ESS/B = (Σ_i w_i)² / (B Σ_i w_i²)`` over the last dim, from ``log w_i`` (VCPO ``compute_ess_info``:
    per optimizer batch, unclipped sequence weights). Log-space, so huge weights do not overflow."""
    b = log_w.shape[-1]
    lw = log_w.detach()
    return torch.exp(2.0 * torch.logsumexp(lw, -1) - torch.logsumexp(2.0 * lw, -1) - math.log(b))


def ess_ratio(logp: Tensor, behaviour_logp: Tensor, mask: Tensor) -> Tensor:
    """Batch ESS ratio of the unclipped sequence ratios ``exp(Σ_t log π_θ − log μ)`` (VCPO), per replica.
    This is the quantity the ``vcpo_lr`` stabilizer expects in its step context."""
    fmask = mask.to(logp.dtype).expand_as(logp)
    return ess_ratio_from_log_weights(seq_sum((logp.detach() - behaviour_logp.detach()) * fmask, fmask))


def k3(log_r: Tensor) -> Tensor:
    """``k3 = r − 1 − log r`` with samples from the denominator policy (non-negative, unbiased for KL(q‖p))."""
    return torch.expm1(log_r) - log_r


def is_metrics(log_rho: Tensor, fmask: Tensor) -> dict[str, Tensor]:
    """Standard monitors of the learner/behaviour mismatch, per replica:

    * ``is/ess_ratio``, ``is/ess``: batch ESS of unclipped sequence ratios (VCPO);
    * ``is/chi2``: token-level ``E[ρ_t²] − 1`` (TIS blog's chi² monitor);
    * ``is/chi2_seq``: ``1/ess_ratio − 1`` (normalised second moment of the sequence weights);
    * ``is/kl_k3``: token mean of ``k3(ρ_t)``, estimating KL(μ‖π_θ) (behaviour vs learner);
    * ``is/log_ratio_mean``: mean of ``log π_θ − log μ`` over valid tokens.

    Each value is the one :func:`seq_sum` and :func:`token_mean` of ``x = log ρ · m`` give, to the bit:
    see :func:`masked_is_metrics`.
    """
    return masked_is_metrics(log_rho.detach() * fmask, fmask)


def masked_is_metrics(x: Tensor, fmask: Tensor) -> dict[str, Tensor]:
    """:func:`is_metrics` from ``x = log ρ · m``, a temporary of the caller's that it overwrites.

    The product ``x · m`` that the sequence sums and the token mean of ``x`` read is formed once
    (in ``x``), and the per-token terms are built in place on two more temporaries: ``(R, N, T)``
    tensors are the cost here, not the arithmetic.
    """
    capped = x.clamp(max=40.0)
    masked = x.mul_(fmask)
    seq = masked.sum(-1)
    ratio = ess_ratio_from_log_weights(seq)
    valid = fmask.sum((-2, -1)).clamp_min(1.0)
    kl = torch.expm1(capped).sub_(capped)  # k3 of the capped log-ratio
    second_moment = capped.mul_(2.0).exp_()  # exp(2 · capped)
    return {
        "is/ess_ratio": ratio,
        "is/ess": ratio * seq.shape[-1],
        "is/chi2": _token_mean_inplace(second_moment, fmask, valid) - 1.0,
        "is/chi2_seq": 1.0 / ratio.clamp_min(1e-30) - 1.0,
        "is/kl_k3": _token_mean_inplace(kl, fmask, valid),
        "is/log_ratio_mean": masked.sum((-2, -1)) / valid,
    }


def _token_mean_inplace(x: Tensor, fmask: Tensor, valid: Tensor) -> Tensor:
    """:func:`token_mean` of a temporary ``x`` the caller gives up (``valid``: its denominator)."""
    return x.mul_(fmask).sum((-2, -1)) / valid
