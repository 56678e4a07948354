"""T2. Stationary variance and autocovariances of delayed SGD on a quadratic.

Model: ``x_{t+1} = x_t - eta (lam x_{t-tau} + xi_t)`` with i.i.d. noise of mean 0
and variance ``sigma**2`` drawn fresh at every step. With ``a = eta lam`` and
``s2 = eta**2 sigma**2`` this is the AR(tau+1) process
``x_{t+1} = x_t - a x_{t-tau} + e_t``, ``Var e_t = s2``. It has a stationary
law iff ``0 < a < a*(tau)`` (T1).

Derivation. For the stationary autocovariances ``g(h) = E[x_{t+h} x_t]``
(``g(-h) = g(h)``) multiply the recursion by ``x_t`` (resp. ``x_{t+1}``):

* ``g(h) = g(h-1) - a g(h-1-tau)`` for ``h = 1, ..., tau+1`` (``e`` is independent
  of the past),
* ``g(0) = g(1) - a g(tau+1) + s2``.

These ``tau + 2`` linear (Yule-Walker) equations are equivalent to the discrete
Lyapunov equation ``Sigma = A Sigma A^T + s2 e1 e1^T`` for the companion matrix
``A`` of T1, whose stationary solution is the Toeplitz matrix
``Sigma_ij = g(|i-j|)``; further lags follow from the first recursion, i.e.
``C(h) = (A^h Sigma)_00``. Solving them symbolically gives (each denominator
vanishes at ``a*(tau)``):

* tau = 0: ``s2 / (a (2 - a))``
* tau = 1: ``s2 (1 + a) / (a (1 - a) (2 + a))``
* tau = 2: ``s2 (1 + a - a**2) / (a (2 - a) (1 - a - a**2))``
* tau = 3: ``s2 (1 + 2a - a**2 - a**3) / (a (2 + a) (1 - 2a - a**2 + a**3))``

Multi-dimensional quadratic with Hessian eigenvalues ``lam_i`` and isotropic noise:
the directions decouple and the expected excess loss is
``E f = 1/2 sum_i lam_i Var_i`` with ``a_i = eta lam_i``.

Transient (finite horizon). With a deterministic start ``x_u = x0`` for ``u <= 0`` and the
warm-up delays ``min(t, tau)`` of a fixed-lag schedule (step ``t`` reads ``x_{max(t - tau, 0)}``),
``x_t = m_t + sum_{s < t} h_{t-1-s} e_s`` where the mean ``m_t`` follows the noiseless recursion
from ``x0`` and ``h`` is the impulse response ``h_0 = 1``, ``h_{j+1} = h_j - a h_{j-tau}``
(``h_{<0} = 0``; noise entering ``x_{s+1}`` never reaches the clipped reads of ``x_0``). Hence, exactly,

    E[x_t**2] = m_t**2 + s2 sum_{j < t} h_j**2,

and for the multi-dimensional quadratic ``E|grad f(x_t)|**2 = sum_i lam_i**2 E[x_{i,t}**2]``
(``transient_second_moments``, ``expected_grad_sq_norm``; the exact prediction the T5 check holds
the simulator's delayed SGD to, docs/theory.md#t5). It holds for any ``a``, stable or not.

Source: the standard Yule-Walker / Lyapunov treatment of linear AR models; the
closed forms above are derived here (``derive_variance``) and checked against
the table of docs/theory.md#t2.

Worked example: ``eta = 0.1, lam = 2`` (``a = 0.2``), ``sigma = 1`` (``s2 = 0.01``).

>>> [round(variance(0.2, tau, 0.01), 6) for tau in (0, 1, 2, 3, 4)]
[0.027778, 0.034091, 0.042398, 0.054097, 0.072259]
>>> variance_closed_form(1)
s2*(a + 1)/(a*(1 - a)*(a + 2))
>>> sp.simplify(derive_variance(2) - variance_closed_form(2))
0
>>> [round(float(v), 6) for v in transient_second_moments(0.2, 1, 0.01, x0=1.0, steps=4)]
[1.0, 0.65, 0.38, 0.22]
>>> variance(0.2, 8, 0.01)
Traceback (most recent call last):
...
ValueError: unstable: a=0.2 >= a*(8)=0.184537
"""

