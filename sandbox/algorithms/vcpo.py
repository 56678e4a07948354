"""VCPO's ESS-driven learning-rate control (Huang et al. arXiv 2602.17616; code mit-han-lab/vcpo
``compute_ess_info``; ``shared/reference/algorithms.md`` §3.7)."""

from __future__ import annotations

import torch
from torch import Tensor

from .configs import VCPOLRConfig


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


class VCPOLR:
    """Stabilizer: scale this step's update by :func:`vcpo_lr_multiplier` of ``context.ess_ratio``;
    the base LR is untouched for the next step (VCPO restores it after the step)."""

    kind = "lr"

    def __init__(self, cfg: VCPOLRConfig):
        self.cfg = cfg

    def lr_scale(self, context, replica_dims: int = 0) -> tuple[Tensor, dict]:
        if context is None or context.ess_ratio is None:
            raise ValueError(
                "vcpo_lr needs StepContext(ess_ratio=...) — the batch ESS ratio of unclipped sequence weights, "
                "e.g. LossOutput.metrics['is/ess_ratio']"
            )
        s = vcpo_lr_multiplier(context.ess_ratio, self.cfg.rho_ref, self.cfg.mode)
        return s, {"vcpo/ess_ratio": torch.as_tensor(context.ess_ratio).detach(), "lr/vcpo_scale": s}
