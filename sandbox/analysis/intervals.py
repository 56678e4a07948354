"""The Student t-interval over seeds, shared by the claims, ``sandbox plan --gpus`` and preflight."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats


def t_interval(
    values: Sequence[float], level: float = 0.95, bounds: tuple[float, float] | None = None
) -> tuple[float, float, float]:
    """(mean, low, high): the Student t-interval over the finite ``values``,
    mean ± t_{(1+level)/2, n−1} · s / √n; NaN ends with fewer than two values. ``bounds``: the range the
    quantity cannot leave (a fraction: (0, 1)); the interval is cut to it."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(a.mean())
    if a.size < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2, a.size - 1) * a.std(ddof=1) / math.sqrt(a.size))
    if bounds is not None:
        return mean, max(bounds[0], mean - half), min(bounds[1], mean + half)
    return mean, mean - half, mean + half
