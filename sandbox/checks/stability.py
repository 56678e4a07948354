"""T1: the critical step of delayed gradient descent, measured through the simulator.

Prediction (Levin & May 1976; theory.delayed_stability): x_{t+1} = x_t − a x_{t−τ} is stable iff
a < a*(τ) = 2 sin(π/(4τ+2)). Measurement, independent of the prediction: each run carries R
replicas with curvatures λ_r on a geometric grid (η = 1, so a_r = λ_r) under a fixed-lag schedule
of τ versions; a replica is unstable when the envelope of its loss over the last quarter of
~60(2τ+1) steps exceeds the envelope over the second quarter (robust to the oscillation phase of
period 4τ+2). A coarse grid over [0.005, 2.5] (5% spacing) brackets the boundary, a fine grid
(0.25% spacing) locates it; the measured a* is where the sorted grid switches from stable to
unstable. Tolerance 5% relative: finite-horizon bias (docs/theory.md#t1) plus transients.
"""

from __future__ import annotations

import numpy as np

from sandbox.checks._sim import delayed_quadratic
from sandbox.checks.base import CheckResult, Point, sweeps
from theory.delayed_stability import critical_step

TOL = 0.05


def _unstable(tau: int, grid: np.ndarray, horizon: int) -> np.ndarray:
    steps = horizon * (2 * tau + 1)
    res = delayed_quadratic(
        lr=1.0,
        tau=tau,
        steps=steps,
        eigenvalues=[1.0],
        replicas=len(grid),
        replica_scales=grid.tolist(),
        x0=1.0,
        max_loss=1e30,
    )
    loss = np.nan_to_num(res.replica_metrics["eval/loss"], nan=np.inf)
    n = loss.shape[0]
    if n < steps:  # every replica diverged early
        return np.ones(len(grid), dtype=bool)
    mid = loss[n // 4 : n // 2].max(0)
    late = loss[3 * n // 4 :].max(0)
    return (res.diverged_at >= 0) | (late > mid)


def _boundary(grid: np.ndarray, unstable: np.ndarray) -> tuple[float, float, str]:
    """Boundary at the count of stable points (robust to isolated misclassifications)."""
    k = int((~unstable).sum())
    if k == 0 or k == len(grid):
        return float("nan"), float("nan"), "boundary outside the grid"
    note = "" if not unstable[:k].any() else "non-monotone near the boundary"
    return float(grid[k - 1]), float(grid[k]), note


def measure_critical_step(tau: int, horizon: int) -> tuple[float, float, str]:
    """(measured a*, bracket half-width, note)."""
    coarse = 0.005 * 1.05 ** np.arange(128)  # 0.005 .. 2.5
    lo, hi, note = _boundary(coarse, _unstable(tau, coarse, horizon))
    if not np.isfinite(lo):
        return lo, lo, note
    fine = np.linspace(lo, hi, 41)
    lo, hi, note = _boundary(fine, _unstable(tau, fine, horizon))
    return 0.5 * (lo + hi), 0.5 * (hi - lo), note


@sweeps("τ", "versions")
def run(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    taus = [0, 1, 2, 4] if quick else [0, 1, 2, 4, 8, 16, 32]
    horizon = 50 if quick else 60
    result = CheckResult(
        name="critical_lr",
        claim="delayed GD is stable iff ηλ < 2 sin(π/(4τ+2))",
        x_label="delay τ (versions)",
        y_label="critical step ηλ",
        justification="5% relative: finite-horizon bias of the boundary (T1) plus transients; grid resolution 0.25%",
        log_y=True,
    )
    for tau in taus:
        theory_value = float(critical_step(tau))
        measured, half_width, note = measure_critical_step(tau, horizon)
        predicted = perturb * theory_value
        tol = TOL * predicted
        ok = bool(np.isfinite(measured) and abs(measured - predicted) <= tol)
        result.points.append(Point(tau, predicted, measured, half_width, tol, ok, note))
    return result
