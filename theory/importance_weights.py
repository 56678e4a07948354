"""T8. Importance-sampling weights: second moments, ESS, divergences, truncation.

Weights ``w = p / q`` with samples from the behaviour ``q`` (so ``E_q w = 1``).

1. Kish ESS ``(sum w)**2 / sum w**2``; ``ESS / n -> 1 / E_q[w**2] = 1 / (1 + chi2(p||q))``
   (Kish 1965). Finite-n ESS is biased upward for heavy tails.
2. ``chi2(p||q) = E_q[w**2] - 1 = Var_q w``.
3. Renyi-2: ``E_q[w**2] = exp(D_2(p||q))`` (variance bounds via ``exp D_2``: Metelli et al. 2018).
4. Gaussians ``p = N(m1, s1**2)``, ``q = N(m2, s2**2)``: finite iff ``2 s2**2 > s1**2``, then
   ``E_q[w**2] = s2**2 / (s1 sqrt(2 s2**2 - s1**2)) exp((m1 - m2)**2 / (2 s2**2 - s1**2))``.
5. Exponential families ``p_th(x) = h(x) exp(th.T(x) - A(th))``:
   ``E_th'[(p_th / p_th')**2] = exp(A(2 th - th') - 2 A(th) + A(th'))`` when ``2 th - th'`` is
   a natural parameter; for a softmax ``A = logsumexp``.
   For a Bernoulli logit ``A(th) = log(1 + e**th)`` (``bernoulli_second_moment``).
6. [approx] Second order in ``dth = th - th'``: ``log E[w**2] ~ dth^T F dth ~ 2 KL`` (F the
   Fisher information), so ``chi2 ~ 2 KL ~ M2 = E_q[(log w)**2]`` (M2PO's statistic).
   Exact companion: in an exponential family ``log w = dth.T(x) - (A(th) - A(th'))``, so
   ``Var_q[log w] = dth^T F(th') dth`` exactly (``F(th') = Cov_q T``, ``bernoulli_fisher``).
7. [approx] Sequence weights ``W = prod_t w_t``: with independent factors
   ``E[W**2] = prod_t E[w_t**2]``; lognormal idealisation ``log W ~ N(-s2/2, s2)`` gives
   ``E[W**2] = exp(s2)`` and ``ESS / n -> exp(-s2)``, ``s2 = length x per-token log-ratio variance``.
8. Truncation ``w_C = min(w, C)`` for lognormal ``w`` (Phi the normal CDF, ``s = sqrt(s2)``):
   ``E[(w - C)+] = Phi((s**2/2 - ln C)/s) - C Phi((-s**2/2 - ln C)/s)`` (the bias of the mean
   is ``-E_q[(w - C)+ f]``), ``E[w_C**2] = exp(s**2) Phi((ln C - 1.5 s**2)/s) + C**2 Phi((-s**2/2 - ln C)/s)``.
   (Truncated IS: Ionides 2008; VCPO, arXiv 2602.17616, computes ESS from unclipped weights.)
9. KL estimators from ``r = p/q``, samples from q: ``k1 = -log r`` (unbiased for KL(q||p)),
   ``k2 = (log r)**2 / 2`` (second-order), ``k3 = r - 1 - log r`` (unbiased, >= 0)
   (J. Schulman, "Approximating KL divergence", 2020).

Worked examples (docs/theory.md#t8):

>>> theta, theta_b = np.zeros(4), np.array([0.2, 0.0, -0.1, 0.1])
>>> print(f"{softmax_second_moment(theta, theta_b):.7f}")
1.0125606
>>> {k: round(v, 6) for k, v in categorical_divergences(theta, theta_b).items()}
{'second_moment': 1.012561, 'chi2': 0.012561, 'two_kl': 0.012482, 'm2': 0.012433, 'ess_fraction': 0.987595}
>>> round(gaussian_second_moment(0.5, 1.0, 0.0, 1.0), 5), round(gaussian_second_moment(0.0, 1.0, 0.0, 1.2), 5)
(1.28403, 1.05023)
>>> gaussian_second_moment(0.0, 1.0, 0.0, 0.7)
inf
>>> round(sequence_ess_fraction(1000, 1e-3), 4), round(sequence_ess_fraction(4000, 1e-3), 4)
(0.3679, 0.0183)
>>> {k: round(v, 4) for k, v in truncated_lognormal(1.0, 2.0).items()}
{'excess': 0.1906, 'mean': 0.8094, 'second_moment': 1.0361, 'tail_prob': 0.1164, 'ess_fraction': 0.6323}
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

_erf = np.vectorize(math.erf, otypes=[float])


def _out(x):
    """Plain float for 0-d results, array otherwise."""
    return float(x) if np.ndim(x) == 0 else x


_NUMERIC = [{"erf": _erf}, "numpy"]


def logsumexp(x, axis: int = -1):
    """Numerically stable ``log sum exp(x)`` along ``axis``."""
    x = np.asarray(x, dtype=float)
    m = np.max(x, axis=axis, keepdims=True)
    return np.squeeze(m, axis=axis) + np.log(np.sum(np.exp(x - m), axis=axis))


def softmax(x, axis: int = -1) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    return np.exp(x - np.expand_dims(logsumexp(x, axis), axis))


# --- 5. exponential family / softmax -----------------------------------------------------


def expfam_second_moment_expr() -> sp.Expr:
    """``exp(A(2 th - th') - 2 A(th) + A(th'))`` with an undefined log-partition ``A``."""
    A = sp.Function("A")
    th, thb = sp.symbols("theta theta_b")
    return sp.exp(A(2 * th - thb) - 2 * A(th) + A(thb))


def softmax_second_moment_expr(k: int) -> tuple[sp.Expr, sp.Expr]:
    """``(sum_a p_a**2 / q_a, exp(LSE(2th - th') - 2 LSE(th) + LSE(th')))`` for ``k`` logits.

    The two are equal; returned together so the identity can be checked symbolically.
    """
    th = sp.symbols(f"theta0:{k}")
    tb = sp.symbols(f"thetab0:{k}")
    lse = lambda v: sp.log(sum(sp.exp(x) for x in v))  # noqa: E731
    p = [sp.exp(x - lse(th)) for x in th]
    q = [sp.exp(x - lse(tb)) for x in tb]
    direct = sum(pa**2 / qa for pa, qa in zip(p, q))
    closed = sp.exp(lse([2 * a - b for a, b in zip(th, tb)]) - 2 * lse(th) + lse(tb))
    return direct, closed


def softmax_second_moment(theta, theta_b):
    """``E_q[w**2]`` for target ``softmax(theta)``, behaviour ``softmax(theta_b)`` (last axis)."""
    theta, theta_b = np.asarray(theta, float), np.asarray(theta_b, float)
    return _out(np.exp(logsumexp(2 * theta - theta_b) - 2 * logsumexp(theta) + logsumexp(theta_b)))


def categorical_divergences(theta, theta_b) -> dict[str, float]:
    """Exact ``E_q[w**2]``, ``chi2``, ``2 KL(p||q)``, ``M2 = E_q[(log w)**2]`` and ``ESS/n``."""
    logp = np.asarray(theta, float) - logsumexp(theta)
    logq = np.asarray(theta_b, float) - logsumexp(theta_b)
    p, q = np.exp(logp), np.exp(logq)
    m2nd = float(softmax_second_moment(theta, theta_b))
    return {
        "second_moment": m2nd,
        "chi2": m2nd - 1.0,
        "two_kl": float(2 * np.sum(p * (logp - logq))),
        "m2": float(np.sum(q * (logp - logq) ** 2)),
        "ess_fraction": 1.0 / m2nd,
    }


def softmax_fisher(theta) -> np.ndarray:
    """Fisher information of a softmax w.r.t. its logits: ``diag(p) - p p^T``."""
    p = softmax(theta)
    return np.diag(p) - np.outer(p, p)


def second_order_divergence(theta, theta_b) -> float:
    """[approx] ``dth^T F dth`` (``F`` at the behaviour), ~ ``log E[w**2]`` ~ ``2 KL``."""
    d = np.asarray(theta, float) - np.asarray(theta_b, float)
    return float(d @ softmax_fisher(theta_b) @ d)


def bernoulli_second_moment(theta, theta_b):
    """Item 5 for Bernoulli(sigmoid(theta)) target and Bernoulli(sigmoid(theta_b)) behaviour, elementwise:
    ``exp(A(2 th - th') - 2 A(th) + A(th'))`` with ``A = log(1 + e**th)``."""
    theta, theta_b = np.asarray(theta, float), np.asarray(theta_b, float)
    A = lambda x: np.logaddexp(0.0, x)  # noqa: E731
    return _out(np.exp(A(2 * theta - theta_b) - 2 * A(theta) + A(theta_b)))


def bernoulli_weight_moment(theta, theta_b, k: int):
    """``E_q[(p/q)**k] = exp(A(k th - (k - 1) th') - k A(th) + (k - 1) A(th'))`` for Bernoulli(sigmoid(theta))
    target and Bernoulli(sigmoid(theta_b)) behaviour, elementwise (item 5 for any power ``k``; ``k = 2`` is
    :func:`bernoulli_second_moment`, ``k = 4`` gives the variance of a sample mean of ``w**2``)."""
    theta, theta_b = np.asarray(theta, float), np.asarray(theta_b, float)

    def A(x):
        return np.logaddexp(0.0, x)

    return _out(np.exp(A(k * theta - (k - 1) * theta_b) - k * A(theta) + (k - 1) * A(theta_b)))


def bernoulli_fisher(theta):
    """Fisher information of Bernoulli(sigmoid(theta)) in its logit, ``p (1 - p)`` = ``Var T``."""
    p = 1.0 / (1.0 + np.exp(-np.asarray(theta, float)))
    return _out(p * (1.0 - p))


# --- 1-4. ESS, chi2, Renyi, Gaussians ------------------------------------------------------


def kish_ess(w, axis: int = -1):
    """Sample Kish effective sample size ``(sum w)**2 / sum w**2``."""
    w = np.asarray(w, dtype=float)
    return _out(np.sum(w, axis=axis) ** 2 / np.sum(w * w, axis=axis))


def ess_fraction(second_moment):
    """Population ``ESS / n = 1 / E_q[w**2] = 1 / (1 + chi2)``."""
    return _out(1.0 / np.asarray(second_moment, dtype=float))


def chi2_from_second_moment(second_moment):
    return _out(np.asarray(second_moment, dtype=float) - 1.0)


def renyi2_from_second_moment(second_moment):
    """``D_2(p||q) = log E_q[w**2] = log(1 + chi2)``."""
    return _out(np.log(np.asarray(second_moment, dtype=float)))


_m1, _m2 = sp.symbols("m1 m2", real=True)
_s1, _s2 = sp.symbols("s1 s2", positive=True)


def gaussian_second_moment_expr() -> sp.Expr:
    """``E_q[(p/q)**2]`` for ``p = N(m1, s1**2)``, ``q = N(m2, s2**2)``; valid iff ``2 s2**2 > s1**2``."""
    k = 2 * _s2**2 - _s1**2
    return _s2**2 / (_s1 * sp.sqrt(k)) * sp.exp((_m1 - _m2) ** 2 / k)


_gauss = sp.lambdify((_m1, _s1, _m2, _s2), gaussian_second_moment_expr(), "numpy")


def gaussian_second_moment(m1: float, s1: float, m2: float, s2: float) -> float:
    """Numeric Gaussian second moment; ``inf`` when ``2 s2**2 <= s1**2``."""
    if 2 * s2**2 <= s1**2:
        return math.inf
    return float(_gauss(m1, s1, m2, s2))


# --- 7. sequence-level weights -------------------------------------------------------------


def sequence_second_moment(per_token_second_moments) -> float:
    """[approx] ``E[W**2] = prod_t E[w_t**2]`` for independent per-token factors."""
    return float(np.prod(np.asarray(per_token_second_moments, dtype=float)))


def lognormal_second_moment(s2):
    """``E[W**2] = exp(s2)`` for ``log W ~ N(-s2/2, s2)``."""
    return _out(np.exp(np.asarray(s2, dtype=float)))


def sequence_ess_fraction(length, per_token_logratio_var):
    """[approx] ``ESS / n -> exp(-length * var)`` under the lognormal idealisation."""
    return _out(np.exp(-np.asarray(length, dtype=float) * per_token_logratio_var))


# --- 8. truncated lognormal weights --------------------------------------------------------

_s, _C = sp.symbols("s C", positive=True)


def _Phi(x: sp.Expr) -> sp.Expr:
    return (1 + sp.erf(x / sp.sqrt(2))) / 2


def truncated_lognormal_exprs() -> dict[str, sp.Expr]:
    """Sympy expressions in ``s, C`` for ``log w ~ N(-s**2/2, s**2)`` and ``w_C = min(w, C)``."""
    lc = sp.log(_C)
    tail = _Phi((-(_s**2) / 2 - lc) / _s)
    excess = _Phi((_s**2 / 2 - lc) / _s) - _C * tail
    second = sp.exp(_s**2) * _Phi((lc - sp.Rational(3, 2) * _s**2) / _s) + _C**2 * tail
    return {
        "excess": excess,
        "mean": 1 - excess,
        "second_moment": second,
        "tail_prob": tail,
        "ess_fraction": (1 - excess) ** 2 / second,
    }


_trunc = {k: sp.lambdify((_s, _C), e, _NUMERIC) for k, e in truncated_lognormal_exprs().items()}


def truncated_lognormal(s: float, C: float) -> dict[str, float]:
    """``E[(w-C)+]``, ``E[w_C]``, ``E[w_C**2]``, ``P(w >= C)`` and truncated ``ESS/n``.

    Untruncated ``ESS/n`` is ``exp(-s**2)`` (``lognormal_second_moment``).
    """
    return {k: float(f(s, C)) for k, f in _trunc.items()}


# --- 9. KL estimators ----------------------------------------------------------------------


def kl_k1(log_r):
    """``-log r``: unbiased for ``KL(q||p)`` under ``q``; can be negative."""
    return -np.asarray(log_r, dtype=float)


def kl_k2(log_r):
    """``(log r)**2 / 2``: matches ``KL(q||p)`` to second order."""
    return 0.5 * np.asarray(log_r, dtype=float) ** 2


def kl_k3(log_r):
    """``r - 1 - log r``: unbiased for ``KL(q||p)`` under ``q`` and non-negative."""
    lr = np.asarray(log_r, dtype=float)
    return np.expm1(lr) - lr
