"""T12: mismatch ESS -- log-normal moments, the finite-N Kish integral and logit noise, against Monte Carlo."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from theory import mismatch_ess as me


def kish_fraction(W):
    return W.sum(-1) ** 2 / (W * W).sum(-1) / W.shape[-1]


def test_lognormal_symbolic():
    m = me.lognormal_moment_expr()
    k, s2, T = (
        sp.Symbol("k", integer=True, nonnegative=True),
        sp.Symbol("s2", positive=True),
        sp.Symbol("T", positive=True),
    )
    assert sp.simplify(m.subs(k, 1)) == 1  # a proper ratio
    assert sp.simplify(m.subs(k, 2) - sp.exp(s2)) == 0
    assert sp.simplify(me.lognormal_sequence_ess_expr() - sp.exp(-T * s2)) == 0
    assert me.lognormal_weight_moment(4, 0.3) == pytest.approx(math.exp(6 * 0.3), rel=1e-15)


def test_lognormal_sequence_monte_carlo():
    # T tokens of log-variance s2 each: E[W^2] = e^{T s2}; E[W^4] = e^{6 T s2} finite, so the SE is meaningful
    rng = np.random.default_rng(11)
    T, s2, n = 16, 0.01, 400_000
    l = rng.normal(-s2 / 2, math.sqrt(s2), (n, T))
    W = np.exp(l.sum(-1))
    se = (W**2).std(ddof=1) / math.sqrt(n)
    assert abs((W**2).mean() - math.exp(T * s2)) <= 4 * se
    # ESS fraction as a ratio of means over 40 replicas, bootstrap SE over replicas
    reps = W.reshape(40, -1)
    num, den = reps.mean(1), (reps**2).mean(1)
    est = num.mean() ** 2 / den.mean()
    idx = rng.integers(0, 40, (2000, 40))
    boot = num[idx].mean(1) ** 2 / den[idx].mean(1)
    assert abs(est - me.lognormal_sequence_ess_fraction(T, s2)) <= 4 * boot.std()


@pytest.mark.parametrize("n,s2", [(2, 0.5), (16, 1.0), (64, 2.0), (256, 0.3), (1000, 4.0), (64, 25.0)])
def test_expected_kish_against_monte_carlo(n, s2):
    rng = np.random.default_rng(n)
    reps = max(400, 2_000_000 // n)
    logw = rng.normal(-s2 / 2, math.sqrt(s2), (reps, n))
    W = np.exp(logw - logw.max(-1, keepdims=True))  # Kish is scale-free; avoids overflow at large s2
    k = kish_fraction(W)  # one Kish ESS/N per independent batch: a plain mean, SE across batches
    pred = me.expected_kish_ess_fraction(n, s2)
    assert abs(k.mean() - pred) <= 4 * k.std(ddof=1) / math.sqrt(reps)
    assert pred > math.exp(-s2)  # biased upward


def test_expected_kish_quadrature_and_limits():
    a = me.expected_kish_ess_fraction(512, 2.0)  # the default grid against one twice as fine and wider
    b = me.expected_kish_ess_fraction(512, 2.0, dz=0.005, dv=0.01, zmax=14.0)
    assert a == pytest.approx(b, abs=1e-6)
    assert me.expected_kish_ess_fraction(1, 3.0) == 1.0
    assert me.expected_kish_ess_fraction(50, 0.0) == 1.0
    # large N: the population value e^{-s2}; saturation at 1/N for very long sequences
    assert me.expected_kish_ess_fraction(1_000_000, 0.5) == pytest.approx(math.exp(-0.5), rel=1e-4)
    # slowly: 2.4/N at s2 = 25 (Monte Carlo above), 1.5/N at s2 = 100 (Monte Carlo: 1.491 +- 0.002)
    sat = me.expected_kish_ess_fraction(64, 100.0)
    assert sat * 64 == pytest.approx(1.491, abs=0.01)
    with pytest.raises(ValueError, match="n must be"):
        me.expected_kish_ess_fraction(0, 1.0)


def test_delta_method_agrees_only_in_its_regime():
    # N >> e^{4 s2}: delta method and the exact integral agree to second order in 1/N
    for n, s2 in ((4096, 0.25), (16384, 0.5)):
        exact = me.expected_kish_ess_fraction(n, s2)
        delta = me.kish_ess_fraction_delta(n, s2)
        assert abs(delta - exact) <= 0.05 * abs(exact - math.exp(-s2))
    # generic moments reproduce the log-normal call
    assert me.kish_ess_fraction_delta(100, m2=math.exp(1), m3=math.exp(3), m4=math.exp(6)) == pytest.approx(
        me.kish_ess_fraction_delta(100, 1.0), rel=1e-14
    )
    # N = 64, s2 = 2: the delta correction explodes while the truth is a bias of 88%
    assert me.kish_ess_fraction_delta(64, 2.0) > 5.0 > me.expected_kish_ess_fraction(64, 2.0)


@pytest.mark.parametrize("s2", [1.0, 2.0, 3.0])
def test_population_regime_rule(s2):
    # at the rule's N the relative bias is about 10% (fit: 8-11% over s2 = 1..4)
    n = int(round(me.population_accuracy_sample_size(s2)))
    bias = me.expected_kish_ess_fraction(n, s2) / math.exp(-s2) - 1
    assert 0.07 <= bias <= 0.12


def test_population_regime_n_exp_minus_s2_is_not_enough():
    # N e^{-s2} = 100 "effective samples" at s2 = 4, yet the sample ESS is nearly twice the population one
    n = int(100 * math.exp(4.0))
    assert me.expected_kish_ess_fraction(n, 4.0) > 1.8 * math.exp(-4.0)


def test_measured_token_moments_and_length_mixture():
    # a skewed, non-lognormal per-token law: two-point mixture; sequences of i.i.d. tokens
    rng = np.random.default_rng(5)
    vals, probs = np.array([-0.3, 0.1]), np.array([0.2, 0.8])
    T, n = 12, 300_000
    l = rng.choice(vals, p=probs, size=(n, T))
    m = me.token_moments(rng.choice(vals, p=probs, size=2_000_000))
    assert m["m1"] == pytest.approx(float(probs @ np.exp(vals)), rel=2e-3)
    exact_m1, exact_m2 = float(probs @ np.exp(vals)), float(probs @ np.exp(2 * vals))
    W = np.exp(l.sum(-1))
    reps = W.reshape(50, -1)
    num, den = reps.mean(1), (reps**2).mean(1)
    est = num.mean() ** 2 / den.mean()
    idx = rng.integers(0, 50, (2000, 50))
    se = (num[idx].mean(1) ** 2 / den[idx].mean(1)).std()
    assert abs(est - me.sequence_ess_fraction_from_moments(exact_m1, exact_m2, T)) <= 4 * se
    # mixture of lengths 4 and 20 (probabilities 0.7, 0.3): pooled ratio of means
    lengths = np.where(rng.random(n) < 0.7, 4, 20)
    mask = np.arange(20)[None, :] < lengths[:, None]
    Wm = np.exp((rng.choice(vals, p=probs, size=(n, 20)) * mask).sum(-1)).reshape(50, -1)
    num, den = Wm.mean(1), (Wm**2).mean(1)
    est = num.mean() ** 2 / den.mean()
    se = (num[idx].mean(1) ** 2 / den[idx].mean(1)).std()
    pred = me.sequence_ess_fraction_from_moments(exact_m1, exact_m2, [4, 20], [0.7, 0.3])
    assert abs(est - pred) <= 4 * se
    with pytest.raises(ValueError, match="probs"):
        me.sequence_ess_fraction_from_moments(1.0, 1.1, [4, 20], [0.5, 0.6])
    with pytest.raises(ValueError, match="empty"):
        me.token_moments([])


def simulate_bernoulli_noise(theta, sz, n, rng):
    eps = rng.normal(0.0, sz, n)
    p_mu = 1 / (1 + np.exp(-(theta + eps)))
    y = rng.random(n) < p_mu
    logpi = np.where(y, -np.logaddexp(0, -theta), -np.logaddexp(0, theta))
    logmu = np.where(y, -np.logaddexp(0, -(theta + eps)), -np.logaddexp(0, theta + eps))
    return logpi - logmu


@pytest.mark.parametrize("theta,sz", [(0.0, 0.5), (1.5, 0.3), (-2.0, 1.0)])
def test_bernoulli_logit_noise_monte_carlo(theta, sz):
    rng = np.random.default_rng(17)
    l = simulate_bernoulli_noise(theta, sz, 2_000_000, rng)
    w = np.exp(l)
    pred = me.bernoulli_logit_noise(theta, sz)
    n = l.size
    assert abs(w.mean() - 1.0) <= 4 * w.std() / math.sqrt(n)  # proper ratio
    assert abs((w * w).mean() - pred["second_moment"]) <= 4 * (w * w).std() / math.sqrt(n)
    assert abs(l.mean() - pred["mean_logratio"]) <= 4 * l.std() / math.sqrt(n)
    d2 = (l - pred["mean_logratio"]) ** 2
    assert abs(d2.mean() - pred["var_logratio"]) <= 4 * d2.std() / math.sqrt(n)
    k3 = np.expm1(l) - l
    assert abs(k3.mean() - pred["k3"]) <= 4 * k3.std() / math.sqrt(n)


def test_bernoulli_logit_noise_quadrature_and_small_noise():
    th = np.array([-3.0, -1.0, 0.0, 0.7, 2.5])
    a = me.bernoulli_logit_noise(th, 1.5)
    b = me.bernoulli_logit_noise(th, 1.5, nodes=300)
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-10)
    assert me.bernoulli_logit_noise(0.3, 0.0)["second_moment"] == pytest.approx(1.0, abs=1e-15)
    # second order: relative error O(sz^2); the 4th-order log m2 is O(sz^4)
    p = 1 / (1 + np.exp(-th))
    for sz in (0.2, 0.1, 0.05):
        ex = me.bernoulli_logit_noise(th, sz)
        ap = me.bernoulli_logit_noise_second_order(th, sz)
        np.testing.assert_allclose(ap["var_logratio"], sz**2 * p * (1 - p), rtol=1e-15)
        assert np.max(np.abs(ex["var_logratio"] / ap["var_logratio"] - 1)) <= 2.0 * sz**2
        assert np.max(np.abs(ex["mean_logratio"] / ap["mean_logratio"] - 1)) <= 2.0 * sz**2
        lm = np.log(ex["second_moment"])
        assert np.max(np.abs(lm / ap["log_second_moment"] - 1)) <= 2.0 * sz**2
        assert np.max(np.abs(lm / ap["log_second_moment_4th"] - 1)) <= 2.0 * sz**4
    with pytest.raises(ValueError, match="sigma_z"):
        me.bernoulli_logit_noise(0.0, -1.0)


def test_softmax_logit_noise_variance_monte_carlo():
    # i.i.d. noise on all K logits: Var l ~ sz^2 (1 - sum p^2), relative error O(sz^2)
    rng = np.random.default_rng(23)
    logits = np.array([1.0, 0.2, -0.5, 0.0, -1.3])
    sz, n = 0.05, 1_000_000
    lq = logits + rng.normal(0, sz, (n, logits.size))
    logpi = logits - np.logaddexp.reduce(logits)
    logmu = lq - np.logaddexp.reduce(lq, axis=1, keepdims=True)
    mu = np.exp(logmu)
    y = (rng.random((n, 1)) > np.cumsum(mu, 1)).sum(1)
    l = logpi[y] - logmu[np.arange(n), y]
    p = np.exp(logpi)
    pred = me.softmax_logit_noise_var(p, sz)
    d2 = (l - l.mean()) ** 2
    tol = 4 * d2.std() / math.sqrt(n) + 3 * sz**2 * pred  # sampling error + the O(sz^2) relative term
    assert abs(d2.mean() - pred) <= tol
    # a Bernoulli as a two-logit softmax with noise on both logits: twice the one-logit variance
    q = 1 / (1 + math.exp(-0.8))
    assert me.softmax_logit_noise_var([q, 1 - q], 0.3) == pytest.approx(
        2 * me.bernoulli_logit_noise_second_order(0.8, 0.3)["var_logratio"], rel=1e-14
    )


def test_bernoulli_sequence_second_moment_monte_carlo():
    rng = np.random.default_rng(29)
    H, sz, n = 24, 0.15, 400_000
    theta = rng.normal(0, 1.5, H)
    l = np.stack([simulate_bernoulli_noise(t, sz, n, rng) for t in theta], -1)
    W2 = np.exp(2 * l.sum(-1))
    pred = me.bernoulli_noise_sequence_second_moment(theta, sz)
    assert abs(W2.mean() - pred) <= 4 * W2.std(ddof=1) / math.sqrt(n)
    assert pred == pytest.approx(np.prod(me.bernoulli_logit_noise(theta, sz)["second_moment"]), rel=1e-12)


def test_two_logit_noise_is_log_odds_noise():
    # noise on both entries of the softmax over (0, theta) with scales s0, s1 vs log-odds noise of sqrt(s0^2 + s1^2)
    rng = np.random.default_rng(31)
    theta, s0, s1, n = 0.6, 0.2, 0.35, 2_000_000
    z0, z1 = rng.normal(0, s0, n), theta + rng.normal(0, s1, n)
    p_mu = 1 / (1 + np.exp(-(z1 - z0)))
    y = rng.random(n) < p_mu
    logpi = np.where(y, -np.logaddexp(0, -theta), -np.logaddexp(0, theta))
    logmu = np.where(y, -np.logaddexp(0, -(z1 - z0)), -np.logaddexp(0, z1 - z0))
    w2 = np.exp(2 * (logpi - logmu))
    sd = me.two_logit_noise_sigma(s0, s1)
    assert sd == pytest.approx(math.hypot(s0, s1), rel=1e-15)
    pred = me.bernoulli_logit_noise(theta, sd)["second_moment"]
    assert abs(w2.mean() - pred) <= 4 * w2.std() / math.sqrt(n)


# ---------------------------------------------------------------- item 5: staleness and logit noise together
def test_stale_noise_second_moment_reduces_to_items_4_and_t8():
    from theory.importance_weights import bernoulli_second_moment
    from theory.mismatch_ess import bernoulli_logit_noise, bernoulli_stale_noise_second_moment

    th = np.array([-1.5, 0.0, 0.7])
    assert np.allclose(
        bernoulli_stale_noise_second_moment(th, th, 0.4), bernoulli_logit_noise(th, 0.4)["second_moment"], rtol=1e-12
    )
    assert np.allclose(
        bernoulli_stale_noise_second_moment(th, th - 0.3, 0.0), bernoulli_second_moment(th, th - 0.3), rtol=1e-12
    )


@pytest.mark.parametrize("theta, theta_v, sz", [(0.3, -0.2, 0.3), (-1.0, -1.0, 0.28), (2.0, 1.0, 0.5)])
def test_stale_noise_moment_and_band_fraction_match_monte_carlo(theta, theta_v, sz):
    from theory.mismatch_ess import bernoulli_stale_noise_band_fraction, bernoulli_stale_noise_second_moment

    rng = np.random.default_rng(0)
    n = 400_000
    q1 = 1 / (1 + np.exp(-(theta_v + rng.normal(0, sz, n))))
    y = rng.random(n) < q1
    p = 1 / (1 + np.exp(-theta))
    w = np.where(y, p / q1, (1 - p) / (1 - q1))
    w2, out = w**2, (w < 0.8) | (w > 1.25)
    assert abs(w2.mean() - bernoulli_stale_noise_second_moment(theta, theta_v, sz)) < 5 * w2.std() / np.sqrt(n)
    frac = bernoulli_stale_noise_band_fraction(theta, theta_v, sz, 0.8, 1.25)
    assert abs(out.mean() - frac) < 5 * np.sqrt(frac * (1 - frac) / n)


def test_band_fraction_refuses_bad_input():
    from theory.mismatch_ess import bernoulli_stale_noise_band_fraction

    with pytest.raises(ValueError, match="alpha"):
        bernoulli_stale_noise_band_fraction(0.0, 0.0, 0.3, 1.2, 1.1)
    with pytest.raises(ValueError, match="sigma_z"):
        bernoulli_stale_noise_band_fraction(0.0, 0.0, 0.0, 0.8, 1.25)
