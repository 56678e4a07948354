"""T3: consecutive-gradient cosine of delayed SGD on a noisy quadratic."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from theory import delayed_variance as dv
from theory import gradient_cosine as gc
from theory.delayed_stability import critical_step

LAMS = np.logspace(-2, 0, 2000)  # docs/theory.md#t3 worked example: d = 2000, log-spaced in [0.01, 1]
SIGMA = 0.05
TABLE = {
    (0.3, 0): -0.0338,
    (1.0, 0): -0.1301,
    (0.3, 4): 0.0768,
    (0.10, 8): 0.0168,
    (0.15, 8): 0.0372,
    (0.17, 8): 0.0567,
    (0.18, 8): 0.0824,
}


@pytest.mark.parametrize("tau", [0, 1, 2, 3, 4])
def test_closed_form_matches_derivation(tau):
    assert sp.simplify(gc.derive_correlation(tau) - gc.correlation_closed_form(tau)) == 0
    f = sp.lambdify(gc.a_sym, gc.correlation_closed_form(tau))
    for frac in (0.1, 0.5, 0.9):
        a = frac * critical_step(tau)
        assert gc.per_coordinate_correlation(a, tau) == pytest.approx(f(a), rel=1e-10)


@pytest.mark.parametrize("tau,limit", [(4, 0.940), (8, 0.983), (1, 0.5), (16, None)])
def test_limit_at_critical_step(tau, limit):
    a = critical_step(tau) * (1 - 1e-9)
    # correlation is smooth in a, so a 1e-9 relative offset moves it by O(1e-7)
    assert gc.per_coordinate_correlation(a, tau) == pytest.approx(gc.critical_correlation(tau), abs=1e-6)
    if limit is not None:
        assert gc.critical_correlation(tau) == pytest.approx(limit, abs=5e-4)  # 3-decimal spec values


@pytest.mark.parametrize("key,value", TABLE.items())
def test_worked_example_table(key, value):
    eta, tau = key
    assert gc.expected_cosine(eta, LAMS, SIGMA, tau) == pytest.approx(value, abs=5e-5)  # 4-decimal table


def test_unstable_raises():
    with pytest.raises(ValueError):
        gc.expected_cosine(0.19, LAMS, SIGMA, 8)


def simulate(eta, tau, seeds, steps, burn, d_lams=LAMS, sigma=SIGMA, stationary_start=False):
    """Vectorised delayed SGD over `seeds` independent replicates, starting at x = 0 or, with
    `stationary_start`, from the exact stationary law of (x_0, ..., x_{-tau}) (T2, whose
    covariance is checked against scipy's Lyapunov solver in test_theory_delayed_variance).

    Returns per-replicate sums over measured steps of <g_t, g_{t+1}>, |g_t|^2 and the
    cosine c_t, plus the number of measured pairs.
    """
    rng = np.random.default_rng(12345 + int(1000 * eta) + tau)
    R, d = seeds, d_lams.size
    lams = d_lams.astype(np.float32)  # float32 halves the cost; cosines need ~1e-4 accuracy only
    hist = np.zeros((tau + 1, R, d), dtype=np.float32)
    if stationary_start:
        covs = np.stack([dv.stationary_covariance(eta * l, tau, (eta * sigma) ** 2) for l in d_lams])
        z = np.einsum("dij,rdj->rdi", np.linalg.cholesky(covs), rng.standard_normal((R, d, tau + 1)))
        for j in range(tau + 1):  # slot (-j) mod (tau+1) holds x_{-j}
            hist[(-j) % (tau + 1)] = z[:, :, j]
    prev = None
    dots = np.zeros(R)
    sq = np.zeros(R)
    cos = np.zeros(R)
    n = 0
    for t in range(burn + steps):
        g = lams * hist[(t - tau) % (tau + 1)] + np.float32(sigma) * rng.standard_normal((R, d), dtype=np.float32)
        hist[(t + 1) % (tau + 1)] = hist[t % (tau + 1)] - np.float32(eta) * g
        if t > burn:
            dot = (prev * g).sum(-1, dtype=np.float64)
            n2p, n2 = (prev * prev).sum(-1, dtype=np.float64), (g * g).sum(-1, dtype=np.float64)
            dots += dot
            sq += n2p
            cos += dot / np.sqrt(n2p * n2)
            n += 1
        prev = g
    return dots, sq, cos, n


@pytest.mark.parametrize("eta,tau", [(0.3, 0), (1.0, 0), (0.3, 4), (0.17, 8)])
def test_ratio_of_means_monte_carlo(eta, tau):
    # Exact for any d in the stationary regime: E<g_t, g_{t+1}> / E|g_t|^2 = sum N_i / sum D_i.
    # d = 200 (every 10th eigenvalue) keeps it cheap. Burn-in 1500 steps from x = 0: coordinates
    # with a = eta lam >~ 0.003 have relaxed (exp(-2 a t) < 1e-3 of their variance missing); the
    # slower ones carry weight lam^2 <~ 1e-4 against sigma^2 = 2.5e-3 in N and D.
    # 20 independent replicates; SE of the ratio of means by bootstrap over replicates.
    lams = LAMS[::10]
    dots, sq, _, _ = simulate(eta, tau, seeds=20, steps=1500, burn=1500, d_lams=lams)
    pred = gc.expected_cosine(eta, lams, SIGMA, tau)
    est = dots.sum() / sq.sum()
    rng = np.random.default_rng(0)
    idx = rng.integers(0, dots.size, size=(2000, dots.size))
    se = np.std(dots[idx].sum(1) / sq[idx].sum(1), ddof=1)
    assert abs(est - pred) <= 4 * se


@pytest.mark.slow
def test_full_table_mean_cosine_monte_carlo():
    # docs/theory.md#t3 check at d = 2000: mean of c_t (mean of ratios, so this also tests the
    # concentration approximation E c ~ sum N / sum D). Tolerance 0.005 absolute or 4 SE over
    # seeds, as in the spec. Started at stationarity, so no burn-in is needed; 4 seeds x 1000
    # steps: per-step c_t has sd ~ 1/sqrt(d) ~ 0.02, so the mean is resolved to ~1e-3.
    for (eta, tau), value in TABLE.items():
        _, _, cos, n = simulate(eta, tau, seeds=4, steps=1000, burn=0, stationary_start=True)
        per_seed = cos / n
        se = per_seed.std(ddof=1) / np.sqrt(per_seed.size)
        assert abs(per_seed.mean() - value) <= max(0.005, 4 * se), (eta, tau)


def test_past_threshold_cosine_near_one():
    # eta = 0.19 > eta_crit(8) = 0.1845: the unstable mode dominates and c_t -> ~cos(pi/17) ~ 0.98
    _, _, cos, n = simulate(0.19, 8, seeds=2, steps=500, burn=1500, d_lams=LAMS[-200:])
    assert cos.sum() / (n * 2) > 0.9


def test_signal_dominated_cosine_monte_carlo():
    # two independent mini-batch means of B per-sample gradients m + noise (anisotropic covariance):
    # E<g1, g2> / E|g1|^2 = |m|^2 / (|m|^2 + tr Sigma / B) exactly; ratio of means over 20 replicates
    # of 1000 pairs each, bootstrap SE over replicates
    rng = np.random.default_rng(17)
    d, B = 50, 8
    m = rng.normal(0, 0.3, d)
    scale = rng.uniform(0.5, 2.0, d)  # per-sample gradient sd per coordinate
    pred = gc.signal_dominated_cosine(m @ m, np.sum(scale**2), B)
    reps, pairs = 20, 1000
    g1 = m + scale * rng.standard_normal((reps, pairs, d)) / np.sqrt(B)
    g2 = m + scale * rng.standard_normal((reps, pairs, d)) / np.sqrt(B)
    num, den = np.sum(g1 * g2, -1).mean(1), np.sum(g1 * g1, -1).mean(1)
    idx = np.random.default_rng(0).integers(0, reps, (2000, reps))
    se = np.std(num[idx].mean(1) / den[idx].mean(1), ddof=1)
    assert abs(num.mean() / den.mean() - pred) <= 4 * se
