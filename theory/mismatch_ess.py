"""T12. Training-inference mismatch: per-token log-ratio noise and the sequence ESS it leaves.

The sampler (the inference engine) draws tokens from ``mu`` and reports ``log mu``; the learner
computes ``log pi`` at the same weights. Per token ``l_t = log(pi / mu)`` and ``w_t = e^{l_t}``,
a proper ratio (``E_mu w = 1``). The sequence weight is ``W = prod_t w_t``.

1. [exact] **Log-normal tokens.** ``l ~ N(-s2/2, s2)`` gives ``E[w**k] = exp(k (k - 1) s2 / 2)``:
   ``E w = 1``, ``E w**2 = e^{s2}``. For ``T`` independent tokens ``log W ~ N(-T s2/2, T s2)``,
   ``E[W**2] = e^{T s2}`` and the population ESS fraction ``(E W)**2 / E[W**2] = e^{-T s2}``
   (T8 item 7).
2. [exact] **Finite-sample Kish ESS.** For ``N`` i.i.d. weights ``W_i`` the sample
   ``ESS/N = (sum W)**2 / (N sum W**2)`` has, from ``1/B = int_0^inf e^{-uB} du`` and independence,

       E[(sum W)**2 / sum W**2] = 1 + N (N - 1) int_0^inf psi(u)**2 phi(u)**(N - 2) du,

   ``phi(u) = E e^{-u W**2}``, ``psi(u) = E[W e^{-u W**2}]`` (the diagonal terms integrate to
   ``phi(0)**N - phi(inf)**N = 1``). ``phi`` and ``psi`` are one-dimensional integrals over
   ``log W``; ``expected_kish_ess_fraction`` evaluates the whole by quadrature, no Monte Carlo.
   The sample ESS is biased upward (it is at least ``1/N``) and saturates near ``1/N`` for long
   sequences. [approx] The delta method gives
   ``E[ESS/N] ~ 1/m2 + (m2 - 1)/(N m2) - 2 (m3 - m2)/(N m2**2) + (m4 - m2**2)/(N m2**3)``
   (``m_k = E W**k``), usable only while its correction is small (log-normal: ``N >> e^{4 s2}``).
   Regime of the population formula (from the exact integral, ``s2 = T s2_token``): the relative
   bias is below 10% only for ``N >~ exp(2 s2 + 2.6 sqrt(s2) + 0.85)`` (161 at ``s2 = 1``, 4,322 at 2,
   1.1e6 at 4). ``N e^{-s2} >> 1`` is necessary, not sufficient: ``E[W**2]`` is carried by the
   draws near ``log W = 3 s2 / 2`` (a standard-normal ``z = 2 sqrt(s2)``), which ``N`` draws reach
   only when ``N P(Z > 2 sqrt(s2)) >> 1``.
3. [exact for independent tokens] **Measured token distribution.** From samples of ``l`` (drawn
   under ``mu``): ``m1 = E e^{l}``, ``m2 = E e^{2l}`` per token, sequence ESS fraction
   ``(m1**2 / m2)**T`` (``m2**-T`` for a proper ratio), and for a mixture of lengths ``T`` with
   probabilities ``p_T`` the pooled ``(sum p_T m1**T)**2 / sum p_T m2**T``.
4. **Logit noise on the sampler.** The engine samples from logits ``theta + eps``, ``eps`` drawn
   independently per token. For a Bernoulli token with log-odds ``theta`` (the bit-string task,
   ``A(x) = log(1 + e^x)``, ``p = sigmoid(theta)``) and noise ``eps`` on that one logit:
   ``l = -eps y + A(theta + eps) - A(theta)`` and, given ``eps`` (T8 item 5),
   ``E_mu[w**2 | eps] = exp(A(theta + eps) + A(theta - eps) - 2 A(theta))``. [exact] For
   Gaussian ``eps ~ N(0, sz**2)`` the per-token ``m2``, ``E l``, ``Var l`` and the mean k3 KL
   ``E[w - 1 - l] = -E l`` are one-dimensional Gaussian integrals (Gauss-Hermite quadrature).
   [approx, second order in ``sz``] ``Var l = sz**2 p (1 - p)``, ``log m2 = sz**2 p (1 - p)``,
   ``E l = -sz**2 p (1 - p) / 2``; the next term of ``log m2`` is
   ``sz**4 (a**2 + A''''/4)`` with ``a = p (1 - p)``, ``A'''' = a (1 - 6a)``.
   For a softmax over ``K`` logits with i.i.d. ``N(0, sz**2)`` noise on every logit, the same
   expansion with the Fisher matrix ``F = diag(p) - p p^T`` (T8 item 6) gives
   ``Var l = E[eps^T F eps] = sz**2 tr F = sz**2 (1 - sum_a p_a**2)``; a Bernoulli written as a
   two-logit softmax with noise on both logits has ``1 - sum p**2 = 2 p (1 - p)``, twice the
   one-logit value (exactly: independent Gaussian noise of scales ``s0``, ``s1`` on the two entries is
   ``N(0, s0**2 + s1**2)`` noise on the log-odds, ``two_logit_noise_sigma``). Heavy-tailed noise (Student-t) makes ``m2`` infinite: ``E[w**2 | eps]`` grows
   like ``e^{|eps|}``, which no power-law density integrates, so the population ESS is 0 and only
   the finite-sample statement of item 2 remains.

5. **Staleness and logit noise together: the learner's own ratio.** The learner at ``theta`` trains
   on a token the engine drew at version ``theta_v`` with noise, so its ratio is
   ``w = pi_theta(y) / mu(y)``, ``mu = Bernoulli(sigmoid(theta_v + eps))``. [exact] Given ``eps``,
   ``E_mu[w**2 | eps] = exp(A(theta_v + eps) - 2A(theta) + A(2 theta - theta_v - eps))`` (item 4 with
   T8 item 5), integrated over ``eps`` by Gauss-Hermite; ``theta = theta_v`` gives item 4. For a band
   ``[alpha, beta]`` (IcePop's) the fraction of tokens whose ``w`` falls outside it is
   ``E_eps[sum_y mu(y) 1{w(y) outside}]``; ``w(1) = p / mu(1)`` decreases and ``w(0) = (1 - p)/mu(0)``
   increases in ``eps``, so each event is a half-line of ``eps`` and the fraction is a sum of smooth
   one-sided Gaussian integrals (Gauss-Legendre on each half-line).

Assumptions: tokens independent given the noise (the bit-string's positions are); the engine reports
the log-probs of the distribution it sampled from, so ``E_mu w = 1``.

Sources: Kish, *Survey Sampling* (1965) for the ESS; the integral identity ``1/B = int e^{-uB}``
is standard (e.g. for ratio estimators); the log-normal moments are textbook. The mismatch setting
(sampler and trainer log-probs differing at the same weights): Yao et al., "Your efficient RL
framework secretly brings you off-policy RL training" (blog, Aug 2025; truncated IS for it) and verl >= 0.6.1
``rollout_corr`` metrics. Derivations of items 2 and 4 are given in ``docs/theory.md#t12``.

Worked examples (docs/theory.md#t12):

>>> round(lognormal_sequence_ess_fraction(100, 0.01), 6)
0.367879
>>> round(expected_kish_ess_fraction(64, 2.0), 4), round(float(np.exp(-2.0)), 4)
(0.2548, 0.1353)
>>> round(kish_ess_fraction_delta(256, 0.5), 4), round(expected_kish_ess_fraction(256, 0.5), 4)
(0.6151, 0.6139)
>>> {k: round(v, 6) for k, v in bernoulli_logit_noise(0.0, 0.5).items()}
{'second_moment': 1.066574, 'mean_logratio': -0.028665, 'var_logratio': 0.054153, 'k3': 0.028665}
>>> {k: round(v, 6) for k, v in bernoulli_logit_noise_second_order(0.0, 0.5).items()}
{'var_logratio': 0.0625, 'log_second_moment': 0.0625, 'log_second_moment_4th': 0.064453, 'mean_logratio': -0.03125}
>>> m = token_moments([-0.1, 0.05, 0.02, -0.03])
>>> round(sequence_ess_fraction_from_moments(m["m1"], m["m2"], 10), 4)
0.9691
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from theory.importance_weights import sequence_ess_fraction


def _out(x):
    """Plain float for 0-d results, array otherwise."""
    return float(x) if np.ndim(x) == 0 else x


# --- 1. log-normal per-token weights ---------------------------------------------------------

_k = sp.Symbol("k", integer=True, nonnegative=True)
_s2, _T = sp.symbols("s2 T", positive=True)
_z = sp.Symbol("z", real=True)


def lognormal_moment_expr() -> sp.Expr:
    """``E[w**k]`` for ``log w ~ N(-s2/2, s2)``, by integrating ``e^{k l}`` against the normal density."""
    l = -_s2 / 2 + sp.sqrt(_s2) * _z
    density = sp.exp(-(_z**2) / 2) / sp.sqrt(2 * sp.pi)
    return sp.simplify(sp.integrate(sp.exp(_k * l) * density, (_z, -sp.oo, sp.oo), conds="none"))


def lognormal_sequence_ess_expr() -> sp.Expr:
    """``(E W)**2 / E[W**2]`` for ``T`` independent log-normal tokens: ``exp(-T s2)``."""
    m = lognormal_moment_expr()
    return sp.simplify((m.subs(_k, 1) ** _T) ** 2 / m.subs(_k, 2) ** _T)


def lognormal_weight_moment(k, s2):
    """``E[w**k] = exp(k (k - 1) s2 / 2)`` for ``log w ~ N(-s2/2, s2)`` (item 1)."""
    k = np.asarray(k, dtype=float)
    return _out(np.exp(k * (k - 1) * np.asarray(s2, dtype=float) / 2))


def lognormal_sequence_ess_fraction(length, token_var):
    """Population ``ESS/N = e^{-T s2}`` for ``T`` i.i.d. log-normal tokens of log-variance ``s2`` (item 1)."""
    return sequence_ess_fraction(length, token_var)


# --- 2. finite-sample Kish ESS -----------------------------------------------------------------


def kish_ess_fraction_delta(n: int, s2: float | None = None, *, m2=None, m3=None, m4=None) -> float:
    """[approx] Delta-method ``E[ESS/N]`` for ``N`` i.i.d. mean-one weights (item 2).

    ``1/m2 + (m2 - 1)/(N m2) - 2 (m3 - m2)/(N m2**2) + (m4 - m2**2)/(N m2**3)``; the moments
    default to the log-normal ones of ``log W ~ N(-s2/2, s2)``.
    """
    if s2 is not None:
        m2, m3, m4 = (lognormal_weight_moment(k, s2) for k in (2, 3, 4))
    return float(1 / m2 + (m2 - 1) / (n * m2) - 2 * (m3 - m2) / (n * m2**2) + (m4 - m2**2) / (n * m2**3))


def _logw_grid(s2: float, dz: float, zmax: float):
    z = np.arange(-zmax, zmax + dz / 2, dz)
    wz = np.exp(-z * z / 2)
    return math.sqrt(s2) * z - s2 / 2, wz / wz.sum()


def expected_kish_ess_fraction(n: int, s2: float, *, dz: float = 0.01, dv: float = 0.02, zmax: float = 12.0) -> float:
    """Exact ``E[(sum W)**2 / (N sum W**2)]`` for ``N`` i.i.d. ``log W ~ N(-s2/2, s2)`` (item 2).

    ``(1 + N (N - 1) int_0^inf psi(u)**2 phi(u)**(N - 2) du) / N`` with ``u = e^v``, trapezoid rules
    in ``z`` (the standard normal behind ``log W``, ``|z| <= zmax``) and ``v``; ``1 - phi`` is summed
    directly (``-expm1``) so ``phi**(N - 2)`` stays accurate for large ``N``. The defaults agree
    with Monte Carlo to its 4 SE and with a grid twice as fine to 1e-6.
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    if n == 1:
        return 1.0
    if s2 == 0:
        return 1.0
    x, wz = _logw_grid(s2, dz, zmax)  # Kish is scale-free, so the log-mean -s2/2 could be dropped
    v = np.arange(-2 * x.max() - 40.0, -2 * x.min() + 10.0 + dv / 2, dv)
    parts = []
    for i in range(0, v.size, 256):
        vv = v[i : i + 256, None]
        with np.errstate(over="ignore", divide="ignore"):
            t = np.exp(vv + 2 * x[None, :])  # u W**2 (inf where the factor below is 0 anyway)
            one_minus_phi = np.minimum((-np.expm1(-t)) @ wz, 1.0)
            psi_sqrt_u = np.exp(x[None, :] + vv / 2 - t) @ wz  # sqrt(u) psi(u), bounded by e^{-1/2}
            power = np.exp((n - 2) * np.log1p(-one_minus_phi)) if n > 2 else np.ones_like(psi_sqrt_u)
        parts.append(psi_sqrt_u**2 * power)
    integral = float(np.sum((v[1:] - v[:-1]) * (lambda f: (f[1:] + f[:-1]) / 2)(np.concatenate(parts))))
    return (1.0 + n * (n - 1) * integral) / n


