"""Precision: the sampler evaluates the same weights at a lower precision (``docs/engines.md#precision``).

The LM's sampler casts the weights of the sampling version to ``dtype`` and runs its forward (the KV
cache included) in it, with real torch casts: ``bfloat16`` or ``float16``; ``fp8_e4m3`` rounds every
weight matrix to the float8 e4m3 grid with a per-tensor scale ``s = max|W| / 448`` (vLLM's per-tensor
fp8 weight quantisation, emulated: ``W ≈ s · fp8(W / s)``, computed as a torch cast to
``torch.float8_e4m3fn`` and back) and computes in bfloat16 (vectors — biases, LayerNorm weights —
stay at bfloat16). Tokens are drawn from ``softmax(z_low / T)`` of the low-precision logits (cast to
float32) and that log-prob is reported; the trainer's exact log-prob comes from a teacher-forced
float32 forward of the same weights (``task.dtype`` must be float32: the learner's precision).

``noise_scale > 0`` adds, on top of the cast, the perturbation of the ``logit_noise`` engine to the
sampler's low-precision logits ``z_low`` (``q = softmax(z_low + ε)``, ``ε_k = noise_scale · ξ_k``, ``ξ``
Student-t with ``noise_dof`` degrees of freedom, or Gaussian when ``noise_dof`` is None;
:mod:`.logit_noise`): the kernel and reduction-order differences of a real serving stack, which in a
deep model add far more than a tiny model's weight cast does. The calibrated dense preset
(``docs/engines.md#calibrated-presets``) needs it: a bf16 cast alone gives this 2-layer model a
per-token k3 KL of ~3e-5, not the published 1e-3 to 5e-3.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from sandbox.base.lazy_torch import lazy_import
from sandbox.engines.base import ENGINES, Engine, EngineBase, tiny_lm_check_settings
from sandbox.engines.logit_noise import LogitNoiseConfig, LogitNoiseEngine

torch = lazy_import("torch", globals())

FP8_MAX = 448.0
"""Largest finite float8 e4m3 (``torch.finfo(torch.float8_e4m3fn).max``)."""


class PrecisionConfig(EngineBase):
    """The sampler runs the LM's forward at bf16, fp16 or emulated fp8 weights; the learner in fp32 (lm task only)."""

    name: Literal["precision"] = "precision"
    needs = frozenset({"logits", "forward"})
    check_settings = tiny_lm_check_settings()
    dtype: Literal["bfloat16", "float16", "fp8_e4m3"] = Field(
        "bfloat16", description="Precision of the sampler's weights and forward."
    )
    noise_scale: float = Field(
        0.0,
        ge=0,
        le=100,
        description="Scale of an added perturbation of the sampler's "
        "low-precision logits (the logit_noise engine's scale; 0 = the cast alone).",
    )
    noise_dof: int | None = Field(
        None, ge=1, le=100, description="Student-t degrees of freedom of that perturbation (None: Gaussian)."
    )

    @model_validator(mode="after")
    def _noise(self):
        if self.noise_dof is not None and self.noise_scale == 0:
            raise ValueError("noise_dof: only used with noise_scale > 0")
        return self

    def task_problem(self, task_cfg):
        if getattr(task_cfg, "dtype", "float32") != "float32":
            return (
                f"engine.name: 'precision' compares a low-precision sampler with a float32 learner; task.dtype is "
                f"{task_cfg.dtype!r}: set task.dtype = 'float32'"
            )
        if getattr(getattr(task_cfg, "model", None), "backend", "builtin") != "builtin":
            return (
                "engine.name: 'precision' is not supported for backend hf (task.model.backend); use the builtin model"
            )
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
    def __init__(self, cfg: PrecisionConfig):
        super().__init__(cfg)
        self.extra = None
        if cfg.noise_scale > 0:
            tail = {"tail": "gaussian"} if cfg.noise_dof is None else {"tail": "student_t", "dof": cfg.noise_dof}
            self.extra = LogitNoiseEngine(LogitNoiseConfig(scale=cfg.noise_scale, **tail))

    def draw(self, z, gen, version=0, position=0):
        """Sample from the low-precision logits ``z``, perturbed when ``noise_scale > 0`` (module docstring)."""
        if self.extra is None:
            return super().draw(z, gen, version, position)
        return self.extra.draw(z, gen, version, position)

    def sampler_weights(self, single):
        kind = self.cfg.dtype
        if kind == "fp8_e4m3":
            return {
                k: (fp8_round(v.float()) if v.dim() >= 2 else v).to(torch.bfloat16) for k, v in single.items()
            }, torch.bfloat16
        dt = torch.bfloat16 if kind == "bfloat16" else torch.float16
        return {k: v.to(dt) for k, v in single.items()}, dt
