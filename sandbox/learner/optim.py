"""The ``[algorithm.optimizer]`` section: a standard torch optimizer and its LR schedule."""

from __future__ import annotations

import inspect
import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from sandbox.base.lazy_torch import lazy_import

torch = lazy_import("torch", globals())

FLOAT32_MAX = float(np.finfo(np.float32).max)  # torch.finfo(torch.float32).max, without torch
"""The largest finite float32: parameters are float32 (bfloat16 shares its range), so a rate or decay above
it overflows when the optimizer applies it."""


class OptimizerConfig(BaseModel):
    """Optimizer, learning rate and schedule. Defaults: Adam(β=(0.9, 0.999), ε=1e-8) as in
    torch / Kingma & Ba 2015; constant LR as in the VCPO scripts (arXiv 2602.17616;
    ``docs/methods/stabilizers.md#vcpo_lr``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: Literal["adam", "adamw", "sgd"] = Field("adam", description="adam | adamw | sgd.")
    lr: float = Field(
        0.05,
        gt=0,
        le=FLOAT32_MAX,
        description="Base learning rate η (> 0, at most 3.4e38: the largest float32, the parameters' dtype; a "
        "larger rate cannot even be applied to them).",
    )
    betas: tuple[float, float] = Field((0.9, 0.999), description="Adam moment decays, each in [0, 1).")
    eps: float = Field(1e-8, gt=0, description="Adam denominator epsilon.")
    momentum: float = Field(0.0, ge=0, lt=1, description="SGD heavy-ball momentum in [0, 1).")
    weight_decay: float = Field(
        0.0, ge=0, le=FLOAT32_MAX, description="Weight decay (decoupled for adamw; at most 3.4e38)."
    )
    schedule: Literal["constant", "linear", "cosine"] = Field("constant", description="LR decay after warm-up.")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up steps.")
    grad_clip: float | None = Field(None, gt=0, description="Per-replica global gradient-norm clip (None = off).")

    @field_validator("betas", mode="before")
    @classmethod
    def _betas_from_list(cls, v):
        # TOML has arrays, not tuples: accept a 2-element array also under strict validation.
        return tuple(v) if isinstance(v, list) else v

    @field_validator("betas")
    @classmethod
    def _betas_in_range(cls, v):
        if not all(0 <= b < 1 for b in v):
            raise ValueError(f"each beta must lie in [0, 1), got {v}")
        return v


def build_optimizer(cfg: OptimizerConfig, params: list[torch.Tensor]) -> torch.optim.Optimizer:
    """The torch optimizer ``cfg`` names, as its :func:`without_dynamo` subclass (the same update)."""
    if cfg.name == "sgd":
        return without_dynamo(torch.optim.SGD)(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    cls = torch.optim.AdamW if cfg.name == "adamw" else torch.optim.Adam
    return without_dynamo(cls)(params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay)


_NO_DYNAMO: dict[type, type] = {}


def without_dynamo(cls: type[torch.optim.Optimizer]) -> type[torch.optim.Optimizer]:
    """``cls`` (a ``torch.optim`` optimizer) with the methods that import ``torch._dynamo`` replaced by the
    functions they wrap. torch 2.x decorates ``Optimizer.add_param_group``, ``zero_grad``, ``state_dict`` and
    ``load_state_dict`` with ``torch._disable_dynamo``, which imports ``torch._dynamo`` on the first call
    (``torch/_compile.py``), and ``step`` with ``_use_grad_for_differentiable``, which imports it on every call
    to place two graph breaks (``torch/optim/optimizer.py``); constructing the optimizer therefore costs a
    training process about as long as importing torch itself (benchmarks/README.md row 12). Outside
    ``torch.compile`` these wrappers do nothing but the import (and the grad-mode switch, kept here), so the
    subclass runs the same functions on the same tensors: the same update to the bit, the same state dict
    (``tests/learner/test_optimizer_without_dynamo.py``). The profiler label and the step hooks that
    ``Optimizer.__init__`` wraps around ``step`` stay."""
    made = _NO_DYNAMO.get(cls)
    if made is not None:
        return made
    unwrap = inspect.unwrap
    raw_step = unwrap(cls.step)
    raw_add, raw_zero = unwrap(cls.add_param_group), unwrap(cls.zero_grad)
    raw_state, raw_load = unwrap(cls.state_dict), unwrap(cls.load_state_dict)

    def step(self, closure=None):
        prev = torch.is_grad_enabled()
        try:
            torch.set_grad_enabled(self.defaults["differentiable"])
            return raw_step(self, closure)
        finally:
            torch.set_grad_enabled(prev)

    def add_param_group(self, param_group):
        return raw_add(self, param_group)

    def zero_grad(self, set_to_none: bool = True):
        return raw_zero(self, set_to_none)

    def state_dict(self):
        return raw_state(self)

    def load_state_dict(self, state_dict):
        return raw_load(self, state_dict)

    step.raw_step = raw_step  # what unhooked_step calls
    made = type(
        cls.__name__,
        (cls,),
        {
            "__module__": __name__,
            "__qualname__": cls.__name__,
            "__doc__": cls.__doc__,
            "step": step,
            "add_param_group": add_param_group,
            "zero_grad": zero_grad,
            "state_dict": state_dict,
            "load_state_dict": load_state_dict,
        },
    )
    _NO_DYNAMO[cls] = made
    return made


def scheduled_lr(cfg: OptimizerConfig, step: int, total_steps: int) -> float:
    """η_t: linear warm-up to ``lr`` over ``warmup_steps``, then constant / linear / cosine decay to 0."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    span = max(total_steps - cfg.warmup_steps, 1)
    progress = min(max(step - cfg.warmup_steps, 0) / span, 1.0)
    if cfg.schedule == "linear":
        return cfg.lr * (1.0 - progress)
    return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def unhooked_step(optimizer: torch.optim.Optimizer):
    """``optimizer.step`` for a caller already under ``torch.no_grad()``, without torch's per-call wrappers
    when nothing uses them: the profiler label and the step hooks of ``Optimizer.profile_hook_step`` and
    the grad-mode switch of ``_use_grad_for_differentiable`` (torch 2.x, ``torch/optim/optimizer.py``).
    The same update function runs on the same tensors, so the weights are the same to the bit; the
    wrappers were about 2% of a lean bandit run (py-spy; benchmarks/README.md row 11). Falls back to
    ``optimizer.step`` whenever a step hook is registered, the optimizer is differentiable, or the method
    is not wrapped the way this torch wraps it."""
    from torch.optim import optimizer as _optimizer

    hooked = type(optimizer).step
    mid = getattr(hooked, "__wrapped__", None)
    raw = getattr(mid, "__wrapped__", None)
    code = getattr(mid, "__code__", None)
    ours = getattr(mid, "raw_step", None)  # a without_dynamo subclass: mid is its own step
    if ours is not None:
        raw, code_ok = ours, True
    else:
        code_ok = code is not None and code.co_name == "_use_grad"
    global_pre = getattr(_optimizer, "_global_optimizer_pre_hooks", None)
    global_post = getattr(_optimizer, "_global_optimizer_post_hooks", None)
    if (
        not getattr(hooked, "hooked", False)
        or raw is None
        or not code_ok
        or optimizer.defaults.get("differentiable", False)
        or global_pre is None
        or global_post is None
        or not hasattr(optimizer, "_optimizer_step_pre_hooks")
        or not hasattr(optimizer, "_optimizer_step_post_hooks")
    ):
        return optimizer.step

    adam = _single_tensor_adam_step(optimizer) if ours is not None else None

    def step():
        if (
            global_pre
            or global_post
            or optimizer._optimizer_step_pre_hooks
            or optimizer._optimizer_step_post_hooks
            or torch.is_grad_enabled()
        ):
            return optimizer.step()
        if adam is not None and adam():
            return None
        return raw(optimizer)

    return step


