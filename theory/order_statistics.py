"""T6. Worker completion times: order statistics and the cost of synchronous batches.

* ``P`` i.i.d. ``Exp(rate mu)`` job times (Renyi's representation of exponential
  spacings): ``E[X_(K:P)] = (H_P - H_{P-K}) / mu`` with ``H_n = sum_{j<=n} 1/j``; the
  expected maximum is ``H_P / mu ~ (ln P + 0.5772) / mu``. A K-sync step waits for
  the K-th of P completions, so its expected duration is ``E[X_(K:P)]``.
* Synchronous generation waits for the slowest of ``P`` rollouts per step; an
  asynchronous stream restarts each worker immediately (renewal throughput
  ``P / E[X]``). Throughput ratio async/sync ``= E[max] / E[X]`` (``H_P`` for
  exponentials); idle fraction of the synchronous workers ``1 - E[X] / E[max]``.
* Any non-negative distribution with CDF ``F``:
  ``E[X_(K:P)] = int_0^inf P(X_(K:P) > x) dx`` with
  ``P(X_(K:P) > x) = sum_{j<K} C(P, j) F**j (1 - F)**(P - j)``; for the maximum
  ``int_0^inf (1 - F(x)**n) dx``. Evaluated by Gauss-Legendre quadrature on
  geometric panels (numpy only).

Assumptions: independent, identically distributed job times; non-negative support
for the quadrature.

>>> [round(harmonic(p), 4) for p in (1, 2, 4, 8, 16, 32, 64)]
[1.0, 1.5, 2.0833, 2.7179, 3.3807, 4.0585, 4.7439]
>>> round(exp_order_statistic_mean(5, 8, rate=2.0), 5)
0.44226
>>> cdf = lognormal_cdf(median=1000.0, sigma_log=0.6)
>>> [round(expected_max(cdf, n)) for n in (8, 64, 512)]
[2521, 4242, 6375]
>>> exp_order_statistic_expr()
(harmonic(P) - harmonic(-K + P))/mu
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import sympy as sp

K_sym, P_sym = sp.symbols("K P", positive=True, integer=True)
mu_sym = sp.Symbol("mu", positive=True)
EULER_GAMMA = 0.5772156649015329

_erf = np.vectorize(math.erf, otypes=[float])


def harmonic(n: int) -> float:
    """``H_n = sum_{j=1..n} 1/j`` (correctly rounded summation)."""
    if n < 0:
        raise ValueError("n must be >= 0")
    return math.fsum(1.0 / j for j in range(1, n + 1))


def exp_order_statistic_expr() -> sp.Expr:
    """``(H_P - H_{P-K}) / mu`` with sympy's harmonic numbers."""
    return (sp.harmonic(P_sym) - sp.harmonic(P_sym - K_sym)) / mu_sym


def exp_order_statistic_mean(K: int, P: int, rate: float = 1.0) -> float:
    """``E[X_(K:P)]`` for ``P`` i.i.d. exponentials of rate ``rate``."""
    if not 1 <= K <= P:
        raise ValueError("need 1 <= K <= P")
    return (harmonic(P) - harmonic(P - K)) / rate


def exp_expected_max(P: int, rate: float = 1.0) -> float:
    """``H_P / rate``; for large P about ``(ln P + 0.5772) / rate``."""
    return harmonic(P) / rate


def exp_throughput_ratio(P: int) -> float:
    """Async/sync throughput ratio ``E[max]/E[X] = H_P`` for exponential job times."""
    return harmonic(P)


def exp_sync_idle_fraction(P: int) -> float:
    """Fraction of worker time idle in synchronous generation: ``1 - 1/H_P``."""
    return 1.0 - 1.0 / harmonic(P)


def _survival_of_order_stat(cdf: Callable, K: int, P: int) -> Callable:
    def surv(x):
        F = np.clip(np.asarray(cdf(x), dtype=float), 0.0, 1.0)
        if K == P:  # 1 - F^P, accurate when F is close to 1
            with np.errstate(divide="ignore"):
                return -np.expm1(P * np.log(F))
        # binomial tail P(fewer than K of P are <= x), in logs so that large P cannot overflow
        with np.errstate(divide="ignore"):
            lF, lQ = np.log(F), np.log1p(-F)
        total = np.zeros_like(F)
        for j in range(K):
            log_c = math.lgamma(P + 1) - math.lgamma(j + 1) - math.lgamma(P - j + 1)
            total += np.exp(log_c + (j * lF if j else 0.0) + (P - j) * lQ)
        return total

    return surv


