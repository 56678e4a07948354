"""Per-token surrogate losses of the base objectives (``shared/reference/algorithms.md`` §1, §3.5).

Each surrogate returns :class:`Surrogate`: the per-token loss ``ℓ_{i,t}`` to minimise (before any
correction multiplier and before aggregation), the *value* of the importance ratio the surrogate
already applies to the token's gradient (``None`` for REINFORCE-form losses that carry none; used
by :mod:`policy_loss` to avoid counting a bypass-mode ratio twice), and clip flags for monitoring.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ._tensor import group_view, seq_mean, seq_sum


@dataclass
class Surrogate:
    per_token: Tensor
    ratio_value: Tensor | None
    clipped: Tensor | None = None
    dual_clipped: Tensor | None = None


def _bcast(bound, like: Tensor):
    """A per-replica bound ``(...)`` broadcast against ``(..., N, T)``; floats pass through."""
    if isinstance(bound, Tensor):
        return bound.reshape(*bound.shape, 1, 1)
    return bound


def clip_surrogate(
    ratio: Tensor,
    adv: Tensor,
    low,
    high,
    dual_clip_c=None,
) -> Surrogate:
    """PPO clip (Schulman et al. arXiv 1707.06347) with optional dual clip (Ye et al. arXiv 1912.09729):

    ``ℓ = −min(r Â, clip(r, low, high) Â)``; for ``Â < 0``: ``ℓ ← min(ℓ, −c Â)``.

    ``low``/``high`` are absolute ratio bounds (``1 − ε_low``, ``1 + ε_high`` for PPO/GRPO/DAPO;
    BAPO and M2PO-clipband pass adaptive per-replica tensors). ``adv`` is per token ``(..., N, T)``.
    """
    low_b, high_b = _bcast(low, ratio), _bcast(high, ratio)
    unclipped = -ratio * adv
    if isinstance(low_b, Tensor) or isinstance(high_b, Tensor):
        low_b = torch.as_tensor(low_b, dtype=ratio.dtype, device=ratio.device)
        high_b = torch.as_tensor(high_b, dtype=ratio.dtype, device=ratio.device)
        clipped_r = torch.minimum(torch.maximum(ratio, low_b), high_b)
    else:
        clipped_r = ratio.clamp(low_b, high_b)
    clipped = -clipped_r * adv
    loss = torch.maximum(unclipped, clipped)
    clip_flag = clipped.detach() > unclipped.detach()
    dual_flag = None
    if dual_clip_c is not None:
        c = _bcast(dual_clip_c, ratio)
        cap = -c * adv
        neg = adv < 0
        dual_flag = neg & (loss.detach() > cap.detach())
        loss = torch.where(neg, torch.minimum(loss, cap), loss)
    return Surrogate(loss, ratio.detach(), clip_flag, dual_flag)


def reinforce_surrogate(logp: Tensor, adv: Tensor) -> Surrogate:
    """REINFORCE (Williams 1992): ``ℓ_t = −sg(Â) log π_θ(y_t|s_t)``; with seq-mean-token-sum this is
    ``−(1/B) Σ_i sg(Â_i) log π_θ(y^i|x)`` (algorithms.md §1.1)."""
    return Surrogate(-adv.detach() * logp, None)


def cispo_surrogate(logp: Tensor, ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float) -> Surrogate:
    """CISPO (MiniMax-M1, arXiv 2506.13585): ``ℓ_t = −sg(clip(r_t, 1−ε_low, 1+ε_high)) Â_t log π_θ``;
    clipped tokens keep their gradient (bounds in verl/SkyRL's 1 ± ε convention)."""
    r = ratio.detach()
    w = r.clamp(1.0 - eps_low, 1.0 + eps_high)
    flag = (r < 1.0 - eps_low) | (r > 1.0 + eps_high)
    return Surrogate(-w * adv.detach() * logp, r, flag)


def gspo_surrogate(logp: Tensor, anchor_logp: Tensor, adv: Tensor, fmask: Tensor, eps_low: float, eps_high: float) -> Surrogate:
    """GSPO (arXiv 2507.18071) in its GSPO-token form: ``s_i = exp(mean_t log(π_θ/π_anchor))``,
    ``s_{i,t} = sg(s_i)·π_θ(y_t)/sg(π_θ(y_t))``, ``ℓ = −min(s Â, clip(s, 1−ε_l, 1+ε_h) Â)``. Same value and
    (with per-sequence advantages) the same gradient as sequence-level GSPO, but per-token factors compose."""
    log_s = seq_mean(logp.detach() - anchor_logp, fmask)
    s = torch.exp(log_s).unsqueeze(-1).expand_as(logp)
    s_tok = s * torch.exp(logp - logp.detach())
    return clip_surrogate(s_tok, adv, 1.0 - eps_low, 1.0 + eps_high)


def tba_loss(
    logp: Tensor,
    fmask: Tensor,
    rewards: Tensor,
    group_size: int,
    beta: float,
    ref_logp: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """Trajectory balance, VarGrad form (TBA, Bartoldson et al. arXiv 2503.18929; algorithms.md §3.5):

    ``z_k = R_k/β − log π_θ(y_k|x) + log π_ref(y_k|x)`` (sequence log-probs), ``log Ẑ = sg(mean_k z_k)``,
    ``L(x) = mean_k (log Ẑ − z_k)²``; the loss per replica is the mean over prompts. Returns
    ``(loss (...), log Ẑ per prompt (..., N/G))``. Without a reference model ``log π_ref`` is taken as 0
    (target ∝ exp(R/β) over the support)."""
    z = rewards / beta - seq_sum(logp, fmask)
    if ref_logp is not None:
        z = z + seq_sum(ref_logp.detach(), fmask)
    zg = group_view(z, group_size)
    log_z = zg.detach().mean(-1, keepdim=True)
    loss = ((log_z - zg) ** 2).mean(-1).mean(-1)
    return loss, log_z.squeeze(-1)


def tba_beta(beta: float, beta_final: float, anneal_steps: int, step: int) -> float:
    """Linear annealing of β from ``beta`` to ``beta_final`` over ``anneal_steps`` learner versions (TBA GSM8K)."""
    if anneal_steps <= 0:
        return beta_final
    frac = min(max(step, 0) / anneal_steps, 1.0)
    return beta + frac * (beta_final - beta)