from __future__ import annotations

from functools import cache

import numpy as np
import sympy as sp

from theory.delayed_stability import critical_step

a_sym, s2_sym = sp.symbols("a s2", positive=True)


def _closed_forms() -> dict[int, sp.Expr]:
    a, s2 = a_sym, s2_sym
    return {
        0: s2 / (a * (2 - a)),
        1: s2 * (1 + a) / (a * (1 - a) * (2 + a)),
        2: s2 * (1 + a - a**2) / (a * (2 - a) * (1 - a - a**2)),
        3: s2 * (1 + 2 * a - a**2 - a**3) / (a * (2 + a) * (1 - 2 * a - a**2 + a**3)),
    }


def variance_closed_form(tau: int) -> sp.Expr:
    """Tabulated closed form of ``Var_inf`` for ``tau`` in 0..3 (symbols ``a, s2``)."""
    forms = _closed_forms()
    if tau not in forms:
        raise ValueError("closed forms are tabulated for tau in 0..3; use derive_variance")
    return forms[tau]


@cache
def derive_autocovariances(tau: int) -> tuple[sp.Expr, ...]:
    """Solve the Yule-Walker equations symbolically: ``[g(0), ..., g(tau+1)]``.

    Exact rational functions of ``a`` and ``s2``; practical for ``tau <= 5``.
    """
    g = sp.symbols(f"g0:{tau + 2}")

    def gam(h: int) -> sp.Symbol:
        return g[abs(h)]

    eqs = [sp.Eq(gam(h), gam(h - 1) - a_sym * gam(h - 1 - tau)) for h in range(1, tau + 2)]
    eqs.append(sp.Eq(gam(0), gam(1) - a_sym * gam(tau + 1) + s2_sym))
    sol = sp.solve(eqs, g, dict=True)[0]
    return tuple(sp.factor(sp.simplify(sol[gi])) for gi in g)


def derive_variance_lyapunov(tau: int) -> sp.Expr:
    """``Sigma_00`` from the symbolic Lyapunov equation ``Sigma = A Sigma A^T + s2 e1 e1^T``.

    A second, independent derivation (``(tau+1)(tau+2)/2`` unknowns; practical for ``tau <= 3``).
    """
    n = tau + 1
    syms = {(i, j): sp.Symbol(f"S{min(i, j)}_{max(i, j)}") for i in range(n) for j in range(n)}
    S = sp.Matrix(n, n, lambda i, j: syms[(i, j)])
    if tau == 0:
        A = sp.Matrix([[1 - a_sym]])
    else:
        A = sp.zeros(n, n)
        A[0, 0], A[0, n - 1] = 1, -a_sym
        for i in range(1, n):
            A[i, i - 1] = 1
    Q = sp.zeros(n, n)
    Q[0, 0] = s2_sym
    R = A * S * A.T + Q - S
    eqs = [R[i, j] for i in range(n) for j in range(i, n)]
    sol = sp.solve(eqs, sorted(set(syms.values()), key=str), dict=True)[0]
    return sp.factor(sp.simplify(sol[syms[(0, 0)]]))


def derive_variance(tau: int) -> sp.Expr:
    """``Var_inf = g(0)`` derived symbolically from the Yule-Walker equations."""
    return derive_autocovariances(tau)[0]


def _check_stable(a: float, tau: int) -> None:
    a_star = critical_step(tau)
    if not 0.0 < a < a_star:
        raise ValueError(f"unstable: a={a:g} >= a*({tau})={a_star:.6f}" if a > 0 else "a must be > 0")


