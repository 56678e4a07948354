"""prime-rl DPPO mask + KL (prime-rl ``default_loss_fn``; arXiv 2602.04879;
``docs/methods/corrections.md#dppo_mask``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandbox.algorithms._tensor import token_mean
from sandbox.algorithms.base import MethodConfig
from sandbox.algorithms.corrections.base import CORRECTIONS, Correction, CorrectionContext, CorrectionResult


class DPPOMaskConfig(MethodConfig):
    """prime-rl DPPO mask + KL (prime-rl ``default_loss_fn``; arXiv 2602.04879;
    docs/methods/corrections.md#dppo_mask): mask tokens whose probability moved too far in the advantage
    direction, add ``kl_tau·(log ρ)²``."""

    name: Literal["dppo_mask"] = "dppo_mask"
    variant: Literal["dppo", "ipo"] = Field(
        "dppo", description="dppo: sign-aware Δp mask; ipo: symmetric |Δp| > ipo_threshold."
    )
    dppo_mask_low: float = Field(0.2, ge=0, description="prime-rl default 0.2.")
    dppo_mask_high: float = Field(0.2, ge=0, description="prime-rl default 0.2.")
    ipo_threshold: float = Field(0.1, ge=0, description="prime-rl ipo variant 0.1.")
    adv_tau: float = Field(1.0, ge=0, description="prime-rl adv_tau = 1.0 (scales the policy-gradient term).")
    kl_tau: float = Field(1e-3, ge=0, description="prime-rl kl_tau = 1e-3 (weight of (log ρ)²).")


@CORRECTIONS.register(DPPOMaskConfig)
class DPPOMask(Correction):
    """prime-rl DPPO mask + KL (prime-rl ``default_loss_fn``; DPPO arXiv 2602.04879, Kimi-K2.5 arXiv 2602.02276):
    with ``Δp_t = π_θ(y_t) − μ(y_t)``, mask ``(Â > 0 and Δp > high) or (Â < 0 and Δp < −low)`` (``ipo``:
    ``|Δp| > 0.1``), scale the policy term by ``adv_tau`` and add ``kl_tau·(log ρ_t)²`` (gradient through ρ).
    The prime-rl loss itself is this correction on an unclipped ratio objective in bypass mode."""

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
