"""The public names of :mod:`sandbox.checks` (its ``__init__`` stays light, so that the command module loads without them)."""

from __future__ import annotations

from sandbox.checks import (
    batching,
    bound,
    cosine,
    divergence,
    ess,
    fisher,
    gac,
    kv_cache,
    learner_ratio,
    minibatch,
    mismatch_ess,
    queueing,
    random_lag,
    split_batch,
    stability,
    variance,
    vcpo_scale,
)
from sandbox.checks.base import Check, CheckResult, Point

CHECKS: dict[str, Check] = {
    c.name: c
    for c in [
        Check("critical_lr", "T1", "critical step of delayed GD vs delay τ = 0..32 (Levin–May)", stability.run, 1.1),
        Check("delayed_variance", "T2", "stationary variance of delayed SGD vs τ (Lyapunov)", variance.run, 1.1),
        Check("gradient_cosine", "T3", "consecutive-gradient cosine vs η/η_crit (GAC's signature)", cosine.run, 1.3),
        Check(
            "gac_boundary", "T1+T4", "divergence boundary of delayed SGD with and without GAC projection", gac.run, 1.3
        ),
        Check("async_sgd_bound", "T5", "bounded-staleness SGD bound vs τ (derived in theory)", bound.run, 0.2),
        Check("straggler_cost", "T6", "synchronous step time = H_P/μ vs workers P", queueing.run_straggler, 1.1),
        Check("ess_vs_lag", "T8", "sequence-weight second moment / ESS vs lag on a learning run", ess.run, 1.1),
        Check(
            "staleness_divergence",
            "T2+T9",
            "displacement after k stale steps, sync vs stale (KL growth)",
            divergence.run,
            1.1,
        ),
        Check(
            "ess_fisher", "T9", "−log ESS vs the Fisher quadratic form ΔθᵀFΔθ on the bit-string policy", fisher.run, 1.1
        ),
        Check("minibatch_lag", "T11", "per-token lag of mini-batch step (e, j): S·ℓ + e·m + j", minibatch.run, 1.1),
        Check(
            "mismatch_ess",
            "T12",
            "sequence ESS of the mismatch weights vs response length T (logit-noise engine, staleness 0)",
            mismatch_ess.run,
            1.1,
        ),
        Check(
            "engine_batching", "T13", "continuous-batching throughput c / (E[L](a + b·c) + c·P) vs c", batching.run, 1.1
        ),
        Check(
            "random_lag",
            "T14",
            "lag law of P exponential workers and delayed SGD's mean path at that lag",
            random_lag.run,
            1.1,
        ),
        Check(
            "split_sync_step",
            "T15",
            "work-conserving synchronous step time vs workers W (groups split over idle workers)",
            split_batch.run,
            1.1,
        ),
        Check(
            "kv_throughput",
            "T13",
            "KV-limited continuous-batching throughput, n̄ = K·E[L]/E[L²] in flight, vs K",
            kv_cache.run,
            1.3,
        ),
        Check(
            "learner_ess",
            "T8+T12",
            "E_μ[W²] of the learner's own sequence ratios π_θ/μ (logit-noise engine) vs lag",
            learner_ratio.run_ess,
            1.3,
        ),
        Check(
            "learner_mask",
            "T12",
            "fraction of tokens the learner's IcePop masks vs P_μ(π_θ/μ outside the band)",
            learner_ratio.run_mask,
            1.1,
        ),
        Check(
            "learner_prox",
            "T8+T11",
            "the learner's decoupled weights π_prox/μ of mini-batch steps (proximal = batch_start) vs lag",
            learner_ratio.run_prox,
            1.1,
        ),
        Check(
            "vcpo_lr_scale",
            "VCPO",
            "the step VCPO applies, ‖Δθ‖/(η‖g‖), vs sqrt(min(1, ESS/N)) of π_θ/μ",
            vcpo_scale.run,
            1.1,
        ),
    ]
}

__all__ = ["CHECKS", "Check", "CheckResult", "Point"]
