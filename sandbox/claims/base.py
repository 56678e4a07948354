"""What a claim is: a statement from a paper turned into a statistic measured once per seed, a mean
with its 95% confidence interval over the seeds, and a verdict against the claim's threshold.

Each claim is a function ``run(quick: bool, seeds: int) -> ClaimResult`` registered in
:data:`sandbox.claims.api.CLAIMS`. A result holds one :class:`Row` per sub-claim (a statistic and its
threshold) and the curves its figure draws. The interval is the Student t-interval
mean ± t_{0.975, n−1} · s/√n over the n seeds (s the sample standard deviation; each seed is an
independent run with its own ``run.seed``). The verdict (docs/claims.md#verdicts):

* ``>`` (the statistic exceeds the threshold): ``reproduced`` if the CI's lower end > threshold,
  ``not reproduced`` if its upper end ≤ threshold, ``inconclusive`` otherwise;
* ``<``: ``reproduced`` if upper end < threshold, ``not reproduced`` if lower end ≥ threshold;
* ``within`` a band [lo, hi]: ``reproduced`` if the CI lies inside the band, ``not reproduced`` if
  it lies entirely outside, ``inconclusive`` otherwise.

Fewer than two finite per-seed values give ``inconclusive`` (the row's note says why). A row's
``cap`` is the best verdict it may have whatever its interval, set when a premise of the claim fails
(e.g. a speed-up predicted on the wrong side of 1, docs/claims.md#verdicts): ``not reproduced`` forces
that verdict, ``inconclusive`` turns a ``reproduced`` into ``inconclusive``, and ``not testable here``
(:data:`NOT_TESTABLE`) replaces any verdict when the premise of the row's context is not reproduced
(:mod:`.premise`; the interval and p-value stay, for information).

Each row also has the one-sided p-value of the test its verdict makes (:func:`p_value`): ``reproduced``
is exactly p < 0.025, so the per-row verdicts are 95% intervals without a multiplicity correction; the
report applies Holm's step-down procedure over the family of tested rows (:func:`holm`; a ``not testable
here`` row is not a test and is left out of the family, docs/claims.md#multiple-comparisons).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import stats

from sandbox.analysis.intervals import t_interval
from sandbox.claims.seed_values import flags

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
NOT_TESTABLE = "not testable here"
"""The verdict of a row whose claim presupposes that stale training degrades, in a context where that
premise is not reproduced (:mod:`.premise`): the row makes no claim either way."""
DIRECTIONS = (">", "<", "within")
CONTEXTS = ("", "bitstring", "lm")
"""Where a learning row was measured (:mod:`._runs`): the bit-string task, the LM task; "" for rows
that are not learning rows (throughput, published speed-ups, ...)."""


ALPHA = 0.025
"""One-sided level of a row's test: the 95% two-sided t-interval's end beyond the threshold."""


def p_value(values: Sequence[float], threshold: float | tuple[float, float], direction: str) -> float:
    """One-sided p-value of the t-test whose rejection at level α is the row's ``reproduced`` at the
    (1 − 2α) t-interval: ``>`` c: H0 mean ≤ c, p = P(T_{n−1} ≥ t) with t = (x̄ − c)/(s/√n); ``<`` c:
    H0 mean ≥ c, p = P(T_{n−1} ≤ t); ``within`` [a, b]: two one-sided tests (TOST; Schuirmann 1987),
    p = max(p(> a), p(< b)). NaN with fewer than two finite values; with s = 0 the p-value is 0 when x̄
    lies strictly on the claimed side and 1 otherwise."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    if a.size < 2:
        return math.nan
    if direction == "within":
        lo, hi = threshold  # type: ignore[misc]
        return max(p_value(a, lo, ">"), p_value(a, hi, "<"))
    if direction not in (">", "<"):
        raise ValueError(f"direction: expected one of {DIRECTIONS}, got {direction!r}")
    mean, sd = float(a.mean()), float(a.std(ddof=1))
    side = mean - threshold if direction == ">" else threshold - mean  # type: ignore[operator]
    if sd == 0:
        return 0.0 if side > 0 else 1.0
    return float(stats.t.sf(side / (sd / math.sqrt(a.size)), a.size - 1))


