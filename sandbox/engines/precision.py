"""Precision: the sampler evaluates the same weights at a lower precision (``docs/engines.md#precision``).

The LM's sampler casts the weights of the sampling version to ``dtype`` and runs its forward (the KV
cache included) in it, with real torch casts: ``bfloat16`` or ``float16``; ``fp8_e4m3`` rounds every
weight matrix to the float8 e4m3 grid with a per-tensor scale ``s = max|W| / 448`` (vLLM's per-tensor
fp8 weight quantisation, emulated: ``W ≈ s · fp8(W / s)``, computed as a torch cast to
``torch.float8_e4m3fn`` and back) and computes in bfloat16 (vectors — biases, LayerNorm weights —
stay at bfloat16). Tokens are drawn from ``softmax(z_low / T)`` of the low-precision logits (cast to
float32) and that log-prob is reported; the trainer's exact log-prob comes from a teacher-forced
float32 forward of the same weights (``task.dtype`` must be float32: the learner's precision).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from .base import ENGINES, Engine, EngineBase

FP8_MAX = 448.0
"""Largest finite float8 e4m3 (``torch.finfo(torch.float8_e4m3fn).max``)."""


class PrecisionConfig(EngineBase):
    """The sampler runs the LM's forward at bf16, fp16 or emulated fp8 weights; the learner in fp32 (lm task only)."""

    name: Literal["precision"] = "precision"
    needs = frozenset({"logits", "forward"})
    check_settings = {"task": {"name": "lm", "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
                               "warmstart": {"enabled": False}, "train_size": 16, "eval_size": 4, "eval_samples": 1}}
    dtype: Literal["bfloat16", "float16", "fp8_e4m3"] = Field("bfloat16", description="Precision of the sampler's "
                                                              "weights and forward.")

    def task_problem(self, task_cfg):
        if getattr(task_cfg, "dtype", "float32") != "float32":
            return (f"engine.name: 'precision' compares a low-precision sampler with a float32 learner; task.dtype is "
                    f"{task_cfg.dtype!r}: set task.dtype = 'float32'")
        if getattr(getattr(task_cfg, "model", None), "backend", "builtin") != "builtin":
            return "engine.name: 'precision' is not supported for backend hf (task.model.backend); use the builtin model"
        return None


def fp8_round(w: torch.Tensor) -> torch.Tensor:
    """``s · fp8_e4m3(w / s)`` with ``s = max|w| / 448`` (float32 in, float32 out; 0 stays 0)."""
    amax = w.abs().amax()
    if float(amax) == 0.0:
        return w.clone()
    s = amax / FP8_MAX
    return (w / s).to(torch.float8_e4m3fn).to(torch.float32) * s


@ENGINES.register(PrecisionConfig)
class PrecisionEngine(Engine):
    def sampler_weights(self, single):
        kind = self.cfg.dtype
        if kind == "fp8_e4m3":
            return {k: (fp8_round(v.float()) if v.dim() >= 2 else v).to(torch.bfloat16) for k, v in single.items()}, torch.bfloat16
        dt = torch.bfloat16 if kind == "bfloat16" else torch.float16
        return {k: v.to(dt) for k, v in single.items()}, dt
