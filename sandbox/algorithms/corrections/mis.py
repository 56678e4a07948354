"""Masked importance sampling, token and sequence level (``docs/methods/corrections.md#mis``)."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, model_validator

from .._tensor import seq_sum
from ..base import MethodConfig
from .base import CORRECTIONS, Correction, CorrectionContext, CorrectionResult, Level, log_or_neg_inf, to_tokens


class MISConfig(MethodConfig):
    """Masked importance sampling (docs/methods/corrections.md#mis): token ``w_t·1[C_low ≤ w_t ≤ C]``;
    sequence keeps response i iff ``C_low ≤ Π_t w_t ≤ C`` (weight Π w or 1)."""

    name: Literal["mis"] = "mis"
    level: Level = Field("token", description="token or sequence.")
    C: float = Field(2.0, gt=0, description="Upper band edge; typical 2–3 (docs/methods/corrections.md#mis; TRL cap 3.0).")
    C_low: float = Field(0.0, ge=0.0, description="Lower band edge (0 = none; SkyRL uses 0.5).")
    seq_weight: Literal["ratio", "one"] = Field(
        "ratio", description="Surviving sequence coefficient: the ratio Π w (verl) or 1 (pure rejection)."
    )
    veto_low: float | None = Field(None, description="Veto: drop a sequence if any token has w_t < veto_low (e.g. 1e-4).")
    veto_high: float | None = Field(None, description="Veto: drop a sequence if any token has w_t > veto_high (e.g. 100).")
    batch_normalize: bool = Field(False, description="Rescale kept coefficients to batch mean 1 (verl rollout_is_batch_normalize).")

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
    normalisation of kept coefficients to mean 1."""

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        c = self.cfg
        lo, hi = log_or_neg_inf(c.C_low), log_or_neg_inf(c.C)
        if c.level == "token":
            keep = (ctx.log_w >= lo) & (ctx.log_w <= hi)
            coef = ctx.log_w.exp()
        else:
            log_seq = seq_sum(ctx.log_w, ctx.fmask)
            keep_seq = (log_seq >= lo) & (log_seq <= hi)
            valid = ctx.fmask > 0
            if c.veto_low is not None:
                keep_seq &= ~((ctx.log_w < log_or_neg_inf(c.veto_low)) & valid).any(-1)
            if c.veto_high is not None:
                keep_seq &= ~((ctx.log_w > log_or_neg_inf(c.veto_high)) & valid).any(-1)
            keep = to_tokens(keep_seq, ctx.log_w)
            coef = to_tokens(log_seq.clamp(max=hi).exp(), ctx.log_w) if c.seq_weight == "ratio" else None
        keep_f = keep.to(ctx.fmask.dtype)
        if c.batch_normalize:
            base = coef if coef is not None else torch.ones_like(ctx.log_w)
            norm = (base * keep_f * ctx.fmask).sum((-2, -1)) / (keep_f * ctx.fmask).sum((-2, -1)).clamp_min(1.0)
            coef = base / norm.clamp_min(1e-12).reshape(*norm.shape, 1, 1)
        return CorrectionResult(coef=coef, mask=keep_f)
