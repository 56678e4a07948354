"""The field-by-field comparison of two :class:`Rollouts` the one-token tests share."""

from __future__ import annotations

import torch

from sandbox.tasks.rollouts import Rollouts

FIELDS = ("tokens", "behaviour_logp", "token_versions", "lengths", "ended", "prompts", "rewards", "version_logp")


def same_rollouts(a: Rollouts, b: Rollouts, layout: bool = False) -> None:
    """Every field of ``a`` equal to ``b``'s (dtype, shape and values; ``layout``: contiguity too), None where
    the other's is None."""
    assert a.group_size == b.group_size
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        if x is None or y is None:
            assert x is None and y is None, name
            continue
        assert x.dtype == y.dtype and x.shape == y.shape, name
        if layout:
            assert x.is_contiguous() == y.is_contiguous(), name
        assert torch.equal(x, y), name
