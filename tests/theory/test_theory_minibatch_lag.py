"""T11: lag of optimizer step (e, j) with m mini-batches and E epochs, against brute-force enumeration
of an explicit update loop and a Monte Carlo over token counts."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import sympy as sp

from theory import minibatch_lag as ml


def simulate_versions(m: int, E: int, batches: int, k: int):
    """An explicit learner loop: version += 1 per optimizer step, publish after the batch; a batch
    b consumes the weights published after batch b − k − 1 (version 0 before any). Returns the lag
    of each step, in loop order."""
    published = [0]  # published[p] = learner version of publication p
    version, lags = 0, []
    for b in range(batches):
        behaviour = published[max(b - k, 0)]
        for _e, _j in itertools.product(range(E), range(m)):
            lags.append(version - behaviour)
            version += 1
        published.append(version)
    return np.array(lags).reshape(batches, E, m)


@pytest.mark.parametrize("m, E, k", [(1, 1, 0), (4, 1, 0), (4, 1, 3), (2, 3, 1), (3, 2, 2)])
def test_step_lag_matches_an_explicit_update_loop(m, E, k):
    lags = simulate_versions(m, E, batches=k + 5, k=k)[k:]  # after the warm-up batches
    S = m * E
    table = ml.lag_table(S * k, m, E)
    assert (lags == table[None]).all()
    assert all(lags[0, e, j] == ml.step_lag(S * k, m, e, j) for e in range(E) for j in range(m))
    assert lags.mean() == pytest.approx(ml.fixed_lag_mean(k, m, E))
    assert lags[0].max() - S * k == ml.max_extra_lag(m, E)
    assert lags[0].var() == pytest.approx(ml.extra_lag_variance(m, E))


@pytest.mark.parametrize("m, E", [(1, 1), (2, 1), (4, 1), (2, 2), (3, 4)])
def test_symbolic_forms_agree_with_numbers(m, E):
    subs = {ml.m_sym: m, ml.E_sym: E}
    assert float(ml.mean_extra_lag_expr().subs(subs)) == ml.mean_extra_lag(m, E)
    assert float(ml.extra_lag_variance_expr().subs(subs)) == pytest.approx(ml.extra_lag_variance(m, E))
    assert sp.simplify(ml.step_lag_expr() - (ml.L_sym + ml.e_sym * ml.m_sym + ml.j_sym)) == 0


def test_token_weighted_mean_by_hand_and_in_expectation():
    # m = 2, E = 1: 30 tokens at extra lag 0 and 10 at extra lag 1 -> 10/40
    assert ml.token_weighted_extra_lag(2, 1, [30, 10]) == 0.25
    # equal token counts: the token- and step-weighted means agree
    assert ml.token_weighted_extra_lag(3, 2, [5, 5, 5]) == ml.mean_extra_lag(3, 2)
    # exchangeable random counts: equal in expectation (Monte Carlo, 4 SE)
    rng = np.random.default_rng(0)
    n = rng.integers(1, 50, size=(20000, 4))
    vals = np.array([ml.token_weighted_extra_lag(4, 3, row) for row in n])
    assert abs(vals.mean() - ml.mean_extra_lag(4, 3)) < 4 * vals.std() / np.sqrt(len(vals))


def test_bad_arguments():
    with pytest.raises(ValueError):
        ml.mean_extra_lag(0, 1)
    with pytest.raises(ValueError):
        ml.step_lag(0, 2, 0, 2)
    with pytest.raises(ValueError):
        ml.token_weighted_extra_lag(2, 1, [1, 2, 3])
