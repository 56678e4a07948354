"""T9: accumulated update correlation S(k) and the predicted divergence after k stale steps."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from theory import importance_weights as iw
from theory import staleness_divergence as sd

KS = [1, 2, 4, 8, 16, 32]
TABLE = {  # c: (equicorrelated row, AR(1) row) of S(k), docs/theory.md#t9, 1 decimal
    0.2: ([1, 2.4, 6.4, 19.2, 64, 230.4], [1, 2.4, 5.4, 11.4, 23.4, 47.4]),
    0.5: ([1, 3, 10, 36, 136, 528], [1, 3, 8.2, 20, 44, 92]),
    0.9: ([1, 3.8, 14.8, 58.4, 232, 924.8], [1, 3.8, 14.1, 49.5, 157.4, 434.2]),
}


def test_table():
    assert sd.S_uncorrelated(np.array(KS)) == pytest.approx(KS)
    for c, (equi, ar) in TABLE.items():
        # 1-decimal table; AR(1) at c = 0.5, k = 4 is exactly 8.25, printed as 8.2 (half-even)
        assert sd.S_equicorrelated(np.array(KS), c) == pytest.approx(equi, abs=0.05 + 1e-9)
        assert sd.S_ar1(np.array(KS), c) == pytest.approx(ar, abs=0.05 + 1e-9)


@pytest.mark.parametrize("c", [0.0, 0.2, 0.5, 0.9, 0.99, 1.0])
@pytest.mark.parametrize("k", [1, 3, 10, 64])
def test_against_explicit_correlation_matrices(k, c):
    i = np.arange(k)
    equi = np.where(i[:, None] == i[None, :], 1.0, c)
    ar = c ** np.abs(i[:, None] - i[None, :])
    assert sd.S_equicorrelated(k, c) == pytest.approx(sd.S_from_correlation(equi), rel=1e-12)
    assert sd.S_ar1(k, c) == pytest.approx(sd.S_from_correlation(ar), rel=1e-9)


def test_symbolic_limits_and_regimes():
    k, c = sd.k_sym, sd.c_sym
    # c -> 1: fully correlated, S = k^2 (checked at k = 5)
    assert sp.limit(sd.S_ar1_expr().subs(k, 5), c, 1) == 25
    # first order in c the AR(1) and equicorrelated sums agree only at k <= 2 (pairs at lag 1)
    assert sp.simplify((sd.S_ar1_expr() - sd.S_equicorrelated_expr()).subs(k, 2)) == 0
    # regimes: slope of S in k is (1 + c)/(1 - c) for k >> 1/(1 - c)
    cval = 0.9
    ks = np.array([2000.0, 4000.0])
    slope = np.diff(sd.S_ar1(ks, cval))[0] / np.diff(ks)[0]
    assert slope == pytest.approx((1 + cval) / (1 - cval), rel=1e-3)
    # log-log slopes: ~2 for k << 1/(1-c) (here c = 0.99, k in 1..10, S ~ k^2 up to O(k^3 (1-c)))
    small = np.array([1.0, 10.0])
    s_small = np.diff(np.log(sd.S_ar1(small, 0.999)))[0] / np.diff(np.log(small))[0]
    assert s_small == pytest.approx(2.0, abs=0.15)
    big = np.array([1e4, 1e5])
    s_big = np.diff(np.log(sd.S_ar1(big, 0.5)))[0] / np.diff(np.log(big))[0]
    assert s_big == pytest.approx(1.0, abs=0.15)


@pytest.mark.parametrize("model", ["ar1", "equi"])
@pytest.mark.parametrize("c,k", [(0.5, 8), (0.9, 16)])
def test_monte_carlo_sum_of_correlated_updates(model, c, k):
    # unit-variance stationary Gaussian sequences; Var(sum u_j) = S(k). 200k independent replicates.
    rng = np.random.default_rng(int(100 * c) + k)
    R = 200_000
    if model == "ar1":
        u = rng.standard_normal(R)
        total = u.copy()
        for _ in range(k - 1):
            u = c * u + math.sqrt(1 - c * c) * rng.standard_normal(R)
            total += u
        pred = sd.S_ar1(k, c)
    else:
        common = rng.standard_normal(R)
        total = sum(math.sqrt(c) * common + math.sqrt(1 - c) * rng.standard_normal(R) for _ in range(k))
        pred = sd.S_equicorrelated(k, c)
    sq = total**2
    assert abs(sq.mean() - pred) <= 4 * sq.std(ddof=1) / math.sqrt(R)


def test_predicted_kl_and_ess_against_softmax():
    # behaviour logits theta_b; learner moved by eta * sum of k AR(1)-correlated random updates
    # with E|u|^2 = U^2 (isotropic). Then E[dth^T F dth] = eta^2 U^2 S(k) tr(F)/K, so the
    # prediction uses the mean Fisher eigenvalue tr(F)/K. Small eta keeps third-order terms
    # below ~1%; MC tolerance 4 SE over 4000 independent replicates, plus 2% for the expansion.
    K, k, c, eta, U = 50, 8, 0.7, 0.01, 3.0
    rng = np.random.default_rng(21)
    theta_b = rng.normal(0, 1, K)
    fisher = np.trace(iw.softmax_fisher(theta_b)) / K
    reps = 4000
    u = rng.standard_normal((reps, K)) * U / math.sqrt(K)
    disp = u.copy()
    for _ in range(k - 1):
        u = c * u + math.sqrt(1 - c * c) * rng.standard_normal((reps, K)) * U / math.sqrt(K)
        disp += u
    theta = theta_b + eta * disp
    logp = theta - iw.logsumexp(theta)[:, None]
    logq = theta_b - iw.logsumexp(theta_b)
    kl = np.sum(np.exp(logp) * (logp - logq), axis=1)
    S = sd.S_ar1(k, c)
    pred = sd.predicted_kl(eta, U, S, fisher)
    assert abs(kl.mean() - pred) <= 4 * kl.std(ddof=1) / math.sqrt(reps) + 0.02 * pred
    # ESS: population ESS/n = 1/E_q[w^2] per replicate; its log is ~ -dth^T F dth
    ess = 1.0 / iw.softmax_second_moment(theta, np.broadcast_to(theta_b, theta.shape))
    log_ess = np.log(ess)
    pred_log = math.log(sd.predicted_ess_fraction(eta, U, S, fisher))
    assert abs(log_ess.mean() - pred_log) <= 4 * log_ess.std(ddof=1) / math.sqrt(reps) + 0.02 * abs(pred_log)
    # a sequence of L independent tokens multiplies the exponent by L
    assert sd.predicted_ess_fraction(eta, U, S, fisher, length=10) == pytest.approx(
        sd.predicted_ess_fraction(eta, U, S, fisher) ** 10, rel=1e-12
    )


def test_fisher_quadratic_form_is_the_exact_log_weight_variance_of_independent_bernoullis():
    """Enumerating every bit string of H = 6 independent Bernoulli positions: Var_μ[log W] equals
    Δθᵀ F(θ') Δθ exactly (exponential family), E_μ[W²] equals the product of the T8.5 factors, and
    −log(ESS/n) = log E_μ[W²] agrees with the quadratic form to second order (relative error O(Δθ))."""
    import itertools

    rng = np.random.default_rng(5)
    theta_b = rng.normal(0, 1, 6)
    for scale in (0.3, 0.03):
        theta = theta_b + scale * rng.normal(size=6)
        p, q = 1 / (1 + np.exp(-theta)), 1 / (1 + np.exp(-theta_b))
        ys = np.array(list(itertools.product([0, 1], repeat=6)), dtype=float)
        mu = np.prod(np.where(ys == 1, q, 1 - q), axis=1)
        log_w = np.sum(np.where(ys == 1, np.log(p / q), np.log((1 - p) / (1 - q))), axis=1)
        var_log_w = np.sum(mu * log_w**2) - np.sum(mu * log_w) ** 2
        quad = sd.fisher_quadratic_form(theta - theta_b, iw.bernoulli_fisher(theta_b))
        assert var_log_w == pytest.approx(quad, rel=1e-10)
        second = float(np.sum(mu * np.exp(2 * log_w)))
        assert second == pytest.approx(float(np.prod(iw.bernoulli_second_moment(theta, theta_b))), rel=1e-12)
        assert math.log(second) == pytest.approx(quad, rel=2 * scale)
    assert sd.fisher_quadratic_form([1.0, 2.0], [[2.0, 0.5], [0.5, 1.0]]) == pytest.approx(2 + 2 + 4)
