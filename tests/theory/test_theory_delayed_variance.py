"""T2: stationary variance of delayed SGD on a quadratic."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from scipy.linalg import solve_discrete_lyapunov

from theory import delayed_variance as dv
from theory.delayed_stability import companion_matrix, critical_step

A_SYM, S2_SYM = dv.a_sym, dv.s2_sym


@pytest.mark.parametrize("tau", [0, 1, 2, 3])
def test_derived_matches_table_closed_form(tau):
    assert sp.simplify(dv.derive_variance(tau) - dv.variance_closed_form(tau)) == 0


@pytest.mark.parametrize("tau", [0, 1, 2, 3])
def test_symbolic_lyapunov_matches_table(tau):
    assert sp.simplify(dv.derive_variance_lyapunov(tau) - dv.variance_closed_form(tau)) == 0


def test_symbolic_lyapunov_tau1():
    # independent route: solve Sigma = A Sigma A^T + s2 e1 e1^T for the 2x2 companion matrix symbolically
    p, q, r = sp.symbols("p q r")
    S = sp.Matrix([[p, q], [q, r]])
    A = sp.Matrix([[1, -A_SYM], [1, 0]])
    Q = sp.Matrix([[S2_SYM, 0], [0, 0]])
    sol = sp.solve(list(A * S * A.T + Q - S), [p, q, r], dict=True)[0]
    assert sp.simplify(sol[p] - dv.variance_closed_form(1)) == 0


@pytest.mark.parametrize("tau", [0, 1, 2, 3])
def test_denominator_vanishes_at_critical_step(tau):
    den = sp.denom(sp.together(dv.variance_closed_form(tau)))
    assert abs(float(den.subs(A_SYM, critical_step(tau)))) < 1e-12


def test_worked_example_table():
    expected = {0: 0.027778, 1: 0.034091, 2: 0.042398, 3: 0.054097, 4: 0.072259}
    ratios = {1: 1.227, 2: 1.526, 3: 1.947, 4: 2.601}
    got = {tau: dv.sgd_variance(0.1, 2.0, 1.0, tau) for tau in expected}
    for tau, v in expected.items():
        assert got[tau] == pytest.approx(v, abs=5e-7)  # 6-decimal table
        if tau in ratios:
            # 3-decimal table; tau=3 is 1.94750 exactly, printed as 1.947, so allow one unit in the last place
            assert got[tau] / got[0] == pytest.approx(ratios[tau], abs=1e-3)
    for tau in range(4):  # sympy closed form evaluated numerically agrees with the numeric solver
        f = sp.lambdify((A_SYM, S2_SYM), dv.variance_closed_form(tau))
        assert f(0.2, 0.01) == pytest.approx(got[tau], rel=1e-12)
    with pytest.raises(ValueError):
        dv.sgd_variance(0.1, 2.0, 1.0, 8)


@pytest.mark.parametrize("tau", [0, 1, 2, 5, 8, 20])
@pytest.mark.parametrize("frac", [0.1, 0.6, 0.97])
def test_against_scipy_lyapunov(tau, frac):
    a, s2 = frac * critical_step(tau), 0.3
    A = companion_matrix(a, tau)
    Q = np.zeros_like(A)
    Q[0, 0] = s2
    sigma = solve_discrete_lyapunov(A, Q)
    ours = dv.stationary_covariance(a, tau, s2)
    assert ours == pytest.approx(sigma, rel=1e-7, abs=1e-9 * sigma[0, 0])
    # autocovariances C(h) = (A^h Sigma)_00
    C = dv.autocovariances(a, tau, s2, max_lag=3 * tau + 5)
    Ah = np.eye(tau + 1)
    for h in range(len(C)):
        assert C[h] == pytest.approx((Ah @ sigma)[0, 0], rel=1e-6, abs=1e-8 * sigma[0, 0])
        Ah = A @ Ah


def test_unstable_raises():
    for tau in (0, 1, 4, 8):
        with pytest.raises(ValueError):
            dv.variance(1.0001 * critical_step(tau), tau)
    with pytest.raises(ValueError):
        dv.variance(-0.1, 2)


@pytest.mark.parametrize("tau", [0, 1, 2, 4])
def test_monte_carlo_variance(tau):
    # eta = 0.1, lam = 2, sigma = 1 (worked example). 1000 independent chains, burn-in 1000 steps
    # (slowest mode decays like rho^t with rho <= 0.96, so rho^2000 ~ 1e-35), then 2000 steps.
    eta, lam, sigma = 0.1, 2.0, 1.0
    rng = np.random.default_rng(100 + tau)
    chains, burn, steps = 1000, 1000, 2000
    hist = np.zeros((tau + 1, chains))
    acc = np.zeros(chains)
    for t in range(burn + steps):
        x = hist[t % (tau + 1)]  # x_t sits at slot t, x_{t-tau} at slot t - tau == t + 1 (mod tau + 1)
        new = x - eta * (lam * hist[(t - tau) % (tau + 1)] + sigma * rng.standard_normal(chains))
        hist[(t + 1) % (tau + 1)] = new
        if t >= burn:
            acc += new**2
    per_chain = acc / steps  # mean is known (0), so E x^2 is the variance
    se = per_chain.std(ddof=1) / np.sqrt(chains)  # chains are independent replicates
    pred = dv.sgd_variance(eta, lam, sigma, tau)
    assert abs(per_chain.mean() - pred) <= 4 * se


def test_excess_loss_multid_monte_carlo():
    lams = np.array([0.1, 0.5, 1.0, 2.0])
    eta, sigma, tau = 0.08, 0.7, 3
    pred = dv.excess_loss(eta, lams, sigma, tau)
    assert pred == pytest.approx(0.5 * sum(l * dv.sgd_variance(eta, l, sigma, tau) for l in lams), rel=1e-12)
    rng = np.random.default_rng(7)
    chains, burn, steps = 500, 1500, 2000  # slowest a = 0.008: decay (1-a)^1500 ~ 6e-6
    hist = np.zeros((tau + 1, chains, lams.size))
    acc = np.zeros(chains)
    for t in range(burn + steps):
        x = hist[t % (tau + 1)]
        new = x - eta * (lams * hist[(t - tau) % (tau + 1)] + sigma * rng.standard_normal((chains, lams.size)))
        hist[(t + 1) % (tau + 1)] = new
        if t >= burn:
            acc += 0.5 * (lams * new**2).sum(-1)
    per_chain = acc / steps
    se = per_chain.std(ddof=1) / np.sqrt(chains)
    assert abs(per_chain.mean() - pred) <= 4 * se


@pytest.mark.parametrize("tau,a", [(0, 0.3), (2, 0.25), (5, 0.4)])  # the last one is unstable (a*(5) = 0.285)
def test_transient_second_moments_monte_carlo(tau, a):
    """Exact finite-horizon E[x_t²] from x_0 = x0 with warm-up delays min(t, τ), against independent chains
    of the recursion itself (numpy, no simulator): every step within 4 SE."""
    s2, x0, steps, chains = 0.04, 1.0, 60, 20000
    rng = np.random.default_rng(11 + tau)
    xs = [np.full(chains, x0)]
    for t in range(steps - 1):
        xs.append(xs[-1] - a * xs[max(t - tau, 0)] + np.sqrt(s2) * rng.standard_normal(chains))
    sq = np.stack(xs) ** 2
    pred = dv.transient_second_moments(a, tau, s2, x0, steps)
    se = sq.std(1, ddof=1) / np.sqrt(chains)
    assert pred[0] == x0**2 and np.all(np.abs(sq.mean(1) - pred) <= 4 * se + 1e-12)


def test_transient_reaches_the_stationary_variance_and_expected_grad_norm_sums_directions():
    a, tau, s2 = 0.1, 3, 0.01
    long = dv.transient_second_moments(a, tau, s2, x0=0.0, steps=4000)
    assert long[-1] == pytest.approx(dv.variance(a, tau, s2), rel=1e-9)
    lams, eta, sigma = np.array([0.2, 1.0]), 0.05, 0.3
    g = dv.expected_grad_sq_norm(eta, lams, sigma, tau, x0=1.0, steps=50)
    parts = [lam**2 * dv.transient_second_moments(eta * lam, tau, (eta * sigma) ** 2, 1.0, 50) for lam in lams]
    assert np.allclose(g, parts[0] + parts[1], rtol=1e-14)
    # noiseless: the deterministic recursion itself
    x = [1.0]
    for t in range(9):
        x.append(x[-1] - 0.3 * x[max(t - 2, 0)])
    assert np.allclose(dv.transient_second_moments(0.3, 2, 0.0, 1.0, 10), np.square(x), rtol=1e-14)
