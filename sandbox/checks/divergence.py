"""T9 on the exact T2 model: how far the learner moves in k stale steps, synchronous vs stale.

T9 (theory.staleness_divergence) says the divergence between the behaviour weights (version t−k)
and the learner (version t) grows with the lag as Σ_{i,j≤k} ⟨u_i, u_j⟩: linearly when consecutive
updates are uncorrelated and faster, up to quadratically, when they are aligned (GAC's stale-aligned
regime), and the ESS falls accordingly (for a Gaussian policy N(x, s²): KL = ‖Δ‖²/(2s²),
ESS/N = exp(−‖Δ‖²/s²), docs/theory.md#t8 item 4). On delayed SGD x_{t+1} = x_t − η(λ x_{t−τ} + ξ_t) the
displacement has an exact stationary prediction from the autocovariances of T2:

    E (x_t − x_{t−k})² = 2 (C(0) − C(k)).

Measurement: R independent replicas run through the simulator (fixed lag τ); each replica's
time-average of (x_t − x_{t−k})² after burn-in is one replicate; tolerance 4·SE across replicas.
Two settings: τ = 0 (synchronous, a = 0.1: consecutive gradients slightly anti-correlated, growth
~linear in k) and τ = 8 (a = 0.16 ≈ 0.87·a*(8): aligned gradients, growth much faster at small k).
The note reports the log–log slope between k = 1 and 4 (1 = linear, 2 = quadratic).
"""

from __future__ import annotations

import math

import numpy as np

from sandbox.checks._sim import delayed_quadratic_scenario, run_with_learner
from sandbox.checks.base import CheckResult, Point, mean_se, sweeps
from sandbox.learner.trainer import OracleLearner
from theory.delayed_variance import autocovariances

SETTINGS = [(0, 0.10), (8, 0.16)]  # (τ, a = ηλ) with λ = σ = 1


class _IterateRecorder(OracleLearner):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.xs: list[np.ndarray] = []

    def compute_loss(self, step, jobs):
        self.xs.append(self.params["x"].detach()[:, 0].numpy().copy())
        return super().compute_loss(step, jobs)


def _trajectories(tau: int, a: float, replicas: int, steps: int, seed: int) -> np.ndarray:
    scn = delayed_quadratic_scenario(
        lr=a,
        tau=tau,
        steps=steps,
        eigenvalues=[1.0],
        noise_std=1.0,
        replicas=replicas,
        x0=0.0,
        seed=seed,
        eval_every=steps,
    )
    return np.stack(run_with_learner(scn, _IterateRecorder).xs)  # (steps, R)


@sweeps("k", "steps", series={"τ = 0": "sync (τ = 0)", "τ = 8": "stale (τ = 8)"})
def run(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    lags = [1, 2, 4, 8, 16] if quick else [1, 2, 4, 8, 16, 32]
    replicas, steps, burn = (200, 1200, 300) if quick else (500, 2500, 500)
    result = CheckResult(
        name="staleness_divergence",
        claim="E(x_t − x_{t−k})² = 2(C(0) − C(k)): displacement after k stale steps, linear when sync, faster when aligned",
        x_label="steps of staleness k",
        y_label="E (x_t − x_{t−k})²  (= 2s²·KL of N(x, s²) policies)",
        justification=f"4·SE across {replicas} independent replicas (time average after {burn} burn-in steps)",
        log_x=True,
        log_y=True,
    )
    for tau, a in SETTINGS:
        xs = _trajectories(tau, a, replicas, steps, seed=tau)
        cov = autocovariances(a, tau, s2=a * a, max_lag=max(lags))
        measured_by_k = {}
        for k in lags:
            d2 = (xs[burn:] - xs[burn - k : steps - k]) ** 2
            measured, se = mean_se(d2.mean(0))
            measured_by_k[k] = measured
            predicted = perturb * 2.0 * (cov[0] - cov[k])
            result.points.append(
                Point(k, predicted, measured, se, 4 * se, abs(measured - predicted) <= 4 * se, series=f"τ = {tau}")
            )
        slope = math.log(measured_by_k[4] / measured_by_k[1]) / math.log(4)
        result.points[-1].note = f"log-log slope k=1..4: {slope:.2f}"
    return result
