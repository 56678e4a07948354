"""VCPO's ESS-driven learning-rate control (Huang et al. arXiv 2602.17616; code mit-han-lab/vcpo
``compute_ess_info``): ``docs/methods/stabilizers.md#vcpo_lr``.

    s = sqrt(min(1, ρ_ess/ρ_ref))   (mode sqrt)   or   min(1, ρ_ess/ρ_ref)   (mode linear)

multiplies this step's update only; the base learning rate is untouched for the next step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from sandbox.algorithms.base import MethodConfig
from sandbox.algorithms.stabilizers.base import STABILIZERS, Stabilizer
from sandbox.base.lazy_torch import lazy_import

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())


class VCPOLRConfig(MethodConfig):
    """VCPO ESS learning-rate control (Huang et al. arXiv 2602.17616; ``docs/methods/stabilizers.md#vcpo_lr``):
    ``η_t = η_base·sqrt(min(1, ρ_ess/ρ_ref))`` (or linear) for this step only."""

    name: Literal["vcpo_lr"] = "vcpo_lr"
    rho_ref: float = Field(1.0, gt=0, description="ρ_ref; 1.0 in VCPO's GSM8K/MATH scripts (0.55 multi-turn).")
    mode: Literal["sqrt", "linear"] = Field("sqrt", description="sqrt (VCPO default) or linear.")


def vcpo_lr_multiplier(ess_ratio: Tensor | float, rho_ref: float = 1.0, mode: str = "sqrt") -> Tensor:
    """``sqrt(min(1, ρ_ess/ρ_ref))`` (default) or ``min(1, ρ_ess/ρ_ref)`` (``linear``); no smoothing, no floor.
    ``ρ_ess`` is the batch ESS ratio of *unclipped* sequence weights (``is/ess_ratio`` of the loss)."""
    x = torch.as_tensor(ess_ratio, dtype=torch.get_default_dtype()).detach()
    m = (x / rho_ref).clamp(max=1.0)
    if mode == "sqrt":
        return m.clamp_min(0.0).sqrt()
    if mode == "linear":
        return m
    raise ValueError(f"vcpo_lr mode must be 'sqrt' or 'linear', got {mode!r}")


@STABILIZERS.register(VCPOLRConfig)
class VCPOLR(Stabilizer):
    """Stabilizer: scale this step's update by :func:`vcpo_lr_multiplier` of ``context.ess_ratio``;
    the base LR is untouched for the next step (VCPO restores it after the step)."""

    stage = "lr"
    reads = ("is/ess_ratio",)

    def lr_scale(self, context, replica_dims: int = 0) -> tuple[Tensor, dict]:
        if context is None or context.ess_ratio is None:
            raise ValueError(
                "vcpo_lr needs StepContext(ess_ratio=...) — the batch ESS ratio of unclipped sequence weights, "
                "e.g. LossOutput.metrics['is/ess_ratio']"
            )
        s = vcpo_lr_multiplier(context.ess_ratio, self.cfg.rho_ref, self.cfg.mode)
        return s, {"vcpo/ess_ratio": torch.as_tensor(context.ess_ratio).detach(), "lr/vcpo_scale": s}
