"""Training–inference mismatch metrics: μ vs π split into a mismatch and a staleness part
(``docs/engines.md#metrics``).

A token ``y`` sampled by version ``v`` carries three log-probs: the engine's reported ``log μ(y)``
(``behaviour_logp``), the trainer's exact ``log π_v(y)`` at the sampling version (``version_logp``)
and the learner's current ``log π_θ(y)``. Per pair ``(a, b)`` of a "target" and a "behaviour" log-prob,
with ``δ = log a − log b`` and ``ρ = e^δ`` over the valid tokens (mask ``m``), per replica:

* ``kl_k3 = mean_t(ρ − 1 − δ)`` (Schulman's k3; estimates KL(b‖a) when the tokens come from b);
* ``kl_k1 = mean_t(−δ)``;
* ``log_ppl_diff = mean_i(mean_t log b − mean_t log a)`` over responses ``i`` (verl's sign: behaviour
  minus training), ``log_ppl_abs_diff`` the mean of its absolute value;
* ``ratio_mean``, ``ratio_std``, ``ratio_max``, ``ratio_min`` of ``ρ`` over tokens;
* ``ratio_outside_band``: fraction of tokens with ``ρ ∉ [1/2, 2]`` (:data:`BAND`);
* ``prob_gap_mean``, ``prob_gap_max``: ``|e^{log a} − e^{log b}|`` over tokens (the token-probability gap);
* per response-length bucket ``j = 1..4`` (:func:`length_buckets`: lengths in ``(0, L/4]``,
  ``(L/4, L/2]``, ``(L/2, 3L/4]``, ``(3L/4, L]`` of the task's longest response ``L``): ``kl_k3_len{j}``
  and ``prob_gap_len{j}`` (NaN when the batch has no response in the bucket).

Reported as ``mismatch/*`` for ``(π_v, μ)``, ``staleness/*`` for ``(π_θ, π_v)`` (the staleness part
has no length buckets), and for the whole ``(π_θ, μ)`` under the frameworks' names:

* verl 0.9.1 ``rollout_corr/{kl, k3_kl, training_log_ppl, rollout_log_ppl, log_ppl_diff, log_ppl_abs_diff,
  log_ppl_diff_max, log_ppl_diff_min, ppl_ratio, chi2_token, chi2_seq}`` (``ppl_ratio`` the response
  mean of ``exp(log_ppl_diff_i)``, ``chi2_token = mean_t ρ² − 1``, ``chi2_seq = mean_i (Π_t ρ)² − 1``);
* prime-rl's ``mismatch_kl/all/mean`` (token mean of k3 of the trainer's current log-prob against the
  inference engine's: the whole pair);
* TRL 1.16's ``sampling/sampling_logp_difference/{mean, max}`` (``|log π_v − log μ|``: TRL's
  ``old_per_token_logps`` are the trainer's log-probs at the sampling weights, so this is the mismatch
  part) and ``sampling/importance_sampling_ratio/{min, mean, max}`` (``π_v/μ`` unclipped; TRL logs it after
  its truncation or masking).

Computed only when the rollouts carry ``version_logp`` (an engine that is not exact): the exact
engine's columns are today's.
"""

from __future__ import annotations

import torch
from torch import Tensor

BAND = (0.5, 2.0)
"""Token ratios outside this band are counted by ``ratio_outside_band``."""
BUCKETS = 4


def length_buckets(lengths: Tensor, max_len: int) -> Tensor:
    """``(R, N)`` bucket 0..3 of each response length: ``ceil(4 · len / max_len) − 1`` clamped to [0, 3]."""
    b = torch.ceil(lengths.double() * BUCKETS / max(max_len, 1)).long() - 1
    return b.clamp_(0, BUCKETS - 1)


