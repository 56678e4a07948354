"""Trainer step time from the hardware (``docs/system.md#hardware``): the FLOPs of the step over the
GPUs' peak throughput times the model-FLOPs utilisation,

    seconds = (6 + 2·r) · N · T / (gpus · peak · MFU)

for ``N`` parameters (``model`` of :data:`sandbox.system.hardware.MODELS`), ``T`` trained tokens and
``r`` forward-only log-prob passes (``recompute_passes``: the old policy's log-probs that a clipped
or importance-weighted objective needs, a reference model's for a KL term), ``peak`` the GPU's
dense bf16 FLOP/s (:data:`sandbox.system.hardware.GPUS`). The 6·N·T of a forward and backward pass is
Kaplan et al. 2020 (arXiv 2001.08361, section 2.1); a forward pass is 2·N·T.

``T`` is the batch's token count the cluster charges (``tokens × algorithm.epochs``), or
``tokens_per_step`` when set (a system-only run, whose trainer reports no tokens).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandbox.system.delays.base import DELAYS, Delay
from sandbox.system.hardware import GPUS, MODELS, train_flops

GpuName = Literal[tuple(GPUS)]  # type: ignore[valid-type]
ModelName = Literal[tuple(MODELS)]  # type: ignore[valid-type]


class HardwareDelay(Delay):
    """Learner step time from FLOPs: (6 + 2·r)·params·tokens / (gpus · peak bf16 · MFU)
    (docs/system.md#hardware)."""

    kind: Literal["hardware"] = "hardware"
    gpu: GpuName = Field("H100", description=f"Accelerator of the table ({', '.join(GPUS)}).")
    model: ModelName = Field("qwen2.5-7b", description=f"Model of the table ({', '.join(MODELS)}).")
    gpus: int = Field(8, ge=1, description="GPUs training (data/tensor parallel together).")
    mfu: float = Field(0.4, gt=0, le=1, description="Model-FLOPs utilisation, the fraction of peak reached (0, 1].")
    recompute_passes: int = Field(
        1, ge=0, description="Forward-only log-prob passes per step (old policy, reference): 2·N·T each."
    )
    tokens_per_step: int | None = Field(
        None, ge=0, description="Tokens of a step for system-only runs; None = the batch's tokens from the trainer."
    )

    def seconds(self, tokens: float) -> float:
        flops = train_flops(MODELS[self.model].params, tokens, self.recompute_passes)
        return flops / (self.gpus * GPUS[self.gpu].peak_bf16 * self.mfu)

    def sample(self, rng, tokens=0):
        return self.expected(tokens)

    def expected(self, tokens=0.0):
        return self.seconds(self.tokens_per_step if self.tokens_per_step is not None else tokens)

    def _mean_for_check(self) -> float:
        return max(self.seconds(self.tokens_per_step or 1), 1.0)

    def fixed_value(self):
        return self.seconds(self.tokens_per_step) if self.tokens_per_step is not None else None

    def cdf(self):
        if self.tokens_per_step is None:
            return None
        import numpy as np

        value = self.fixed_value()
        return lambda x: (np.asarray(x) >= value).astype(float)


DELAYS.register(HardwareDelay, HardwareDelay)
