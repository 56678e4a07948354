"""Each delay model against its closed form: ``expected()`` equals the textbook mean, and the mean of
seeded draws lies within 5 standard errors of it (standard error from the closed-form variance)
(``docs/system.md#<kind>``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from sandbox.system.delays import (
    DELAYS,
    MAX_MEAN_SECONDS,
    ConstantDelay,
    CostModelDelay,
    DelayConfig,
    EmpiricalDelay,
    ExponentialDelay,
    GammaDelay,
    LognormalDelay,
    ParetoDelay,
    UniformDelay,
)

N = 40_000


def draws(delay, tokens=0, n=N, seed=0):
    rng = np.random.default_rng(seed)
    return np.array([delay.sample(rng, tokens) for _ in range(n)])


def assert_mean(samples, mean, var):
    se = math.sqrt(var / len(samples))
    assert abs(samples.mean() - mean) < 5 * se, (samples.mean(), mean, se)


@pytest.mark.component("delay", "constant")
def test_constant_is_its_value():
    d = ConstantDelay(value=0.7)
    assert d.expected() == 0.7 and d.expected(tokens=100) == 0.7
    assert (draws(d, n=50) == 0.7).all()


@pytest.mark.component("delay", "exponential")
def test_exponential_mean_and_variance():
    d = ExponentialDelay(mean=0.8)
    assert d.expected() == 0.8
    x = draws(d)
    assert_mean(x, 0.8, 0.8**2)
    assert x.var() == pytest.approx(0.64, rel=0.05)  # variance mean² (memoryless)


@pytest.mark.component("delay", "gamma")
def test_gamma_mean_k_theta():
    d = GammaDelay(shape=2.0, scale=0.5)
    assert d.expected() == 1.0
    assert_mean(draws(d), 1.0, 2.0 * 0.5**2)  # variance kθ²


@pytest.mark.component("delay", "lognormal")
def test_lognormal_mean_and_median():
    median, sigma = 0.9, 0.6
    d = LognormalDelay(median=median, sigma=sigma)
    mean = median * math.exp(sigma**2 / 2)
    assert d.expected() == pytest.approx(mean, rel=1e-15)
    x = draws(d)
    assert_mean(x, mean, (math.exp(sigma**2) - 1) * median**2 * math.exp(sigma**2))
    assert np.median(x) == pytest.approx(median, rel=0.02)


@pytest.mark.component("delay", "pareto")
def test_pareto_mean_and_tail():
    alpha, xm = 4.5, 0.5
    d = ParetoDelay(alpha=alpha, scale=xm)
    assert d.expected() == pytest.approx(alpha * xm / (alpha - 1), rel=1e-15)
    x = draws(d)
    assert x.min() >= xm
    assert_mean(x, alpha * xm / (alpha - 1), xm**2 * alpha / ((alpha - 1) ** 2 * (alpha - 2)))
    assert (x > 1.0).mean() == pytest.approx((xm / 1.0) ** alpha, abs=5 * math.sqrt(0.044 / N))  # P(X > x) = (x_m/x)^α


@pytest.mark.component("delay", "uniform")
def test_uniform_mean_and_support():
    d = UniformDelay(low=0.5, high=1.5)
    assert d.expected() == 1.0
    x = draws(d)
    assert x.min() >= 0.5 and x.max() <= 1.5
    assert_mean(x, 1.0, 1.0 / 12)


@pytest.mark.component("delay", "empirical")
def test_empirical_resamples_the_trace_uniformly():
    d = EmpiricalDelay(values=[1.0, 2.0, 6.0])
    assert d.expected() == 3.0
    x = draws(d)
    assert set(np.unique(x)) == {1.0, 2.0, 6.0}
    assert_mean(x, 3.0, ((1 - 3) ** 2 + (2 - 3) ** 2 + (6 - 3) ** 2) / 3)


@pytest.mark.component("delay", "cost_model")
def test_cost_model_charges_the_work():
    exact = CostModelDelay(prefill=0.1, per_token=0.05)
    assert exact.expected(tokens=10) == pytest.approx(0.6) and exact.sample(
        np.random.default_rng(0), 10
    ) == pytest.approx(0.6)
    assert exact.per_token_time(np.random.default_rng(0)) == 0.05
    jitter = 0.2
    d = CostModelDelay(prefill=0.1, per_token=0.05, jitter=jitter)
    mean = 0.6 * math.exp(jitter**2 / 2)  # E[e^{N(0, σ²)}] = e^{σ²/2}
    assert d.expected(tokens=10) == pytest.approx(mean, rel=1e-15)
    assert_mean(draws(d, tokens=10), mean, 0.6**2 * (math.exp(jitter**2) - 1) * math.exp(jitter**2))


def test_union_is_derived_from_the_registry():
    adapter = TypeAdapter(DelayConfig)
    for name in DELAYS.names():
        model = DELAYS[name].config
        assert model.model_fields["kind"].default == name
    assert isinstance(adapter.validate_python({"kind": "gamma"}), GammaDelay)
    with pytest.raises(ValidationError, match="does not match any of the expected tags"):
        adapter.validate_python({"kind": "weibull"})


def test_a_mean_beyond_the_clock_is_refused():
    with pytest.raises(ValidationError, match="at most"):
        ConstantDelay(value=10 * MAX_MEAN_SECONDS)
    with pytest.raises(ValidationError, match=r"cost_model: checked as"):
        CostModelDelay(prefill=10 * MAX_MEAN_SECONDS)