def population_accuracy_sample_size(s2):
    """Rule of thumb fitted to the exact integral: the sample ESS of ``N`` log-normal weights is
    within ~10% of ``e^{-s2}`` once ``N >~ exp(2 s2 + 2.6 sqrt(s2) + 0.85)`` (item 2)."""
    s2 = np.asarray(s2, dtype=float)
    return _out(np.exp(2 * s2 + 2.6 * np.sqrt(s2) + 0.85))


# --- 3. measured per-token log-ratios ------------------------------------------------------------


def token_moments(logratios) -> dict[str, float]:
    """Sample ``m1 = mean e^l``, ``m2 = mean e^{2l}``, mean and variance of ``l`` and mean k3 (item 3)."""
    l = np.asarray(logratios, dtype=float).ravel()
    if l.size == 0:
        raise ValueError("logratios is empty")
    w = np.exp(l)
    return {
        "m1": float(w.mean()),
        "m2": float((w * w).mean()),
        "mean_logratio": float(l.mean()),
        "var_logratio": float(l.var()),
        "k3": float(np.mean(np.expm1(l) - l)),
    }


def sequence_ess_fraction_from_moments(m1, m2, lengths, probs=None):
    """Population sequence ESS fraction from per-token moments (item 3).

    Without ``probs``: ``(m1**2 / m2)**T`` per length. With ``probs`` (a length distribution over
    ``lengths``): the pooled ``(sum p_T m1**T)**2 / sum p_T m2**T``.
    """
    T = np.asarray(lengths, dtype=float)
    if probs is None:
        return _out((np.asarray(m1, float) ** 2 / np.asarray(m2, float)) ** T)
    p = np.asarray(probs, dtype=float)
    if p.shape != T.shape or np.any(p < 0) or not math.isclose(float(p.sum()), 1.0, rel_tol=1e-9):
        raise ValueError("probs must be a distribution over lengths (same shape, >= 0, sum 1)")
    return float(np.sum(p * m1**T) ** 2 / np.sum(p * m2**T))


