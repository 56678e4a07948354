"""What a claim is: a statement from a paper turned into a statistic measured once per seed, a mean
with its 95% confidence interval over the seeds, and a verdict against the claim's threshold.

Each claim is a function ``run(quick: bool, seeds: int) -> ClaimResult`` registered in
:data:`sandbox.claims.CLAIMS`. A result holds one :class:`Row` per sub-claim (a statistic and its
threshold) and the curves its figure draws. The interval is the Student t-interval
mean ± t_{0.975, n−1} · s/√n over the n seeds (s the sample standard deviation; each seed is an
independent run with its own ``run.seed``). The verdict (docs/claims.md#verdicts):

* ``>`` (the statistic exceeds the threshold): ``reproduced`` if the CI's lower end > threshold,
  ``not reproduced`` if its upper end ≤ threshold, ``inconclusive`` otherwise;
* ``<``: ``reproduced`` if upper end < threshold, ``not reproduced`` if lower end ≥ threshold;
* ``within`` a band [lo, hi]: ``reproduced`` if the CI lies inside the band, ``not reproduced`` if
  it lies entirely outside, ``inconclusive`` otherwise.

Fewer than two finite per-seed values give ``inconclusive`` (the row's note says why).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import numpy as np
from scipy import stats

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
DIRECTIONS = (">", "<", "within")


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the Student t-interval over the finite ``values``; NaN ends with fewer
    than two values."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(a.mean())
    if a.size < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2, a.size - 1) * a.std(ddof=1) / math.sqrt(a.size))
    return mean, mean - half, mean + half


def verdict(low: float, high: float, threshold: float | tuple[float, float], direction: str) -> str:
    """The verdict of a CI [low, high] against a claim ``statistic <direction> threshold``."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction: expected one of {DIRECTIONS}, got {direction!r}")
    if not (math.isfinite(low) and math.isfinite(high)):
        return INCONCLUSIVE
    if direction == ">":
        return REPRODUCED if low > threshold else NOT_REPRODUCED if high <= threshold else INCONCLUSIVE
    if direction == "<":
        return REPRODUCED if high < threshold else NOT_REPRODUCED if low >= threshold else INCONCLUSIVE
    lo, hi = threshold  # type: ignore[misc]
    if lo <= low and high <= hi:
        return REPRODUCED
    return NOT_REPRODUCED if high < lo or low > hi else INCONCLUSIVE


@dataclass
class Row:
    """One sub-claim: ``statistic <direction> threshold`` measured once per seed."""

    label: str
    statistic: str
    values: list[float]
    threshold: float | tuple[float, float]
    direction: str
    note: str = ""
    mean: float = math.nan
    low: float = math.nan
    high: float = math.nan
    verdict: str = INCONCLUSIVE
    forced_inconclusive: bool = False
    """Set when the statistic is undefined for this run (the note says why)."""

    def __post_init__(self):
        self.values = [float(v) for v in self.values]
        self.mean, self.low, self.high = t_interval(self.values)
        self.verdict = INCONCLUSIVE if self.forced_inconclusive else verdict(self.low, self.high, self.threshold, self.direction)
        finite = int(np.isfinite(self.values).sum())
        if finite < 2 and not self.note:
            self.note = f"{finite} finite value(s): no interval"

    @property
    def seeds(self) -> int:
        return int(np.isfinite(self.values).sum())

    def threshold_text(self) -> str:
        if self.direction == "within":
            lo, hi = self.threshold  # type: ignore[misc]
            return f"in [{lo:g}, {hi:g}]"
        return f"{self.direction} {self.threshold:g}"


@dataclass
class Curve:
    """A line of the claim's figure: mean over seeds (``y``) with a band (``low``/``high``)."""

    label: str
    x: list[float]
    y: list[float]
    low: list[float] = field(default_factory=list)
    high: list[float] = field(default_factory=list)


@dataclass
class ClaimResult:
    name: str
    paper: str
    definition: str
    settings: dict
    rows: list[Row] = field(default_factory=list)
    curves: list[Curve] = field(default_factory=list)
    x_label: str = "learner step"
    y_label: str = ""
    kind: str = "lines"
    """``lines`` (curves over x), ``bars`` (one bar per curve: its single y with the CI) or ``grouped``
    (one bar per curve at each category ``x = 0, 1, …`` named by :attr:`x_ticks`, the curves side by side)."""
    x_ticks: list[str] = field(default_factory=list)
    """Category names of a ``grouped`` figure (empty otherwise)."""
    appendix: str = ""
    """Markdown written under the verdict table of ``claims.md`` (e.g. a claim's search table); empty: nothing."""

    def to_dict(self) -> dict:
        d = asdict(self)
        for r, row in zip(d["rows"], self.rows):
            r["threshold_text"] = row.threshold_text()
            r["seeds"] = row.seeds
        return d


@dataclass(frozen=True)
class Claim:
    name: str
    paper: str
    description: str
    run: Callable[..., ClaimResult]


def band(per_seed: np.ndarray, bounds: tuple[float, float] | None = None) -> tuple[list[float], list[float], list[float]]:
    """Mean and t-interval at each column of a (seeds, points) array (NaN-aware: a column without a
    finite value stays NaN, a gap in the figure). ``bounds``: the quantity's possible range (a
    cosine [−1, 1], a fraction [0, 1]); the interval is clipped to it."""
    means, lows, highs = [], [], []
    for col in np.asarray(per_seed, dtype=float).T:
        m, lo, hi = t_interval(col)
        means.append(m)
        lows.append(lo if math.isfinite(lo) else m)
        highs.append(hi if math.isfinite(hi) else m)
    if bounds is not None:
        lows = [min(max(v, bounds[0]), bounds[1]) if math.isfinite(v) else v for v in lows]
        highs = [min(max(v, bounds[0]), bounds[1]) if math.isfinite(v) else v for v in highs]
    return means, lows, highs
