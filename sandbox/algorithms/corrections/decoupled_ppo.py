"""AReaL decoupled PPO behaviour weight with rejection (``docs/methods/corrections.md#decoupled_ppo``)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from sandbox.algorithms.base import MethodConfig
from sandbox.algorithms.corrections.base import (
    CORRECTIONS,
    Correction,
    CorrectionContext,
    CorrectionResult,
    Level,
    to_tokens,
)


class DecoupledPPOConfig(MethodConfig):
    """AReaL decoupled PPO (Fu et al. arXiv 2505.24298; Hilton et al. arXiv 2110.00641;
    docs/methods/corrections.md#decoupled_ppo): the per-token loss is weighted by ``sg(w_t)``, ``w = π_prox/μ``,
    with rejection where ``w_t > cap``; the trust region (objective's clip) is anchored at π_prox. Pair with the
    ``ppo`` objective."""

    name: Literal["decoupled_ppo"] = "decoupled_ppo"
    behave_imp_weight_cap: float = Field(5.0, gt=0, description="Reject tokens with w_t > cap; AReaL examples 5.0.")
    level: Level = Field("token", description="Rejection at token level (AReaL default) or whole sequence.")
    require_prox: bool = Field(
        False, description="Raise if prox_logp is missing (otherwise bypass: w = sg(π_θ)/μ, A-3PO-like)."
    )


@CORRECTIONS.register(DecoupledPPOConfig)
class DecoupledPPO(Correction):
    """AReaL decoupled PPO (Fu et al. arXiv 2505.24298, objective of Hilton et al. arXiv 2110.00641;
    AReaL ``apply_rejection_sampling``/``ppo_actor_loss_fn``): weight ``sg(w_t)``, ``w = π_prox/μ``, with
    tokens (or whole responses) whose ``w_t > cap`` rejected; the token count before rejection stays
    the denominator. The objective's clip (``ppo``) supplies the trust region around π_prox."""

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        if self.cfg.require_prox and not ctx.decoupled:
            raise ValueError("decoupled_ppo: require_prox=True but PolicyLossInput.prox_logp is None")
        over = (ctx.log_w > math.log(self.cfg.behave_imp_weight_cap)) & (ctx.fmask > 0)
        if self.cfg.level == "sequence":
            over = to_tokens(over.any(-1), ctx.log_w)
        return CorrectionResult(
            coef=ctx.log_w.exp(),
            mask=(~over).to(ctx.fmask.dtype),
            metrics={
                "is/behave_approx_kl": (ctx.log_w * ctx.fmask).sum((-2, -1)) / ctx.fmask.sum((-2, -1)).clamp_min(1.0)
            },
        )