# --- 4. logit noise on the sampler -----------------------------------------------------------------


def _softplus(x):
    return np.logaddexp(0.0, x)


def bernoulli_logit_noise(theta, sigma_z, nodes: int = 96) -> dict:
    """Per-token moments of ``l = log(pi/mu)`` when the sampler's log-odds are ``theta + eps``,
    ``eps ~ N(0, sigma_z**2)``, the learner's ``theta`` (item 4, exact up to quadrature).

    Returns ``second_moment`` (``E[w**2]``), ``mean_logratio`` (``E l``), ``var_logratio``
    (``Var l``) and ``k3`` (``E[w - 1 - l] = -E l``), elementwise over broadcast ``theta``, ``sigma_z``.
    Gauss-Hermite with ``nodes`` points (probabilists' weights); 96 nodes reach 1e-10 for
    ``sigma_z <= 2``.
    """
    theta, sigma_z = np.broadcast_arrays(np.asarray(theta, float), np.asarray(sigma_z, float))
    if np.any(sigma_z < 0):
        raise ValueError("sigma_z must be >= 0")
    x, wx = np.polynomial.hermite_e.hermegauss(nodes)
    wx = wx / wx.sum()
    th = theta[..., None]
    eps = sigma_z[..., None] * x
    A0 = _softplus(th)
    c = _softplus(th + eps) - A0  # l for y = 0; l(y = 1) = c - eps
    p_mu = 1.0 / (1.0 + np.exp(-(th + eps)))  # sampler's P(y = 1)
    m2 = np.exp(_softplus(th + eps) + _softplus(th - eps) - 2 * A0) @ wx
    el = (c - p_mu * eps) @ wx
    el2 = (p_mu * (c - eps) ** 2 + (1 - p_mu) * c**2) @ wx
    return {"second_moment": _out(m2), "mean_logratio": _out(el), "var_logratio": _out(el2 - el**2), "k3": _out(-el)}