_ADAM_OFF = {"amsgrad": False, "maximize": False, "capturable": False, "differentiable": False}


def _single_tensor_adam_step(optimizer: torch.optim.Optimizer):
    """For a CPU ``torch.optim.Adam`` / ``AdamW`` in its default single-tensor mode: a function that runs
    ``Adam.step``'s update, ``torch.optim.adam._single_tensor_adam``, on the same tensors with the same
    arguments, without the per-call work around it that cannot change the result on CPU (the lists
    rebuilt by ``_init_group``, here built once and reused while the groups, the state dict and the
    gradient tensors are the same ones; ``_default_to_fused_or_foreach``, the accelerator check); it returns False,
    having done nothing, whenever ``Adam.step`` would do more (a parameter with no state yet: the first
    step initializes it; a sparse or complex gradient; a gradient scaler), so the caller then runs the
    full step. None when the optimizer is not such an Adam (the caller keeps the full step). torch 2.x
    (``torch/optim/adam.py``: ``Adam.step``, ``adam``); the same update to the bit, after a
    ``load_state_dict`` too (``tests/learner/test_unhooked_step.py``)."""
    try:
        from torch.optim.adam import _single_tensor_adam
    except ImportError:  # another torch layout: the full step
        return None
    if not isinstance(optimizer, torch.optim.Adam):
        return None
    groups = optimizer.param_groups

    def eligible(group) -> bool:
        # foreach / fused None on CPU parameters: adam() picks the single-tensor function (foreach needs CUDA)
        return (
            group.get("foreach") in (None, False)
            and group.get("fused") in (None, False)
            and all(group.get(k, True) is v for k, v in _ADAM_OFF.items())
            and "decoupled_weight_decay" in group
            and all(p.device.type == "cpu" and not p.is_complex() for p in group["params"])
        )

    if not all(eligible(g) for g in groups):
        return None
    checked = [groups, len(groups), True]  # the groups last checked (load_state_dict replaces the list)
    # The argument lists of the last step, reused while they would be built the same: the same groups list of
    # as many groups, the same state dict (load_state_dict replaces both; a step of Adam only writes into the
    # tensors of a parameter's state once it has one) and every parameter's gradient the same tensor (or None).
    made: list = [None]  # (groups, number of groups, state, calls, [(parameter, its gradient)])

    def step() -> bool:
        groups, state = optimizer.param_groups, optimizer.state
        if groups is not checked[0] or len(groups) != checked[1]:
            checked[:] = groups, len(groups), all(eligible(g) for g in groups)
        if not checked[2] or getattr(optimizer, "grad_scale", None) is not None:
            return False
        if getattr(optimizer, "found_inf", None) is not None:
            return False
        last = made[0]
        if last is None or last[0] is not groups or last[1] != len(groups) or last[2] is not state:
            last = None
        else:
            for p, g in last[4]:
                if p.grad is not g:
                    last = None
                    break
        if last is None:
            last = made[0] = _adam_calls(groups, state)
            if last is None:  # a parameter without state yet, or a sparse gradient: the full step
                return False
        for group, params, grads, avgs, sqs, steps in last[3]:
            beta1, beta2 = group["betas"]
            _single_tensor_adam(
                params,
                grads,
                avgs,
                sqs,
                [],
                steps,
                None,
                None,
                amsgrad=False,
                has_complex=False,
                beta1=beta1,
                beta2=beta2,
                lr=group["lr"],
                weight_decay=group["weight_decay"],
                eps=group["eps"],
                maximize=False,
                capturable=False,
                differentiable=False,
                decoupled_weight_decay=group["decoupled_weight_decay"],
            )
        return True

    return step


def _adam_calls(groups: list, state: dict) -> tuple | None:
    """``(groups, len(groups), state, calls, [(parameter, its gradient)])``: per group with a gradient, the
    argument lists ``Adam.step`` hands ``_single_tensor_adam`` (``torch/optim/adam.py: _init_group`` for
    parameters whose state exists); None for a parameter without state yet or with a sparse gradient."""
    calls, grads_of = [], []
    for group in groups:
        params, grads, avgs, sqs, steps = [], [], [], [], []
        for p in group["params"]:
            g = p.grad
            grads_of.append((p, g))
            if g is None:
                continue
            s = state.get(p)
            if not s or g.is_sparse:
                return None
            params.append(p)
            grads.append(g)
            avgs.append(s["exp_avg"])
            sqs.append(s["exp_avg_sq"])
            steps.append(s["step"])
        if params:
            calls.append((group, params, grads, avgs, sqs, steps))
    return groups, len(groups), state, calls, grads_of
