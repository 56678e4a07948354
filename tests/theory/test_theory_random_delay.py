"""T14: the lag law of memoryless workers and the mean path of delayed SGD at that lag, against a
direct simulation of the workers' race (no simulator: exponential clocks drawn with numpy)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from theory import random_delay as rd


def race(workers: int, steps: int, a: float, runs: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(lags (runs, steps), x (runs, steps))`` of P exponential workers racing, each restarting with the
    version of the step its job is consumed at, and x_{t+1} = x_t − a x_{t−L_t} from x_0 = 1."""
    rng = np.random.default_rng(seed)
    lags = np.zeros((runs, steps), dtype=int)
    xs = np.zeros((runs, steps))
    for r in range(runs):
        finish = rng.exponential(1.0, workers)
        version = np.zeros(workers, dtype=int)
        x = [1.0]
        for t in range(steps):
            w = int(np.argmin(finish))
            lags[r, t] = t - version[w]
            xs[r, t] = x[t]
            x.append(x[t] - a * x[version[w]])
            version[w] = t  # restarts at once with the weights before this step's update
            finish[w] += rng.exponential(1.0)
    return lags, xs


def test_pmf_sums_to_one_and_matches_the_symbolic_form():
    for P in (1, 2, 5):
        for t in range(8):
            p = rd.lag_pmf(P, t)
            assert p.sum() == pytest.approx(1.0, abs=1e-12) and (p >= 0).all()
            assert float(np.dot(np.arange(t + 1), p)) == pytest.approx(rd.mean_lag(P, t), abs=1e-12)
    inner, last = rd.lag_pmf_expr()
    assert float(inner.subs({rd.P_sym: 4, rd.j_sym: 3})) == pytest.approx(rd.lag_pmf(4, 6)[3])
    assert float(last.subs({rd.P_sym: 4, rd.t_sym: 6})) == pytest.approx(rd.lag_pmf(4, 6)[6])
    assert sp.limit(rd.mean_lag_expr().subs(rd.P_sym, 3), rd.t_sym, sp.oo) == 3
    with pytest.raises(ValueError, match="workers"):
        rd.lag_pmf(0, 3)


def test_one_worker_is_a_fixed_lag_of_one():
    # P = 1: every step after the first consumes the job started one step earlier
    assert list(rd.lag_pmf(1, 5)) == [0.0, 1.0, 0.0, 0.0, 0.0, 0.0] and list(rd.lag_pmf(1, 1)) == [0.0, 1.0]
    m = rd.mean_path(0.2, 1, 6)
    x = [1.0, 0.8]
    for t in range(1, 5):
        x.append(x[t] - 0.2 * x[t - 1])
    assert m == pytest.approx(x, abs=1e-12)


def test_recursion_equals_the_pmf_sum_and_the_momentum_form():
    for P, a in ((2, 0.5), (4, 0.3), (8, 0.1)):
        m = rd.mean_path(a, P, 60)
        assert m == pytest.approx(rd.mean_path_from_pmf(a, P, 60), abs=1e-12)
        q = 1 - 1 / P
        for t in range(1, 58):  # heavy ball once the warm-up mass has the geometric form (t ≥ 1)
            assert m[t + 2] == pytest.approx(m[t + 1] + q * (m[t + 1] - m[t]) - (a / P) * m[t], abs=1e-12)


@pytest.mark.parametrize("P", [2, 4, 8])
def test_lag_law_and_mean_path_match_a_direct_race(P):
    steps, runs, a = 30, 4000, 0.3
    lags, xs = race(P, steps, a, runs, seed=P)
    for t in (0, 1, 2, 5, 29):
        pmf = rd.lag_pmf(P, t)
        freq = np.bincount(lags[:, t], minlength=t + 1)[: t + 1] / runs
        assert np.abs(freq - pmf).max() <= 5 * math.sqrt(0.25 / runs)  # binomial SE ≤ 0.5/√runs
    se = xs.std(axis=0, ddof=1) / math.sqrt(runs)
    m = rd.mean_path(a, P, steps)
    assert (np.abs(xs.mean(0) - m) <= 5 * se + 1e-12).all()
