"""T5: the bounded-staleness convergence bound, held against delayed SGD in the simulator, with the
exact T2 transient as the discriminating prediction.

Bound (theory.async_sgd_bound, derived there): for L-smooth f, gradient noise E‖ξ‖² ≤ σ² and delays
≤ τ, with η ≤ η_max(τ), (1/T) Σ_t E‖∇f(x_t)‖² ≤ 2F₀/(ηT) + Lησ² + 2L²η²τσ², evaluated at the step that
minimises it. Measurement: the simulator's delayed SGD at that η on a noisy quadratic (L = λ_max = 1,
d = 20, σ² = d·σ_coord²), fixed lag τ, ‖∇f(x_t)‖² averaged over steps, then over independent replicas.
The bound passes when measured − 4·SE ≤ bound (an upper bound can only be violated from above). It is
about 3× above the measurement on this model, so on its own it cannot tell a delayed simulator from a
delay-free one.

Exact prediction (theory.delayed_variance.expected_grad_sq_norm, docs/theory.md#t2 "Transient"): on
this quadratic the same average has a closed form for the schedule the fixed-lag control promises
(step t reads x_{max(t−τ, 0)}), E‖∇f(x_t)‖² = Σ_i λ_i² (m_{i,t}² + η²σ_coord² Σ_{j<t} h_{i,j}²).
Tolerance 4·SE across replicas. The point's note gives, in units of SE, the values a simulator with a
wrong lag would measure at the same η: the delay-free value (a simulator ignoring the delay) and the
value at lag τ − 1 (a lag off by one). The replica counts are sized so that both are caught: with 64
replicas the off-by-one value at τ = 8 was only 2.4 SE away; with 1,024 (quick) it is 9.8 SE
away (delay-free: 113 SE; at τ = 1 both are 14.6 SE away), and ``tests/checks/test_checks_injected_bugs.py`` injects both
bugs. ``perturb`` scales both predictions; the perturbation 0.2 (a bound 5× tighter) must be violated.
"""

from __future__ import annotations

import numpy as np

from sandbox.checks._sim import delayed_quadratic
from sandbox.checks.base import CheckResult, Point, mean_se, sweeps
from theory.async_sgd_bound import bound, optimal_step_size
from theory.delayed_variance import expected_grad_sq_norm

DIM, SIGMA_COORD, L = 20, 0.3, 1.0
QUICK = {"taus": [1, 8], "steps": 600, "replicas": 1024}
FULL = {"taus": [0, 1, 2, 4, 8, 16], "steps": 1500, "replicas": 2048}


def step_size(tau: int, steps: int) -> float:
    """The η that minimises the bound at this τ and horizon (F₀ from the start x₀ = 1)."""
    F0 = 0.5 * float(np.logspace(-2, 0, DIM).sum())
    return optimal_step_size(L, F0, SIGMA_COORD * np.sqrt(DIM), tau, steps)


def exact_average(eta: float, tau: int, steps: int) -> float:
    """(1/T) Σ_t E‖∇f(x_t)‖² of the check's quadratic from x₀ = 1 (T2 transient, exact)."""
    lams = np.logspace(-2, 0, DIM)
    return float(expected_grad_sq_norm(eta, lams, SIGMA_COORD, tau, 1.0, steps).mean())


@sweeps("τ", "versions", upper_bound={"bound (upper)"})
def run(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    cfg = QUICK if quick else FULL
    steps, replicas = cfg["steps"], cfg["replicas"]
    sigma = SIGMA_COORD * np.sqrt(DIM)
    result = CheckResult(
        name="async_sgd_bound",
        claim="(1/T)ΣE‖∇f(x_t)‖² ≤ 2F₀/(ηT) + Lησ² + 2L²η²τσ² at the optimal admissible η; and = the exact "
        "delayed-SGD transient (T2) of the fixed-lag schedule",
        x_label="maximum delay τ",
        y_label="(1/T) Σ ‖∇f(x_t)‖²",
        justification=f"bound: upper, pass iff measured − 4·SE ≤ bound; exact: |measured − prediction| ≤ 4·SE "
        f"(SE over {replicas} independent replicas)",
        log_y=True,
    )
    for tau in cfg["taus"]:
        # F0 from the deterministic start x0 = 1 on every coordinate of the log-spaced spectrum.
        F0 = 0.5 * float(np.logspace(-2, 0, DIM).sum())
        eta = step_size(tau, steps)
        res = delayed_quadratic(
            lr=eta,
            tau=tau,
            steps=steps,
            dim=DIM,
            eig_min=0.01,
            eig_max=L,
            noise_std=SIGMA_COORD,
            replicas=replicas,
            x0=1.0,
            seed=tau,
        )
        measured, se = mean_se(res.replica_metrics["eval/grad_sq_norm"].mean(0))
        predicted = perturb * bound(eta, L, F0, sigma, tau, steps)
        ok = measured - 4 * se <= predicted
        result.points.append(
            Point(tau, predicted, measured, se, 4 * se, bool(ok), f"η = {eta:.4g}", series="bound (upper)")
        )
        exact = perturb * exact_average(eta, tau, steps)
        delay_free = exact_average(eta, 0, steps)
        note = f"delay-free at this η: {delay_free:.5g} ({abs(measured - delay_free) / se:.1f} SE away)"
        if tau >= 1:
            off = exact_average(eta, tau - 1, steps)
            note += f"; lag τ − 1: {off:.5g} ({abs(measured - off) / se:.1f} SE away)"
        result.points.append(
            Point(
                tau,
                exact,
                measured,
                se,
                4 * se,
                bool(abs(measured - exact) <= 4 * se),
                note,
                series="exact (T2 transient)",
            )
        )
    return result
