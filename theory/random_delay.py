"""T14. Lags that arise from the timing: memoryless workers and delayed SGD at a random lag.

Setting (``docs/system.md``, the sandbox's cluster). ``P`` identical workers, each generating one job
at a time with i.i.d. exponential durations; the learner consumes ``B = 1`` job per step as soon as
it finishes (no admission limit: a bounded-lag control with ``k_max`` at least the number of steps);
training and weight synchronisation take no time. A worker that finishes starts its next job at
once, with the newest visible weights, which at that instant are those before the update its
finished job is about to make: step ``t`` consumes a job generated from version ``v`` and has lag
``L_t = t − v``; every worker starts with version 0.

Statement [exact].

* Lag distribution. By memorylessness and symmetry, the worker that finishes at step ``t``, ``W_t``,
  is uniform over the ``P`` workers and independent of ``W_0, …, W_{t−1}``. ``L_t`` is ``t − s`` for
  the last step ``s < t`` with ``W_s = W_t`` (that worker restarted at step ``s`` with version ``s``),
  or ``t`` if there is none. With ``q = 1 − 1/P``:

      P(L_0 = 0) = 1;  for t ≥ 1:  P(L_t = j) = q^{j−1}/P  (1 ≤ j ≤ t − 1),  P(L_t = t) = q^{t−1};

  ``E[L_t] = P(1 − q^t)``, which tends to ``P`` (a geometric lag on ``{1, 2, …}`` with mean ``P``).
* Mean path of delayed SGD at that lag. On a quadratic direction with curvature ``λ``, noise-free
  gradients and ``a = ηλ``, ``x_{t+1} = x_t − a x_{t−L_t}`` from ``x_0``. The event ``{L_t = j}``
  depends on ``W_{t−j}, …, W_t`` only, and ``x_{t−j}`` on ``W_0, …, W_{t−j−1}`` only, so they are
  independent and, exactly, ``m_t = E[x_t]`` follows ``m_{t+1} = m_t − a Σ_j P(L_t = j) m_{t−j}``.
  With ``S_t = Σ_j P(L_t = j) m_{t−j}`` this is the two-term recursion

      S_0 = m_0 = x_0,   m_{t+1} = m_t − a S_t,   S_{t+1} = m_t/P + q S_t,

  and eliminating ``S``: ``m_{t+2} = m_{t+1} + q (m_{t+1} − m_t) − (a/P) m_t``, heavy-ball momentum
  ``q = 1 − 1/P`` at step ``a/P`` on a gradient one step old ("asynchrony begets momentum").

A simulator that ignores the delay distributions (every job taking its mean), that ignores the lag
(gradients at the newest weights) or that gets the lag off by one produces another lag law or
another mean path.

Assumptions: exponential job times (the memoryless property is what makes ``W_t`` i.i.d. uniform;
other distributions give other lag laws), identical workers, ``B = 1``, zero training and sync
time, no admission limit, and, for the mean path, a linear gradient (quadratic objective) whose
noise has mean zero (it then drops out of ``E[x_t]``; the check uses none, so that the spread
across runs comes from the timing alone).

Sources: the lag law is the coupon-collector/geometric argument for exponential workers in
Mitliagkas, Zhang, Hadjis & Ré, "Asynchrony begets momentum, with an application to deep
learning" (arXiv 1605.09774, 2016), whose implicit momentum ``1 − 1/P`` is the recursion above; the
transient with the warm-up mass ``q^{t−1}`` at ``j = t`` is derived here.

Worked example (``P = 4``, ``a = 0.3``, ``x_0 = 1``):

>>> [round(float(p), 4) for p in lag_pmf(4, 3)]
[0.0, 0.25, 0.1875, 0.5625]
>>> round(mean_lag(4, 3), 4), round(mean_lag(4, 1000), 4)
(2.3125, 4.0)
>>> [round(float(v), 4) for v in mean_path(0.3, 4, 5)]
[1.0, 0.7, 0.4, 0.1225, -0.1156]
>>> bool(np.allclose(mean_path(0.3, 4, 40), mean_path_from_pmf(0.3, 4, 40)))
True
"""

from __future__ import annotations

import numpy as np
import sympy as sp

P_sym, j_sym, t_sym = sp.symbols("P j t", positive=True, integer=True)


def lag_pmf_expr() -> tuple[sp.Expr, sp.Expr]:
    """``(P(L_t = j) for 1 ≤ j < t, P(L_t = t))`` as sympy expressions in ``P``, ``j``, ``t``."""
    q = 1 - 1 / P_sym
    return q ** (j_sym - 1) / P_sym, q ** (t_sym - 1)


def mean_lag_expr() -> sp.Expr:
    """``E[L_t] = P (1 − q^t)``, ``q = 1 − 1/P`` (t ≥ 0)."""
    return P_sym * (1 - (1 - 1 / P_sym) ** t_sym)


def _check(workers: int, t: int) -> None:
    if not (int(workers) == workers and workers >= 1):
        raise ValueError(f"workers: expected an integer >= 1, got {workers}")
    if not (int(t) == t and t >= 0):
        raise ValueError(f"t: expected an integer >= 0, got {t}")


def lag_pmf(workers: int, t: int) -> np.ndarray:
    """``P(L_t = j)`` for ``j = 0 … t`` (array of length ``t + 1``)."""
    _check(workers, t)
    p = np.zeros(t + 1)
    if t == 0:
        p[0] = 1.0
        return p
    q = 1.0 - 1.0 / workers
    j = np.arange(1, t)
    p[1:t] = q ** (j - 1) / workers
    p[t] = q ** (t - 1)
    return p


def mean_lag(workers: int, t: int) -> float:
    """``E[L_t] = P (1 − q^t)``."""
    _check(workers, t)
    return float(workers * (1.0 - (1.0 - 1.0 / workers) ** t))


def mean_path(a: float, workers: int, steps: int, x0: float = 1.0) -> np.ndarray:
    """``m_t = E[x_t]`` for ``t = 0 … steps − 1`` by the two-term recursion of the module docstring."""
    _check(workers, steps)
    q = 1.0 - 1.0 / workers
    m = np.empty(steps)
    if steps == 0:
        return m
    m[0], s = x0, x0
    for t in range(steps - 1):
        m[t + 1] = m[t] - a * s
        s = m[t] / workers + q * s
    return m


def mean_path_from_pmf(a: float, workers: int, steps: int, x0: float = 1.0) -> np.ndarray:
    """The same ``m_t`` summed directly over :func:`lag_pmf` (O(steps²); the docstring's first form)."""
    m = np.empty(steps)
    if steps == 0:
        return m
    m[0] = x0
    for t in range(steps - 1):
        p = lag_pmf(workers, t)
        m[t + 1] = m[t] - a * float(np.dot(p, m[t::-1][: t + 1]))
    return m
