"""T2: stationary variance of delayed SGD on a noisy quadratic, measured through the simulator.

Prediction (theory.delayed_variance, discrete Lyapunov equation of the companion matrix):
Var∞(a = ηλ, τ, s² = η²σ²). Measurement: R independent replicas (one event schedule, independent
gradient noise) of x_{t+1} = x_t − η(λ x_{t−τ} + ξ_t), x² averaged over each replica's steps after a
burn-in, then over replicas. Tolerance 4 standard errors across replicas (replicas are independent;
steps within a replica are not, so the SE is never taken over steps).
"""

from __future__ import annotations

from sandbox.checks._sim import delayed_quadratic
from sandbox.checks.base import CheckResult, Point, mean_se, sweeps
from theory.delayed_variance import sgd_variance

ETA, LAM, SIGMA = 0.1, 2.0, 1.0  # docs/theory.md#t2 worked example: a = 0.2, s² = 0.01


@sweeps("τ", "versions")
def run(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    taus = [0, 1, 3] if quick else [0, 1, 2, 3, 4]
    replicas, steps, burn = (300, 700, 200) if quick else (800, 1300, 300)
    result = CheckResult(
        name="delayed_variance",
        claim="Var∞ of delayed SGD solves the Lyapunov equation of the delay companion matrix",
        x_label="delay τ (versions)",
        y_label="stationary Var(x)",
        justification=f"4·SE across {replicas} independent replicas (time-average per replica after {burn} burn-in steps)",
    )
    for tau in taus:
        res = delayed_quadratic(
            lr=ETA, tau=tau, steps=steps, eigenvalues=[LAM], noise_std=SIGMA, replicas=replicas, x0=0.0, seed=tau
        )
        x2 = 2.0 * res.replica_metrics["eval/loss"][burn:] / LAM  # (steps, R)
        measured, se = mean_se(x2.mean(0))
        predicted = perturb * sgd_variance(ETA, LAM, SIGMA, tau)
        result.points.append(Point(tau, predicted, measured, se, 4 * se, abs(measured - predicted) <= 4 * se))
    return result
