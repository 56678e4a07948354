"""The stabilizer protocol: what :class:`~sandbox.algorithms.stabilized.StabilizedOptimizer` asks of a
stabilizer, and the registry every stabilizer registers into (``docs/methods/stabilizers.md#protocol``).

A stabilizer declares WHERE it acts and WHETHER it can skip a step; the optimizer wrapper reads only
these declarations, never a stabilizer's name or config:

* ``stage = "gradient"``: edit the gradient before the optimizer, ``transform(grads, ...)``;
  ``before_clip`` puts it before the global-norm clipping (else after);
* ``stage = "update"``: edit the optimizer's update ``Δθ = θ_after − θ_before``, ``transform(deltas, ...)``;
* ``stage = "lr"``: a per-replica multiplier ``s_r`` of this step's update, ``lr_scale(...)``.

``transform`` returns ``(vecs, skip_mask | None, metrics)``; a skip mask ``(R...)`` (bool, True = skip
this replica's step) is allowed only from a stabilizer with ``can_skip = True``, which tells the wrapper
to save the optimizer state before the step so a skipped replica's moments can be restored.

A stabilizer that carries state between steps (GAC's reference direction and cosine history,
``grad_norm_skip``'s norm statistics) declares it through ``state_dict()`` / ``load_state_dict()``, as a
torch module or optimizer does; the wrapper saves and restores every stabilizer's state through these two
methods only, so a run resumed from a checkpoint continues bitwise as the uninterrupted run
(``docs/methods/stabilizers.md#checkpoints``). The state holds only tensors, lists, dicts, numbers, strings
and None, so ``torch.load(..., weights_only=True)`` reads it back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from sandbox.base.registry import Registry

if TYPE_CHECKING:
    from torch import Tensor

STABILIZERS = Registry("stabilizer", plugins="stabilizer")
"""Every stabilizer: ``name`` → config and implementation (:mod:`sandbox.base.registry`)."""

Stage = Literal["gradient", "update", "lr"]
STAGES: tuple[str, ...] = ("gradient", "update", "lr")


@dataclass
class StepContext:
    """Batch information a stabilizer may need at step time.

    ``ess_ratio``: batch ESS ratio of unclipped sequence weights, ``(R...)`` or scalar (``vcpo_lr``;
    take ``LossOutput.metrics['is/ess_ratio']``). ``staleness``: lag in versions, scalar, ``(R...)`` or
    per sample ``(R..., N)`` (``staleness_lr``, GAC ``staleness_scaled``)."""

    ess_ratio: Tensor | float | None = None
    staleness: Tensor | float | None = None
    extras: dict = field(default_factory=dict)


class Stabilizer:
    """Base of every stabilizer: holds its validated config and declares where it acts.

    Subclasses set ``stage`` (and ``before_clip``, ``can_skip`` where they apply), as class attributes
    or as properties when the config decides, and implement ``transform`` (gradient/update stages) or
    ``lr_scale`` (lr stage). Per-replica semantics: every vector carries ``replica_dims`` leading
    dims, and every norm, mask and scale is per replica ``(R...)``.
    """

    stage: Stage = "gradient"
    before_clip: bool = False
    can_skip: bool = False
    reads: tuple[str, ...] = ()
    """Metrics of the learner's step that this stabilizer reads through :class:`StepContext` (``vcpo_lr``:
    ``is/ess_ratio``); a run at ``run.metrics = "lean"`` computes them (docs/system.md#metric-levels)."""

    def __init__(self, cfg):
        self.cfg = cfg

    def transform(
        self, vecs: list[Tensor], replica_dims: int, context: StepContext | None = None
    ) -> tuple[list[Tensor], Tensor | None, dict[str, Tensor]]:
        """Edited gradient (or update) tensors, an optional skip mask ``(R...)`` and metrics."""
        raise NotImplementedError(f"{type(self).__name__} acts at stage {self.stage!r} and has no transform()")

    def lr_scale(self, context: StepContext | None, replica_dims: int = 0) -> tuple[Tensor, dict[str, Tensor]]:
        """This step's update multiplier (scalar or ``(R...)``) and metrics."""
        raise NotImplementedError(f"{type(self).__name__} acts at stage {self.stage!r} and has no lr_scale()")

    def reset(self) -> None:
        """Forget any state carried between steps."""

    def state_dict(self) -> dict:
        """The state carried between steps (tensors, lists, dicts, numbers, strings, None). A stateless
        stabilizer (the default) returns ``{}``; a stateful one overrides this and :meth:`load_state_dict`."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned, so that the next step is the one the saved run would
        have taken. The default (stateless) accepts only ``{}``."""
        if state:
            raise ValueError(f"{type(self).__name__} carries no state, but the state to load has keys {sorted(state)}")


__all__ = ["STABILIZERS", "STAGES", "Stabilizer", "Stage", "StepContext"]
