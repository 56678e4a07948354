"""Optimizer-level wrapper running stabilizers around any ``torch.optim`` optimizer, through the
stabilizer protocol only (``docs/methods/stabilizers.md#protocol``): it asks each stabilizer where it
acts (``stage``, ``before_clip``) and whether it can skip (``can_skip``), never which one it is.

Per-replica LR scaling works for every optimizer whose update is linear in the learning rate given its
state (SGD, momentum, Adam, AdamW incl. decoupled weight decay): the parameters are snapshotted before
``optimizer.step()`` and set to ``θ_before + s_r·(θ_after − θ_before)`` per replica r. The optimizer's own
``lr`` (and any schedule) is never modified.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from sandbox.algorithms._tensor import replica_sum, replica_view
from sandbox.algorithms.stabilizers import STABILIZERS, STAGES, StepContext
from sandbox.base.lazy_torch import lazy_import, no_grad

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())

__all__ = ["PendingStep", "StabilizedOptimizer", "StepContext", "build_stabilizers"]


def build_stabilizers(cfgs: Iterable) -> list:
    """Stabilizer objects for a list of ``StabilizerConfig``; feed them to :class:`StabilizedOptimizer`."""
    return [STABILIZERS.build(c) for c in cfgs]


class StabilizedOptimizer:
    """``optimizer`` plus stabilizers, with per-replica semantics.

    Args:
        optimizer: any torch optimizer over ``params``.
        params: the parameter tensors (all of them carry the leading replica dims if ``replica_dims > 0``).
        stabilizers: objects from :func:`build_stabilizers` (configs are built here).
        replica_dims: number of leading dims of every parameter that index independent learners.
        max_grad_norm: per-replica global-norm gradient clipping (None = off); a gradient-stage
            stabilizer's ``before_clip`` decides whether it acts before or after it.

    Call after ``backward()``: ``metrics = opt.step(StepContext(...))``. One step, in this order (list
    order kept within each stage): gradient-stage transforms with ``before_clip``; clipping; the other
    gradient-stage transforms; lr-stage multipliers (evaluated here, applied below);
    ``optimizer.step()`` (not called when every replica skips); update-stage transforms of
    ``Δ = θ_after − θ_before``; ``θ = θ_before + s_r·Δ`` with ``s_r`` the product of the multipliers and
    0 for skipped replicas.

    Metrics (each ``(R...)`` or scalar): ``grad/norm`` (before clipping), ``grad/clip_coef``,
    ``grad/norm_clipped``, ``lr/scale`` (product of all multipliers), ``step/skipped``, and each
    stabilizer's own.

    Skipping with replicas: a skipped replica keeps its parameters and the optimizer-state tensors shaped
    like the parameter (Adam moments); shared scalar state (Adam's step count) still advances.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        params: Iterable[Tensor],
        stabilizers=(),
        replica_dims: int = 0,
        max_grad_norm: float | None = None,
    ):
        self.optimizer = optimizer
        self.params = [p for p in params]
        self.stabilizers = [STABILIZERS.build(s) if isinstance(s, BaseModel) else s for s in stabilizers]
        for s in self.stabilizers:
            if s.stage not in STAGES:
                raise ValueError(f"{type(s).__name__}.stage = {s.stage!r}; expected one of {list(STAGES)}")
        self.replica_dims = replica_dims
        self.max_grad_norm = max_grad_norm
        if replica_dims:
            shapes = {tuple(p.shape[:replica_dims]) for p in self.params}
            if len(shapes) != 1:
                raise ValueError(f"parameters disagree on their replica dims: {shapes}")
        # Where each stabilizer acts is fixed by its config: sorted once, not on every step.
        self._by_stage = {stage: [s for s in self.stabilizers if s.stage == stage] for stage in STAGES}
        self._by_stage["before_clip"] = [s for s in self._by_stage["gradient"] if s.before_clip]
        self._by_stage["after_clip"] = [s for s in self._by_stage["gradient"] if not s.before_clip]

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        """``{"optimizer": the inner optimizer's state_dict(), "stabilizers": [...]}``: everything a resumed
        run needs besides the parameters, so that it continues bitwise as the uninterrupted run. Each
        stabilizer entry is ``{"name": its config's name, "state": its state_dict()}`` (the name only
        checks that a checkpoint is loaded into the same list of stabilizers)."""
        return {"optimizer": self.optimizer.state_dict(), "stabilizers": self.stabilizer_state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (the parameters are restored by their owner)."""
        missing = {"optimizer", "stabilizers"} - set(state)
        if missing:
            raise ValueError(f"not a StabilizedOptimizer state: {sorted(missing)} missing (keys: {sorted(state)})")
        self.load_stabilizer_state_dict(state["stabilizers"])
        self.optimizer.load_state_dict(state["optimizer"])

    def stabilizer_state_dict(self) -> list[dict[str, Any]]:
        """Every stabilizer's state, in list order (what :meth:`state_dict` adds to the optimizer's)."""
        return [{"name": getattr(s.cfg, "name", type(s).__name__), "state": s.state_dict()} for s in self.stabilizers]

    def load_stabilizer_state_dict(self, entries: list[dict[str, Any]]) -> None:
        """Restore :meth:`stabilizer_state_dict`; refuses a checkpoint of another list of stabilizers."""
        ours = [getattr(s.cfg, "name", type(s).__name__) for s in self.stabilizers]
        theirs = [e["name"] for e in entries]
        if ours != theirs:
            raise ValueError(
                f"the checkpoint holds the state of the stabilizers {theirs}, but this optimizer runs {ours}: "
                "resume with the stabilizers of the saved run"
            )
        for s, e in zip(self.stabilizers, entries):
            s.load_state_dict(e["state"])

    def _stage(self, stage: str) -> list:
        return self._by_stage[stage]

    def _clip(self, grads: list[Tensor], metrics: dict) -> list[Tensor]:
        norm = sum(replica_sum(g * g, self.replica_dims) for g in grads).sqrt()
        coef = (self.max_grad_norm / (norm + 1e-6)).clamp(max=1.0)
        metrics["grad/clip_coef"] = coef
        return [g * replica_view(coef, g, self.replica_dims) for g in grads]

    @no_grad
    def step(self, context: StepContext | None = None) -> dict[str, Tensor]:
        pending = self.begin(context)
        if pending is None:
            return {}
        self.gradient_stage(pending, before_clip=True)
        if self.max_grad_norm is not None:
            pending.grads = self._clip(pending.grads, pending.metrics)
        self.gradient_stage(pending, before_clip=False)
        self.prepare_update(pending)
        if not pending.all_skip:
            self.optimizer.step()
        return self.finish(pending)

    # --------------------------------------------------------------------------------- the phases
    # ``step`` is these phases in order; a trainer that owns the clipping and the ``optimizer.step()``
    # call (TRL's, via optimizer hooks: ``sandbox.integrations.step_hooks``) runs them around its own.

    @no_grad
    def begin(self, context: StepContext | None) -> PendingStep | None:
        """Start a step: the parameters that have gradients and ``grad/norm``; None if none has one."""
        params = [p for p in self.params if p.grad is not None]
        if not params:
            return None
        grads = [p.grad for p in params]
        metrics: dict[str, Tensor] = {"grad/norm": sum(replica_sum(g * g, self.replica_dims) for g in grads).sqrt()}
        skip = torch.zeros(metrics["grad/norm"].shape, dtype=torch.bool, device=grads[0].device)
        return PendingStep(context, params, grads, metrics, skip)

    @no_grad
    def gradient_stage(self, pending: PendingStep, before_clip: bool) -> None:
        """Run the gradient-stage transforms placed before (or after) the global-norm clipping."""
        stabs = self._stage("before_clip" if before_clip else "after_clip")
        pending.grads = self._run_transforms(stabs, pending.grads, pending)

    @no_grad
    def prepare_update(self, pending: PendingStep, step_always_runs: bool = False) -> None:
        """Write the edited gradients into ``p.grad``, evaluate the lr-stage multipliers and snapshot what
        ``finish`` needs. ``step_always_runs``: the caller cannot withhold ``optimizer.step()`` (a hook), so
        a skip decided here (gradient stage) is undone afterwards by restoring every tensor of the optimizer
        state too, as if the step had not been called; an update-stage skip is handled as in :meth:`step`."""
        rd, grads, metrics = self.replica_dims, pending.grads, pending.metrics
        metrics["grad/norm_clipped"] = sum(replica_sum(g * g, rd) for g in grads).sqrt()
        for p, g in zip(pending.params, grads):
            if p.grad is not g:
                p.grad.copy_(g)
        rshape = metrics["grad/norm"].shape
        scale = torch.ones(rshape, dtype=grads[0].dtype, device=grads[0].device)
        for s in self._stage("lr"):
            sc, m = s.lr_scale(pending.context, rd)
            metrics.update(m)
            scale = scale * torch.as_tensor(sc, dtype=scale.dtype, device=scale.device).expand(rshape)
        metrics["lr/scale"] = scale
        pending.scale = scale
        skip = pending.skip
        pending.all_skip = bool(skip.all())
        any_skip = bool(skip.any())
        update = self._stage("update")
        pending.snapshot = bool(update) or any_skip or bool((scale != 1.0).any())
        if not pending.snapshot:
            return
        pending.before = [p.detach().clone() for p in pending.params]
        update_can_skip = any(s.can_skip for s in update)
        if step_always_runs and any_skip:
            pending.restore_all = True
            for p in pending.params:
                st = self.optimizer.state.get(p, {})
                pending.saved_state[p] = {k: v.clone() for k, v in st.items() if torch.is_tensor(v)}
        elif (any_skip and not pending.all_skip) or update_can_skip:
            for p in pending.params:
                st = self.optimizer.state.get(p, {})
                pending.saved_state[p] = {
                    k: v.clone() for k, v in st.items() if torch.is_tensor(v) and v.shape == p.shape
                }

    @no_grad
    def finish(self, pending: PendingStep) -> dict[str, Tensor]:
        """After ``optimizer.step()``: update-stage transforms, ``θ = θ_before + s·Δ``, skipped replicas
        restored. Returns the step's metrics."""
        rd, metrics, skip = self.replica_dims, pending.metrics, pending.skip
        if not pending.snapshot:
            metrics["step/skipped"] = skip.to(pending.scale.dtype)
            return metrics
        params = pending.params
        deltas = [p - b for p, b in zip(params, pending.before)]
        deltas = self._run_transforms(self._stage("update"), deltas, pending)
        skip = pending.skip
        keep = (~skip).to(pending.scale.dtype)
        factor = pending.scale * keep
        for p, b, d in zip(params, pending.before, deltas):
            p.copy_(b + replica_view(factor, d, rd) * d)
        for p, st in pending.saved_state.items():
            state = self.optimizer.state[p]
            if pending.restore_all:
                if not bool(skip.all()):
                    continue
                for k in list(state):
                    if torch.is_tensor(state[k]) and k not in st:
                        del state[k]
                for k, old in st.items():
                    state[k] = old
                continue
            for k, old in st.items():
                cur = state[k]
                cur.copy_(torch.where(replica_view(skip, cur, rd), old, cur))
        metrics["step/skipped"] = skip.to(pending.scale.dtype)
        return metrics

    def _run_transforms(self, stabs: list, vecs: list[Tensor], pending: PendingStep) -> list[Tensor]:
        for s in stabs:
            vecs, sk, m = s.transform(vecs, self.replica_dims, pending.context)
            pending.metrics.update(m)
            if sk is not None:
                if not s.can_skip:
                    raise RuntimeError(f"{type(s).__name__} returned a skip mask but declares can_skip = False")
                pending.skip = pending.skip | sk
        return vecs


@dataclass
class PendingStep:
    """One optimizer step between :meth:`StabilizedOptimizer.begin` and :meth:`StabilizedOptimizer.finish`."""

    context: StepContext | None
    params: list[Tensor]
    grads: list[Tensor]
    metrics: dict[str, Tensor]
    skip: Tensor
    scale: Tensor | None = None
    all_skip: bool = False
    snapshot: bool = False
    restore_all: bool = False
    before: list[Tensor] = field(default_factory=list)
    saved_state: dict = field(default_factory=dict)
