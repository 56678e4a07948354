"""Compact neural policies: a decoder-only transformer with KV-cache sampling (small LMs)."""

from .transformer import Transformer, TransformerConfig, draw, sample, sequence_logprobs

__all__ = ["Transformer", "TransformerConfig", "draw", "sample", "sequence_logprobs"]