def two_logit_noise_sigma(s0, s1):
    """Log-odds noise of a Bernoulli written as the two-entry softmax over logits ``(z0, z1)`` with
    independent ``N(0, s0**2)``, ``N(0, s1**2)`` noise on each entry: the distribution depends only on
    ``z1 - z0``, so the noise is exactly ``N(0, s0**2 + s1**2)`` on the log-odds (item 4)."""
    return _out(np.hypot(np.asarray(s0, float), np.asarray(s1, float)))


def bernoulli_logit_noise_second_order(theta, sigma_z) -> dict:
    """[approx] Small-noise terms for one Bernoulli logit: ``a = p (1 - p)``,
    ``Var l = log m2 = sz**2 a`` (plus ``sz**4 (a**2 + a (1 - 6a)/4)`` for ``log m2``), ``E l = -sz**2 a/2``."""
    p = 1.0 / (1.0 + np.exp(-np.asarray(theta, float)))
    a = p * (1 - p)
    s2 = np.asarray(sigma_z, float) ** 2
    return {
        "var_logratio": _out(s2 * a),
        "log_second_moment": _out(s2 * a),
        "log_second_moment_4th": _out(s2 * a + s2**2 * (a * a + a * (1 - 6 * a) / 4)),
        "mean_logratio": _out(-s2 * a / 2),
    }


