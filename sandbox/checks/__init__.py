"""``sandbox check``: predictions from ``theory/`` held against simulations in the sandbox.

Each check sweeps its free variable, compares prediction and measurement point by point within a
tolerance justified by the sampling error, and can fail (``perturbation`` is a distortion of the
prediction that the check must reject; the tests run every check with it), and each must fail under a
simulator bug it exists to catch (``tests/checks/test_checks_injected_bugs.py``). T7 (Little's law) and
T10 (the OPOB variance identity) have no check: the first compared an identity computed from the
simulator's own log, the second never ran the simulator, so neither could catch a simulator bug; both
are unit tests (``tests/system/test_queueing_laws.py``, ``tests/algorithms/test_alg_opob_variance.py``;
docs/theory.md#t7, #t10).
"""

from __future__ import annotations

from . import batching, bound, cosine, divergence, ess, fisher, gac, minibatch, mismatch_ess, queueing, random_lag, split_batch, stability, variance
from .base import Check, CheckResult, Point

CHECKS: dict[str, Check] = {
    c.name: c
    for c in [
        Check("critical_lr", "T1", "critical step of delayed GD vs delay τ = 0..32 (Levin–May)", stability.run, 1.1),
        Check("delayed_variance", "T2", "stationary variance of delayed SGD vs τ (Lyapunov)", variance.run, 1.1),
        Check("gradient_cosine", "T3", "consecutive-gradient cosine vs η/η_crit (GAC's signature)", cosine.run, 1.3),
        Check("gac_boundary", "T1+T4", "divergence boundary of delayed SGD with and without GAC projection", gac.run, 1.3),
        Check("async_sgd_bound", "T5", "bounded-staleness SGD bound vs τ (derived in theory)", bound.run, 0.2),
        Check("straggler_cost", "T6", "synchronous step time = H_P/μ vs workers P", queueing.run_straggler, 1.1),
        Check("ess_vs_lag", "T8", "sequence-weight second moment / ESS vs lag on a learning run", ess.run, 1.1),
        Check("staleness_divergence", "T2+T9", "displacement after k stale steps, sync vs stale (KL growth)", divergence.run, 1.1),
        Check("ess_fisher", "T9", "−log ESS vs the Fisher quadratic form ΔθᵀFΔθ on the bit-string policy", fisher.run, 1.1),
        Check("minibatch_lag", "T11", "per-token lag of mini-batch step (e, j): S·ℓ + e·m + j", minibatch.run, 1.1),
        Check("mismatch_ess", "T12", "sequence ESS of the mismatch weights vs response length T (logit-noise engine, "
              "staleness 0)", mismatch_ess.run, 1.1),
        Check("engine_batching", "T13", "continuous-batching throughput c / (E[L](a + b·c) + c·P) vs c", batching.run, 1.1),
        Check("random_lag", "T14", "lag law of P exponential workers and delayed SGD's mean path at that lag", random_lag.run, 1.1),
        Check("split_sync_step", "T15", "work-conserving synchronous step time vs workers W (groups split over idle "
              "workers)", split_batch.run, 1.1),
    ]
}

__all__ = ["CHECKS", "Check", "CheckResult", "Point"]
