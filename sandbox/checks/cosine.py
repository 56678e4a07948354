"""T3: cosine between consecutive gradients of delayed SGD on a noisy quadratic (GAC's
stale-aligned signature), against η/η_crit.

Prediction (theory.gradient_cosine): in high dimension E c ≈ Σ_i N_i / Σ_i D_i from the stationary
autocovariances of each eigen-direction (negative for τ = 0, small positive and rising with
η/η_crit for τ ≥ 1). Measurement: the learner's ``grad/cos_prev`` (raw consecutive gradients) in
the simulator, averaged over steps after burn-in; numerator and denominator averaged separately
across replicas (ratio of means) would need the raw inner products, so the per-replica time
average of c is the replicate and the SE is taken across replicas. Tolerance: max(0.005 absolute,
4·SE) as in docs/theory.md#t3 (0.005 covers the high-dimensional concentration approximation).
"""

from __future__ import annotations

import numpy as np

from sandbox.checks._sim import delayed_quadratic
from sandbox.checks.base import CheckResult, Point, mean_se, sweeps
from theory.delayed_stability import critical_lr
from theory.gradient_cosine import expected_cosine

DIM, EIG_MIN, EIG_MAX, SIGMA = 2000, 0.01, 1.0, 0.05  # docs/theory.md#t3 worked example


@sweeps("η/η_crit", "(τ = 8)", labels={0.0: "sync: τ = 0, η = 0.3"})
def run(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    tau = 8
    eta_crit = float(critical_lr(tau, EIG_MAX))
    fractions = [0.92] if quick else [0.3, 0.55, 0.8, 0.92, 0.975]
    dim, replicas, steps, burn = (500, 8, 1300, 600) if quick else (DIM, 6, 3200, 1600)
    lams = np.logspace(np.log10(EIG_MIN), np.log10(EIG_MAX), dim)
    result = CheckResult(
        name="gradient_cosine",
        claim="consecutive-gradient cosine of delayed SGD: E c ≈ ΣN_i/ΣD_i (rises with η/η_crit)",
        x_label="η / η_crit (τ = 8; last point: τ = 0 at η = 0.3, shown at x = 0)",
        y_label="E cos(g_t, g_{t+1})",
        justification=f"max(0.005, 4·SE) with SE across {replicas} replicas of the post-burn-in time average",
    )
    cases = [(f * eta_crit, tau, f) for f in fractions] + [(0.3, 0, 0.0)]
    for eta, t, x in cases:
        res = delayed_quadratic(
            lr=eta,
            tau=t,
            steps=steps,
            dim=dim,
            eig_min=EIG_MIN,
            eig_max=EIG_MAX,
            noise_std=SIGMA,
            replicas=replicas,
            x0=0.0,
            seed=int(1000 * eta) + t,
            metrics="standard",
        )  # reads grad/cos_prev, which lean does not compute
        c = res.replica_metrics["grad/cos_prev"][burn:]
        measured, se = mean_se(np.nanmean(c, axis=0))
        predicted = perturb * expected_cosine(eta, lams, SIGMA, t)
        tol = max(0.005, 4 * se)
        result.points.append(Point(x, predicted, measured, se, tol, abs(measured - predicted) <= tol))
    return result
