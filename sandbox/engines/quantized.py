"""Quantized: the sampler runs the LM with round-to-nearest integer weights (``docs/engines.md#quantized``).

The sampler's forward uses the sampling version's weights rounded to ``bits``-bit signed integers,
symmetric round-to-nearest (RTN) with one scale per output channel (each row of a weight matrix) or
per tensor, and dequantized: for a row ``w``::

    s = max_j |w_j| / (2^(bits−1) − 1),   ŵ_j = s · clamp(round(w_j / s), −(2^(bits−1) − 1), 2^(bits−1) − 1)

(the RTN baseline of weight-only quantization, as in LLM.int8(), Dettmers et al. 2022, and the
per-channel int8/int4 weight schemes vLLM serves; GPTQ and AWQ improve on it with error compensation
this engine does not do). Vectors (biases, LayerNorm weights) are kept; the token and position
embeddings (the output head when tied) are quantized only with ``embeddings = true``. The forward,
KV cache included, then runs in ``compute`` (``"bfloat16"``: a W``bits``A16 kernel; ``"float32"``:
the rounding alone). Tokens are drawn from the sampler's logits and that log-prob is reported; the
trainer's exact log-prob comes from a float32 teacher-forced forward of the unrounded weights.

Unlike ``logit_noise`` nothing is drawn per sample: the sampler's distribution is a fixed function of
the weights and the context, so the sampler and the trainer disagree the same way every time the
same context comes back (a systematic mismatch), most in relative terms on low-probability tokens
(a logit error ``ε`` moves ``log p`` by ``ε_y − Σ_k p_k ε_k``), and the per-sequence log-ratio adds
up over the response.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandbox.base.lazy_torch import lazy_import

from .base import ENGINES, Engine, EngineBase, tiny_lm_check_settings

torch = lazy_import("torch", globals())

EMBEDDINGS = ("tok.weight", "pos.weight")
"""The builtin transformer's embedding tables (the token one is the output head when tied)."""


class QuantizedConfig(EngineBase):
    """The sampler runs the LM with RTN integer-quantized weights (bits, per channel or tensor); the learner in fp32 (lm task only)."""

    name: Literal["quantized"] = "quantized"
    needs = frozenset({"logits", "forward"})
    check_settings = tiny_lm_check_settings()
    bits: int = Field(
        8, ge=2, le=8, description="Bits of the signed integer weights (2^(bits-1) - 1 levels each side)."
    )
    granularity: Literal["channel", "tensor"] = Field(
        "channel", description="One scale per output channel (row) of each weight matrix, or one per tensor."
    )
    compute: Literal["bfloat16", "float32"] = Field(
        "bfloat16",
        description="Dtype of the sampler's forward (weights, activations and KV cache) after dequantization.",
    )
    embeddings: bool = Field(
        False,
        description="Quantize the token and position embeddings too (the output head "
        "when tied); false keeps them, as weight-only schemes usually do.",
    )

    def task_problem(self, task_cfg):
        if getattr(task_cfg, "dtype", "float32") != "float32":
            return (
                f"engine.name: 'quantized' compares a quantized sampler with a float32 learner; task.dtype is "
                f"{task_cfg.dtype!r}: set task.dtype = 'float32'"
            )
        if getattr(getattr(task_cfg, "model", None), "backend", "builtin") != "builtin":
            return (
                "engine.name: 'quantized' is not supported for backend hf (task.model.backend); use the builtin model"
            )
        return None


def rtn(w: torch.Tensor, bits: int, per_channel: bool) -> torch.Tensor:
    """Symmetric round-to-nearest of ``w`` (float32, ``dim >= 2``) to ``bits``-bit integers, dequantized
    (module docstring); a row (or tensor) of zeros stays zero."""
    q = 2 ** (bits - 1) - 1
    amax = w.abs().amax(dim=tuple(range(1, w.dim())), keepdim=True) if per_channel else w.abs().amax()
    s = torch.where(amax > 0, amax / q, torch.ones_like(amax))
    return torch.clamp(torch.round(w / s), -q, q) * s


@ENGINES.register(QuantizedConfig)
class QuantizedEngine(Engine):
    def sampler_weights(self, single):
        c = self.cfg
        dt = torch.bfloat16 if c.compute == "bfloat16" else torch.float32
        out = {}
        for k, v in single.items():
            if v.dim() >= 2 and (c.embeddings or k not in EMBEDDINGS):
                v = rtn(v.float(), c.bits, c.granularity == "channel")
            out[k] = v.to(dt)
        return out, dt