def softmax_logit_noise_var(probs, sigma_z):
    """[approx] ``Var l ~ sz**2 (1 - sum_a p_a**2)`` for i.i.d. ``N(0, sz**2)`` noise on every one of
    the softmax's logits (item 4; ``probs`` on the last axis)."""
    p = np.asarray(probs, float)
    return _out(np.asarray(sigma_z, float) ** 2 * (1.0 - np.sum(p * p, axis=-1)))


def bernoulli_noise_sequence_second_moment(theta, sigma_z, nodes: int = 96):
    """``E[W**2] = prod_t m2(theta_t, sz_t)`` over the last axis (positions), independent noise per
    position; the population sequence ESS fraction is its inverse (items 3, 4)."""
    m2 = np.asarray(bernoulli_logit_noise(theta, sigma_z, nodes)["second_moment"], float)
    return _out(np.exp(np.sum(np.log(m2), axis=-1)))


def bernoulli_stale_noise_second_moment(theta, theta_v, sigma_z, nodes: int = 96):
    """``E_mu[(pi_theta/mu)**2]`` per token for the learner's ``theta`` and a sampler at ``theta_v`` with
    ``N(0, sigma_z**2)`` log-odds noise (item 5), elementwise over broadcast inputs."""
    theta, theta_v, sigma_z = np.broadcast_arrays(*(np.asarray(x, float) for x in (theta, theta_v, sigma_z)))
    if np.any(sigma_z < 0):
        raise ValueError("sigma_z must be >= 0")
    x, wx = np.polynomial.hermite_e.hermegauss(nodes)
    wx = wx / wx.sum()
    b = theta_v[..., None] + sigma_z[..., None] * x  # the sampler's log-odds
    th = theta[..., None]
    return _out(np.exp(_softplus(b) - 2 * _softplus(th) + _softplus(2 * th - b)) @ wx)


