"""T8: importance-sampling identities against enumeration, quadrature and Monte Carlo."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import sympy as sp

from theory import importance_weights as iw

TRAPZ = getattr(np, "trapezoid", None) or np.trapz  # numpy < 2 has only trapz
THETA = np.zeros(4)
THETA_B = np.array([0.2, 0.0, -0.1, 0.1])


def direct_second_moment(theta, theta_b):
    p, q = iw.softmax(theta), iw.softmax(theta_b)
    return float(np.sum(p**2 / q))


def test_softmax_worked_example():
    closed = iw.softmax_second_moment(THETA, THETA_B)
    assert closed == pytest.approx(1.0125606, abs=5e-8)  # 7-decimal table
    assert closed == pytest.approx(direct_second_moment(THETA, THETA_B), rel=1e-14)
    d = iw.categorical_divergences(THETA, THETA_B)
    # 6-significant-digit table values
    assert d["chi2"] == pytest.approx(0.012561, abs=5e-7)
    assert d["two_kl"] == pytest.approx(0.012482, abs=5e-7)
    assert d["m2"] == pytest.approx(0.012433, abs=5e-7)
    assert d["ess_fraction"] == pytest.approx(0.98760, abs=5e-6)
    # second-order agreement "to ~1%" (T8.6); allow 2%
    log_m = math.log(d["second_moment"])
    for approx in (iw.second_order_divergence(THETA, THETA_B), d["chi2"], d["two_kl"], d["m2"]):
        assert approx == pytest.approx(log_m, rel=0.02)


def test_softmax_identity_random_logits():
    rng = np.random.default_rng(3)
    for k in (2, 5, 50):
        th, tb = rng.normal(0, 2, (2, k))
        # deterministic identity: double-precision agreement (spec: 1e-12 relative)
        assert iw.softmax_second_moment(th, tb) == pytest.approx(direct_second_moment(th, tb), rel=1e-12)
    batch = rng.normal(size=(7, 6))
    batch_b = rng.normal(size=(7, 6))
    vals = iw.softmax_second_moment(batch, batch_b)
    assert vals == pytest.approx([direct_second_moment(a, b) for a, b in zip(batch, batch_b)], rel=1e-12)


def test_softmax_identity_symbolic():
    direct, closed = iw.softmax_second_moment_expr(3)
    rng = np.random.default_rng(4)
    syms = sorted(direct.free_symbols | closed.free_symbols, key=str)
    for _ in range(3):
        vals = {s: sp.Rational(int(rng.integers(-30, 30)), 10) for s in syms}
        diff = sp.N(direct.subs(vals) - closed.subs(vals), 50)
        assert abs(diff) < 1e-40  # exact identity evaluated at 50 digits
    ef = iw.expfam_second_moment_expr()
    A = sp.Function("A")
    th, thb = sp.symbols("theta theta_b")
    # Gaussian with unit variance: A(theta) = theta^2 / 2 gives exp((theta - theta_b)^2)
    assert sp.simplify(ef.replace(A, sp.Lambda(sp.Symbol("u"), sp.Symbol("u") ** 2 / 2)) - sp.exp((th - thb) ** 2)) == 0


def gauss_quadrature_second_moment(m1, s1, m2, s2):
    # integrand p^2/q on a fine grid: smooth and decaying, trapezoid error << 1e-9
    x = np.linspace(-40, 40, 400_001)
    logp = -0.5 * ((x - m1) / s1) ** 2 - np.log(s1 * np.sqrt(2 * np.pi))
    logq = -0.5 * ((x - m2) / s2) ** 2 - np.log(s2 * np.sqrt(2 * np.pi))
    return float(TRAPZ(np.exp(2 * logp - logq), x))


@pytest.mark.parametrize(
    "m1,s1,m2,s2,value",
    [(0.5, 1, 0, 1, 1.28403), (0, 1, 0, 1.2, 1.05023), (0, 1, 0, 0.8, 1.20949), (0.3, 0.9, -0.2, 1.5, None)],
)
def test_gaussian_second_moment(m1, s1, m2, s2, value):
    got = iw.gaussian_second_moment(m1, s1, m2, s2)
    if value is not None:
        assert got == pytest.approx(value, abs=5e-6)  # 5-decimal table
    assert got == pytest.approx(gauss_quadrature_second_moment(m1, s1, m2, s2), rel=1e-8)


def test_gaussian_finiteness_and_equal_variance():
    assert iw.gaussian_second_moment(0, 1, 0, 0.7071) == math.inf  # 2 * 0.7071^2 < 1
    assert math.isfinite(iw.gaussian_second_moment(0, 1, 0, 0.7072))
    d, s = 0.7, 1.3
    kl = d**2 / (2 * s**2)
    assert iw.gaussian_second_moment(d, s, 0, s) == pytest.approx(math.exp(2 * kl), rel=1e-14)
    assert iw.ess_fraction(iw.gaussian_second_moment(0.5, 1, 0, 1)) == pytest.approx(0.77880, abs=5e-6)


def test_gaussian_monte_carlo_and_kish_ess():
    # p = N(0.5, 1), q = N(0, 1): E_q[w^4] = exp(6 * 0.25) is finite, so SEs are meaningful.
    rng = np.random.default_rng(11)
    reps, n = 20, 50_000  # 10^6 samples in 20 independent replicates
    x = rng.standard_normal((reps, n))
    w = np.exp(0.5 * x - 0.125)
    w2 = w**2
    pred = iw.gaussian_second_moment(0.5, 1, 0, 1)
    se = w2.std(ddof=1) / math.sqrt(w2.size)
    assert abs(w2.mean() - pred) <= 4 * se
    # ESS/n as a ratio of means over replicates, SE by bootstrap over replicates
    num, den = w.mean(1) ** 2, w2.mean(1)
    idx = np.random.default_rng(0).integers(0, reps, (2000, reps))
    boot = num[idx].mean(1) / den[idx].mean(1)
    assert abs(num.mean() / den.mean() - iw.ess_fraction(pred)) <= 4 * boot.std(ddof=1)
    # the sample Kish ESS of one replicate is this same ratio times n
    assert iw.kish_ess(w[0]) / n == pytest.approx(num[0] / den[0], rel=1e-12)


def test_kish_ess_biased_upward_for_heavy_tails():
    # s2 = 0.7 < 1/sqrt(2): E_q[w^2] = inf, population ESS/n = 0, but a finite sample looks healthy
    rng = np.random.default_rng(5)
    x = 0.7 * rng.standard_normal(10_000)
    logw = -0.5 * x**2 + 0.5 * (x / 0.7) ** 2 + math.log(0.7)
    assert iw.gaussian_second_moment(0, 1, 0, 0.7) == math.inf
    assert iw.kish_ess(np.exp(logw)) / x.size > 0.05


def test_renyi_and_chi2():
    p, q = iw.softmax(THETA), iw.softmax(THETA_B)
    d2_direct = math.log(np.sum(p**2 * q ** (-1)))  # D_alpha with alpha = 2
    m = iw.softmax_second_moment(THETA, THETA_B)
    assert iw.renyi2_from_second_moment(m) == pytest.approx(d2_direct, rel=1e-12)
    assert iw.chi2_from_second_moment(m) == pytest.approx(np.sum(q * (p / q - 1) ** 2), rel=1e-12)


def test_sequence_weights_exact_enumeration():
    # 4 independent tokens with different per-token logits: E[W^2] over all 3^4 sequences
    rng = np.random.default_rng(8)
    th, tb = rng.normal(0, 0.5, (2, 4, 3))
    p, q = iw.softmax(th), iw.softmax(tb)
    total = 0.0
    for seq in itertools.product(range(3), repeat=4):
        qs = np.prod([q[t, a] for t, a in enumerate(seq)])
        W = np.prod([p[t, a] / q[t, a] for t, a in enumerate(seq)])
        total += qs * W**2
    per_token = [iw.softmax_second_moment(th[t], tb[t]) for t in range(4)]
    assert iw.sequence_second_moment(per_token) == pytest.approx(total, rel=1e-12)


def test_lognormal_sequence_monte_carlo():
    s2 = 0.5  # E[W^4] = exp(6 s2) finite
    rng = np.random.default_rng(9)
    W = np.exp(rng.normal(-s2 / 2, math.sqrt(s2), 1_000_000))
    se = (W**2).std(ddof=1) / 1000.0
    assert abs((W**2).mean() - iw.lognormal_second_moment(s2)) <= 4 * se
    assert iw.sequence_ess_fraction(1000, 1e-3) == pytest.approx(0.37, abs=0.005)  # spec "~0.37"
    assert iw.sequence_ess_fraction(4000, 1e-3) == pytest.approx(0.018, abs=0.0005)  # spec "0.018"


TRUNC_TABLE = [  # s, C, excess, E w_C, E w_C^2, P(w >= C), ESS/n untruncated, truncated
    (0.5, 2, 0.0261, 0.9739, 1.1508, 0.0509, 0.7788, 0.8241),
    (1.0, 2, 0.1906, 0.8094, 1.0361, 0.1164, 0.3679, 0.6323),
    (1.0, 8, 0.0175, 0.9825, 2.2707, 0.0049, 0.3679, 0.4251),
    (2.0, 8, 0.3186, 0.6814, 2.688, 0.0207, 0.0183, 0.1727),
]


@pytest.mark.parametrize("row", TRUNC_TABLE)
def test_truncated_lognormal_table(row):
    s, C, excess, mean, second, tail, ess_u, ess_t = row
    r = iw.truncated_lognormal(s, C)
    tol = 5e-5 if second != 2.688 else 5e-4  # table printed to 4 decimals (2.688 to 3)
    assert r["excess"] == pytest.approx(excess, abs=5e-5)
    assert r["mean"] == pytest.approx(mean, abs=5e-5)
    assert r["second_moment"] == pytest.approx(second, abs=tol)
    assert r["tail_prob"] == pytest.approx(tail, abs=5e-5)
    assert r["ess_fraction"] == pytest.approx(ess_t, abs=5e-5)
    assert iw.ess_fraction(iw.lognormal_second_moment(s**2)) == pytest.approx(ess_u, abs=5e-5)


@pytest.mark.parametrize("s,C", [(0.5, 2.0), (1.0, 2.0), (1.0, 8.0), (2.0, 8.0)])
def test_truncated_lognormal_monte_carlo(s, C):
    rng = np.random.default_rng(int(10 * s + C))
    w = np.exp(rng.normal(-s * s / 2, s, 1_000_000))
    r = iw.truncated_lognormal(s, C)
    wc = np.minimum(w, C)
    for key, sample in [
        ("mean", wc),
        ("second_moment", wc**2),
        ("tail_prob", (w >= C).astype(float)),
        ("excess", np.maximum(w - C, 0.0)),
    ]:
        # all four have finite variance for a lognormal; SE from 10^6 i.i.d. samples
        se = sample.std(ddof=1) / math.sqrt(sample.size)
        assert abs(sample.mean() - r[key]) <= 4 * se, key


def test_truncated_lognormal_symbolic_derivatives():
    # d/dC E[(w - C)+] = -P(w > C) and d/dC E[min(w, C)^2] = 2 C P(w > C), checked at 40 digits
    e = iw.truncated_lognormal_exprs()
    s, C = sp.symbols("s C", positive=True)
    for sv, cv in [(sp.Rational(1, 2), 2), (1, sp.Rational(3, 2)), (2, 8)]:
        sub = {s: sv, C: cv}
        d1 = sp.N((sp.diff(e["excess"], C) + e["tail_prob"]).subs(sub), 40)
        d2 = sp.N((sp.diff(e["second_moment"], C) - 2 * C * e["tail_prob"]).subs(sub), 40)
        assert abs(d1) < 1e-30 and abs(d2) < 1e-30
    # C -> infinity recovers the untruncated moments E w = 1, E w^2 = exp(s^2)
    assert iw.truncated_lognormal(0.8, 1e8)["mean"] == pytest.approx(1.0, abs=1e-12)
    assert iw.truncated_lognormal(0.8, 1e8)["second_moment"] == pytest.approx(math.exp(0.64), rel=1e-12)


def test_kl_estimators():
    p, q = iw.softmax(THETA), iw.softmax(THETA_B)
    log_r = np.log(p / q)
    kl_qp = float(np.sum(q * np.log(q / p)))
    # exact expectations under q by enumeration
    assert np.sum(q * iw.kl_k1(log_r)) == pytest.approx(kl_qp, rel=1e-12)
    assert np.sum(q * iw.kl_k3(log_r)) == pytest.approx(kl_qp, rel=1e-12)
    assert np.sum(q * iw.kl_k2(log_r)) == pytest.approx(kl_qp, rel=0.02)  # second order, small divergence
    assert np.all(iw.kl_k3(log_r) >= 0) and np.any(iw.kl_k1(log_r) < 0)
    # Monte Carlo with samples from q: k1 and k3 unbiased within 4 SE
    rng = np.random.default_rng(2)
    a = rng.choice(4, size=1_000_000, p=q)
    for est in (iw.kl_k1(log_r[a]), iw.kl_k3(log_r[a])):
        assert abs(est.mean() - kl_qp) <= 4 * est.std(ddof=1) / 1000.0
