"""Tapered off-policy REINFORCE (Le Roux et al. arXiv 2503.14286; ``docs/methods/corrections.md#topr``)."""

from __future__ import annotations

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
from sandbox.base.lazy_torch import lazy_import

torch = lazy_import("torch", globals())


class TOPRConfig(MethodConfig):
    """Tapered off-policy REINFORCE (Le Roux et al. arXiv 2503.14286; docs/methods/corrections.md#topr):
    ``c_i = 1`` if ``R_i ≥ 0`` else ``sg(clamp(π_θ(y)/μ(y), 0, 1))``. Pair with ``reinforce``."""

    name: Literal["topr"] = "topr"
    level: Level = Field("sequence", description="sequence (paper) or token (ROLL's variant).")
    split_on: Literal["reward", "advantage"] = Field(
        "reward", description="Sign test on R (paper; baseline shifts R) or on the advantage."
    )
    positive_weight: float = Field(1.0, ge=0, description="ROLL topr_positive_weight (default 1.0).")
    negative_weight: float = Field(1.0, ge=0, description="ROLL topr_negative_weight (default 1.0).")


@CORRECTIONS.register(TOPRConfig)
class TOPR(Correction):
    """Tapered off-policy REINFORCE (Le Roux et al. arXiv 2503.14286): ``c_i = 1`` for ``R_i ≥ 0`` and
    ``sg(clamp(π_θ(y^i)/μ(y^i), 0, 1))`` for ``R_i < 0`` (sequence level; ROLL's token-level variant
    clamps ``w_t``). ROLL's positive/negative weights scale the two parts."""

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        c = self.cfg
        sign_src = ctx.rewards if c.split_on == "reward" else ctx.adv
        pos = to_tokens(sign_src >= 0, ctx.log_w)
        if c.level == "sequence":
            neg_w = to_tokens(ctx.seq_log_w().clamp(max=0.0).exp(), ctx.log_w)
        else:
            neg_w = ctx.log_w.clamp(max=0.0).exp()
        coef = torch.where(pos, torch.full_like(neg_w, c.positive_weight), c.negative_weight * neg_w)
        trunc = ((~pos) & (neg_w < 1.0) & (ctx.fmask > 0)).to(ctx.fmask.dtype)
        n_neg = ((~pos) & (ctx.fmask > 0)).to(ctx.fmask.dtype).sum((-2, -1))
        return CorrectionResult(
            coef=coef,
            metrics={
                "topr/neg_frac": (~pos[..., 0]).to(ctx.fmask.dtype).mean(-1),
                "topr/neg_truncated_frac": trunc.sum((-2, -1)) / n_neg.clamp_min(1.0),
            },
        )
