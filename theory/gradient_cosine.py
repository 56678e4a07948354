"""T3. Consecutive-gradient cosine of delayed SGD on a noisy quadratic.

Model: diagonal Hessian with eigenvalues ``lam_i``, applied gradient
``g_t = H x_{t-tau} + xi_t`` with isotropic fresh noise ``xi_t ~ (0, sigma**2 I)``,
``x_{t+1} = x_t - eta g_t``; stationary regime (``eta lam_max < a*(tau)``, T1).

Per coordinate, with ``C(h)`` the stationary autocovariances of T2 (``a = eta lam``):

* ``D = Var g_t = lam**2 C(0) + sigma**2``
* ``N = Cov(g_t, g_{t+1}) = lam**2 C(1)`` for ``tau >= 1``; for ``tau = 0`` the
  noise ``xi_t`` that produced ``x_{t+1}`` reappears in ``g_{t+1}``, giving
  ``N = lam**2 C(1) - eta lam sigma**2``.

``N / D`` depends on ``a`` only (``C`` scales as ``eta**2 sigma**2``):
tau=0: ``-a/2``; 1: ``a/2``; 2: ``a/(2(1-a))``; 3: ``a(1+a)/(2(1-a-a**2))``;
4: ``a(1+a-a**2)/(2(1-2a-a**2+a**3))``. As ``a -> a*(tau)`` it tends to
``cos(pi/(2 tau + 1))``.

In high dimension the norms concentrate, so the expected cosine of consecutive
gradients is approximately the ratio of sums

    E c ~ sum_i N_i / sum_i D_i        [approx; the ratio itself is exact for
                                         E<g_t, g_{t+1}> / E|g_t|**2].

Other regime [approx]: far from the optimum, consecutive mini-batch gradients
with mean ``m``, per-sample covariance ``Sigma_g`` and batch size ``B`` have
``E c ~ |m|**2 / (|m|**2 + tr(Sigma_g) / B)`` (independent batches at nearly the
same point; ``signal_dominated_cosine``).

Context: the diagnostic of GAC (arXiv 2603.01501) -- synchronous SGD gives
slightly negative ``c``, stable delayed SGD a small positive ``c`` growing with
``eta / eta_crit``, and ``c`` near 1 past ``eta_crit``. The formulas are derived
here from T2 (docs/theory.md#t3).

Worked example (docs/theory.md#t3): d = 2000, ``lam_i`` log-spaced in [0.01, 1],
``sigma = 0.05``.

>>> lams = np.logspace(-2, 0, 2000)
>>> [round(expected_cosine(eta, lams, 0.05, tau), 4)
...  for eta, tau in [(0.3, 0), (1.0, 0), (0.3, 4), (0.1, 8), (0.15, 8), (0.17, 8), (0.18, 8)]]
[-0.0338, -0.1301, 0.0768, 0.0168, 0.0372, 0.0567, 0.0824]
>>> correlation_closed_form(2)
a/(2 - 2*a)
>>> round(per_coordinate_correlation(0.2, 0), 6)
-0.1
>>> signal_dominated_cosine(mean_sq_norm=1.0, trace_cov=64.0, batch=64)
0.5
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from theory.delayed_variance import a_sym, autocovariances, derive_autocovariances


def correlation_closed_form(tau: int) -> sp.Expr:
    """Tabulated per-coordinate lag-1 gradient correlation for ``tau`` in 0..4."""
    a = a_sym
    forms = {
        0: -a / 2,
        1: a / 2,
        2: a / (2 * (1 - a)),
        3: a * (1 + a) / (2 * (1 - a - a**2)),
        4: a * (1 + a - a**2) / (2 * (1 - 2 * a - a**2 + a**3)),
    }
    if tau not in forms:
        raise ValueError("closed forms are tabulated for tau in 0..4; use derive_correlation")
    return forms[tau]


def derive_correlation(tau: int) -> sp.Expr:
    """``N/D`` derived symbolically from the T2 autocovariances (units ``sigma = 1``).

    With ``s2 = eta**2`` and ``lam = a / eta``: ``lam**2 C(h) = a**2 C(h)|_{s2=1}``.
    """
    g = derive_autocovariances(tau)
    s2 = sp.Symbol("s2", positive=True)
    g0, g1 = (gi.subs(s2, 1) for gi in g[:2])
    num = a_sym**2 * g1 - (a_sym if tau == 0 else 0)
    den = a_sym**2 * g0 + 1
    return sp.factor(sp.simplify(num / den))


def cosine_terms(eta: float, lam: float, sigma: float, tau: int) -> tuple[float, float]:
    """Per-coordinate ``(N, D)``: lag-1 gradient covariance and gradient variance."""
    c = autocovariances(eta * lam, tau, (eta * sigma) ** 2, max_lag=1)
    num = lam**2 * c[1] - (eta * lam * sigma**2 if tau == 0 else 0.0)
    den = lam**2 * c[0] + sigma**2
    return float(num), float(den)


def per_coordinate_correlation(a: float, tau: int) -> float:
    """``N/D`` for one coordinate as a function of ``a = eta lam`` (any tau)."""
    num, den = cosine_terms(a, 1.0, 1.0, tau)
    return num / den


def expected_cosine(eta: float, lams, sigma: float, tau: int) -> float:
    """High-dimensional ``E c ~ sum N_i / sum D_i``; ``ValueError`` if unstable."""
    terms = np.array([cosine_terms(eta, float(l), sigma, tau) for l in np.asarray(lams, dtype=float)])
    return float(terms[:, 0].sum() / terms[:, 1].sum())


def critical_correlation(tau):
    """Limit of the per-coordinate correlation as ``a -> a*(tau)``: ``cos(pi/(2 tau+1))``."""
    return np.cos(np.pi / (2 * np.asarray(tau, dtype=float) + 1))


def signal_dominated_cosine(mean_sq_norm: float, trace_cov: float, batch: int) -> float:
    """``|m|**2 / (|m|**2 + tr(Sigma_g) / B)`` for two independent mini-batch gradients."""
    return mean_sq_norm / (mean_sq_norm + trace_cov / batch)
