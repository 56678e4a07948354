"""T11. The extra lag of mini-batch updates: several optimizer steps per rollout batch.

Setting (``docs/system.md#mini-batches``). A learner consumes a batch of rollouts and takes
``S = m·E`` optimizer steps on it: ``E`` epochs (passes), each over ``m`` mini-batches in a fixed
order (verl 0.9.1 ``ppo_epochs`` / ``ppo_mini_batch_size`` with ``actor.shuffle = false``, TRL 1.16
``num_iterations`` / ``steps_per_generation``, AReaL 1.0.4 ``actor.ppo_n_minibatches`` with E = 1).
The learner's version counts optimizer steps, and the weights are published only after the batch's
last step. Let ``L`` be the *base lag* of a token: the optimizer steps between the weights that
generated it and the weights at the batch's first step.

Statement [exact]. At step ``(e, j)`` (epoch ``e = 0..E−1``, mini-batch ``j = 0..m−1``) the learner
has taken ``s = e·m + j`` further steps since the batch started, so every token of that step has lag

    ℓ(e, j) = L + e·m + j.

Over the ``S`` steps of a batch (each step counted once: *step-weighted*) the extra lag
``s = e·m + j`` runs through ``0, 1, …, S − 1`` exactly once, so its mean is ``(S − 1)/2``, its
variance ``(S² − 1)/12`` and its maximum ``S − 1``; the mean lag is ``E[L] + (m·E − 1)/2``.
*Token-weighted* (each token counted once, the convention of the learner's
``staleness/token_mean`` pooled over steps): with ``n_j`` tokens in mini-batch ``j`` (the same in
every epoch) the batch's mean extra lag is ``m(E − 1)/2 + Σ_j j·n_j / Σ_j n_j``; it equals the
step-weighted ``(S − 1)/2`` when the mini-batches hold equal token counts and, when the groups are
exchangeable (the split is blind to their lengths), in expectation, since then
``E[n_j / Σ_i n_i] = 1/m`` for every ``j``.

Schedules that count batches. The sandbox's staleness controls (and AReaL's version counter) count
*published* versions, one per batch: a group with batch lag ``ℓ`` (consumed by batch ``b``,
generated with the weights published after batch ``b − ℓ − 1``) has base lag ``L = S·ℓ``. A fixed
lag of ``k`` batches therefore gives ``ℓ(e, j) = S·k + e·m + j`` (mean ``S·k + (S − 1)/2``), and a
synchronous schedule ``e·m + j``: with several steps per batch even "on-policy" training is off
policy from the second step on. The maximum extra lag ``S − 1`` is TRL's lag bound
``num_iterations·steps_per_generation/gradient_accumulation_steps − 1`` (TRL 1.16
``GRPOTrainer._prepare_inputs`` generates once per ``steps_per_generation·num_iterations`` micro-steps).

Assumptions: every batch takes all ``S`` steps (no early stop) and the publication carries the
weights of the last one; the mini-batch order does not depend on the data (fixed order, or a
shuffle independent of the lengths for the token-weighted expectation).

Sources: verl 0.9.1 ``workers/engine_workers.py`` ``train_mini_batch`` and
``utils/tensordict_utils.py`` ``make_iterator``; TRL 1.16 ``GRPOTrainer._prepare_inputs``; PPO's
epochs over mini-batches: Schulman et al., arXiv 1707.06347 (2017).

Worked example: m = 4 mini-batches, E = 2 epochs, fixed lag k = 1 batch: S = 8, the steps see lags
8, 9, …, 15, mean 11.5 = 8 + 3.5.

>>> [step_lag(8, 4, e, j) for e in range(2) for j in range(4)]
[8, 9, 10, 11, 12, 13, 14, 15]
>>> fixed_lag_mean(1, 4, 2), mean_extra_lag(4, 2), max_extra_lag(4, 2)
(11.5, 3.5, 7)
>>> extra_lag_variance(4, 2)
5.25
>>> token_weighted_extra_lag(2, 1, [30, 10])
0.25
>>> mean_extra_lag_expr()
E*m/2 - 1/2
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import sympy as sp

L_sym, m_sym, E_sym, e_sym, j_sym = sp.symbols("L m E e j", nonnegative=True, integer=True)


def step_lag_expr() -> sp.Expr:
    """``ℓ(e, j) = L + e·m + j``."""
    return L_sym + e_sym * m_sym + j_sym


def mean_extra_lag_expr() -> sp.Expr:
    """Step-weighted mean of ``e·m + j`` over ``e < E``, ``j < m``: ``(m·E − 1)/2``."""
    total = sp.summation(sp.summation(e_sym * m_sym + j_sym, (j_sym, 0, m_sym - 1)), (e_sym, 0, E_sym - 1))
    return sp.expand(sp.simplify(total / (m_sym * E_sym)))


def extra_lag_variance_expr() -> sp.Expr:
    """Step-weighted variance of ``e·m + j``: that of a uniform draw from ``0..S−1``, ``(S² − 1)/12``."""
    s, S = sp.symbols("s S", nonnegative=True, integer=True)
    mean = sp.summation(s, (s, 0, S - 1)) / S
    second = sp.summation(s**2, (s, 0, S - 1)) / S
    return sp.factor(sp.simplify(second - mean**2)).subs(S, m_sym * E_sym)


def step_lag(base_lag: float, m: int, e: int, j: int) -> float:
    """Lag of every token of optimizer step (``e``, ``j``) whose base lag is ``base_lag``."""
    _check(m, 1)
    if not (0 <= j < m and e >= 0):
        raise ValueError(f"need 0 <= j < m and e >= 0, got e={e}, j={j}, m={m}")
    return base_lag + e * m + j


def lag_table(base_lag: float, m: int, E: int) -> np.ndarray:
    """``(E, m)`` array of the lags of the batch's steps."""
    _check(m, E)
    return base_lag + np.arange(E)[:, None] * m + np.arange(m)[None, :]


def mean_extra_lag(m: int, E: int = 1) -> float:
    """Step-weighted mean extra lag ``(m·E − 1)/2``."""
    _check(m, E)
    return (m * E - 1) / 2


def max_extra_lag(m: int, E: int = 1) -> int:
    """Extra lag of the batch's last step, ``m·E − 1``."""
    _check(m, E)
    return m * E - 1


def extra_lag_variance(m: int, E: int = 1) -> float:
    """Step-weighted variance of the extra lag, ``((m·E)² − 1)/12``."""
    _check(m, E)
    return ((m * E) ** 2 - 1) / 12


def fixed_lag_mean(k: int, m: int, E: int = 1) -> float:
    """Step-weighted mean lag under a fixed lag of ``k`` *batches*: ``S·k + (S − 1)/2``, ``S = m·E``."""
    _check(m, E)
    return m * E * k + mean_extra_lag(m, E)


def token_weighted_extra_lag(m: int, E: int, tokens: Sequence[float]) -> float:
    """Token-weighted mean extra lag of one batch whose mini-batch ``j`` holds ``tokens[j]`` tokens:
    ``m(E − 1)/2 + Σ_j j·n_j / Σ_j n_j``."""
    _check(m, E)
    n = np.asarray(tokens, dtype=float)
    if n.shape != (m,) or np.any(n < 0) or n.sum() <= 0:
        raise ValueError(f"tokens must be {m} non-negative counts with a positive sum, got {list(tokens)}")
    return m * (E - 1) / 2 + float((np.arange(m) * n).sum() / n.sum())


def _check(m: int, E: int) -> None:
    if int(m) != m or int(E) != E or m < 1 or E < 1:
        raise ValueError(f"m and E must be integers >= 1, got m={m}, E={E}")
