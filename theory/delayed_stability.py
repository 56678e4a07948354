"""T1. Stability threshold of gradient descent with a constant delay.

Model: ``f(x) = lam x**2 / 2`` and the update uses a gradient that is ``tau``
steps old, ``x_{t+1} = x_t - a x_{t-tau}`` with ``a = eta * lam > 0``.
Trying ``x_t = z**t`` gives the characteristic polynomial

    z**(tau+1) - z**tau + a = 0.

Statement (Levin & May 1976 for this equation; Kuruklis 1994 for general
two-term linear delay difference equations): the recursion is asymptotically
stable iff

    0 < a < a*(tau) = 2 sin(pi / (2 (2 tau + 1))).

At ``a = a*`` the critical roots are ``exp(+-i w)`` with ``w = pi / (2 tau + 1)``,
so the mode that loses stability oscillates with period ``4 tau + 2`` steps.
For a quadratic with Hessian eigenvalues ``lam_i`` the condition applies per
eigen-direction and the largest eigenvalue binds: ``eta_crit = a*(tau) / lam_max``.
For large ``tau``, ``a* ~ pi / (2 tau + 1)``.

Assumptions: plain (S)GD with constant delay; noise does not change the
stability of the mean recursion. Adaptive optimisers (Adam) are not covered.

Worked example: ``lam_max = 1``, ``tau = 8``: GD diverges for ``eta > 0.1845``.

>>> round(critical_step(8), 5)
0.18454
>>> round(critical_lr(8, lam_max=1.0), 4)
0.1845
>>> [round(float(x), 5) for x in critical_step([0, 1, 2, 3])]
[2.0, 1.0, 0.61803, 0.44504]
>>> characteristic_polynomial(2)
a + z**3 - z**2
>>> spectral_radius(0.9 * critical_step(1), 1) < 1 < spectral_radius(1.1 * critical_step(1), 1)
True
"""

from __future__ import annotations

import numpy as np
import sympy as sp

a_sym, z_sym, tau_sym = sp.symbols("a z tau", positive=True)


def characteristic_polynomial(tau: int | sp.Expr | None = None) -> sp.Expr:
    """``z**(tau+1) - z**tau + a`` as a sympy expression (symbolic tau if None)."""
    t = tau_sym if tau is None else tau
    return z_sym ** (t + 1) - z_sym**t + a_sym


def critical_step_expr(tau: int | sp.Expr | None = None) -> sp.Expr:
    """``a*(tau) = 2 sin(pi / (2 (2 tau + 1)))`` as a sympy expression."""
    t = tau_sym if tau is None else sp.sympify(tau)
    return 2 * sp.sin(sp.pi / (2 * (2 * t + 1)))


_critical_step = sp.lambdify(tau_sym, critical_step_expr(), "numpy")


def critical_step(tau):
    """Numeric ``a*(tau)``; accepts a scalar or an array of delays."""
    out = _critical_step(np.asarray(tau, dtype=float))
    return float(out) if np.ndim(out) == 0 else out


def critical_lr(tau, lam_max: float):
    """Largest stable learning rate ``a*(tau) / lam_max`` for a quadratic."""
    return critical_step(tau) / lam_max


def critical_frequency(tau):
    """Angle ``w = pi / (2 tau + 1)`` of the critical roots ``exp(+-i w)``."""
    return np.pi / (2 * np.asarray(tau, dtype=float) + 1)


def oscillation_period(tau):
    """Period ``4 tau + 2`` (steps) of the mode that becomes unstable."""
    return 4 * np.asarray(tau) + 2


def companion_matrix(a: float, tau: int) -> np.ndarray:
    """State matrix for ``z_t = (x_t, ..., x_{t-tau})``.

    First row ``(1, 0, ..., 0, -a)``, ones on the sub-diagonal; ``[1 - a]`` for tau = 0.
    """
    if tau < 0:
        raise ValueError("tau must be >= 0")
    if tau == 0:
        return np.array([[1.0 - a]])
    A = np.zeros((tau + 1, tau + 1))
    A[0, 0] = 1.0
    A[0, -1] = -a
    A[np.arange(1, tau + 1), np.arange(tau)] = 1.0
    return A


def spectral_radius(a: float, tau: int) -> float:
    """Largest eigenvalue modulus of the companion matrix (< 1 iff stable)."""
    return float(np.max(np.abs(np.linalg.eigvals(companion_matrix(a, tau)))))


def is_stable(a: float, tau: int) -> bool:
    """Whether the delayed recursion with step ``a`` is asymptotically stable."""
    return 0.0 < a < critical_step(tau)
