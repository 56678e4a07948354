"""Compact neural policies: a decoder-only transformer with KV-cache sampling (small LMs), and
:mod:`.hf`, the adapter that runs a Hugging Face ``transformers`` causal LM through the same
``Forward`` signature (optional dependency, imported lazily)."""

from sandbox.base.lazy_api import api_getattr

__getattr__ = api_getattr(__name__)
"""The public names of :mod:`sandbox.models` (its ``__init__`` stays light: a task's config loads without torch)."""
