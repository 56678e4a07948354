"""Compact neural policies: a decoder-only transformer with KV-cache sampling (small LMs), and
:mod:`.hf`, the adapter that runs a Hugging Face ``transformers`` causal LM through the same
``Forward`` signature (optional dependency, imported lazily)."""

from sandbox.models.transformer import Transformer, TransformerConfig, draw, sample, sequence_logprobs

__all__ = ["Transformer", "TransformerConfig", "draw", "sample", "sequence_logprobs"]
