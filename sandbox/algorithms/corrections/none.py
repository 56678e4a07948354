"""``none``: no correction (``docs/methods/corrections.md#none``)."""

from __future__ import annotations

from typing import Literal

from sandbox.algorithms.base import MethodConfig
from sandbox.algorithms.corrections.base import CORRECTIONS, Correction, CorrectionContext, CorrectionResult


class NoCorrectionConfig(MethodConfig):
    """No correction: the objective's own ratio (π_θ/μ in bypass mode, π_θ/π_prox in decoupled mode)."""

    name: Literal["none"] = "none"


@CORRECTIONS.register(NoCorrectionConfig)
class NoCorrection(Correction):
    """``none``: the objective's own ratio is the only importance weight."""

    is_identity = True

    def __init__(self, cfg=None):
        super().__init__(cfg)

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        return CorrectionResult()
