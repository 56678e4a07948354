"""T5. Bounded-staleness SGD on a smooth non-convex objective: an explicit bound.

Setting. ``f: R^d -> R`` is L-smooth (``|grad f(x) - grad f(y)| <= L |x - y|``)
and bounded below by ``f*``; ``F0 = f(x_0) - f*``. The iteration is

    x_{t+1} = x_t - eta g_t,   g_t = grad f(x_{t - tau_t}) + xi_t,   0 <= tau_t <= min(t, tau).

Noise: ``xi_t`` has conditional mean zero and ``E|xi_t|**2 <= sigma**2`` given
everything that determined ``x_0..x_t`` and ``x_{t-tau_t}`` (a martingale
difference sequence; the delays do not depend on the noise).

Statement. If ``L eta + 2 L**2 eta**2 tau**2 <= 1``, i.e.

    eta <= eta_max(tau) = 2 / (L (1 + sqrt(1 + 8 tau**2)))   (>= 1 / (L (2 tau + 1))),

then for every ``T >= 1``

    (1/T) sum_{t<T} E|grad f(x_t)|**2 <= 2 F0 / (eta T) + L eta sigma**2 + 2 L**2 eta**2 tau sigma**2.

This is the shape of Lian, Huang, Li & Liu (NeurIPS 2015, Thm. 1) with
mini-batch 1; the derivation below is self-contained.

Derivation. Write ``G_t = grad f(x_{t-tau_t})`` and ``D_t = grad f(x_t)``.

1. Descent lemma: ``f(x_{t+1}) <= f(x_t) - eta <D_t, g_t> + (L eta**2 / 2) |g_t|**2``.
2. ``E<D_t, g_t> = E<D_t, G_t> = (1/2) E(|D_t|**2 + |G_t|**2 - |D_t - G_t|**2)``
   and ``E|g_t|**2 <= E|G_t|**2 + sigma**2`` (the noise is uncorrelated with the
   past). Hence
   ``E f(x_{t+1}) <= E f(x_t) - (eta/2) E|D_t|**2 - (eta/2)(1 - L eta) E|G_t|**2
   + (eta/2) E|D_t - G_t|**2 + L eta**2 sigma**2 / 2``.
3. Smoothness and ``x_t - x_{t-tau_t} = -eta sum_{j=t-tau_t}^{t-1} (G_j + xi_j)``:
   ``E|D_t - G_t|**2 <= L**2 eta**2 E|sum_j (G_j + xi_j)|**2
   <= 2 L**2 eta**2 (tau sum_{j=t-tau}^{t-1} E|G_j|**2 + tau sigma**2)``,
   using ``|u+v|**2 <= 2|u|**2 + 2|v|**2``, Cauchy-Schwarz on at most ``tau`` terms,
   and orthogonality of the martingale differences ``xi_j`` (terms with ``j < 0``
   are absent).
4. Sum over ``t < T``. Each ``E|G_j|**2`` falls in at most ``tau`` windows, so
   the ``G`` terms total ``-(eta/2)(1 - L eta - 2 L**2 eta**2 tau**2) sum_t E|G_t|**2``,
   which is ``<= 0`` under the step-size condition and can be dropped.
5. With ``E f(x_T) >= f*``:
   ``(eta/2) sum_t E|D_t|**2 <= F0 + T (L eta**2 sigma**2 / 2 + L**2 eta**3 tau sigma**2)``;
   divide by ``eta T / 2``.

Optimal step. The bound ``B(eta) = A/eta + b eta + c eta**2`` (``A = 2F0/T``,
``b = L sigma**2``, ``c = 2 L**2 tau sigma**2``) is convex on ``eta > 0``; its
minimiser is the positive root of ``2 c eta**3 + b eta**2 - A = 0`` clipped to ``eta_max``.

Iterations to ``eps``. ``B(eta) <= eps`` iff ``T >= 2 F0 / h(eta)`` with
``h(eta) = eta (eps - L eta sigma**2 - 2 L**2 eta**2 tau sigma**2)``; ``h`` is concave,
maximised at ``eta_h = (sqrt(L**2 sigma**4 + 6 L**2 tau sigma**2 eps) - L sigma**2) / (6 L**2 tau sigma**2)``
(``eps / (2 L sigma**2)`` if ``tau = 0``), clipped to ``eta_max``. So
``T_eps = 2 F0 / h(min(eta_h, eta_max))``, which behaves like
``8 L F0 sigma**2 / eps**2`` for small ``eps`` and like ``2 F0 / (eta_max eps) ~ 2 sqrt(2) L tau F0 / eps``
when ``sigma = 0``: the delay enters only the ``1/eps`` term (as in Stich & Karimireddy 2020).

Rate shapes of other results (docs/theory.md#t5; constants uncertain, validate only as slopes):
``stich_karimireddy_rate`` (JMLR 2020), ``mishchenko_rate`` (Mishchenko, Bach, Even &
Woodworth, NeurIPS 2022), ``koloskova_iterations`` (Koloskova, Stich & Jaggi, NeurIPS 2022).

Worked example: ``L = 1, tau = 4, sigma = 1, F0 = 10, T = 10**4``.

>>> round(step_size_limit(1.0, 4), 5)
0.16184
>>> eta = optimal_step_size(L=1.0, F0=10.0, sigma=1.0, tau=4, T=10_000)
>>> B = bound(eta, L=1.0, F0=10.0, sigma=1.0, tau=4, T=10_000)
>>> round(eta, 5), round(B, 5)
(0.03568, 0.10192)
>>> iterations_to_eps(B, L=1.0, F0=10.0, sigma=1.0, tau=4)
10000
>>> bound_expr()
2*F0/(T*eta) + 2*L**2*eta**2*sigma**2*tau + L*eta*sigma**2
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

eta, L, F0, sigma, tau, T, eps = sp.symbols("eta L F0 sigma tau T epsilon", positive=True)
n_workers, tau_max, tau_avg = sp.symbols("n tau_max tau_avg", positive=True)


def bound_expr() -> sp.Expr:
    """Right-hand side of the bound on ``(1/T) sum_t E|grad f(x_t)|**2``."""
    return 2 * F0 / (eta * T) + L * eta * sigma**2 + 2 * L**2 * eta**2 * tau * sigma**2


def step_condition_expr() -> sp.Expr:
    """Step-size condition as ``expr <= 1``: ``L eta + 2 L**2 eta**2 tau**2``."""
    return L * eta + 2 * L**2 * eta**2 * tau**2


def step_size_limit_expr() -> sp.Expr:
    """Largest admissible step: positive root of ``step_condition_expr() = 1``."""
    return 2 / (L * (1 + sp.sqrt(1 + 8 * tau**2)))


def iterations_to_eps_expr() -> sp.Expr:
    """``2 F0 / h(eta)``: iterations for the bound to reach ``eps`` at step ``eta``."""
    return 2 * F0 / (eta * (eps - L * eta * sigma**2 - 2 * L**2 * eta**2 * tau * sigma**2))


_bound = sp.lambdify((eta, L, F0, sigma, tau, T), bound_expr(), "numpy")
_limit = sp.lambdify((L, tau), step_size_limit_expr(), "numpy")


def bound(eta: float, L: float, F0: float, sigma: float, tau: float, T: float) -> float:
    """Numeric bound; ``ValueError`` if ``eta`` violates the step-size condition."""
    if not 0 < eta <= step_size_limit(L, tau) * (1 + 1e-12):
        raise ValueError(f"eta={eta:g} outside (0, {step_size_limit(L, tau):g}]")
    return float(_bound(eta, L, F0, sigma, tau, T))


def step_size_limit(L: float, tau: float) -> float:
    """``eta_max = 2 / (L (1 + sqrt(1 + 8 tau**2)))``."""
    return float(_limit(L, tau))


def optimal_step_size(L: float, F0: float, sigma: float, tau: float, T: float) -> float:
    """Minimiser of ``bound`` over admissible ``eta`` (convex problem)."""
    eta_max = step_size_limit(L, tau)
    A, b, c = 2 * F0 / T, L * sigma**2, 2 * L**2 * tau * sigma**2
    if b == 0:  # no noise: the bound decreases in eta
        return eta_max
    roots = np.roots([2 * c, b, 0.0, -A]) if c > 0 else np.array([math.sqrt(A / b)])
    root = max(r.real for r in np.atleast_1d(roots) if abs(r.imag) < 1e-12 and r.real > 0)
    return float(min(root, eta_max))


def iterations_to_eps(eps: float, L: float, F0: float, sigma: float, tau: float) -> int:
    """Smallest ``T`` for which some admissible ``eta`` makes the bound ``<= eps``."""
    eta_max = step_size_limit(L, tau)
    if sigma == 0:
        eta_h = eta_max
    elif tau == 0:
        eta_h = eps / (2 * L * sigma**2)
    else:
        s2 = sigma**2
        eta_h = (math.sqrt(L**2 * s2**2 + 6 * L**2 * tau * s2 * eps) - L * s2) / (6 * L**2 * tau * s2)
    e = min(eta_h, eta_max)
    h = e * (eps - L * e * sigma**2 - 2 * L**2 * e**2 * tau * sigma**2)
    return math.ceil(2 * F0 / h * (1 - 1e-12))


# --- O(.) shapes from the literature (docs/theory.md#t5) ------------------------------------


def stich_karimireddy_rate() -> sp.Expr:
    """Item 1: ``sqrt(L F0 sigma**2 / T) + L F0 tau / T`` (constant delay, eta ~ 1/(L tau))."""
    return sp.sqrt(L * F0 * sigma**2 / T) + L * F0 * tau / T


def stich_karimireddy_iterations() -> sp.Expr:
    """Item 1, iterations to eps: ``sigma**2 L F0 / eps**2 + L tau F0 / eps``."""
    return sigma**2 * L * F0 / eps**2 + L * tau * F0 / eps


def mishchenko_rate() -> sp.Expr:
    """Item 4: ``sqrt(L F0 sigma**2 / T) + n L F0 / T`` (depends on workers, not delays)."""
    return sp.sqrt(L * F0 * sigma**2 / T) + n_workers * L * F0 / T


def koloskova_iterations(adaptive: bool = False) -> sp.Expr:
    """Item 5: ``sigma**2/eps**2 + sqrt(tau_max tau_avg)/eps`` (``tau_avg/eps`` if delay-adaptive)."""
    delay = tau_avg if adaptive else sp.sqrt(tau_max * tau_avg)
    return sigma**2 / eps**2 + delay / eps


def burn_in_iterations(rate: sp.Expr) -> sp.Expr:
    """``T`` where the two terms of a ``sqrt(.../T) + .../T`` rate are equal."""
    # the statistical term scales like T**(-1/2), the delay term like 1/T
    halves = lambda e: sp.simplify(e.subs(T, 4 * T) / e) == sp.Rational(1, 2)  # noqa: E731
    (stat,) = [e for e in rate.as_ordered_terms() if halves(e)]
    (delay,) = [e for e in rate.as_ordered_terms() if not halves(e)]
    (sol,) = sp.solve(sp.Eq(stat, delay), T)
    return sp.simplify(sol)
