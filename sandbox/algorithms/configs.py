"""Configs of the optimizer-level stabilizers (GAC, VCPO LR, staleness-aware LR), kept here until they move
next to their implementations in ``sandbox/algorithms/stabilizers/``. Objective and correction configs live
in their own modules (``sandbox/algorithms/objectives/``, ``sandbox/algorithms/corrections/``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import MethodConfig


class GACConfig(MethodConfig):
    """Gradient alignment control (Xu et al. arXiv 2603.01501) as the **[reconstruction]** family of
    algorithms.md §3.8: every unknown of the paper is a knob.

    Defaults = the reference setting of §3.8 (previous *applied* gradient as reference, whole model,
    edit the raw gradient before Adam, clip then project, fixed ``c_thr = 0.3``, one-sided full removal,
    no skip). Why: theory.md T3/T4 show that with these settings the projection is idle in stable
    (synchronous or mildly stale) runs, where consecutive cosines are ≲ 0.1 < 0.3, so it matches the
    synchronous baseline there, while at high staleness (c → 0.95+) it fires every step, returns
    near-orthogonal consecutive updates (post cosine ≤ c_thr by construction) and moves the divergence
    boundary outward, which is the paper's qualitative claim (on-policy-like dynamics at high staleness).
    """

    name: Literal["gac"] = "gac"
    reference: Literal["prev_raw", "prev_applied", "ema"] = Field("prev_applied", description="Reference direction p.")
    ema_beta: float = Field(0.9, ge=0, lt=1, description="β of p ← βp + (1−β)g̃ when reference='ema' [reconstruction].")
    scope: Literal["global", "per_layer"] = Field("global", description="One cosine for the flattened model or one per parameter tensor.")
    placement: Literal["pre_optimizer", "post_optimizer"] = Field(
        "pre_optimizer", description="Edit the raw gradient fed to the optimizer, or the optimizer's update Δθ."
    )
    clip_order: Literal["clip_then_project", "project_then_clip"] = Field(
        "clip_then_project", description="Order relative to global-norm clipping (StabilizedOptimizer.max_grad_norm)."
    )
    threshold_mode: Literal["fixed", "ema_mean_std", "quantile", "staleness_scaled"] = Field(
        "fixed", description="fixed c_thr; mean+κ·std or q-quantile of the last `window` cosines; c_thr/(1+γ·k̄)."
    )
    c_thr: float = Field(0.3, ge=0, lt=1, description="Threshold (c_0 for staleness_scaled); §3.8 reference 0.3, theory T4.")
    kappa: float = Field(1.0, description="κ for ema_mean_std [reconstruction].")
    quantile: float = Field(0.9, gt=0, lt=1, description="q for threshold_mode='quantile' [reconstruction].")
    window: int = Field(50, ge=2, description="History length W for adaptive thresholds [reconstruction].")
    min_history: int = Field(5, ge=1, description="Adaptive thresholds fall back to c_thr until this many cosines are seen.")
    gamma: float = Field(0.1, ge=0, description="γ for staleness_scaled [reconstruction].")
    sided: Literal["one_sided", "two_sided"] = Field(
        "one_sided", description="Act only when ⟨g, p̂⟩ > 0, or on any |cos| > threshold."
    )
    strength: Literal["alpha", "to_target"] = Field("alpha", description="Remove α of the parallel part, or shrink to cos = c_thr.")
    alpha: float = Field(1.0, ge=0, le=1, description="Fraction of the parallel component removed (1 = full).")
    c_skip: float | None = Field(None, description="Skip the step when cos > c_skip (must exceed c_thr); None = never.")
    skip_mode: Literal["zero_update", "skip_step"] = Field(
        "skip_step", description="zero_update: feed g̃ = 0 to the optimizer; skip_step: no optimizer update."
    )
    renorm: bool = Field(False, description="Rescale g̃ to ‖g‖ after projection.")

    @model_validator(mode="after")
    def _check(self):
        if self.c_skip is not None and self.c_skip <= self.c_thr:
            raise ValueError(f"gac: c_skip={self.c_skip} must exceed c_thr={self.c_thr}")
        return self


class VCPOLRConfig(MethodConfig):
    """VCPO ESS learning-rate control (Huang et al. arXiv 2602.17616; algorithms.md §3.7):
    ``η_t = η_base·sqrt(min(1, ρ_ess/ρ_ref))`` (or linear) for this step only."""

    name: Literal["vcpo_lr"] = "vcpo_lr"
    rho_ref: float = Field(1.0, gt=0, description="ρ_ref; 1.0 in VCPO's GSM8K/MATH scripts (0.55 multi-turn).")
    mode: Literal["sqrt", "linear"] = Field("sqrt", description="sqrt (VCPO default) or linear.")


class StalenessLRConfig(MethodConfig):
    """Staleness-aware LR baselines (algorithms.md §3.9): inverse ``η/max(1,τ)`` (Zhang et al. IJCAI 2016),
    polynomial ``(1+τ)^(−a)/(1+τ̄)^(−a)`` (FedAsync, Xie et al. 2019; FLSim), threshold, delay-adaptive
    ``n/max(n,τ)`` (Mishchenko et al. NeurIPS 2022) and drop-if-too-stale (Ringmaster ASGD arXiv 2501.16168)."""

    name: Literal["staleness_lr"] = "staleness_lr"
    rule: Literal["inverse", "polynomial", "threshold", "delay_adaptive", "drop"] = Field(
        "inverse", description="Which rule; 'inverse' is the original staleness-aware ASGD."
    )
    exponent: float = Field(0.5, ge=0, le=1, description="a of the polynomial rule, a ∈ [0, 1]; 0.5 is our midpoint choice.")
    avg_staleness: float = Field(1.0, ge=0, description="τ̄ where the polynomial weight is 1 (FLSim default 1).")
    cutoff: float = Field(4.0, ge=0, description="threshold rule: weight 1 if τ ≤ cutoff ...")
    threshold_value: float = Field(0.5, ge=0, description="... else this constant [our default].")
    num_workers: int = Field(1, ge=1, description="n of the delay-adaptive rule (concurrent workers).")
    max_staleness: float = Field(8.0, ge=0, description="drop rule: zero update if τ > max_staleness (R of Ringmaster).")
    batch_tau: Literal["mean", "max"] = Field("mean", description="Reduce per-sample staleness of a batch by mean or max.")


__all__ = ["MethodConfig", "GACConfig", "VCPOLRConfig", "StalenessLRConfig"]
