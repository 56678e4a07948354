"""T13 (theory.engine_batching) against independent numerics: sympy for the closed forms and their
limit, Monte Carlo for the mean of the rounded, cut log-normal length model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from theory.engine_batching import (
    EL_sym,
    P_sym,
    a_sym,
    b_sym,
    c_sym,
    engine_latency,
    engine_throughput,
    engine_throughput_limit,
    mean_staleness_saturated,
    rounded_lognormal_mean,
    throughput_expr,
)


def test_closed_forms_agree_with_sympy_and_little():
    X = throughput_expr()
    vals = {c_sym: 16, a_sym: 0.01, b_sym: 0.001, EL_sym: 113.0, P_sym: 0.02}
    assert float(X.subs(vals)) == pytest.approx(engine_throughput(16, 0.01, 0.001, 113.0, 0.02), rel=1e-12)
    # Little: c = X W
    assert engine_throughput(16, 0.01, 0.001, 113.0, 0.02) * engine_latency(
        16, 0.01, 0.001, 113.0, 0.02
    ) == pytest.approx(16)
    limit = sp.limit(X, c_sym, sp.oo)
    assert sp.simplify(limit - 1 / (EL_sym * b_sym + P_sym)) == 0
    assert engine_throughput_limit(0.001, 113.0, 0.02) == pytest.approx(1 / (0.113 + 0.02))
    # batching ignored: (a + b) per step; the ratio of decode terms is (a + b c)/(a + b)
    assert engine_throughput(1, 0.01, 0.001, 100.0) == pytest.approx(1 / (100 * 0.011))
    assert mean_staleness_saturated(1, 1) == 1.0 and mean_staleness_saturated(8, 4) == pytest.approx((8 + 1.5) / 4)


@pytest.mark.parametrize(
    "median,sigma,cut", [(100.0, 0.5, None), (3.0, 1.0, 20), (1000.0, 0.819, 8192), (0.4, 0.3, None)]
)
def test_rounded_lognormal_mean_against_monte_carlo(median, sigma, cut):
    rng = np.random.default_rng(7)
    x = np.rint(median * np.exp(sigma * rng.standard_normal(2_000_000)))
    x = np.clip(x, 1, cut if cut is not None else np.inf)
    se = x.std() / math.sqrt(x.size)
    assert abs(x.mean() - rounded_lognormal_mean(median, sigma, cut)) < 4 * se


def test_kv_limited_concurrency_is_the_size_biased_count():
    from theory.engine_batching import kv_limited_concurrency, kv_limited_throughput, rounded_lognormal_mean

    # constant lengths L: K/L sequences fit; with a prompt each reserves P + L
    assert kv_limited_concurrency(1000, 50.0, 2500.0) == 20.0
    assert kv_limited_concurrency(1000, 50.0, 2500.0, prompt_tokens=50) == 10.0
    assert kv_limited_throughput(1000, 0.01, 0.001, 50.0, 2500.0) == pytest.approx(20 / (50 * (0.01 + 0.02)))
    # E[L²] of the length model by the exact sum: above E[L]² (spread), equal without spread
    assert rounded_lognormal_mean(100.0, 0.0, power=2) == 100.0**2
    assert rounded_lognormal_mean(100.0, 0.5, 300, power=2) > rounded_lognormal_mean(100.0, 0.5, 300) ** 2
