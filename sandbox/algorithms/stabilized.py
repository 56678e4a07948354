"""Optimizer-level wrapper running stabilizers around any ``torch.optim`` optimizer, through the
stabilizer protocol only (``docs/methods/stabilizers.md#protocol``): it asks each stabilizer where it
acts (``stage``, ``before_clip``) and whether it can skip (``can_skip``), never which one it is.

Per-replica LR scaling works for every optimizer whose update is linear in the learning rate given its
state (SGD, momentum, Adam, AdamW incl. decoupled weight decay): the parameters are snapshotted before
``optimizer.step()`` and set to ``θ_before + s_r·(θ_after − θ_before)`` per replica r. The optimizer's own
``lr`` (and any schedule) is never modified.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch
from pydantic import BaseModel
from torch import Tensor

from ._tensor import replica_sum, replica_view
from .stabilizers import STABILIZERS, STAGES, StepContext

__all__ = ["StabilizedOptimizer", "StepContext", "build_stabilizers"]


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

    def __init__(self, optimizer: torch.optim.Optimizer, params: Iterable[Tensor], stabilizers=(),
                 replica_dims: int = 0, max_grad_norm: float | None = None):
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

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def _stage(self, stage: str) -> list:
        return [s for s in self.stabilizers if s.stage == stage]

    def _clip(self, grads: list[Tensor], metrics: dict) -> list[Tensor]:
        norm = sum(replica_sum(g * g, self.replica_dims) for g in grads).sqrt()
        coef = (self.max_grad_norm / (norm + 1e-6)).clamp(max=1.0)
        metrics["grad/clip_coef"] = coef
        return [g * replica_view(coef, g, self.replica_dims) for g in grads]

    @torch.no_grad()
    def step(self, context: StepContext | None = None) -> dict[str, Tensor]:
        rd = self.replica_dims
        params = [p for p in self.params if p.grad is not None]
        metrics: dict[str, Tensor] = {}
        if not params:
            return metrics
        grads = [p.grad for p in params]
        metrics["grad/norm"] = sum(replica_sum(g * g, rd) for g in grads).sqrt()
        rshape = metrics["grad/norm"].shape

        gradient = self._stage("gradient")
        update = self._stage("update")
        lr_rules = self._stage("lr")
        skip = torch.zeros(rshape, dtype=torch.bool, device=grads[0].device)

        def run_transforms(stabs, vecs):
            nonlocal skip
            for s in stabs:
                vecs, sk, m = s.transform(vecs, rd, context)
                metrics.update(m)
                if sk is not None:
                    if not s.can_skip:
                        raise RuntimeError(f"{type(s).__name__} returned a skip mask but declares can_skip = False")
                    skip = skip | sk
            return vecs

        grads = run_transforms([s for s in gradient if s.before_clip], grads)
        if self.max_grad_norm is not None:
            grads = self._clip(grads, metrics)
        grads = run_transforms([s for s in gradient if not s.before_clip], grads)
        metrics["grad/norm_clipped"] = sum(replica_sum(g * g, rd) for g in grads).sqrt()
        for p, g in zip(params, grads):
            if p.grad is not g:
                p.grad.copy_(g)

        scale = torch.ones(rshape, dtype=grads[0].dtype, device=grads[0].device)
        for s in lr_rules:
            sc, m = s.lr_scale(context, rd)
            metrics.update(m)
            scale = scale * torch.as_tensor(sc, dtype=scale.dtype, device=scale.device).expand(rshape)
        metrics["lr/scale"] = scale

        all_skip = bool(skip.all())
        any_skip = bool(skip.any())
        need_snapshot = bool(update) or any_skip or bool((scale != 1.0).any())
        if not need_snapshot:
            self.optimizer.step()
            metrics["step/skipped"] = skip.to(scale.dtype)
            return metrics

        before = [p.detach().clone() for p in params]
        saved_state = {}
        update_can_skip = any(s.can_skip for s in update)
        if (any_skip and not all_skip) or update_can_skip:
            for p in params:
                st = self.optimizer.state.get(p, {})
                saved_state[p] = {k: v.clone() for k, v in st.items() if torch.is_tensor(v) and v.shape == p.shape}
        if not all_skip:
            self.optimizer.step()
        deltas = [p - b for p, b in zip(params, before)]
        deltas = run_transforms(update, deltas)
        keep = (~skip).to(scale.dtype)
        factor = scale * keep
        for p, b, d in zip(params, before, deltas):
            p.copy_(b + replica_view(factor, d, rd) * d)
        if saved_state:
            for p, st in saved_state.items():
                for k, old in st.items():
                    cur = self.optimizer.state[p][k]
                    cur.copy_(torch.where(replica_view(skip, cur, rd), old, cur))
        metrics["step/skipped"] = skip.to(scale.dtype)
        return metrics
