"""T7. Little's law for staleness in a rollout pipeline.

Statement (Little 1961; sample-path form, Stidham 1974): for a stable system the
time-average number in system ``L``, the throughput ``lambda`` and the mean sojourn
time ``W`` satisfy ``L = lambda W``, exactly for the sample path up to ``O(1/horizon)``
edge effects (exactly, if every item both enters and leaves inside the window).

Pipeline reading: the "system" is the set of dispatched-but-not-yet-consumed
samples (generating or queued). A trainer consuming ``B`` samples per optimizer
step of period ``T_step`` has ``lambda = B / T_step``, so the mean
dispatch-to-consumption time is ``W = L T_step / B`` and the mean fractional
staleness (sojourn in units of steps) is ``E[s~] = L / B``. The integer version
lag differs from ``s~`` by less than one step per sample.

Everything here works on logged arrays (dispatch time, consume time per sample);
``consume = inf`` or ``nan`` marks samples still in the system.

Worked example: ``B = 512``, ``T_step = 10 s`` and ``L = 1536`` in flight give
``W = 30 s`` and a mean staleness of 3 steps.

>>> mean_sojourn_from_L(1536, T_step=10.0, B=512), mean_fractional_staleness(1536, B=512)
(30.0, 3.0)
>>> r = littles_law([0.0, 1.0, 2.0], [2.0, 4.0, 3.0], t0=0.0, t1=4.0)
>>> r.L, r.lam, r.W, r.lam * r.W
(1.5, 0.75, 2.0, 1.5)
>>> littles_law_expr()
Eq(L, W*lambda)
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import sympy as sp

L_sym, lam_sym, W_sym, B_sym, Tstep_sym = sp.symbols("L lambda W B T_step", positive=True)


def littles_law_expr() -> sp.Eq:
    return sp.Eq(L_sym, lam_sym * W_sym)


def fractional_staleness_expr() -> sp.Expr:
    """``E[s~] = W / T_step`` with ``W = L / lambda``, ``lambda = B / T_step``: ``L / B``."""
    W = L_sym / (B_sym / Tstep_sym)
    return sp.simplify(W / Tstep_sym)


def mean_sojourn_from_L(L: float, T_step: float, B: float) -> float:
    """``W = L T_step / B``."""
    return L * T_step / B


def mean_fractional_staleness(L: float, B: float) -> float:
    """``E[s~] = L / B`` (valid when the trainer consumes ``B`` per step)."""
    return L / B


def _clean(dispatch, consume) -> tuple[np.ndarray, np.ndarray]:
    d = np.asarray(dispatch, dtype=float)
    c = np.asarray(consume, dtype=float)
    if d.shape != c.shape:
        raise ValueError("dispatch and consume must have the same shape")
    c = np.where(np.isnan(c), np.inf, c)
    if np.any(c < d):
        raise ValueError("consume time before dispatch time")
    return d, c


def time_average_in_system(dispatch, consume, t0: float, t1: float) -> float:
    """``(1/(t1-t0)) int_{t0}^{t1} N(t) dt`` with ``N(t) = #{i: d_i <= t < c_i}`` (exact)."""
    d, c = _clean(dispatch, consume)
    overlap = np.clip(np.minimum(c, t1) - np.maximum(d, t0), 0.0, None)
    return float(overlap.sum() / (t1 - t0))


def in_system_count(dispatch, consume, times) -> np.ndarray:
    """``N(t)`` at the given times (right-continuous step function)."""
    d, c = _clean(dispatch, consume)
    t = np.asarray(times, dtype=float)
    return np.searchsorted(np.sort(d), t, side="right") - np.searchsorted(np.sort(c), t, side="right")


class LittleResult(NamedTuple):
    L: float  # time-average number in system over the window
    lam: float  # departures per unit time in the window
    W: float  # mean sojourn of the samples that departed in the window
    rel_gap: float  # (L - lam W) / L


def littles_law(dispatch, consume, t0: float, t1: float) -> LittleResult:
    """Both sides of ``L = lambda W`` from logged data over the window ``[t0, t1]``.

    ``lambda`` and ``W`` use the samples consumed in ``(t0, t1]``; the gap is an edge
    effect of order (sojourn time / window length).
    """
    d, c = _clean(dispatch, consume)
    L = time_average_in_system(d, c, t0, t1)
    done = (c > t0) & (c <= t1)
    lam = done.sum() / (t1 - t0)
    W = float(np.mean(c[done] - d[done])) if done.any() else float("nan")
    return LittleResult(L, float(lam), W, float((L - lam * W) / L) if L > 0 else float("nan"))
