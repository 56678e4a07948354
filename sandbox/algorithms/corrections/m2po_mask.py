"""M2PO token masking, paper text / AReaL form (Zheng, Zhao, Chen arXiv 2510.01161;
``docs/methods/corrections.md#m2po_mask``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from sandbox.algorithms._tensor import token_mean
from sandbox.algorithms.base import MethodConfig
from sandbox.algorithms.corrections.base import CORRECTIONS, Correction, CorrectionContext, CorrectionResult
from sandbox.base.lazy_torch import lazy_import

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())


class M2POMaskConfig(MethodConfig):
    """M2PO token masking, paper text / AReaL style (Zheng, Zhao, Chen arXiv 2510.01161;
    docs/methods/corrections.md#m2po_mask): mask the fewest largest-δ² tokens so the mean δ² of the rest is
    below τ_M2."""

    name: Literal["m2po_mask"] = "m2po_mask"
    m2_threshold: float = Field(
        0.04, gt=0, description="τ_M2; 0.04 in all paper experiments (AReaL actor.m2_threshold)."
    )
    anchor: Literal["prox", "current"] = Field(
        "prox",
        description="δ = log π_anchor − log μ: 'prox' (AReaL; falls back to sg(π_θ) in bypass) or 'current' (paper: π_θ).",
    )
    behaviour_weight: bool = Field(
        True, description="Multiply kept tokens by w = π_prox/μ as decoupled PPO does (AReaL); False = mask only."
    )


def m2po_keep_mask(delta: Tensor, fmask: Tensor, threshold: float) -> Tensor:
    """M2PO token selection (Zheng, Zhao, Chen arXiv 2510.01161; AReaL ``_get_m2po_loss_mask``).

    Per replica, over all valid tokens j with ``q_j = δ_j²`` sorted descending, find the smallest k such
    that the mean of the remaining ``q_(k+1..n)`` is ``< threshold`` (if none, ``k = n − 1``: keep one
    token) and mask the k largest. Returns a 0/1 keep mask shaped like ``delta``.

    The sums of the remaining ``q`` are reversed cumulative sums (smallest terms first), not
    ``total − prefix``: with one dominant outlier the difference cancels in float32 (δ = [15, 0.001,
    0.0011], threshold 1.083e-6 would keep both small tokens although their mean δ² is 1.105e-6;
    AReaL 1.0.4 and float64 keep only the smaller one)."""
    shape = delta.shape
    q = (delta.detach() ** 2).flatten(-2)
    valid = fmask.expand(shape).flatten(-2) > 0
    key = torch.where(valid, q, torch.full_like(q, -1.0))
    sorted_key, order = torch.sort(key, dim=-1, descending=True)
    sorted_q = sorted_key.clamp_min(0.0)
    n = valid.sum(-1, keepdim=True)  # (..., 1)
    L = q.shape[-1]
    suffix = sorted_q.flip(-1).cumsum(-1).flip(-1)  # sum of sorted_q[k:], k=0..L-1
    k = torch.arange(L, device=q.device)
    remaining = (n - k).clamp_min(1)
    ok = (suffix / remaining < threshold) & (k < n)
    first = torch.where(ok, k.expand_as(ok), torch.full_like(ok, L, dtype=torch.long)).amin(-1, keepdim=True)
    k_star = torch.where(first >= L, (n - 1).clamp_min(0), first)
    rank = torch.empty_like(order)
    rank.scatter_(-1, order, k.expand_as(order).contiguous())
    keep = (rank >= k_star) & valid
    return keep.reshape(shape).to(fmask.dtype)


@CORRECTIONS.register(M2POMaskConfig)
class M2POMask(Correction):
    """``m2po_mask``: M2PO token masking as in the paper text and AReaL (docs/methods/corrections.md#m2po_mask).
    The mask comes from ``δ = log π_anchor − log μ`` (anchor π_prox, fixed for the step, or the current π_θ);
    kept tokens carry the behaviour weight ``w`` (decoupled PPO) unless ``behaviour_weight=False``. The paper's
    loss is this correction with an unclipped ratio objective (e.g. ``ppo`` with a huge ε)."""

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        delta = ctx.log_w if self.cfg.anchor == "prox" else ctx.log_rho
        keep = m2po_keep_mask(delta, ctx.fmask, self.cfg.m2_threshold)
        m2_before = token_mean(delta**2, ctx.fmask)
        m2_after = token_mean(delta**2, ctx.fmask * keep)
        return CorrectionResult(
            coef=ctx.log_w.exp() if self.cfg.behaviour_weight else None,
            mask=keep,
            metrics={"m2/value": m2_before, "m2/value_kept": m2_after},
        )
