"""T6: order statistics of job times, against exact sums, quadrature and Monte Carlo."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from theory import order_statistics as os_

H_TABLE = {1: 1, 2: 1.5, 4: 2.0833, 8: 2.7179, 16: 3.3807, 32: 4.0585, 64: 4.7439}


def test_harmonic_table_and_asymptotics():
    for P, h in H_TABLE.items():
        assert os_.harmonic(P) == pytest.approx(h, abs=5e-5)  # 4-decimal table
        assert os_.harmonic(P) == pytest.approx(float(sp.harmonic(P)), rel=1e-15)
    # H_P - ln P - gamma ~ 1/(2P)
    for P in (100, 1000):
        assert os_.harmonic(P) - math.log(P) - os_.EULER_GAMMA == pytest.approx(1 / (2 * P), rel=0.01)


def test_exponential_order_statistics_symbolic_and_quadrature():
    expr = os_.exp_order_statistic_expr()
    val = expr.subs({os_.K_sym: 5, os_.P_sym: 8, os_.mu_sym: 2})
    assert float(val) == pytest.approx(0.44226, abs=5e-6)  # worked example (i), 5 decimals
    cdf = os_.exponential_cdf(2.0)
    for K, P in [(1, 1), (1, 8), (5, 8), (8, 8), (3, 20), (64, 64), (1000, 2000)]:
        exact = os_.exp_order_statistic_mean(K, P, 2.0)
        # quadrature of a smooth survival function: agreement to ~1e-12 relative
        assert os_.expected_order_statistic(cdf, K, P) == pytest.approx(exact, rel=1e-10)
        # Renyi representation: sum of independent spacings Exp(rate (P - j)), j < K
        assert exact == pytest.approx(sum(1 / (2.0 * (P - j)) for j in range(K)), rel=1e-14)
    assert os_.exp_throughput_ratio(8) == pytest.approx(2.7179, abs=5e-5)
    assert os_.exp_sync_idle_fraction(8) == pytest.approx(1 - 1 / 2.7179, abs=1e-5)
    assert os_.throughput_ratio(cdf, 16) == pytest.approx(os_.harmonic(16), rel=1e-10)


def test_exponential_monte_carlo():
    # worked example (i): P = 8, K = 5, rate 2; 2e4 replicates, tolerance 4 SE
    rng = np.random.default_rng(6)
    x = np.sort(rng.exponential(0.5, (20_000, 8)), axis=1)[:, 4]
    assert abs(x.mean() - os_.exp_order_statistic_mean(5, 8, 2.0)) <= 4 * x.std(ddof=1) / math.sqrt(x.size)


@pytest.mark.parametrize("n,value", [(8, 2521), (64, 4242), (512, 6375)])
def test_lognormal_expected_max(n, value):
    cdf = os_.lognormal_cdf(1000.0, 0.6)
    got = os_.expected_max(cdf, n)
    assert got == pytest.approx(value, abs=0.5)  # table rounded to integers
    assert os_.expected_value(cdf) == pytest.approx(1000 * math.exp(0.18), rel=1e-10)  # mean 1197
    ratio = {8: 2.1, 64: 3.5, 512: 5.3}[n]
    assert os_.throughput_ratio(cdf, n) == pytest.approx(ratio, abs=0.05)  # 1-decimal spec values
    # Monte Carlo: 2e4 replicates of the max of n, tolerance 4 SE
    rng = np.random.default_rng(n)
    mx = np.exp(rng.normal(math.log(1000.0), 0.6, (20_000, n))).max(axis=1)
    assert abs(mx.mean() - got) <= 4 * mx.std(ddof=1) / math.sqrt(mx.size)


def test_general_quadrature_other_distributions():
    uniform = lambda x: np.clip(np.asarray(x, float), 0.0, 1.0)  # noqa: E731
    for K, P in [(1, 3), (2, 3), (4, 4), (7, 10)]:
        assert os_.expected_order_statistic(uniform, K, P) == pytest.approx(K / (P + 1), rel=1e-10)
    # a kink away from the panel edges (uniform on [0, 3]): piecewise-smooth integrand, looser tolerance
    u3 = lambda x: np.clip(np.asarray(x, float) / 3.0, 0.0, 1.0)  # noqa: E731
    assert os_.expected_max(u3, 5) == pytest.approx(3 * 5 / 6, rel=1e-6)
    # heavy tail with infinite mean is rejected
    pareto_half = lambda x: 1 - 1 / np.sqrt(np.maximum(np.asarray(x, float), 1.0))  # noqa: E731
    with pytest.raises(ValueError):
        os_.expected_max(pareto_half, 2)
