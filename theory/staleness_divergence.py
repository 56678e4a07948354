"""T9. Policy divergence after k stale steps, from the correlation of the updates.

Derived here, docs/theory.md#t9 (linking GAC's consecutive cosine, arXiv 2603.01501, to
VCPO's ESS, arXiv 2602.17616). After ``k`` optimizer steps the learner is
``dth = eta sum_{j=1..k} u_j`` away from the behaviour weights, with update
directions of norm ``~U``. Then

    E|dth|**2 = eta**2 U**2 S(k),    S(k) = sum_{i,j <= k} corr(u_i, u_j),

and by the second-order expansions of T8.6-7 (Fisher ``F``, here a scalar
curvature ``F`` along the update direction):
``KL ~ (1/2) F E|dth|**2``, per-token ``ESS/n ~ exp(-F E|dth|**2)`` and for ``L`` roughly
independent tokens ``ESS/n ~ exp(-L F E|dth|**2)`` [approx].

Correlation models:

* uncorrelated (synchronous-like, ``c ~ 0``): ``S(k) = k`` (linear in the lag);
* equicorrelated (all pairs ``c``): ``S(k) = k + k (k - 1) c`` (quadratic);
* AR(1), ``corr = c**|i-j|``: ``S(k) = k (1+c)/(1-c) - 2 c (1 - c**k)/(1-c)**2`` --
  quadratic for ``k << 1/(1-c)``, then linear with slope ``(1+c)/(1-c)``.

Assumptions: small divergence (second order), updates with equal norms, tokens
independent for the sequence-level version.

The Fisher quadratic form on a real policy. Whatever the update correlations, the
second-order link is ``-log(ESS/n) = log E_mu[W**2] ~ dth^T F dth`` with ``dth`` the
actual displacement and ``F`` the Fisher information of the whole sequence at the
behaviour weights (``fisher_quadratic_form``); for ``L`` tokens sharing the
parameters ``F = L F_token`` (the ``L F |dth|**2`` above). When the sequence
log-probability is an exponential family in the parameters (independent Bernoulli
positions, the bit-string task: ``F = diag(p'(1 - p'))``, T8 items 5 and 6), the
log sequence weight is ``dth.T(y) - dA`` and ``Var_mu[log W] = dth^T F dth``
*exactly*: the lognormal idealisation of T8 item 7 (``-log(ESS/n) = Var log W``)
then has its variance given by the quadratic form at any divergence, and only
``log E[W**2] = Var log W + O(dth**3)`` is approximate.

>>> S_equicorrelated(8, 0.5), S_ar1(8, 0.5)
(36.0, 20.015625)
>>> round(S_ar1(32, 0.9), 1)
434.2
>>> S_ar1_expr()
-2*c*(1 - c**k)/(1 - c)**2 + k*(c + 1)/(1 - c)
>>> round(predicted_ess_fraction(eta=0.01, U=1.0, S=S_uncorrelated(4), fisher=10.0, length=100), 4)
0.6703
>>> round(fisher_quadratic_form(np.array([0.1, -0.2]), np.array([0.25, 0.2])), 6)
0.0105
"""

from __future__ import annotations

import numpy as np
import sympy as sp

k_sym, c_sym = sp.symbols("k c", positive=True)
eta_sym, U_sym, S_sym, F_sym, L_sym = sp.symbols("eta U S F L", positive=True)


def S_uncorrelated_expr() -> sp.Expr:
    return k_sym


def S_equicorrelated_expr() -> sp.Expr:
    return k_sym + k_sym * (k_sym - 1) * c_sym


def S_ar1_expr() -> sp.Expr:
    return k_sym * (1 + c_sym) / (1 - c_sym) - 2 * c_sym * (1 - c_sym**k_sym) / (1 - c_sym) ** 2


def predicted_kl_expr() -> sp.Expr:
    """``KL ~ (1/2) F eta**2 U**2 S``."""
    return F_sym * eta_sym**2 * U_sym**2 * S_sym / 2


def predicted_ess_fraction_expr() -> sp.Expr:
    """``ESS/n ~ exp(-L F eta**2 U**2 S)`` (``L = 1`` for a single token)."""
    return sp.exp(-L_sym * F_sym * eta_sym**2 * U_sym**2 * S_sym)


def _out(x):
    return float(x) if np.ndim(x) == 0 else x


def S_uncorrelated(k):
    return _out(np.asarray(k, dtype=float) * 1.0)


def S_equicorrelated(k, c: float):
    k = np.asarray(k, dtype=float)
    return _out(k + k * (k - 1) * c)


def S_ar1(k, c: float):
    """AR(1) sum; the limit ``k**2`` at ``c = 1`` is returned exactly."""
    k = np.asarray(k, dtype=float)
    if c == 1.0:
        return _out(k**2)
    return _out(k * (1 + c) / (1 - c) - 2 * c * (1 - c**k) / (1 - c) ** 2)


def S_from_correlation(corr) -> float:
    """``S(k) = sum_{i,j} corr_ij`` for an explicit ``k x k`` correlation matrix."""
    return float(np.sum(np.asarray(corr, dtype=float)))


def expected_sq_displacement(eta: float, U: float, S):
    """``E|dth|**2 = eta**2 U**2 S(k)``."""
    return _out(eta**2 * U**2 * np.asarray(S, dtype=float))


def predicted_kl(eta: float, U: float, S, fisher: float):
    """[approx] ``KL ~ (1/2) F eta**2 U**2 S``."""
    return 0.5 * fisher * expected_sq_displacement(eta, U, S)


def predicted_ess_fraction(eta: float, U: float, S, fisher: float, length: float = 1.0):
    """[approx] ``ESS/n ~ exp(-length F eta**2 U**2 S)``."""
    return _out(np.exp(-length * fisher * expected_sq_displacement(eta, U, S)))


def fisher_quadratic_form(dtheta, fisher) -> float:
    """``dth^T F dth`` for ``F`` given as a matrix or as its diagonal (1-D): the second-order
    ``-log(ESS/n)`` of the sequence, and exactly ``Var_mu[log W]`` for an exponential family."""
    d = np.asarray(dtheta, dtype=float)
    F = np.asarray(fisher, dtype=float)
    return float(d @ F @ d) if F.ndim == 2 else float(np.sum(F * d * d))
