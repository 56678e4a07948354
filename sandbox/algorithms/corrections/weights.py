"""Importance-weight corrections: truncation and band masks on ``w`` (``shared/reference/algorithms.md`` §2.1–2.5,
§3.1, §3.4). All factors are stop-gradient."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._tensor import masked_frac, seq_mean, seq_sum
from ..configs import DecoupledPPOConfig, GeoMISConfig, IcePopConfig, MISConfig, TISConfig, TOPRConfig
from .base import CorrectionContext, CorrectionResult


def _log(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf


def _seq_frac(flag: Tensor) -> Tensor:
    return flag.to(torch.get_default_dtype()).mean(-1)


def _to_tokens(seq: Tensor, like: Tensor) -> Tensor:
    return seq.unsqueeze(-1).expand_as(like)


class TIS:
    """Truncated IS (Yao, Liu et al., "Your Efficient RL Framework Secretly Brings You Off-Policy RL
    Training", Aug 2025; VCPO arXiv 2602.17616 for the sequence form):

    * token: ``coef_t = clamp(w_t, C_low, C)`` (default C = 2);
    * sequence: ``coef_{i,t} = clamp(Π_t w_{i,t}, C_low, C)`` (default C = 8, VCPO).
    Computed in log space so long sequences do not overflow."""

    def __init__(self, cfg: TISConfig):
        self.cfg = cfg

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        lo, hi = _log(self.cfg.C_low), _log(self.cfg.cap)
        if self.cfg.level == "token":
            coef = ctx.log_w.clamp(lo, hi).exp()
            trunc = masked_frac(ctx.log_w > hi, ctx.fmask)
        else:
            log_seq = seq_sum(ctx.log_w, ctx.fmask)
            coef = _to_tokens(log_seq.clamp(lo, hi).exp(), ctx.log_w)
            trunc = _seq_frac(log_seq > hi)
        return CorrectionResult(coef=coef, metrics={"is/trunc_frac": trunc})


class MIS:
    """Masked IS (algorithms.md §2.3; verl ``rollout_rs``, TRL ``sequence_mask``): drop outliers
    instead of truncating them. Token: ``coef_t = w_t·1[C_low ≤ w_t ≤ C]``. Sequence: keep response i iff
    ``C_low ≤ Π_t w_t ≤ C`` (and no veto token), coefficient ``Π_t w_t`` or 1; optional batch
    normalisation of kept coefficients to mean 1."""

    def __init__(self, cfg: MISConfig):
        self.cfg = cfg

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        c = self.cfg
        lo, hi = _log(c.C_low), _log(c.C)
        if c.level == "token":
            keep = (ctx.log_w >= lo) & (ctx.log_w <= hi)
            coef = ctx.log_w.exp()
        else:
            log_seq = seq_sum(ctx.log_w, ctx.fmask)
            keep_seq = (log_seq >= lo) & (log_seq <= hi)
            valid = ctx.fmask > 0
            if c.veto_low is not None:
                keep_seq &= ~((ctx.log_w < _log(c.veto_low)) & valid).any(-1)
            if c.veto_high is not None:
                keep_seq &= ~((ctx.log_w > _log(c.veto_high)) & valid).any(-1)
            keep = _to_tokens(keep_seq, ctx.log_w)
            coef = _to_tokens(log_seq.clamp(max=hi).exp(), ctx.log_w) if c.seq_weight == "ratio" else None
        keep_f = keep.to(ctx.fmask.dtype)
        if c.batch_normalize:
            base = coef if coef is not None else torch.ones_like(ctx.log_w)
            norm = (base * keep_f * ctx.fmask).sum((-2, -1)) / (keep_f * ctx.fmask).sum((-2, -1)).clamp_min(1.0)
            coef = base / norm.clamp_min(1e-12).reshape(*norm.shape, 1, 1)
        return CorrectionResult(coef=coef, mask=keep_f)


class GeoMIS:
    """Geometric-mean rejection (Geo-RS; algorithms.md §2.4; verl ``seq_mean_k1``, OpenRLHF ``seq-mask-tis``):
    mask response i if ``exp(mean_t log w_{i,t}) ∉ [lo, hi]``; survivors keep weight 1 or ``min(w_t, C)``."""

    def __init__(self, cfg: GeoMISConfig):
        self.cfg = cfg

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        c = self.cfg
        g = seq_mean(ctx.log_w, ctx.fmask)
        keep = _to_tokens((g >= math.log(c.lo)) & (g <= math.log(c.hi)), ctx.log_w).to(ctx.fmask.dtype)
        coef = ctx.log_w.clamp(max=math.log(c.C)).exp() if c.token_weight == "tis" else None
        return CorrectionResult(coef=coef, mask=keep, metrics={"is/geo_mean": g.exp().mean(-1)})


class IcePop:
    """IcePop (Ring-1T, arXiv 2510.18855): ``coef_t = w_t`` if ``α ≤ w_t ≤ β`` else 0 (defaults [0.5, 5])."""

    def __init__(self, cfg: IcePopConfig):
        self.cfg = cfg

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        keep = (ctx.log_w >= _log(self.cfg.alpha)) & (ctx.log_w <= _log(self.cfg.beta))
        return CorrectionResult(coef=ctx.log_w.exp(), mask=keep.to(ctx.fmask.dtype))


class DecoupledPPO:
    """AReaL decoupled PPO (Fu et al. arXiv 2505.24298, objective of Hilton et al. arXiv 2110.00641;
    AReaL ``apply_rejection_sampling``/``ppo_actor_loss_fn``): weight ``sg(w_t)``, ``w = π_prox/μ``, with
    tokens (or whole responses) whose ``w_t > cap`` rejected; the token count before rejection stays
    the denominator. The objective's clip (``ppo``) supplies the trust region around π_prox."""

    def __init__(self, cfg: DecoupledPPOConfig):
        self.cfg = cfg

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        if self.cfg.require_prox and not ctx.decoupled:
            raise ValueError("decoupled_ppo: require_prox=True but PolicyLossInput.prox_logp is None")
        over = (ctx.log_w > math.log(self.cfg.behave_imp_weight_cap)) & (ctx.fmask > 0)
        if self.cfg.level == "sequence":
            over = _to_tokens(over.any(-1), ctx.log_w)
        return CorrectionResult(
            coef=ctx.log_w.exp(),
            mask=(~over).to(ctx.fmask.dtype),
            metrics={"is/behave_approx_kl": (ctx.log_w * ctx.fmask).sum((-2, -1)) / ctx.fmask.sum((-2, -1)).clamp_min(1.0)},
        )


class TOPR:
    """Tapered off-policy REINFORCE (Le Roux et al. arXiv 2503.14286): ``c_i = 1`` for ``R_i ≥ 0`` and
    ``sg(clamp(π_θ(y^i)/μ(y^i), 0, 1))`` for ``R_i < 0`` (sequence level; ROLL's token-level variant
    clamps ``w_t``). ROLL's positive/negative weights scale the two parts."""

    def __init__(self, cfg: TOPRConfig):
        self.cfg = cfg

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        c = self.cfg
        sign_src = ctx.rewards if c.split_on == "reward" else ctx.adv
        pos = _to_tokens(sign_src >= 0, ctx.log_w)
        if c.level == "sequence":
            neg_w = _to_tokens(seq_sum(ctx.log_w, ctx.fmask).clamp(max=0.0).exp(), ctx.log_w)
        else:
            neg_w = ctx.log_w.clamp(max=0.0).exp()
        coef = torch.where(pos, torch.full_like(neg_w, c.positive_weight), c.negative_weight * neg_w)
        trunc = ((~pos) & (neg_w < 1.0) & (ctx.fmask > 0)).to(ctx.fmask.dtype)
        n_neg = ((~pos) & (ctx.fmask > 0)).to(ctx.fmask.dtype).sum((-2, -1))
        return CorrectionResult(
            coef=coef,
            metrics={
                "topr/neg_frac": (~pos[..., 0]).to(ctx.fmask.dtype).mean(-1),
                "topr/neg_truncated_frac": trunc.sum((-2, -1)) / n_neg.clamp_min(1.0),
            },
        )
