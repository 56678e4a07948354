"""What a correction sees and what it returns (``docs/methods/objectives.md#composition``).

A correction never computes a loss itself. It returns stop-gradient factors that
:class:`sandbox.algorithms.policy_loss.PolicyLoss` combines with the objective's per-token surrogate:

* ``coef``: the importance weight the token's gradient should carry *instead of* the behaviour weight.
  In decoupled mode (``prox_logp`` given) it replaces ``w = π_prox/μ``, which the surrogate (ratio
  ``π_θ/π_prox``) does not contain. In bypass mode the surrogate's ratio is already ``π_θ/μ``, so the
  policy loss divides by that ratio's value before multiplying by ``coef`` (no double counting).
* ``mask``: 0/1 keep flags; dropped tokens still count in the aggregation denominator (AReaL, verl).
* ``bounds`` / ``dual_clip_c``: absolute ratio bounds replacing the objective's clip (BAPO, M2PO clip band);
  a correction returning them sets ``replaces_clip_bounds = True`` and needs a ratio-clip objective.
* ``pg_scale`` and ``penalty``: a constant factor on the policy term and an extra per-token loss (prime-rl).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal

from sandbox.algorithms._tensor import seq_sum
from sandbox.base.lazy_torch import lazy_import
from sandbox.base.registry import Registry

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())

CORRECTIONS = Registry("correction", plugins="correction")
"""Every off-policy correction, keyed by its TOML ``name``; one module of this package each."""

Level = Literal["token", "sequence"]


@dataclass
class CorrectionContext:
    """Everything a correction may read, so that a new correction needs no edit of this file or of
    ``policy_loss.py``: the weights and ratios, masks, advantages and rewards, and the loss's inputs
    (token versions, learner version, group size, staleness, extras)."""

    log_w: Tensor
    """``(..., N, T)`` log behaviour weight, detached, 0 on padding: ``log π_prox − log μ`` (decoupled) or
    ``log π_θ − log μ`` (bypass)."""
    log_rho: Tensor
    """``(..., N, T)`` detached ``log π_θ − log μ`` (full ratio), 0 on padding."""
    ratio: Tensor | None
    """``(..., N, T)`` detached value of the objective's ratio ``π_θ/π_anchor``; None only for an identity
    correction (``is_identity``) with an objective that does not read it (``Objective.reads_ratio``)."""
    fmask: Tensor
    adv: Tensor
    """``(..., N)`` advantages."""
    rewards: Tensor
    logp: Tensor
    """``(..., N, T)`` learner log-probs *with* gradient (for penalties)."""
    behaviour_logp: Tensor
    decoupled: bool
    log_seq_w: Tensor | None = None
    """``(..., N)`` ``Σ_t m·log w`` (:func:`seq_sum` of ``log_w``) when the caller has it already; read it
    through :meth:`seq_log_w`."""
    prox_logp: Tensor | None = None
    """``(..., N, T)`` detached ``log π_prox`` in decoupled mode, else ``None``."""
    token_versions: Tensor | None = None
    """``(N, T)`` (or ``(..., N, T)``) policy version that produced each token, when the caller records it
    (the sandbox learner does), for staleness-aware corrections; ``None`` otherwise."""
    learner_version: int = 0
    """Version of the learner weights the gradient is taken at (lag of a token: ``learner_version −
    token_versions``)."""
    group_size: int = 1
    """Responses per prompt (groups are contiguous blocks along ``N``)."""
    staleness: dict | None = None
    """Per-replica staleness metrics the caller measured (``staleness/mean``, ``staleness/max``), if any."""
    extras: dict = field(default_factory=dict)
    """Method-specific inputs of the loss (``PolicyLossInput.extras``), e.g. ``ref_logp``."""

    def seq_log_w(self) -> Tensor:
        """``(..., N)`` log of the sequence behaviour weight, ``Σ_t m·log w_t`` (computed once)."""
        if self.log_seq_w is None:
            self.log_seq_w = seq_sum(self.log_w, self.fmask)
        return self.log_seq_w


@dataclass
class CorrectionResult:
    coef: Tensor | None = None
    mask: Tensor | None = None
    bounds: tuple | None = None
    dual_clip_c: float | None = None
    pg_scale: float = 1.0
    penalty: Tensor | None = None
    metrics: dict = field(default_factory=dict)


class Correction:
    """One correction inside one :class:`~sandbox.algorithms.policy_loss.PolicyLoss` (it may keep state
    across batches). Built from its validated config by :data:`CORRECTIONS`.

    Class facts read by the generic composition: ``replaces_clip_bounds`` (returns ``bounds``, so the
    objective must be a ratio clip) and ``is_identity`` (returns no factor at all: the only correction an
    objective with ``takes_corrections = False`` accepts)."""

    replaces_clip_bounds: ClassVar[bool] = False
    is_identity: ClassVar[bool] = False

    def __init__(self, cfg):
        self.cfg = cfg

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        raise NotImplementedError


def log_or_neg_inf(x: float) -> float:
    """``log x``, with ``log 0 = −inf`` (a band edge of 0 means: no edge)."""
    return math.log(x) if x > 0 else -math.inf


def seq_frac(flag: Tensor) -> Tensor:
    """Fraction of responses ``(..., N)`` where ``flag`` holds, per replica."""
    return flag.to(torch.get_default_dtype()).mean(-1)


def to_tokens(seq: Tensor, like: Tensor) -> Tensor:
    """A per-response value ``(..., N)`` broadcast to every token ``(..., N, T)``."""
    return seq.unsqueeze(-1).expand_as(like)
