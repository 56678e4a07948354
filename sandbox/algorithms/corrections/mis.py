"""Masked importance sampling, token and sequence level (``docs/methods/corrections.md#mis``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from sandbox.algorithms.base import MethodConfig
from sandbox.algorithms.corrections.base import (
    CORRECTIONS,
    Correction,
    CorrectionContext,
    CorrectionResult,
    Level,
    log_or_neg_inf,
    to_tokens,
)
from sandbox.base.lazy_torch import lazy_import

torch = lazy_import("torch", globals())


class MISConfig(MethodConfig):
    """Masked importance sampling (docs/methods/corrections.md#mis): token ``w_t·1[C_low ≤ w_t ≤ C]``;
    sequence keeps response i iff ``C_low ≤ Π_t w_t ≤ C`` (weight Π w or 1)."""

    name: Literal["mis"] = "mis"
    level: Level = Field("token", description="token or sequence.")
    C: float = Field(
        2.0, gt=0, description="Upper band edge; typical 2–3 (docs/methods/corrections.md#mis; TRL cap 3.0)."
    )
    C_low: float = Field(0.0, ge=0.0, description="Lower band edge (0 = none; SkyRL uses 0.5).")
    seq_weight: Literal["ratio", "one"] = Field(
        "ratio", description="Surviving sequence coefficient: the ratio Π w (verl) or 1 (pure rejection)."
    )
    veto_low: float | None = Field(
        None, description="Veto: drop a sequence if any token has w_t < veto_low (e.g. 1e-4)."
    )
    veto_high: float | None = Field(
        None, description="Veto: drop a sequence if any token has w_t > veto_high (e.g. 100)."
    )
    batch_normalize: bool | Literal["kept_tokens", "verl_band", "verl_is_rs"] = Field(
        False,
        description="Rescale the coefficients to batch mean 1, and over what (docs/methods/corrections.md#mis): false = "
        "off; true = 'kept_tokens' (mean over the kept valid tokens, token-weighted); 'verl_band' (verl 0.9.1 "
        "rollout_is with a 'lo_hi' band + rollout_is_batch_normalize, what --framework verl writes: mean of the "
        "band-zeroed weights over all valid tokens, or over valid sequences one each); 'verl_is_rs' (verl 0.9.1 "
        "TIS weights min(w, C) normalised the same way before a separate rollout_rs rejection).",
    )

    @model_validator(mode="after")
    def _check(self):
        if self.C_low >= self.C:
            raise ValueError(f"mis: empty band [C_low={self.C_low}, C={self.C}]")
        return self


@CORRECTIONS.register(MISConfig)
class MIS(Correction):
    """Masked IS (docs/methods/corrections.md#mis; verl ``rollout_rs``, TRL ``sequence_mask``): drop
    outliers instead of truncating them. Token: ``coef_t = w_t·1[C_low ≤ w_t ≤ C]``. Sequence: keep response i iff
    ``C_low ≤ Π_t w_t ≤ C`` (and no veto token), coefficient ``Π_t w_t`` or 1; optional batch
    normalisation to mean 1 under one of three named conventions (``batch_normalize``)."""

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        c = self.cfg
        lo, hi = log_or_neg_inf(c.C_low), log_or_neg_inf(c.C)
        if c.level == "token":
            keep = (ctx.log_w >= lo) & (ctx.log_w <= hi)
            coef = ctx.log_w.exp()
        else:
            log_seq = ctx.seq_log_w()
            keep_seq = (log_seq >= lo) & (log_seq <= hi)
            valid = ctx.fmask > 0
            if c.veto_low is not None:
                keep_seq &= ~((ctx.log_w < log_or_neg_inf(c.veto_low)) & valid).any(-1)
            if c.veto_high is not None:
                keep_seq &= ~((ctx.log_w > log_or_neg_inf(c.veto_high)) & valid).any(-1)
            keep = to_tokens(keep_seq, ctx.log_w)
            coef = to_tokens(log_seq.clamp(max=hi).exp(), ctx.log_w) if c.seq_weight == "ratio" else None
        keep_f = keep.to(ctx.fmask.dtype)
        convention = "kept_tokens" if c.batch_normalize is True else c.batch_normalize
        if convention == "kept_tokens":
            base = coef if coef is not None else torch.ones_like(ctx.log_w)
            norm = (base * keep_f * ctx.fmask).sum((-2, -1)) / (keep_f * ctx.fmask).sum((-2, -1)).clamp_min(1.0)
            coef = base / norm.clamp_min(1e-12).reshape(*norm.shape, 1, 1)
        elif convention and coef is not None:  # seq_weight='one': verl has no IS weight to normalise
            if convention == "verl_band":
                weights = coef * keep_f
            else:  # verl_is_rs: the truncated weights, rejected units included
                weights = ctx.log_w.clamp(max=hi).exp() if c.level == "token" else coef
            coef = coef / verl_batch_mean(weights, ctx.fmask, c.level).reshape(*weights.shape[:-2], 1, 1)
        return CorrectionResult(coef=coef, mask=keep_f)


def verl_batch_mean(weights, fmask, level: Level):
    """The mean verl 0.9.1 divides by (``rollout_corr_helper.compute_rollout_correction_weights`` with
    ``rollout_is_batch_normalize``): over all valid tokens (token level) or over the valid sequences, one
    weight each (sequence level, ``weights`` constant along a response); 1 where it is ≤ 1e-8."""
    fmask = fmask.expand_as(weights)
    if level == "token":
        mean = (weights * fmask).sum((-2, -1)) / fmask.sum((-2, -1)).clamp_min(1.0)
    else:
        valid = (fmask.sum(-1) > 0).to(weights.dtype)
        per_seq = (weights * fmask).sum(-1) / fmask.sum(-1).clamp_min(1.0)
        mean = (per_seq * valid).sum(-1) / valid.sum(-1).clamp_min(1.0)
    return torch.where(mean > 1e-8, mean, torch.ones_like(mean))
