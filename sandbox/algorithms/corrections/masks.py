"""Mask-type corrections: OPSM, M2PO token masking, prime-rl DPPO (``shared/reference/algorithms.md`` §2.6,
§3.2a, §3.6)."""

from __future__ import annotations

import torch
from torch import Tensor

from .._tensor import seq_mean, token_mean
from ..configs import DPPOMaskConfig, M2POMaskConfig, OPSMConfig
from .base import CorrectionContext, CorrectionResult


class OPSM:
    """Off-policy sequence masking (DeepSeek-V3.2, arXiv 2512.02556; TRL ``get_off_policy_mask``,
    slime ``compute_opsm_mask``): drop response i iff ``Â_i < 0`` and
    ``(1/|y^i|) Σ_t (log μ − log π_θ) > δ``."""

    def __init__(self, cfg: OPSMConfig):
        self.cfg = cfg

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        drift = -seq_mean(ctx.log_rho, ctx.fmask)
        drop = (ctx.adv < 0) & (drift > self.cfg.delta)
        mask = (~drop).unsqueeze(-1).expand_as(ctx.log_rho).to(ctx.fmask.dtype)
        return CorrectionResult(mask=mask, metrics={"opsm/drop_frac": drop.to(ctx.fmask.dtype).mean(-1)})


def m2po_keep_mask(delta: Tensor, fmask: Tensor, threshold: float) -> Tensor:
    """M2PO token selection (Zheng, Zhao, Chen arXiv 2510.01161; AReaL ``_get_m2po_loss_mask``).

    Per replica, over all valid tokens j with ``q_j = δ_j²`` sorted descending, find the smallest k such
    that the mean of the remaining ``q_(k+1..n)`` is ``< threshold`` (if none, ``k = n − 1``: keep one
    token) and mask the k largest. Returns a 0/1 keep mask shaped like ``delta``."""
    shape = delta.shape
    q = (delta.detach() ** 2).flatten(-2)
    valid = fmask.expand(shape).flatten(-2) > 0
    key = torch.where(valid, q, torch.full_like(q, -1.0))
    sorted_key, order = torch.sort(key, dim=-1, descending=True)
    sorted_q = sorted_key.clamp_min(0.0)
    n = valid.sum(-1, keepdim=True)  # (..., 1)
    L = q.shape[-1]
    total = sorted_q.sum(-1, keepdim=True)
    prefix = torch.cat([torch.zeros_like(total), sorted_q.cumsum(-1)[..., :-1]], dim=-1)  # sum of first k, k=0..L-1
    k = torch.arange(L, device=q.device)
    remaining = (n - k).clamp_min(1)
    ok = ((total - prefix) / remaining < threshold) & (k < n)
    first = torch.where(ok, k.expand_as(ok), torch.full_like(ok, L, dtype=torch.long)).amin(-1, keepdim=True)
    k_star = torch.where(first >= L, (n - 1).clamp_min(0), first)
    rank = torch.empty_like(order)
    rank.scatter_(-1, order, k.expand_as(order).contiguous())
    keep = (rank >= k_star) & valid
    return keep.reshape(shape).to(fmask.dtype)


class M2POMask:
    """``m2po_mask``: M2PO token masking as in the paper text and AReaL (algorithms.md §3.2a). The mask
    comes from ``δ = log π_anchor − log μ`` (anchor π_prox, fixed for the step, or the current π_θ);
    kept tokens carry the behaviour weight ``w`` (decoupled PPO) unless ``behaviour_weight=False``. The
    paper's loss is this correction with an unclipped ratio objective (e.g. ``ppo`` with a huge ε)."""

    def __init__(self, cfg: M2POMaskConfig):
        self.cfg = cfg

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


class DPPOMask:
    """prime-rl DPPO mask + KL (prime-rl ``default_loss_fn``; DPPO arXiv 2602.04879, Kimi-K2.5 arXiv 2602.02276):
    with ``Δp_t = π_θ(y_t) − μ(y_t)``, mask ``(Â > 0 and Δp > high) or (Â < 0 and Δp < −low)`` (``ipo``:
    ``|Δp| > 0.1``), scale the policy term by ``adv_tau`` and add ``kl_tau·(log ρ_t)²`` (gradient through ρ).
    The prime-rl loss itself is this correction on an unclipped ratio objective in bypass mode."""

    def __init__(self, cfg: DPPOMaskConfig):
        self.cfg = cfg

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        c = self.cfg
        dp = ctx.logp.detach().exp() - ctx.behaviour_logp.detach().exp()
        a = ctx.adv.unsqueeze(-1).expand_as(dp)
        if c.variant == "dppo":
            high = (a > 0) & (dp > c.dppo_mask_high)
            low = (a < 0) & (dp < -c.dppo_mask_low)
        else:
            high = dp > c.ipo_threshold
            low = dp < -c.ipo_threshold
        masked = high | low
        log_rho = ctx.logp - ctx.behaviour_logp.detach()
        return CorrectionResult(
            mask=(~masked).to(ctx.fmask.dtype),
            pg_scale=c.adv_tau,
            penalty=c.kl_tau * log_rho**2,
            metrics={
                "dppo/masked_low": token_mean(low.to(dp.dtype), ctx.fmask),
                "dppo/masked_high": token_mean(high.to(dp.dtype), ctx.fmask),
            },
        )
