"""The sandbox's stabilizers inside a trainer that owns its own optimizer step, through torch's
optimizer hooks (``Optimizer.register_step_pre_hook`` / ``register_step_post_hook``, torch >= 2.0).

A trainer such as Hugging Face's ``Trainer`` (transformers 5.x, which TRL's ``GRPOTrainer`` extends)
runs ``backward``, clips the global gradient norm, then calls ``optimizer.step()``, with gradient
accumulation, mixed precision and a learning-rate schedule of its own. :class:`StabilizerHooks` runs
the same phases as :class:`~sandbox.algorithms.stabilized.StabilizedOptimizer` (the simulator's
learner) around that call, without replacing the optimizer, its schedule or its checkpoints:

1. :meth:`StabilizerHooks.before_clip` (optional; call it just before the trainer clips): the raw
   gradient's norm and its cosine with the previous raw gradient (``grad/cos_prev``), then the
   gradient-stage stabilizers placed before clipping (GAC ``project_then_clip``);
2. pre-hook of ``optimizer.step()``: phase 1 if nobody called it (no clipping configured), the other
   gradient-stage stabilizers (GAC's default ``clip_then_project`` sees the clipped gradient), the
   lr-stage multipliers (VCPO's ``sqrt(ESS/N)`` rule), a snapshot of the parameters;
3. post-hook: update-stage stabilizers on ``Δθ = θ_after − θ_before``, then ``θ = θ_before + s·Δθ``;
   a skipped step (GAC ``c_skip``, ``grad_norm_skip``) restores the parameters and every tensor of the
   optimizer state, so it is as if the step had not been taken (the trainer's LR schedule still
   advances, as it does for any step its own gradient scaler skips).

Checkpoints: the stabilizers' state (GAC's reference direction and cosine history, ``grad_norm_skip``'s
statistics, the previous gradient of ``grad/cos_prev``) travels inside the optimizer's own
``state_dict()`` under the key :data:`STATE_KEY`, added by a state-dict post-hook and taken back out by a
load pre-hook (``Optimizer.register_state_dict_post_hook`` / ``register_load_state_dict_pre_hook``,
torch >= 2.1). So whatever saves and loads the optimizer saves and loads them too: Hugging Face's
``Trainer`` writes ``optimizer.pt`` from ``optimizer.state_dict()`` and reads it back with
``optimizer.load_state_dict(torch.load(..., weights_only=True))`` (transformers 5.x
``_save_optimizer_and_scheduler`` / ``_load_optimizer_and_scheduler``), through accelerate's optimizer
wrapper, which forwards both calls to the torch optimizer these hooks sit on.

Every parameter must hold its full gradient on every process (one process, or data-parallel DDP where
gradients are all-reduced before the step): with sharded gradients (FSDP, DeepSpeed ZeRO) the global
cosines and norms would be per shard, so :func:`check_full_gradients` refuses them.
``docs/promotion.md#trl`` shows the TRL trainer built on this.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable

import torch
from torch import Tensor

from sandbox.algorithms.stabilized import PendingStep, StabilizedOptimizer, StepContext

__all__ = ["STATE_KEY", "StabilizerHooks", "check_full_gradients"]

logger = logging.getLogger(__name__)

STATE_KEY = "sandbox_stabilizer_hooks"
"""The key of :meth:`StabilizerHooks.state_dict` inside the optimizer's ``state_dict()``."""

SHARDED_BACKENDS = ("FSDP", "DEEPSPEED", "MEGATRON_LM", "XLA")


def check_full_gradients(distributed_type: str) -> None:
    """Refuse a distributed backend whose gradients are sharded across processes (named as accelerate's
    ``DistributedType``)."""
    name = str(distributed_type).rsplit(".", 1)[-1].upper()
    if name in SHARDED_BACKENDS:
        raise ValueError(
            f"the sandbox stabilizers need every process to hold the full gradient, but the trainer runs with "
            f"{name} (sharded gradients); use one process or data-parallel (DDP) training"
        )


