"""T10: optimal (OPOB) baseline, exact enumeration and Monte Carlo."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from theory import optimal_baseline as ob

PI, MU, R = [0.5, 0.3, 0.2], [0.4, 0.4, 0.2], [1.0, 0.0, 0.5]


@pytest.fixture(scope="module")
def ex():
    return ob.enumerate_softmax(PI, MU, R)


def test_worked_example(ex):
    assert ob.softmax_score_sq_norms(PI) == pytest.approx([0.38, 0.78, 0.98], abs=1e-14)
    assert ex.w == pytest.approx([1.25, 0.75, 1.0], abs=1e-14)
    assert ex.W == pytest.approx([0.59375, 0.43875, 0.98], abs=1e-14)
    assert ex.b_star == pytest.approx(0.55090, abs=5e-6)  # 5-decimal table
    for b, v, dv in [
        (0.0, 0.21370, 0.18483),
        (0.6, 0.03034, 0.00147),
        (0.5, 0.03045, 0.00158),
        (ex.b_star, 0.02887, 0.0),
    ]:
        assert ex.variance(b) == pytest.approx(v, abs=5e-6)
        assert ex.excess_variance(b) == pytest.approx(dv, abs=5e-6)
    assert ex.mean_grad == pytest.approx([0.2, -0.18, -0.02], abs=1e-14)
    # the table's E_pi R and E_mu R rows
    assert np.dot(PI, R) == pytest.approx(0.6) and np.dot(MU, R) == pytest.approx(0.5)


def test_symbolic():
    bstar, _ = ob.optimal_baseline_expr()
    EW, EWR = sp.symbols("EW EWR", real=True)
    assert sp.simplify(bstar - EWR / EW) == 0
    assert sp.simplify(ob.variance_identity_expr()) == 0


def test_identity_and_unbiasedness_random_instances():
    rng = np.random.default_rng(1)
    for _ in range(20):
        K = int(rng.integers(2, 8))
        pi, mu = rng.dirichlet(np.ones(K)), rng.dirichlet(np.ones(K))
        ex = ob.enumerate_softmax(pi, mu, rng.normal(size=K))
        for b in rng.normal(size=5):
            # exact identity, double precision
            assert ex.variance(b) - ex.variance(ex.b_star) == pytest.approx(ex.excess_variance(b), abs=1e-12)
            g = ex.estimator(np.arange(K), b)  # the estimator for every action
            mean = mu @ g
            assert mean == pytest.approx(ex.mean_grad, abs=1e-12)  # E g(b) does not depend on b
            cov_trace = mu @ np.sum((g - mean) ** 2, axis=1)  # independent route to V(b)
            assert cov_trace == pytest.approx(ex.variance(b), rel=1e-10, abs=1e-14)
        assert ex.variance(ex.b_star) <= min(ex.variance(b) for b in np.linspace(-3, 3, 601)) + 1e-12


def test_monte_carlo_single_sample(ex):
    rng = np.random.default_rng(2)
    a = rng.choice(3, size=1_000_000, p=MU)
    for b in (0.0, 0.5, 0.6, ex.b_star):
        dev = np.sum((ex.estimator(a, b) - ex.mean_grad) ** 2, axis=1)  # exact mean is known
        assert abs(dev.mean() - ex.variance(b)) <= 4 * dev.std(ddof=1) / 1000.0


@pytest.mark.parametrize("B", [4, 16, 64])
def test_monte_carlo_batch_estimators(ex, B):
    # common random numbers, so baseline comparisons are paired
    rng = np.random.default_rng(B)
    n_batches = 400_000 // B  # paired z-scores are >= 14 at 4e5 draws, so 4 SE has ample power
    a = rng.choice(3, size=(n_batches, B), p=MU)
    W, Rs = ex.W[a], ex.R[a]
    plugin = {
        "none": np.zeros(n_batches),
        "mean": Rs.mean(1),
        "opob": (W * Rs).sum(1) / W.sum(1),
        "fixed_opob": np.full(n_batches, ex.b_star),
        "fixed_0.5": np.full(n_batches, 0.5),
    }
    sq = {}
    for name, b in plugin.items():
        g = ex.estimator(a, b[:, None]).mean(axis=1)  # batch-mean estimator, shape (n, 3)
        sq[name] = np.sum((g - g.mean(0)) ** 2, axis=1)

    def paired(x, y):  # mean difference and its SE across independent batches
        d = sq[x] - sq[y]
        return d.mean(), d.std(ddof=1) / math.sqrt(n_batches)

    # ordering OPOB <= mean <= none, significant at 4 SE (paired)
    for lo, hi in [("opob", "mean"), ("mean", "none")]:
        diff, se = paired(lo, hi)
        assert diff + 4 * se < 0, (lo, hi)
    # fixed baselines: batch variance is V(b)/B, and the identity holds for the difference
    dv, se = paired("fixed_0.5", "fixed_opob")
    assert abs(dv - ex.excess_variance(0.5) / B) <= 4 * se
    v = sq["fixed_opob"]
    assert abs(v.mean() - ex.variance(ex.b_star) / B) <= 4 * v.std(ddof=1) / math.sqrt(n_batches) + 1e-12
