"""Baselines and group-relative advantages (``docs/methods/objectives.md``: ``#reinforce``, ``#grpo``,
``#dr_grpo``, ``#rloo``; OPOB ``docs/theory.md#t10``).

All functions take rewards ``(..., N)`` with groups as contiguous blocks of ``group_size`` and
return advantages ``(..., N)`` without gradient. Leading replica dimensions pass through.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox.algorithms._tensor import group_view, ungroup
from sandbox.base.lazy_torch import lazy_import

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())


def group_mean_baseline(rewards: Tensor, group_size: int) -> Tensor:
    """``b_i = mean_{j in group(i)} R_j`` (includes the sample itself, O(1/G) bias; GRPO/Dr.GRPO,
    DeepSeekMath arXiv 2402.03300)."""
    g = group_view(rewards, group_size)
    # = ungroup(...): flatten(-2) is that reshape (a copy of the broadcast means), with less argument handling
    return g.mean(-1, keepdim=True).expand_as(g).flatten(-2)


def leave_one_out_baseline(rewards: Tensor, group_size: int) -> Tensor:
    """``b_i = (1/(G−1)) Σ_{j≠i} R_j`` (RLOO, Kool et al. 2019; Ahmadian et al. arXiv 2402.14740).
    Unbiased; requires ``G ≥ 2``."""
    if group_size < 2:
        raise ValueError("leave_one_out baseline needs group_size >= 2")
    g = group_view(rewards, group_size)
    return ungroup((g.sum(-1, keepdim=True) - g) / (group_size - 1))


def group_std(rewards: Tensor, group_size: int, unbiased: bool) -> Tensor:
    """Per-group standard deviation broadcast back to ``(..., N)``. ``unbiased=True`` is the
    Bessel-corrected sample std (torch default, used by verl/TRL for GRPO); ``False`` is the
    population std (VCPO's OPOB, ``norm_by_std``). A group of one has std 0."""
    g = group_view(rewards, group_size)
    if unbiased and group_size > 1:
        s = g.std(-1, unbiased=True, keepdim=True)
    else:
        s = g.std(-1, unbiased=False, keepdim=True)
    return ungroup(s.expand_as(g))


def weighted_group_baseline(
    rewards: Tensor, log_weights: Tensor, group_size: int, leave_one_out: bool = False
) -> Tensor:
    """``b*_g = Σ_i W_i R_i / Σ_i W_i`` within each group, given ``log W_i`` (``(..., N)``).

    Computed as a softmax over the group so that huge sequence importance weights (``w_i²``
    overflows quickly) stay finite. If every weight of a group is 0 (``log W = −inf``) the plain
    group mean is used. ``leave_one_out=True`` drops sample i from its own baseline,
    ``b_i = Σ_{j≠i} W_j R_j / Σ_{j≠i} W_j``, which removes the O(1/G) bias of the batch estimate
    (``docs/theory.md#t10``). This is the optimal scalar baseline (Weaver & Tao 2001; Greensmith et al.
    2004) and, with ``W = w²‖∇log π‖²``, VCPO's OPOB (Huang et al. arXiv 2602.17616).
    """
    lw = group_view(log_weights, group_size)
    r = group_view(rewards, group_size)
    all_zero = torch.isneginf(lw).all(-1, keepdim=True)
    lw = torch.where(all_zero, torch.zeros_like(lw), lw)
    p = torch.softmax(lw, dim=-1)
    b = (p * r).sum(-1, keepdim=True)
    if leave_one_out:
        rest = (1.0 - p).clamp_min(1e-12)
        b_loo = (b - p * r) / rest
        b_mean = (r.sum(-1, keepdim=True) - r) / max(group_size - 1, 1)
        return ungroup(torch.where(1.0 - p > 1e-6, b_loo, b_mean))
    return ungroup(b.expand_as(r))


def opob_log_weights(
    log_seq_ratio: Tensor,
    seq_grad_sq_norms: Tensor,
    weight: str = "readme",
    clip_c: float = 8.0,
) -> Tensor:
    """``log W_i`` for the off-policy optimal baseline (VCPO, arXiv 2602.17616; ``docs/methods/objectives.md#reinforce``).

    * ``readme``: ``W_i = w_i² ‖∇_θ log π_θ(y^i|x)‖²`` (VCPO README; optimal by ``docs/theory.md#t10``);
    * ``code``:   ``W_i = min(w_i, C)² · w_i² · ‖∇ log π_θ(y^i|x)‖²`` (mit-han-lab/vcpo
      ``compute_opob_baseline``, where the per-trajectory gradient already carries ``min(w, C)``).

    ``w_i`` is the *unclipped* sequence ratio ``exp(Σ_t log π_θ − log μ)``, passed as its log.
    """
    lw = 2.0 * log_seq_ratio + torch.log(seq_grad_sq_norms.clamp_min(0.0))
    if weight == "code":
        lw = lw + 2.0 * log_seq_ratio.clamp(max=float(torch.log(torch.tensor(clip_c))))
    elif weight != "readme":
        raise ValueError(f"opob weight must be 'readme' or 'code', got {weight!r}")
    return lw


class EMABaseline:
    """``b = EMA of past batch-mean rewards`` (``docs/methods/objectives.md#reinforce``; decay 0.9–0.99). The baseline
    used for a batch only depends on *earlier* batches, so the estimator stays unbiased; the state
    holds one value per replica."""

    def __init__(self, decay: float, init: float = 0.0):
        self.decay = decay
        self.init = init
        self.value: Tensor | None = None

    def __call__(self, rewards: Tensor) -> Tensor:
        batch_mean = rewards.detach().mean(-1)
        if self.value is None or self.value.shape != batch_mean.shape:
            self.value = torch.full_like(batch_mean, self.init)
        b = self.value.unsqueeze(-1).expand_as(rewards).clone()
        self.value = self.decay * self.value + (1.0 - self.decay) * batch_mean
        return b


def normalize_by_group_std(adv: Tensor, rewards: Tensor, group_size: int, eps: float, unbiased: bool) -> Tensor:
    """``Â_i / (std_g + ε_std)`` (GRPO, arXiv 2402.03300; verl ``compute_grpo_outcome_advantage``)."""
    return adv / (group_std(rewards, group_size, unbiased) + eps)


def zero_variance_group_frac(rewards: Tensor, group_size: int) -> Tensor:
    """Fraction of groups whose rewards are all equal (no GRPO signal), per replica."""
    g = group_view(rewards, group_size)
    return (g.amax(-1) == g.amin(-1)).to(rewards.dtype).mean(-1)
