"""Staleness-aware learning-rate and sample-weight rules: ``docs/methods/stabilizers.md#staleness_lr``.
Sources of each rule are in :func:`staleness_weight`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from sandbox.algorithms.base import MethodConfig
from sandbox.algorithms.stabilizers.base import STABILIZERS, Stabilizer
from sandbox.base.lazy_torch import lazy_import

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())


class StalenessLRConfig(MethodConfig):
    """Staleness-aware LR baselines (``docs/methods/stabilizers.md#staleness_lr``): inverse ``η/max(1,τ)``
    (Zhang et al. IJCAI 2016), polynomial ``(1+τ)^(−a)/(1+τ̄)^(−a)`` (FedAsync, Xie et al. 2019; FLSim),
    threshold, delay-adaptive ``n/max(n,τ)`` (Mishchenko et al. NeurIPS 2022) and drop-if-too-stale
    (Ringmaster ASGD arXiv 2501.16168)."""

    name: Literal["staleness_lr"] = "staleness_lr"
    rule: Literal["inverse", "polynomial", "threshold", "delay_adaptive", "drop"] = Field(
        "inverse", description="Which rule; 'inverse' is the original staleness-aware ASGD."
    )
    exponent: float = Field(
        0.5, ge=0, le=1, description="a of the polynomial rule, a ∈ [0, 1]; 0.5 is our midpoint choice."
    )
    avg_staleness: float = Field(1.0, ge=0, description="τ̄ where the polynomial weight is 1 (FLSim default 1).")
    cutoff: float = Field(4.0, ge=0, description="threshold rule: weight 1 if τ ≤ cutoff ...")
    threshold_value: float = Field(0.5, ge=0, description="... else this constant [our default].")
    num_workers: int = Field(1, ge=1, description="n of the delay-adaptive rule (concurrent workers).")
    max_staleness: float = Field(
        8.0, ge=0, description="drop rule: zero update if τ > max_staleness (R of Ringmaster)."
    )
    batch_tau: Literal["mean", "max"] = Field(
        "mean", description="Reduce per-sample staleness of a batch by mean or max."
    )


def staleness_weight(tau: Tensor | float, cfg: StalenessLRConfig) -> Tensor:
    """Multiplier for a gradient (or sample) of staleness ``τ``:

    * ``inverse``: ``1/max(1, τ)`` (Zhang, Gupta, Lian, Liu, Staleness-aware Async-SGD, IJCAI 2016);
    * ``polynomial``: ``(1+τ)^(−a) / (1+τ̄)^(−a)`` (FedAsync, Xie et al. 2019; FLSim
      ``async_staleness_weights.py``), equal to 1 at the configured average staleness τ̄;
    * ``threshold``: 1 if ``τ ≤ cutoff`` else ``threshold_value`` (FLSim);
    * ``delay_adaptive``: ``n / max(n, τ)`` (Mishchenko et al., NeurIPS 2022);
    * ``drop``: 0 if ``τ > max_staleness`` else 1 (Ringmaster ASGD, arXiv 2501.16168).
    """
    t = torch.as_tensor(tau, dtype=torch.get_default_dtype()).detach()
    if cfg.rule == "inverse":
        return 1.0 / t.clamp_min(1.0)
    if cfg.rule == "polynomial":
        return (1.0 + t).pow(-cfg.exponent) / (1.0 + cfg.avg_staleness) ** (-cfg.exponent)
    if cfg.rule == "threshold":
        return torch.where(t <= cfg.cutoff, torch.ones_like(t), torch.full_like(t, cfg.threshold_value))
    if cfg.rule == "delay_adaptive":
        n = float(cfg.num_workers)
        return n / t.clamp_min(n)
    if cfg.rule == "drop":
        return (t <= cfg.max_staleness).to(t.dtype)
    raise ValueError(f"unknown staleness rule {cfg.rule!r}")


@STABILIZERS.register(StalenessLRConfig)
class StalenessLR(Stabilizer):
    """Stabilizer: scale the step by :func:`staleness_weight` of the batch staleness (mean or max of
    ``context.staleness`` over the samples; per replica when it carries replica dims). The ``drop``
    rule instead skips the step of a replica whose τ exceeds ``max_staleness``: its parameters and
    optimizer moments stay as they were, as Ringmaster ASGD discards the stale gradient (a multiplier
    of 0 would still feed the gradient to Adam's moments). For per-sample weighting of the loss instead,
    multiply the rewards/advantages by :func:`staleness_weight` yourself."""

    before_clip = True  # a skip does not depend on the gradient: decided before anything edits it

    @property
    def stage(self) -> str:
        return "gradient" if self.cfg.rule == "drop" else "lr"

    @property
    def can_skip(self) -> bool:
        return self.cfg.rule == "drop"

    def _batch_tau(self, context, replica_dims: int) -> Tensor:
        if context is None or context.staleness is None:
            raise ValueError("staleness_lr needs StepContext(staleness=...) (per-sample or batch lag in versions)")
        t = torch.as_tensor(context.staleness, dtype=torch.get_default_dtype()).detach()
        if t.dim() > replica_dims:
            dims = tuple(range(replica_dims, t.dim()))
            t = t.mean(dims) if self.cfg.batch_tau == "mean" else t.amax(dims)
        return t

    def lr_scale(self, context, replica_dims: int = 0) -> tuple[Tensor, dict]:
        t = self._batch_tau(context, replica_dims)
        s = staleness_weight(t, self.cfg)
        return s, {"staleness/batch_tau": t, "lr/staleness_scale": s}

    def transform(self, vecs, replica_dims, context=None):
        """The ``drop`` rule: gradients unchanged, skip mask ``τ > max_staleness``."""
        t = self._batch_tau(context, replica_dims)
        keep = staleness_weight(t, self.cfg)
        return vecs, keep == 0, {"staleness/batch_tau": t, "lr/staleness_scale": keep}
