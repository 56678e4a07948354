"""A synthetic correction for the component checker that reads token versions from the context:
coef_t = w_t · γ^lag_t, lag_t = learner version − version of token t (it declares nothing else)."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from sandbox.algorithms.base import MethodConfig
from sandbox.algorithms.corrections.base import CORRECTIONS, Correction, CorrectionContext, CorrectionResult


class SyntheticCorrectionConfig(MethodConfig):
    """Synthetic correction: the behaviour weight discounted by γ per version of token lag."""

    name: Literal["synthetic_correction"] = "synthetic_correction"
    gamma: float = Field(0.9, gt=0, le=1, description="Discount per version of lag.")


@CORRECTIONS.register(SyntheticCorrectionConfig)
class SyntheticCorrection(Correction):
    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        if ctx.token_versions is None:
            lag = torch.zeros_like(ctx.log_w)
        else:
            lag = (ctx.learner_version - ctx.token_versions).clamp_min(0).to(ctx.log_w.dtype).expand_as(ctx.log_w)
        coef = (ctx.log_w.exp() * self.cfg.gamma**lag).detach()
        lag_mean = (lag * ctx.fmask).sum((-2, -1)) / ctx.fmask.sum((-2, -1)).clamp_min(1)
        return CorrectionResult(coef=coef, metrics={"synthetic/lag_mean": lag_mean})