def pair_metrics(
    a: Tensor, b: Tensor, mask: Tensor, prefix: str, lengths: Tensor | None = None, max_len: int = 1
) -> dict[str, Tensor]:
    """The per-pair metrics of the module docstring for log-probs ``a``, ``b`` ``(R, N, T)``, under ``prefix/``."""
    m = mask.double()
    a, b = a.detach().double() * m, b.detach().double() * m
    delta = a - b
    rho = delta.exp()
    tokens = m.sum((-2, -1)).clamp_min(1.0)
    tmean = lambda x: (x * m).sum((-2, -1)) / tokens  # noqa: E731
    big, small = torch.finfo(torch.float64).max, -torch.finfo(torch.float64).max
    per_seq = m.sum(-1).clamp_min(1.0)
    has = (m.sum(-1) > 0).double()
    n_seq = has.sum(-1).clamp_min(1.0)
    lppl = (b.sum(-1) - a.sum(-1)) / per_seq * has  # (R, N): behaviour minus target mean log-prob
    gap = (a.exp() - b.exp()).abs() * m
    k3 = torch.expm1(delta) - delta
    ratio_mean = tmean(rho)
    out = {
        "kl_k3": tmean(k3),
        "kl_k1": tmean(-delta),
        "log_ppl_diff": lppl.sum(-1) / n_seq,
        "log_ppl_abs_diff": lppl.abs().sum(-1) / n_seq,
        "ratio_mean": ratio_mean,
        "ratio_std": (tmean(rho.square()) - ratio_mean.square()).clamp_min(0.0).sqrt(),
        "ratio_max": torch.where(m > 0, rho, small).amax((-2, -1)),
        "ratio_min": torch.where(m > 0, rho, big).amin((-2, -1)),
        "ratio_outside_band": tmean(((rho < BAND[0]) | (rho > BAND[1])).double()),
        "prob_gap_mean": tmean(gap),
        "prob_gap_max": gap.amax((-2, -1)),
    }
    if lengths is not None:
        bucket = length_buckets(lengths, max_len)
        for j in range(BUCKETS):
            sel = m * (bucket == j).double().unsqueeze(-1)
            count = sel.sum((-2, -1))
            nan = torch.full_like(count, float("nan"))
            out[f"kl_k3_len{j + 1}"] = torch.where(count > 0, (k3 * sel).sum((-2, -1)) / count.clamp_min(1.0), nan)
            out[f"prob_gap_len{j + 1}"] = torch.where(count > 0, (gap * sel).sum((-2, -1)) / count.clamp_min(1.0), nan)
    return {f"{prefix}/{k}": v for k, v in out.items()}


def framework_metrics(logp: Tensor, version_logp: Tensor, behaviour_logp: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """verl's ``rollout_corr/*``, prime-rl's ``mismatch_kl/all/mean`` and TRL's ``sampling/*`` (module docstring)."""
    m = mask.double()
    train, roll, ver = (
        logp.detach().double() * m,
        behaviour_logp.detach().double() * m,
        version_logp.detach().double() * m,
    )
    tokens = m.sum((-2, -1)).clamp_min(1.0)
    tmean = lambda x: (x * m).sum((-2, -1)) / tokens  # noqa: E731
    has = m.sum(-1) > 0
    n_seq = has.double().sum(-1).clamp_min(1.0)
    per_seq = m.sum(-1).clamp_min(1.0)
    smean = lambda x: (x * has.double()).sum(-1) / n_seq  # noqa: E731
    mean_train, mean_roll = train.sum(-1) / per_seq, roll.sum(-1) / per_seq
    diff = mean_roll - mean_train
    big = torch.finfo(torch.float64).max
    delta = train - roll
    k3 = torch.expm1(delta) - delta
    seq_log = delta.sum(-1)
    mis = ver - roll
    ratio = mis.exp()
    absdiff = mis.abs() * m
    return {
        "rollout_corr/kl": tmean(roll - train),
        "rollout_corr/k3_kl": tmean(k3),
        "rollout_corr/training_log_ppl": smean(-mean_train),
        "rollout_corr/rollout_log_ppl": smean(-mean_roll),
        "rollout_corr/log_ppl_diff": smean(diff),
        "rollout_corr/log_ppl_abs_diff": smean(diff.abs()),
        "rollout_corr/log_ppl_diff_max": torch.where(has, diff, -big).amax(-1),
        "rollout_corr/log_ppl_diff_min": torch.where(has, diff, big).amin(-1),
        "rollout_corr/ppl_ratio": smean(diff.exp()),
        "rollout_corr/chi2_token": tmean((2 * delta).exp()) - 1.0,
        "rollout_corr/chi2_seq": smean((2 * seq_log).exp()) - 1.0,
        "mismatch_kl/all/mean": tmean(k3),
        "sampling/sampling_logp_difference/mean": tmean(absdiff),
        "sampling/sampling_logp_difference/max": absdiff.amax((-2, -1)),
        "sampling/importance_sampling_ratio/min": torch.where(m > 0, ratio, big).amin((-2, -1)),
        "sampling/importance_sampling_ratio/mean": tmean(ratio),
        "sampling/importance_sampling_ratio/max": torch.where(m > 0, ratio, -big).amax((-2, -1)),
    }


def mismatch_metrics(
    logp: Tensor, version_logp: Tensor, behaviour_logp: Tensor, mask: Tensor, lengths: Tensor, max_len: int
) -> dict[str, Tensor]:
    """Every metric of the module docstring, per replica ``(R,)`` float64 tensors."""
    out = pair_metrics(version_logp, behaviour_logp, mask, "mismatch", lengths, max_len)
    out.update(pair_metrics(logp, version_logp, mask, "staleness"))
    out.update(framework_metrics(logp, version_logp, behaviour_logp, mask))
    return out


__all__ = ["BAND", "BUCKETS", "framework_metrics", "length_buckets", "mismatch_metrics", "pair_metrics"]
