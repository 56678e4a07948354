"""Tensor-level contract shared by every objective, correction and stabilizer.

Shapes: ``...`` is any number of leading *replica* dimensions (R independent learners carried in
one batched tensor); ``N`` responses, ``T`` token positions (padded).
Every reduction is over the last two dimensions only, so a loss of shape ``(...)`` comes back
with one value per replica; the learner sums it for ``backward`` (replicas share no parameters,
so each replica receives exactly its own gradient).
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

SEQ_GRAD_KEY = "seq_grad_sq_norms"
"""``extras`` key of the per-trajectory squared gradient norms ``(..., N)`` (OPOB / optimal baseline)."""
REF_LOGP_KEY = "ref_logp"
"""``extras`` key of the reference policy's log-probs ``(..., N, T)`` (GRPO's KL penalty, TBA)."""


@dataclass
class PolicyLossInput:
    """Everything a policy-gradient loss may need for one optimizer batch.

    Notation follows ``docs/methods/objectives.md#aggregation``.
    """

    logp: Tensor
    """``(..., N, T)`` log π_θ(y_t|s_t) under the learner's current weights (carries gradient)."""
    behaviour_logp: Tensor
    """``(..., N, T)`` log μ(y_t|s_t) recorded by the sampler at generation time (no gradient)."""
    mask: Tensor
    """``(..., N, T)`` or ``(N, T)`` 1.0 for valid response tokens, 0.0 for padding."""
    rewards: Tensor
    """``(..., N)`` scalar reward per response."""
    group_size: int
    """Responses per prompt; groups are contiguous blocks of ``group_size`` along ``N``."""
    prox_logp: Tensor | None = None
    """``(..., N, T)`` log π_prox (trainer recompute at the start of the update). ``None`` means
    bypass mode: π_prox := μ."""
    token_versions: Tensor | None = None
    """``(N, T)`` policy version that produced each token (for staleness-aware methods)."""
    learner_version: int = 0
    """Version of the learner weights the gradient is taken at."""
    staleness: dict[str, Tensor] | None = None
    """Per-replica staleness the caller measures itself (the sandbox learner: per-response lags); when
    given, its ``staleness/mean`` and ``staleness/max`` are reported in place of the token lag of
    ``token_versions`` (which is then not computed)."""
    extras: dict = field(default_factory=dict)
    """Method-specific inputs (e.g. per-trajectory gradient norms for VCPO's OPOB)."""
    advantages: Tensor | None = None
    """``(..., N)`` per-response advantages computed elsewhere, used as given (the objective's own
    advantages are skipped, and so is the group-size check). For trainers that compute advantages over
    whole groups at generation time and then train on shuffled micro-batches (TRL's GRPOTrainer,
    ``docs/promotion.md#trl``). ``None``: the objective computes them from ``rewards`` and the groups."""
    monitors: Container[str] | None = None
    """The batch monitors the caller reads (anything answering ``name in monitors``): the advantage, IS,
    staleness, clip and loss-part statistics not in it are not computed. ``None``: all of them. The loss,
    its gradient and the metrics the correction and the objective's advantages report are the same either
    way (the sandbox learner's ``run.metrics = "lean"``, docs/system.md#metric-levels). A loss reads an object's
    answers once and keeps them while it is given the same object (its answers must not change meanwhile); a
    ``set``, ``list`` or ``dict`` is read at every call."""
    full_mask: bool = False
    """The caller knows every position of ``mask`` to be 1.0 (complete responses of one width, e.g. the
    bandit's one-token groups): the loss's aggregation then skips its product by the mask, which changes no
    value and no gradient (``x · 1.0 = x`` in IEEE arithmetic). ``False``: not known, the product is taken."""

    @property
    def fmask(self) -> Tensor:
        """Float mask broadcast to ``logp``'s shape: ``mask.to(logp.dtype).expand_as(logp)``, which is ``mask``
        itself when it has ``logp``'s dtype and shape (both calls would return it unchanged, as a view)."""
        mask, logp = self.mask, self.logp
        if mask.dtype == logp.dtype and mask.shape == logp.shape:
            return mask
        return mask.to(logp.dtype).expand_as(logp)


@dataclass
class LossOutput:
    """A loss per replica and the metrics the method monitors (each a tensor of shape ``(...)``
    or a scalar), named with slash namespaces (``is/ess_ratio``, ``clip/frac`` ...)."""

    loss: Tensor
    metrics: dict[str, Tensor] = field(default_factory=dict)


def masked_mean(x: Tensor, mask: Tensor, dim=None) -> Tensor:
    """Mean of ``x`` over ``dim`` counting only positions where ``mask`` is 1 (0 if none)."""
    mask = mask.to(x.dtype).expand_as(x)
    if dim is None:
        dim = tuple(range(-2, 0))
    return (x * mask).sum(dim) / mask.sum(dim).clamp_min(1.0)