def _logit(p):
    return np.log(p) - np.log1p(-p)


def _half_line_mass(f, theta_v, sigma_z, lo, hi, nodes: int = 64, zmax: float = 12.0):
    """``E_eps[f(theta_v + eps) 1{lo < eps < hi}]`` for ``eps ~ N(0, sigma_z**2)``, elementwise (Gauss-Legendre
    on the interval cut to ``|eps| <= zmax·sigma_z``; ``f`` smooth)."""
    a = np.clip(lo / sigma_z, -zmax, zmax)
    c = np.clip(hi / sigma_z, -zmax, zmax)
    x, wx = np.polynomial.legendre.leggauss(nodes)
    half, mid = (c - a)[..., None] / 2, (c + a)[..., None] / 2
    z = mid + half * x
    dens = np.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    return np.sum(f(theta_v[..., None] + sigma_z[..., None] * z) * dens * wx, -1) * (c - a)[...] / 2 * (c > a)


def bernoulli_stale_noise_band_fraction(theta, theta_v, sigma_z, alpha: float, beta: float, nodes: int = 64):
    """``P_mu(w < alpha or w > beta)`` per token, ``w = pi_theta(y)/mu(y)``, for the learner's ``theta``, a sampler
    at ``theta_v`` with ``N(0, sigma_z**2)`` log-odds noise (``sigma_z > 0``) and ``0 < alpha < beta`` (item 5)."""
    if not 0 < alpha < beta:
        raise ValueError(f"need 0 < alpha < beta, got alpha={alpha}, beta={beta}")
    theta, theta_v, sigma_z = np.broadcast_arrays(*(np.asarray(x, float) for x in (theta, theta_v, sigma_z)))
    if np.any(sigma_z <= 0):
        raise ValueError("sigma_z must be > 0")
    p = 1.0 / (1.0 + np.exp(-theta))
    inf = np.full(theta.shape, np.inf)

    def edge(q):  # eps at which the sampler's P(y = 1) equals q (nan where q is outside (0, 1))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where((q > 0) & (q < 1), _logit(np.clip(q, 1e-300, 1 - 1e-16)) - theta_v, np.nan)

    def mu1(b):
        return 1.0 / (1.0 + np.exp(-b))

    def mu0(b):
        return 1.0 / (1.0 + np.exp(b))

    total = np.zeros(theta.shape)
    # y = 1: w = p / mu(1) > beta  <=>  mu(1) < p/beta  <=>  eps < edge(p/beta)  (always when p/beta >= 1)
    e = edge(p / beta)
    total += _half_line_mass(
        mu1, theta_v, sigma_z, -inf, np.where(p / beta >= 1, inf, np.nan_to_num(e, nan=-np.inf)), nodes
    )
    # y = 1: w < alpha  <=>  mu(1) > p/alpha  <=>  eps > edge(p/alpha)  (never when p/alpha >= 1)
    e = edge(p / alpha)
    total += np.where(
        p / alpha >= 1, 0.0, _half_line_mass(mu1, theta_v, sigma_z, np.nan_to_num(e, nan=np.inf), inf, nodes)
    )
    # y = 0: w = (1 - p)/mu(0) > beta  <=>  mu(1) > 1 - (1 - p)/beta  <=>  eps > edge(1 - (1 - p)/beta)
    q = 1 - (1 - p) / beta
    e = edge(q)
    total += np.where(
        q <= 0,
        _half_line_mass(mu0, theta_v, sigma_z, -inf, inf, nodes),
        _half_line_mass(mu0, theta_v, sigma_z, np.nan_to_num(e, nan=np.inf), inf, nodes),
    )
    # y = 0: w < alpha  <=>  mu(1) < 1 - (1 - p)/alpha  <=>  eps < edge(1 - (1 - p)/alpha)  (never when <= 0)
    q = 1 - (1 - p) / alpha
    e = edge(q)
    total += np.where(q <= 0, 0.0, _half_line_mass(mu0, theta_v, sigma_z, -inf, np.nan_to_num(e, nan=-np.inf), nodes))
    return _out(total)
