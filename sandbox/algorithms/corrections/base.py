"""What a correction sees and what it returns (``shared/reference/algorithms.md`` §2 preamble).

A correction never computes a loss itself. It returns stop-gradient factors that
:class:`sandbox.algorithms.policy_loss.PolicyLoss` combines with the objective's per-token surrogate:

* ``coef``: the importance weight the token's gradient should carry *instead of* the behaviour weight.
  In decoupled mode (``prox_logp`` given) it replaces ``w = π_prox/μ``, which the surrogate (ratio
  ``π_θ/π_prox``) does not contain. In bypass mode the surrogate's ratio is already ``π_θ/μ``, so the
  policy loss divides by that ratio's value before multiplying by ``coef`` (no double counting).
* ``mask``: 0/1 keep flags; dropped tokens still count in the aggregation denominator (AReaL, verl).
* ``bounds`` / ``dual_clip_c``: absolute ratio bounds replacing the objective's clip (BAPO, M2PO clip band).
* ``pg_scale`` and ``penalty``: a constant factor on the policy term and an extra per-token loss (prime-rl).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor


@dataclass
class CorrectionContext:
    log_w: Tensor
    """``(..., N, T)`` log behaviour weight, detached, 0 on padding: ``log π_prox − log μ`` (decoupled) or
    ``log π_θ − log μ`` (bypass)."""
    log_rho: Tensor
    """``(..., N, T)`` detached ``log π_θ − log μ`` (full ratio), 0 on padding."""
    ratio: Tensor
    """``(..., N, T)`` detached value of the objective's ratio ``π_θ/π_anchor``."""
    fmask: Tensor
    adv: Tensor
    """``(..., N)`` advantages."""
    rewards: Tensor
    logp: Tensor
    """``(..., N, T)`` learner log-probs *with* gradient (for penalties)."""
    behaviour_logp: Tensor
    decoupled: bool


@dataclass
class CorrectionResult:
    coef: Tensor | None = None
    mask: Tensor | None = None
    bounds: tuple | None = None
    dual_clip_c: float | None = None
    pg_scale: float = 1.0
    penalty: Tensor | None = None
    metrics: dict = field(default_factory=dict)


class NoCorrection:
    """``none``: the objective's own ratio is the only importance weight."""

    def __init__(self, cfg=None):
        self.cfg = cfg

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        return CorrectionResult()
