"""Off-policy sequence masking (DeepSeek-V3.2, arXiv 2512.02556; ``docs/methods/corrections.md#opsm``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandbox.algorithms._tensor import seq_mean
from sandbox.algorithms.base import MethodConfig
from sandbox.algorithms.corrections.base import CORRECTIONS, Correction, CorrectionContext, CorrectionResult


class OPSMConfig(MethodConfig):
    """Off-policy sequence masking (DeepSeek-V3.2, arXiv 2512.02556; docs/methods/corrections.md#opsm):
    drop response i iff ``Â_i < 0`` and ``mean_t (log μ − log π_θ) > δ``."""

    name: Literal["opsm"] = "opsm"
    delta: float = Field(1e-4, description="δ; slime default 1e-4 (TRL docs example 0.5). Task dependent.")


@CORRECTIONS.register(OPSMConfig)
class OPSM(Correction):
    """Off-policy sequence masking (DeepSeek-V3.2, arXiv 2512.02556; TRL ``get_off_policy_mask``,
    slime ``compute_opsm_mask``): drop response i iff ``Â_i < 0`` and
    ``(1/|y^i|) Σ_t (log μ − log π_θ) > δ``."""

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        drift = -seq_mean(ctx.log_rho, ctx.fmask)
        drop = (ctx.adv < 0) & (drift > self.cfg.delta)
        mask = (~drop).unsqueeze(-1).expand_as(ctx.log_rho).to(ctx.fmask.dtype)
        return CorrectionResult(mask=mask, metrics={"opsm/drop_frac": drop.to(ctx.fmask.dtype).mean(-1)})
