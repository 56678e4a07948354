"""IcePop band masking (Ring-1T, arXiv 2510.18855; ``docs/methods/corrections.md#icepop``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from sandbox.algorithms.base import MethodConfig
from sandbox.algorithms.corrections.base import (
    CORRECTIONS,
    Correction,
    CorrectionContext,
    CorrectionResult,
    log_or_neg_inf,
)


class IcePopConfig(MethodConfig):
    """IcePop (Ring-1T, arXiv 2510.18855; docs/methods/corrections.md#icepop):
    ``coef_t = w_t·1[α ≤ w_t ≤ β]``."""

    name: Literal["icepop"] = "icepop"
    alpha: float = Field(0.5, ge=0, description="Lower band edge; OpenRLHF/verl preset 0.5 [unverified vs paper].")
    beta: float = Field(5.0, gt=0, description="Upper band edge; OpenRLHF/verl preset 5 [unverified vs paper].")

    @model_validator(mode="after")
    def _check(self):
        if self.alpha >= self.beta:
            raise ValueError(f"icepop: empty band [alpha={self.alpha}, beta={self.beta}]")
        return self


@CORRECTIONS.register(IcePopConfig)
class IcePop(Correction):
    """IcePop (Ring-1T, arXiv 2510.18855): ``coef_t = w_t`` if ``α ≤ w_t ≤ β`` else 0 (defaults [0.5, 5])."""

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        keep = (ctx.log_w >= log_or_neg_inf(self.cfg.alpha)) & (ctx.log_w <= log_or_neg_inf(self.cfg.beta))
        return CorrectionResult(coef=ctx.log_w.exp(), mask=keep.to(ctx.fmask.dtype))
