"""T15. A synchronous step spread over the whole fleet: the expected time of a split batch.

A synchronous step generates ``B`` groups of ``G`` samples on ``W`` workers. With fewer groups than
workers (``B < W``) a work-conserving dispatcher splits each group into
``p = min(G, ceil(W / B))`` parts, as an inference engine's batch is split over engines (verl, TRL,
OpenRLHF and AReaL spread a step's batch over every rollout engine), so ``m = B·p`` parts run on the
``W`` workers; ``B >= W`` needs no split (``p = 1``). A worker produces samples at a fixed rate, so a
part of ``n`` of a group's ``G`` samples takes ``(n/G)·X`` with ``X`` the time of a whole group.

* Exponential group times of mean ``1/μ`` and equal parts (``p`` divides ``G``): every part is
  ``Exp`` of mean ``s = 1/(p·μ)``. Parts are taken by free workers in any order. While parts still
  wait, all ``W`` workers are busy and (memorylessness) completions come at rate ``W/s``; the
  ``m − W`` completions that start the waiting parts take ``(m − W)·s/W`` in expectation, then ``W``
  fresh parts remain, whose maximum has mean ``s·H_W``. Hence

      E[T_gen] = s·(H_W + (m − W)/W)   (m >= W),      E[T_gen] = s·H_m   (m <= W).

  With ``m = B``, ``p = 1`` (no split) and ``W >= B`` this is T6's ``H_B/μ``: adding workers beyond
  ``B`` shortens nothing unless groups are split.
* Any non-negative group-time law ``F`` with ``m <= W`` (one part per worker): the parts' maximum has
  mean ``s·∫₀^∞ (1 − F(x)^m) dx`` with the scale ``s = 1/p`` (T6's quadrature,
  :func:`theory.order_statistics.expected_max`).

A synchronous step adds the training and weight-sync time: ``E[T_step] = E[T_gen] + t_train + t_sync``.

Assumptions: i.i.d. group times, identical workers, parts of equal size, a part's time proportional
to its samples (a throughput-bound worker; a model charging the longest response, such as a per-token
cost model, gives each part the whole group's time instead).

>>> parts_per_group(8, 8, 16), parts_per_group(8, 8, 8), parts_per_group(2, 4, 16)
(2, 1, 4)
>>> round(exp_split_step_mean(8, 8, 16, rate=1.0), 4), round(exp_split_step_mean(8, 8, 8, rate=1.0), 4)
(1.6904, 2.7179)
>>> round(split_step_mean(exponential_cdf(1.0), 4, 8, 12), 4)  # parts of 3, 3, 2 samples
1.0623
>>> exp_split_makespan_expr()
Piecewise((s*harmonic(m), W >= m), (s*(harmonic(W) + (-W + m)/W), True))
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import sympy as sp

from .order_statistics import _integrate_survival, expected_max, exponential_cdf, harmonic  # noqa: F401 (exponential_cdf: the doctests)

m_sym, W_sym = sp.symbols("m W", positive=True, integer=True)
s_sym = sp.Symbol("s", positive=True)


def parts_per_group(groups: int, group_size: int, workers: int) -> int:
    """``p = min(G, ceil(W / B))`` when ``B < W``, else 1: the parts a work-conserving synchronous step
    splits each group into."""
    if min(groups, group_size, workers) < 1:
        raise ValueError("groups, group_size and workers must be >= 1")
    if groups >= workers:
        return 1
    return min(group_size, math.ceil(workers / groups))


def exp_split_makespan_expr() -> sp.Expr:
    """``E[T_gen]`` of ``m`` i.i.d. exponential parts of mean ``s`` on ``W`` workers (free workers take
    waiting parts): ``s·H_m`` for ``m <= W``, else ``s·(H_W + (m − W)/W)``."""
    return sp.Piecewise(
        (s_sym * sp.harmonic(m_sym), m_sym <= W_sym), (s_sym * (sp.harmonic(W_sym) + (m_sym - W_sym) / W_sym), True)
    )


def exp_split_makespan(parts: int, workers: int, part_mean: float) -> float:
    """Numeric :func:`exp_split_makespan_expr`."""
    if parts < 1 or workers < 1 or not part_mean > 0:
        raise ValueError("parts and workers must be >= 1 and part_mean > 0")
    if parts <= workers:
        return part_mean * harmonic(parts)
    return part_mean * (harmonic(workers) + (parts - workers) / workers)


def exp_split_step_mean(
    groups: int, group_size: int, workers: int, rate: float = 1.0, train: float = 0.0, sync: float = 0.0
) -> float:
    """Expected synchronous step time with exponential group times of rate ``rate`` (mean ``1/rate``),
    split by :func:`parts_per_group` (which must divide ``group_size``: equal parts), plus ``train`` and
    ``sync`` seconds."""
    p = parts_per_group(groups, group_size, workers)
    if group_size % p:
        raise ValueError(f"{p} parts do not divide a group of {group_size}: the parts are not identically distributed")
    return exp_split_makespan(groups * p, workers, 1.0 / (p * rate)) + train + sync


def part_sizes(group_size: int, parts: int) -> list[int]:
    """The near-equal split of ``G`` samples into ``p`` parts (the first ``G mod p`` one larger)."""
    return [group_size // parts + (1 if i < group_size % parts else 0) for i in range(parts)]


def split_step_mean(cdf: Callable, groups: int, group_size: int, workers: int) -> float:
    """``E[T_gen]`` for group times of CDF ``cdf`` when every part has its own worker (``B·p <= W``):
    the mean of ``max_i (n_i/G)·X_i`` over the ``B·p`` parts, ``∫₀^∞ (1 − Π_i F(x·G/n_i)) dx``
    (``(1/p)·E[max of B·p group times]`` when ``p`` divides ``G``)."""
    p = parts_per_group(groups, group_size, workers)
    if groups * p > workers:
        raise ValueError(f"{groups * p} parts on {workers} workers: this closed form needs one part per worker")
    sizes = part_sizes(group_size, p)
    if len(set(sizes)) == 1:
        return expected_max(cdf, groups * p) / p
    scales = {n / group_size: groups * sizes.count(n) for n in set(sizes)}  # part scale -> how many parts

    def survival(x):
        prod = np.ones_like(x, dtype=float)
        for scale, count in scales.items():
            prod = prod * np.asarray(cdf(x / scale), dtype=float) ** count
        return 1.0 - prod

    return _integrate_survival(survival)
