"""Truncated importance sampling, token and sequence level (``docs/methods/corrections.md#tis``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from sandbox.algorithms._tensor import masked_frac
from sandbox.algorithms.base import MethodConfig
from sandbox.algorithms.corrections.base import (
    CORRECTIONS,
    Correction,
    CorrectionContext,
    CorrectionResult,
    Level,
    log_or_neg_inf,
    seq_frac,
    to_tokens,
)


class TISConfig(MethodConfig):
    """Truncated importance sampling (Yao, Liu et al., blog Aug 2025; docs/methods/corrections.md#tis):
    token ``sg(clamp(w_t, C_low, C))``, sequence ``sg(clamp(Π_t w_t, C_low, C))``."""

    name: Literal["tis"] = "tis"
    level: Level = Field("token", description="token (TIS blog) or sequence (VCPO).")
    C: float | None = Field(
        None, gt=0, description="Cap; None → 2.0 at token level (TIS blog) and 8.0 at sequence level (VCPO)."
    )
    C_low: float = Field(0.0, ge=0.0, description="Optional floor (0 = none, the common setting).")

    @property
    def cap(self) -> float:
        return self.C if self.C is not None else (2.0 if self.level == "token" else 8.0)

    @model_validator(mode="after")
    def _check(self):
        if self.C is not None and self.C_low > self.C:
            raise ValueError(f"tis: C_low={self.C_low} exceeds C={self.C}")
        return self


@CORRECTIONS.register(TISConfig)
class TIS(Correction):
    """Truncated IS (Yao, Liu et al., "Your Efficient RL Framework Secretly Brings You Off-Policy RL
    Training", Aug 2025; VCPO arXiv 2602.17616 for the sequence form):

    * token: ``coef_t = clamp(w_t, C_low, C)`` (default C = 2);
    * sequence: ``coef_{i,t} = clamp(Π_t w_{i,t}, C_low, C)`` (default C = 8, VCPO).
    Computed in log space so long sequences do not overflow."""

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        lo, hi = log_or_neg_inf(self.cfg.C_low), log_or_neg_inf(self.cfg.cap)
        if self.cfg.level == "token":
            coef = ctx.log_w.clamp(lo, hi).exp()
            trunc = masked_frac(ctx.log_w > hi, ctx.fmask)
        else:
            log_seq = ctx.seq_log_w()
            coef = to_tokens(log_seq.clamp(lo, hi).exp(), ctx.log_w)
            trunc = seq_frac(log_seq > hi)
        return CorrectionResult(coef=coef, metrics={"is/trunc_frac": trunc})