class StabilizerHooks:
    """Stabilizers attached to ``optimizer`` by its step hooks (see the module docstring).

    Args:
        optimizer: the torch optimizer the trainer steps (the inner one, not accelerate's wrapper).
        params: the trainable parameters, in a fixed order (every process the same).
        stabilizers: stabilizer configs or objects (``sandbox.algorithms.stabilizers``).
        context: called once per optimizer step, before any stabilizer runs: the step's
            :class:`StepContext` (the ESS of the optimizer batch, the lags).
        on_metrics: receives each step's metrics as floats (the sandbox's names: ``grad/norm``,
            ``grad/cos_prev``, ``lr/scale``, ``step/skipped``, ``gac/...``, ``vcpo/...``).
        grad_cosine: keep a copy of the previous raw gradient to log ``grad/cos_prev`` (one
            gradient-sized float32 buffer).
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        params: Iterable[Tensor],
        stabilizers=(),
        context: Callable[[], StepContext] | None = None,
        on_metrics: Callable[[dict[str, float]], None] | None = None,
        grad_cosine: bool = True,
    ):
        self.core = StabilizedOptimizer(optimizer, params, stabilizers, replica_dims=0, max_grad_norm=None)
        self.context = context or StepContext
        self.on_metrics = on_metrics or (lambda metrics: None)
        self.grad_cosine = grad_cosine
        self.prev_grad: Tensor | None = None
        self.pending: PendingStep | None = None
        self.steps = 0
        self.last_metrics: dict[str, float] = {}
        self._loaded: dict | None = None
        self._handles = [
            optimizer.register_step_pre_hook(self._pre_step),
            optimizer.register_step_post_hook(self._post_step),
            optimizer.register_state_dict_post_hook(self._add_state),
            optimizer.register_load_state_dict_pre_hook(self._take_state),
            optimizer.register_load_state_dict_post_hook(self._restore_state),
        ]

    # ------------------------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """What a resumed run needs besides the optimizer's own state: every stabilizer's state, the previous
        raw gradient (``grad/cos_prev``) and the step count."""
        return {"stabilizers": self.core.stabilizer_state_dict(), "prev_grad": self.prev_grad, "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.core.load_stabilizer_state_dict(state["stabilizers"])
        self.prev_grad, self.steps = state["prev_grad"], int(state["steps"])
        self.pending = None

    def _add_state(self, optimizer, state_dict: dict) -> dict:
        state_dict[STATE_KEY] = self.state_dict()
        return state_dict

    def _take_state(self, optimizer, state_dict: dict) -> dict:
        state_dict = dict(state_dict)
        self._loaded = state_dict.pop(STATE_KEY, None)
        if self._loaded is None:
            logger.warning(
                "the optimizer state loaded has no sandbox stabilizer state (a checkpoint of a run without "
                "them?): the stabilizers and grad/cos_prev start afresh"
            )
        return state_dict

    def _restore_state(self, optimizer) -> None:
        loaded, self._loaded = self._loaded, None
        if loaded is not None:
            self.load_state_dict(loaded)

    # ------------------------------------------------------------------------------------ phases
    @torch.no_grad()
    def before_clip(self) -> None:
        """Phase 1: call after the last backward of an optimizer step and before the trainer clips."""
        self.pending = self.core.begin(self.context())
        if self.pending is None:
            return
        if self.grad_cosine:
            flat = torch.cat([g.detach().reshape(-1).float() for g in self.pending.grads])
            cos = math.nan  # undefined without a previous gradient, or when either gradient is zero: missing, never 0
            if self.prev_grad is not None:
                norms = flat.norm() * self.prev_grad.norm()
                if norms > 0:
                    cos = float(flat @ self.prev_grad / (norms + 1e-12))
            self.pending.metrics["grad/cos_prev"] = torch.tensor(cos)
            self.prev_grad = flat
        self.core.gradient_stage(self.pending, before_clip=True)
        for p, g in zip(self.pending.params, self.pending.grads):
            if p.grad is not g:
                p.grad.copy_(g)  # the trainer clips p.grad in place next

    @torch.no_grad()
    def _pre_step(self, optimizer, args, kwargs) -> None:
        if self.pending is None:
            self.before_clip()
        if self.pending is None:
            return
        # The trainer may have clipped p.grad in place: the after-clip stabilizers must see that gradient.
        self.pending.grads = [p.grad for p in self.pending.params]
        self.core.gradient_stage(self.pending, before_clip=False)
        self.core.prepare_update(self.pending, step_always_runs=True)

    @torch.no_grad()
    def _post_step(self, optimizer, args, kwargs) -> None:
        pending, self.pending = self.pending, None
        if pending is None:
            return
        metrics = self.core.finish(pending)
        self.steps += 1
        self.last_metrics = {k: float(torch.as_tensor(v).float().mean()) for k, v in metrics.items()}
        self.on_metrics(self.last_metrics)

    def remove(self) -> None:
        """Detach the hooks (the optimizer is left as it is)."""
        for h in self._handles:
            h.remove()
        self._handles = []
