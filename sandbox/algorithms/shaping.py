"""Data-side companions of the objectives: DAPO's overlong reward shaping and dynamic sampling
(Yu et al., DAPO, arXiv 2503.14476; ``docs/methods/objectives.md#dapo``). Pure tensor functions
the sampler/learner may call before building a :class:`~sandbox.algorithms.api.PolicyLossInput`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox.algorithms._tensor import group_view
from sandbox.base.lazy_torch import lazy_import

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())


def overlong_penalty(lengths: Tensor, max_len: int = 20480, cache_len: int = 4096) -> Tensor:
    """DAPO soft overlong punishment added to the reward: 0 if ``|y| ≤ L_max − L_cache``,
    ``((L_max − L_cache) − |y|)/L_cache`` inside the cache window, −1 beyond ``L_max``.
    Defaults L_max = 20480, L_cache = 4096 are the paper's values [unverified]."""
    lengths = lengths.to(torch.get_default_dtype())
    soft = max_len - cache_len
    pen = (soft - lengths) / cache_len
    pen = torch.where(lengths <= soft, torch.zeros_like(pen), pen)
    return torch.where(lengths > max_len, torch.full_like(pen, -1.0), pen)


def dynamic_sampling_keep(rewards: Tensor, group_size: int) -> Tensor:
    """DAPO dynamic sampling: ``True`` for groups whose rewards are not all equal (the others carry no
    group-relative signal and are dropped; the caller refills the batch). ``(..., N)`` → ``(..., N/G)``."""
    g = group_view(rewards, group_size)
    return g.amax(-1) > g.amin(-1)