def holm(p_values: Sequence[float], alpha: float = ALPHA) -> list[bool]:
    """Holm's step-down procedure (Holm, Scand. J. Statist. 6, 1979) over the finite p-values: sorted
    ascending, p_(i) (i = 0, 1, …) is rejected while p_(i) ≤ α/(m − i), m the number of finite
    p-values; it controls the family-wise error rate at α. Returns, per input, whether it is rejected
    (NaN: never)."""
    order = sorted((p, i) for i, p in enumerate(p_values) if math.isfinite(p))
    m = len(order)
    out = [False] * len(p_values)
    for rank, (p, i) in enumerate(order):
        if p > alpha / (m - rank):
            break
        out[i] = True
    return out


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
    cap: str = ""
    """The best verdict the row may have ("" = no cap; ``not reproduced`` or ``inconclusive``), set when a
    premise of the claim fails (the note says which); ``not testable here`` when its context's premise
    (stale training degrades) is not reproduced (:func:`sandbox.claims.premise.gate`)."""
    p_value: float = math.nan
    """One-sided p-value of the row's test (:func:`p_value`); NaN when forced inconclusive or too few values."""
    context: str = ""
    """Where the row was measured (:data:`CONTEXTS`): ``bitstring``, ``lm`` or "" (not a learning row)."""
    collapsed: list[bool] | None = None
    """Per seed, whether a run its value was measured on collapsed (diverged, or dead:
    :mod:`sandbox.analysis.collapse`); taken from the values when they carry it (:mod:`.seed_values`,
    what :func:`sandbox.claims._runs.per_seed` returns); None: no learning run recorded behind the row."""
    diverged: list[bool] | None = None
    """Per seed, whether a run its value was measured on diverged (None as :attr:`collapsed`)."""
    collapse_complete: bool = True
    """False when part of the values came without per-run records: :attr:`collapsed` is then a lower bound."""

    def __post_init__(self):
        if self.cap not in ("", NOT_REPRODUCED, INCONCLUSIVE, NOT_TESTABLE):
            raise ValueError(
                f"cap: expected '', {NOT_REPRODUCED!r}, {INCONCLUSIVE!r} or {NOT_TESTABLE!r}, got {self.cap!r}"
            )
        if self.context not in CONTEXTS:
            raise ValueError(f"context: expected one of {CONTEXTS}, got {self.context!r}")
        recorded = flags(self.values)
        if self.collapsed is None and recorded is not None and len(recorded[0]) == len(self.values):
            self.collapsed, self.diverged, self.collapse_complete = recorded
        self.values = [float(v) for v in self.values]
        self.mean, self.low, self.high = t_interval(self.values)
        self.verdict = (
            INCONCLUSIVE if self.forced_inconclusive else verdict(self.low, self.high, self.threshold, self.direction)
        )
        if self.cap == NOT_TESTABLE:
            self.verdict = NOT_TESTABLE
        elif self.cap == NOT_REPRODUCED:
            self.verdict = NOT_REPRODUCED
        elif self.cap == INCONCLUSIVE and self.verdict == REPRODUCED:
            self.verdict = INCONCLUSIVE
        self.p_value = math.nan if self.forced_inconclusive else p_value(self.values, self.threshold, self.direction)
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
    seeds: list[list[float]] = field(default_factory=list)
    """Each seed's curve (drawn thin under the mean, so that a collapsed seed stays visible); empty: none."""


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
    lm_variants: Sequence[dict] = ()
    """The LM-context runs (override sets) a learning claim reads; non-empty: the claim runs in the LM
    context too and its ``run`` takes ``lm_seeds`` (:func:`sandbox.claims.report.run_claims` simulates
    these runs first, in parallel)."""


def band(
    per_seed: np.ndarray, bounds: tuple[float, float] | None = None
) -> tuple[list[float], list[float], list[float]]:
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


def seed_curve(label: str, x: list[float], per_seed: np.ndarray, bounds: tuple[float, float] | None = None) -> Curve:
    """A :class:`Curve` of a (seeds, points) array: the mean with its :func:`band`, and every seed's own curve."""
    m, lo, hi = band(per_seed, bounds=bounds)
    return Curve(label, x, m, lo, hi, [row.tolist() for row in np.asarray(per_seed, dtype=float)])
