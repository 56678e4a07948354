"""The public names of :mod:`sandbox.models`, read on first use (``sandbox.base.lazy_api``)."""

from __future__ import annotations

from sandbox.models.transformer import TransformerConfig, draw, sample, sequence_logprobs
from sandbox.models.transformer_nn import Transformer

__all__ = ["Transformer", "TransformerConfig", "draw", "sample", "sequence_logprobs"]
