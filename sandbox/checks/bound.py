"""T5: the bounded-staleness convergence bound, held against delayed SGD in the simulator.

Prediction (theory.async_sgd_bound, derived there): for L-smooth f, gradient noise E‖ξ‖² ≤ σ² and
delays ≤ τ, with η ≤ η_max(τ), (1/T) Σ_t E‖∇f(x_t)‖² ≤ 2F₀/(ηT) + Lησ² + 2L²η²τσ², evaluated at the
step that minimises it. Measurement: the simulator's delayed SGD at that η on a noisy quadratic
(L = λ_max = 1, d = 20, σ² = d·σ_coord²), fixed lag τ, ‖∇f(x_t)‖² averaged over steps, then over
independent replicas. It passes when measured − 4·SE ≤ bound (an upper bound can only be violated
from above). ``perturb`` scales the bound; the perturbation 0.2 (a bound 5× tighter) must be violated:
the derived bound is about 3× above the measurement on this model.
"""

from __future__ import annotations

import numpy as np

from theory.async_sgd_bound import bound, optimal_step_size

from .base import CheckResult, Point, mean_se, sweeps
from ._sim import delayed_quadratic

DIM, SIGMA_COORD, L = 20, 0.3, 1.0


@sweeps("τ", "versions", upper_bound=True)
def run(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    taus = [1, 8] if quick else [0, 1, 2, 4, 8, 16]
    steps, replicas = (600, 64) if quick else (1500, 64)
    sigma = SIGMA_COORD * np.sqrt(DIM)
    result = CheckResult(
        name="async_sgd_bound",
        claim="(1/T)ΣE‖∇f(x_t)‖² ≤ 2F₀/(ηT) + Lησ² + 2L²η²τσ² at the optimal admissible η",
        x_label="maximum delay τ",
        y_label="(1/T) Σ ‖∇f(x_t)‖²",
        justification=f"upper bound: pass iff measured − 4·SE ≤ bound (SE over {replicas} replicas)",
        log_y=True,
    )
    for tau in taus:
        # F0 from the deterministic start x0 = 1 on every coordinate of the log-spaced spectrum.
        lams = np.logspace(-2, 0, DIM)
        F0 = 0.5 * float(lams.sum())
        eta = optimal_step_size(L, F0, sigma, tau, steps)
        res = delayed_quadratic(lr=eta, tau=tau, steps=steps, dim=DIM, eig_min=0.01, eig_max=L,
                                noise_std=SIGMA_COORD, replicas=replicas, x0=1.0, seed=tau)
        measured, se = mean_se(res.replica_metrics["eval/grad_sq_norm"].mean(0))
        predicted = perturb * bound(eta, L, F0, sigma, tau, steps)
        ok = measured - 4 * se <= predicted
        result.points.append(Point(tau, predicted, measured, se, 4 * se, bool(ok), f"η = {eta:.4g}"))
    return result
