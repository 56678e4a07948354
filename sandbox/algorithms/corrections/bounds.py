"""Corrections that replace the objective's clip bounds per replica: M2PO clip band and BAPO
(``shared/reference/algorithms.md`` §3.2b, §3.3)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..configs import BAPOConfig, M2POClipBandConfig
from .base import CorrectionContext, CorrectionResult


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


class M2POClipBand:
    """``m2po_clipband``: adaptive PPO bounds ``[exp(−τ), exp(τ)]`` of the official M2PO code (Zheng, Zhao,
    Chen arXiv 2510.01161). Harmful tokens: ``(Â > 0, r > 1)`` or ``(Â < 0, r < 1)``; only they enter M2,
    and the clip removes their gradient beyond τ. Here ``δ = −log r`` of the objective's ratio (``π_θ/μ`` in
    bypass mode, as in the reference code; ``π_θ/π_prox`` in decoupled mode)."""

    def __init__(self, cfg: M2POClipBandConfig):
        self.cfg = cfg

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


def _bapo_pn(r: Tensor, a: Tensor, m: Tensor, c_low: Tensor, c_high: Tensor, stat: str) -> tuple[Tensor, Tensor]:
    cl = c_low.reshape(*c_low.shape, 1, 1)
    ch = c_high.reshape(*c_high.shape, 1, 1)
    if stat == "value":
        eff = torch.where(a >= 0, torch.minimum(r, ch) * a, torch.maximum(r, cl) * a)
        return (m * eff.clamp_min(0)).sum((-2, -1)), (m * (-eff).clamp_min(0)).sum((-2, -1))
    pos = (a > 0) & (r <= ch)
    neg = (a < 0) & (r >= cl)
    return (m * pos * r * a).sum((-2, -1)), (m * neg * r * (-a)).sum((-2, -1))


class BAPO:
    """BAPO (Xi et al. arXiv 2510.18927; WooooDyy/BAPO ``compute_policy_loss_bapo``): starting from
    ``[a⁻, a⁺]`` every update, raise ``c_low`` by δ⁻ while ``P/N < target`` and ``c_low < b⁻``, then
    ``c_high`` by δ⁺ likewise; the loss is dual-clip PPO with ``clamp(r, c_low, c_high)`` and c = 3.
    ``P``/``N`` are the positive/negative parts of the clipped surrogate (``stat='value'``, official code)
    or only of tokens still carrying gradient (``'gradient_carrying'``, [reconstruction])."""

    def __init__(self, cfg: BAPOConfig):
        self.cfg = cfg
        self.last_bounds: tuple[Tensor, Tensor] | None = None

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        c = self.cfg
        r, m = ctx.ratio, ctx.fmask
        a = ctx.adv.unsqueeze(-1).expand_as(r)
        shape = r.shape[:-2]
        c_low = torch.full(shape, c.c_low_start, dtype=r.dtype, device=r.device)
        c_high = torch.full(shape, c.c_high_start, dtype=r.dtype, device=r.device)
        P, N = _bapo_pn(r, a, m, c_low, c_high, c.stat)
        for _ in range(int(math.ceil((c.c_low_max - c.c_low_start) / c.step_low)) + 1):
            active = (P < c.pos_neg_target * N) & (c_low < c.c_low_max)
            if not bool(active.any()):
                break
            c_low = torch.where(active, (c_low + c.step_low).clamp(max=c.c_low_max), c_low)
            P, N = _bapo_pn(r, a, m, c_low, c_high, c.stat)
        for _ in range(int(math.ceil((c.c_high_max - c.c_high_start) / c.step_high)) + 1):
            active = (P < c.pos_neg_target * N) & (c_high < c.c_high_max)
            if not bool(active.any()):
                break
            c_high = torch.where(active, (c_high + c.step_high).clamp(max=c.c_high_max), c_high)
            P, N = _bapo_pn(r, a, m, c_low, c_high, c.stat)
        self.last_bounds = (c_low, c_high)
        return CorrectionResult(
            bounds=(c_low, c_high),
            dual_clip_c=c.dual_clip_c,
            metrics={"bapo/c_low": c_low, "bapo/c_high": c_high, "bapo/pos_neg_ratio": P / N.clamp_min(1e-12)},
        )