def _integrate_survival(surv: Callable, tail_tol: float = 1e-12, rtol: float = 1e-11) -> float:
    """``int_0^inf surv(x) dx`` for a non-increasing survival function on ``x >= 0``.

    Finds a range beyond which ``surv(x) x`` is negligible, splits it into geometric
    panels and bisects every panel on which 16- and 32-node Gauss-Legendre rules
    disagree (kinks and jumps of the CDF end up in tiny panels).
    """
    S = lambda x: float(surv(np.array([x]))[0])  # noqa: E731
    # Double x_hi until x S(x) is negligible against its largest value (a proxy for the
    # integral). S can become exactly 0 at the end of a bounded support (S -> 0 continuously)
    # or where F rounds to 1 (S jumps from ~1e-16 n to 0); bisection on the last doubling
    # tells them apart, and the second case with a non-negligible x S(x) means the tail is too
    # heavy for a CDF given in double precision.
    x_hi, peak = 1.0, 0.0
    for _ in range(1000):
        v = S(x_hi) * x_hi
        peak = max(peak, v)
        if v <= tail_tol * peak:
            if v == 0.0 and x_hi > 1.0:
                lo, hi = 0.5 * x_hi, x_hi
                for _ in range(100):
                    mid = 0.5 * (lo + hi)
                    lo, hi = (mid, hi) if S(mid) > 0 else (lo, mid)
                if S(lo) * lo > 1e-6 * peak:
                    raise ValueError("CDF rounds to 1 before the tail is negligible: heavy tail?")
                x_hi = hi
            break
        x_hi *= 2.0
    else:
        raise ValueError("survival function does not decay: infinite or undefined mean?")
    rules = [np.polynomial.legendre.leggauss(n) for n in (16, 32)]

    def panel_integrals(lo, hi):
        out = []
        for t, wts in rules:
            x = 0.5 * (hi - lo)[:, None] * (t[None, :] + 1.0) + lo[:, None]
            out.append(np.sum(0.5 * (hi - lo)[:, None] * wts * surv(x.ravel()).reshape(x.shape), axis=1))
        return out

    edges = np.concatenate([[0.0], x_hi * 2.0 ** -np.arange(80, -1, -1)])
    lo, hi = edges[:-1], edges[1:]
    total = 0.0
    for _ in range(60):
        coarse, fine = panel_integrals(lo, hi)
        bad = np.abs(fine - coarse) > rtol * max(abs(total + fine.sum()), 1e-300) / lo.size
        total += fine[~bad].sum()
        if not bad.any():
            return float(total)
        mid = 0.5 * (lo[bad] + hi[bad])
        lo, hi = np.concatenate([lo[bad], mid]), np.concatenate([mid, hi[bad]])
    return float(total + fine[bad].sum())


def expected_order_statistic(cdf: Callable, K: int, P: int) -> float:
    """``E[X_(K:P)]`` for ``P`` i.i.d. non-negative draws with CDF ``cdf`` (vectorised callable)."""
    if not 1 <= K <= P:
        raise ValueError("need 1 <= K <= P")
    return _integrate_survival(_survival_of_order_stat(cdf, K, P))


def expected_max(cdf: Callable, n: int) -> float:
    """``E[max of n] = int_0^inf (1 - F(x)**n) dx``."""
    return expected_order_statistic(cdf, n, n)


def expected_value(cdf: Callable) -> float:
    """``E[X] = int_0^inf (1 - F) dx`` for a non-negative variable."""
    return expected_max(cdf, 1)


def throughput_ratio(cdf: Callable, P: int) -> float:
    """Async/sync throughput ratio ``E[max of P] / E[X]`` for a general distribution."""
    return expected_max(cdf, P) / expected_value(cdf)


def sync_idle_fraction(cdf: Callable, P: int) -> float:
    """Idle fraction of synchronous workers, ``1 - E[X] / E[max of P]``."""
    return 1.0 - 1.0 / throughput_ratio(cdf, P)


def lognormal_cdf(median: float, sigma_log: float) -> Callable:
    """CDF of a log-normal with the given median and log-scale sd (vectorised)."""

    def cdf(x):
        x = np.asarray(x, dtype=float)
        with np.errstate(divide="ignore"):
            z = (np.log(np.maximum(x, 0.0)) - math.log(median)) / (sigma_log * math.sqrt(2.0))
        return 0.5 * (1.0 + _erf(z))

    return cdf


def exponential_cdf(rate: float) -> Callable:
    return lambda x: -np.expm1(-rate * np.maximum(np.asarray(x, dtype=float), 0.0))