def autocovariances(a: float, tau: int, s2: float = 1.0, max_lag: int | None = None) -> np.ndarray:
    """Stationary ``C(h) = E[x_{t+h} x_t]`` for ``h = 0..max_lag`` (default ``tau+1``).

    Solves the ``tau + 2`` Yule-Walker equations numerically, then extends by
    ``C(h) = C(h-1) - a C(h-1-tau)``. Raises ``ValueError`` if not stable.
    """
    _check_stable(a, tau)
    n = tau + 2
    M = np.zeros((n, n))
    rhs = np.zeros(n)
    for h in range(1, tau + 2):  # g(h) - g(h-1) + a g(|h-1-tau|) = 0
        M[h - 1, h] += 1.0
        M[h - 1, h - 1] -= 1.0
        M[h - 1, abs(h - 1 - tau)] += a
    M[n - 1, 0] += 1.0  # g(0) - g(1) + a g(tau+1) = s2
    M[n - 1, 1] -= 1.0
    M[n - 1, tau + 1] += a
    rhs[n - 1] = s2
    g = list(np.linalg.solve(M, rhs))
    max_lag = tau + 1 if max_lag is None else max_lag
    for h in range(tau + 2, max_lag + 1):
        g.append(g[h - 1] - a * g[abs(h - 1 - tau)])
    return np.asarray(g[: max_lag + 1])


def variance(a: float, tau: int, s2: float = 1.0) -> float:
    """Stationary variance ``Var_inf`` of the delayed recursion (any tau)."""
    return float(autocovariances(a, tau, s2, max_lag=0)[0])


def stationary_covariance(a: float, tau: int, s2: float = 1.0) -> np.ndarray:
    """Solution ``Sigma`` of ``Sigma = A Sigma A^T + s2 e1 e1^T`` (Toeplitz in ``C(h)``)."""
    g = autocovariances(a, tau, s2, max_lag=tau)
    idx = np.arange(tau + 1)
    return g[np.abs(idx[:, None] - idx[None, :])]


def sgd_variance(eta: float, lam: float, sigma: float, tau: int) -> float:
    """``Var_inf`` in optimiser units: ``a = eta lam``, ``s2 = (eta sigma)**2``."""
    return variance(eta * lam, tau, (eta * sigma) ** 2)


def excess_loss(eta: float, lams, sigma: float, tau: int) -> float:
    """Expected stationary loss ``1/2 sum_i lam_i Var_i`` (isotropic noise ``sigma**2``)."""
    lams = np.asarray(lams, dtype=float)
    return float(0.5 * sum(l * sgd_variance(eta, l, sigma, tau) for l in lams))


def transient_second_moments(a: float, tau: int, s2: float, x0: float, steps: int) -> np.ndarray:
    """Exact ``E[x_t**2]`` for ``t = 0..steps-1`` of ``x_{t+1} = x_t - a x_{max(t-tau, 0)} + e_t`` from
    ``x_0 = x0`` (``Var e_t = s2``): ``m_t**2 + s2 sum_{j<t} h_j**2`` (module docstring, Transient)."""
    m = np.empty(steps + 1)
    m[0] = x0
    h = np.zeros(steps)
    h[0] = 1.0
    for t in range(steps):
        m[t + 1] = m[t] - a * m[max(t - tau, 0)]
        if t + 1 < steps:
            h[t + 1] = h[t] - (a * h[t - tau] if t >= tau else 0.0)
    noise = np.concatenate([[0.0], np.cumsum(h * h)[:-1]]) if steps else np.zeros(0)
    return m[:steps] ** 2 + s2 * noise


def expected_grad_sq_norm(eta: float, lams, sigma: float, tau: int, x0: float, steps: int) -> np.ndarray:
    """Exact ``E|grad f(x_t)|**2`` for ``t = 0..steps-1`` of delayed SGD on ``f = 1/2 sum_i lam_i x_i**2`` from
    ``x_i = x0`` with per-coordinate gradient noise ``sigma`` (one sample per step) and warm-up delays ``min(t, tau)``."""
    lams = np.asarray(lams, dtype=float)
    return sum(lam**2 * transient_second_moments(eta * lam, tau, (eta * sigma) ** 2, x0, steps) for lam in lams)
