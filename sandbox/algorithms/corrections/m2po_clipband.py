"""M2PO adaptive clip band of the official code (Infini-AI-Lab/M2PO; Zheng, Zhao, Chen arXiv 2510.01161;
``docs/methods/corrections.md#m2po_clipband``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from sandbox.algorithms.base import MethodConfig
from sandbox.algorithms.corrections.base import CORRECTIONS, Correction, CorrectionContext, CorrectionResult
from sandbox.base.lazy_torch import lazy_import

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())


class M2POClipBandConfig(MethodConfig):
    """M2PO as in the official code (Infini-AI-Lab/M2PO ``kpo_clip_harmful_tokens``;
    docs/methods/corrections.md#m2po_clipband): adaptive PPO bounds ``[exp(−τ), exp(τ)]`` water-filled so
    harmful tokens' M2 ≤ budget."""

    name: Literal["m2po_clipband"] = "m2po_clipband"
    m2_budget: float = Field(0.04, gt=0, description="M2_budget; 0.04 (paper and official scripts).")
    miniclip_low: float | None = Field(
        None,
        description="Floor on ε_low (lower bound ≤ 1 − miniclip_low); code knob, unset in released scripts (0.3 when used).",
    )
    miniclip_high: float | None = Field(
        None,
        description="Floor on ε_high (upper bound ≥ 1 + miniclip_high); unset in released scripts (0.5 when used).",
    )


def m2po_clipband_tau(delta: Tensor, harmful: Tensor, budget: float) -> tuple[Tensor, Tensor]:
    """Water-filling of the official M2PO code (Infini-AI-Lab/M2PO ``kpo_clip_harmful_tokens``).

    ``M2_H = mean_{j∈H} δ_j²``. If ``M2_H ≤ budget`` (or H is empty) return ``τ = +inf`` (no clip).
    Otherwise return the largest observed ``|δ_j|``, j ∈ H, with ``(1/|H|) Σ_{i∈H} min(δ_i², τ²) ≤ budget``
    (τ snapped to data), or ``sqrt(budget)`` if even the smallest ``|δ|`` overshoots. Returns ``(τ, M2_H)``
    per replica."""
    a = delta.detach().abs().flatten(-2)
    h = harmful.flatten(-2)
    n_h = h.sum(-1).to(a.dtype)
    m2 = (a**2 * h).sum(-1) / n_h.clamp_min(1.0)
    key = torch.where(h, a, torch.full_like(a, math.inf))
    s, _ = torch.sort(key, dim=-1)
    fin = torch.isfinite(s)
    s2 = torch.where(fin, s**2, torch.zeros_like(s))
    cum = s2.cumsum(-1)
    j = torch.arange(1, a.shape[-1] + 1, device=a.device, dtype=a.dtype)
    f = (cum + (n_h.unsqueeze(-1) - j) * s2) / n_h.clamp_min(1.0).unsqueeze(-1)
    ok = fin & (f <= budget)
    best = torch.where(ok, s, torch.full_like(s, -1.0)).amax(-1)
    tau = torch.where(best >= 0, best, torch.full_like(best, math.sqrt(budget)))
    tau = torch.where((m2 <= budget) | (n_h == 0), torch.full_like(tau, math.inf), tau)
    return tau, m2


@CORRECTIONS.register(M2POClipBandConfig)
class M2POClipBand(Correction):
    """``m2po_clipband``: adaptive PPO bounds ``[exp(−τ), exp(τ)]`` of the official M2PO code (Zheng, Zhao,
    Chen arXiv 2510.01161). Harmful tokens: ``(Â > 0, r > 1)`` or ``(Â < 0, r < 1)``; only they enter M2,
    and the clip removes their gradient beyond τ. Here ``δ = −log r`` of the objective's ratio (``π_θ/μ`` in
    bypass mode, as in the reference code; ``π_θ/π_prox`` in decoupled mode)."""

    replaces_clip_bounds = True

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        r = ctx.ratio
        delta = -torch.log(r.clamp_min(1e-30))
        a = ctx.adv.unsqueeze(-1).expand_as(r)
        harmful = (((a > 0) & (r > 1)) | ((a < 0) & (r < 1))) & (ctx.fmask > 0)
        tau, m2 = m2po_clipband_tau(delta, harmful, self.cfg.m2_budget)
        low, high = torch.exp(-tau), torch.exp(tau)
        if self.cfg.miniclip_low is not None:
            low = low.clamp(max=1.0 - self.cfg.miniclip_low)
        if self.cfg.miniclip_high is not None:
            high = high.clamp(min=1.0 + self.cfg.miniclip_high)
        return CorrectionResult(
            bounds=(low, high),
            metrics={"m2/value": m2, "m2/tau": tau, "clip/lower_bound": low, "clip/upper_bound": high},
        )
