"""Geometric-mean rejection sampling, Geo-RS (``docs/methods/corrections.md#geo_mis``)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from sandbox.algorithms._tensor import seq_mean
from sandbox.algorithms.base import MethodConfig
from sandbox.algorithms.corrections.base import CORRECTIONS, Correction, CorrectionContext, CorrectionResult, to_tokens


class GeoMISConfig(MethodConfig):
    """Geometric-mean rejection (Geo-RS; docs/methods/corrections.md#geo_mis): mask response i if
    ``exp(mean_t log w_{i,t}) ∉ [lo, hi]``."""

    name: Literal["geo_mis"] = "geo_mis"
    lo: float = Field(0.999, gt=0, description="Lower edge; verl bypass preset 0.999 (SkyRL 0.99).")
    hi: float = Field(1.001, gt=0, description="Upper edge; verl bypass preset 1.001 (SkyRL 1.01).")
    token_weight: Literal["none", "tis"] = Field(
        "none", description="Surviving tokens keep weight 1 ('none': mask only) or token-TIS min(w_t, C)."
    )
    C: float = Field(2.0, gt=0, description="Token TIS cap when token_weight='tis' (TIS blog C=2).")

    @model_validator(mode="after")
    def _check(self):
        if self.lo >= self.hi:
            raise ValueError(f"geo_mis: empty band [lo={self.lo}, hi={self.hi}]")
        return self


@CORRECTIONS.register(GeoMISConfig)
class GeoMIS(Correction):
    """Geometric-mean rejection (Geo-RS; docs/methods/corrections.md#geo_mis; verl ``seq_mean_k1``, OpenRLHF
    ``seq-mask-tis``): mask response i if ``exp(mean_t log w_{i,t}) ∉ [lo, hi]``; survivors keep weight 1 or
    ``min(w_t, C)``."""

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        c = self.cfg
        g = seq_mean(ctx.log_w, ctx.fmask)
        keep = to_tokens((g >= math.log(c.lo)) & (g <= math.log(c.hi)), ctx.log_w).to(ctx.fmask.dtype)
        coef = ctx.log_w.clamp(max=math.log(c.C)).exp() if c.token_weight == "tis" else None
        return CorrectionResult(coef=coef, mask=keep, metrics={"is/geo_mean": g.exp().mean(-1)})
