"""Optimizer-level wrapper applying GAC and learning-rate rules around any ``torch.optim`` optimizer
(``shared/reference/algorithms.md`` §3.7–3.9).

Per-replica LR scaling works for every optimizer whose update is linear in the learning rate given its
state (SGD, momentum, Adam, AdamW incl. decoupled weight decay): the parameters are snapshotted before
``optimizer.step()`` and set to ``θ_before + s_r·(θ_after − θ_before)`` per replica r. The optimizer's own
``lr`` (and any schedule) is never modified.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import torch
from torch import Tensor

from ._tensor import replica_sum, replica_view
from .configs import GACConfig, StalenessLRConfig, VCPOLRConfig
from .gac import GAC
from .staleness_lr import StalenessLR
from .vcpo import VCPOLR

STABILIZERS = {GACConfig: GAC, VCPOLRConfig: VCPOLR, StalenessLRConfig: StalenessLR}


@dataclass
class StepContext:
    """Batch information a stabilizer may need at step time.

    ``ess_ratio``: batch ESS ratio of unclipped sequence weights, ``(R...)`` or scalar (``vcpo_lr``;
    take ``LossOutput.metrics['is/ess_ratio']``). ``staleness``: lag in versions, scalar, ``(R...)`` or
    per sample ``(R..., N)`` (``staleness_lr``, GAC ``staleness_scaled``)."""

    ess_ratio: Tensor | float | None = None
    staleness: Tensor | float | None = None
    extras: dict = field(default_factory=dict)


def build_stabilizers(cfgs: Iterable) -> list:
    """Stabilizer objects for a list of ``StabilizerConfig``; feed them to :class:`StabilizedOptimizer`."""
    out = []
    for c in cfgs:
        try:
            out.append(STABILIZERS[type(c)](c))
        except KeyError:
            raise TypeError(f"no stabilizer registered for {type(c).__name__}") from None
    return out


class StabilizedOptimizer:
    """``optimizer`` plus stabilizers, with per-replica semantics.

    Args:
        optimizer: any torch optimizer over ``params``.
        params: the parameter tensors (all of them carry the leading replica dims if ``replica_dims > 0``).
        stabilizers: objects from :func:`build_stabilizers` (or configs, built here).
        replica_dims: number of leading dims of every parameter that index independent learners.
        max_grad_norm: per-replica global-norm gradient clipping (None = off); GAC's ``clip_order``
            decides whether its projection happens before or after it.

    Call after ``backward()``: ``metrics = opt.step(StepContext(...))``. Metrics (each ``(R...)`` or scalar):
    ``grad/norm`` (before clipping), ``grad/norm_clipped``, ``lr/scale`` (product of all LR rules),
    ``step/skipped``, and each stabilizer's own (``grad/cos_prev``, ``gac/*``, ``lr/vcpo_scale``, ...).

    Skipping with replicas: a skipped replica keeps its parameters and the optimizer-state tensors shaped
    like the parameter (Adam moments); shared scalar state (Adam's step count) still advances. When every
    replica skips, the optimizer is not called at all.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, params: Iterable[Tensor], stabilizers=(),
                 replica_dims: int = 0, max_grad_norm: float | None = None):
        self.optimizer = optimizer
        self.params = [p for p in params]
        stabilizers = list(stabilizers)
        if stabilizers and not hasattr(stabilizers[0], "kind"):
            stabilizers = build_stabilizers(stabilizers)
        self.stabilizers = stabilizers
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

        pre = [s for s in self.stabilizers if s.kind == "gac" and s.placement == "pre_optimizer"]
        post = [s for s in self.stabilizers if s.kind == "gac" and s.placement == "post_optimizer"]
        lr_rules = [s for s in self.stabilizers if s.kind == "lr"]
        skip = torch.zeros(rshape, dtype=torch.bool, device=grads[0].device)

        def run_gac(stabs, vecs):
            nonlocal skip
            for s in stabs:
                vecs, sk, m = s.apply(vecs, rd, context)
                metrics.update(m)
                if sk is not None:
                    skip = skip | sk
            return vecs

        first = [s for s in pre if s.cfg.clip_order == "project_then_clip"]
        second = [s for s in pre if s.cfg.clip_order == "clip_then_project"]
        grads = run_gac(first, grads)
        if self.max_grad_norm is not None:
            grads = self._clip(grads, metrics)
        grads = run_gac(second, grads)
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
        need_snapshot = bool(post) or any_skip or bool((scale != 1.0).any())
        if not need_snapshot:
            self.optimizer.step()
            metrics["step/skipped"] = skip.to(scale.dtype)
            return metrics

        before = [p.detach().clone() for p in params]
        saved_state = {}
        post_can_skip = any(s.cfg.c_skip is not None and s.cfg.skip_mode == "skip_step" for s in post)
        if (any_skip and not all_skip) or post_can_skip:
            for p in params:
                st = self.optimizer.state.get(p, {})
                saved_state[p] = {k: v.clone() for k, v in st.items() if torch.is_tensor(v) and v.shape == p.shape}
        if not all_skip:
            self.optimizer.step()
        deltas = [p - b for p, b in zip(params, before)]
        deltas = run_gac(post, deltas)
        all_skip = bool(skip.all())
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
