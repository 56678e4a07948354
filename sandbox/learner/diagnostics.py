"""Per-replica diagnostics computed from the data and the gradients (never from the schedule).

* Kish effective sample size of the unclipped sequence weights w_i = exp(Σ_t log π_θ − log μ):
  ESS/N = (Σ w)² / (N Σ w²) (Kish 1965; VCPO arXiv 2602.17616 uses it per optimizer batch).
* χ² estimate: N Σ w² / (Σ w)² − 1 (= E[w²]/E[w]² − 1; theory.md T8.1–2).
* k3 KL estimator with r = π_θ/μ on tokens sampled from μ: E[r − 1 − log r] = KL(μ‖π_θ)
  (Schulman's estimator; algorithms.md §0).
"""

from __future__ import annotations

import torch
from torch import Tensor


def sequence_log_weights(logp: Tensor, behaviour_logp: Tensor, mask: Tensor) -> Tensor:
    """``(R, N)`` log w_i = Σ_t mask·(log π_θ − log μ), detached."""
    return ((logp.detach() - behaviour_logp) * mask).sum(-1)


def ess_ratio(log_w: Tensor) -> Tensor:
    """``(R,)`` Kish ESS / N of weights given in log space (stable for huge weights)."""
    lw = log_w - log_w.max(-1, keepdim=True).values
    w = lw.exp()
    return w.sum(-1) ** 2 / (w.shape[-1] * (w * w).sum(-1))


def chi2_estimate(log_w: Tensor) -> Tensor:
    """``(R,)`` sample χ² = N Σ w² / (Σ w)² − 1 (self-normalised, so scale-free)."""
    return 1.0 / ess_ratio(log_w) - 1.0


def kl_k3(logp: Tensor, behaviour_logp: Tensor, mask: Tensor) -> Tensor:
    """``(R,)`` token-mean k3 estimate of KL(μ‖π_θ) from tokens sampled by μ."""
    log_r = (logp.detach() - behaviour_logp) * mask
    k3 = (log_r.exp() - 1.0 - log_r) * mask
    return k3.sum((-2, -1)) / mask.sum((-2, -1)).clamp_min(1.0)


def flat_per_replica(tensors: list[Tensor], replicas: int) -> Tensor:
    """``(R, P)`` concatenation of tensors whose first dimension indexes replicas."""
    return torch.cat([t.reshape(replicas, -1) for t in tensors], dim=1)


def cosine(a: Tensor, b: Tensor) -> Tensor:
    """``(R,)`` cosine between rows (0 where either row is zero)."""
    denom = a.norm(dim=1) * b.norm(dim=1)
    return torch.where(denom > 0, (a * b).sum(1) / denom.clamp_min(1e-30), torch.zeros_like(denom))
