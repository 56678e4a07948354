"""What a theory check is: a prediction from ``theory/`` held against a measurement from the
simulator, over a swept free variable, with a tolerance justified by the sampling error.

Each check is a function ``run(quick: bool, perturb: float) -> CheckResult``. ``perturb``
multiplies the prediction (1.0 = the theory as stated); the test suite runs every check with its
``perturbation`` to show the check can fail. The function declares what it sweeps with
:func:`sweeps` (the symbol and unit the ``sandbox check`` table prints beside each point, and whether
the prediction is a one-sided bound); the declaration is presentation only, never part of the result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

from sandbox.checks._sim import reuse_runs


@dataclass
class Point:
    x: float
    predicted: float
    measured: float
    se: float
    tolerance: float
    ok: bool
    note: str = ""
    series: str = ""
    """Label of the curve this point belongs to when a check sweeps several settings."""


@dataclass
class CheckResult:
    name: str
    claim: str
    x_label: str
    y_label: str
    justification: str
    points: list[Point] = field(default_factory=list)
    log_x: bool = False
    log_y: bool = False

    @property
    def passed(self) -> bool:
        return bool(self.points) and all(p.ok for p in self.points)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["passed"] = self.passed
        return d


@dataclass(frozen=True)
class Swept:
    """The free variable a check sweeps, as the ``sandbox check`` table names it at each point:
    ``symbol = value unit`` (``τ = 4 versions``), a label of its own for a categorical or special point
    (``labels``), prefixed by the curve's label when the check sweeps several settings (``series``,
    keyed by :attr:`Point.series`)."""

    symbol: str
    unit: str = ""
    labels: Mapping[float, str] = field(default_factory=dict)
    series: Mapping[str, str] = field(default_factory=dict)
    upper_bound: bool | frozenset[str] = False
    """The prediction is a one-sided (upper) bound: a point passes when measured − tolerance ≤ bound.
    ``True`` for every point, or the :attr:`Point.series` names that are one-sided."""

    def is_upper(self, point: Point) -> bool:
        """Whether ``point``'s prediction is a one-sided upper bound."""
        if isinstance(self.upper_bound, bool):
            return self.upper_bound
        return point.series in self.upper_bound

    def label(self, point: Point) -> str:
        text = self.labels.get(point.x)
        if text is None:
            unit = self.unit
            if point.x == 1 and unit.split(" ", 1)[0].endswith("s") and unit[:1].isalpha():  # 1 worker, 1 step
                first, _, rest = unit.partition(" ")
                unit = f"{first[:-1]} {rest}".strip()
            text = f"{self.symbol} = {point.x:g}" + (f" {unit}" if unit else "")
        curve = self.series.get(point.series, point.series)
        return f"{curve}: {text}" if curve else text


UNDECLARED = Swept("x")
"""What a check whose ``run`` has no :func:`sweeps` declaration shows (the test suite refuses it)."""


def sweeps(
    symbol: str,
    unit: str = "",
    *,
    labels: Mapping[float, str] | None = None,
    series: Mapping[str, str] | None = None,
    upper_bound: bool | set[str] | frozenset[str] = False,
):
    """Decorator declaring what a check's ``run`` sweeps (a :class:`Swept` stored as ``run.swept``)."""

    def declare(run: Callable[..., CheckResult]) -> Callable[..., CheckResult]:
        upper = upper_bound if isinstance(upper_bound, bool) else frozenset(upper_bound)
        run.swept = Swept(symbol, unit, dict(labels or {}), dict(series or {}), upper)  # type: ignore[attr-defined]
        return run

    return declare


@dataclass(frozen=True)
class Check:
    name: str
    theory: str
    description: str
    run: Callable[..., CheckResult]
    perturbation: float
    """Factor applied to the prediction that the check must reject."""

    @property
    def swept(self) -> Swept:
        """What ``run`` declared with :func:`sweeps` (:data:`UNDECLARED` if nothing)."""
        return getattr(self.run, "swept", UNDECLARED)

    def run_perturbed(self, quick: bool, perturbs) -> list[CheckResult]:
        """``[run(quick, perturb=f) for f in perturbs]``. A check whose ``run`` declares ``run.measure(quick)``
        and ``run.judge(measured, perturb)`` (``run = judge(measure(quick), perturb)``) simulates once and
        judges every factor from the same measurements, which by construction never depend on the
        prediction; any other check runs once per factor with its simulator runs reused across factors
        (:func:`sandbox.checks._sim.reuse_runs`: a run whose input is unchanged is not simulated again)."""
        measure, judge = getattr(self.run, "measure", None), getattr(self.run, "judge", None)
        if measure is None or judge is None:
            with reuse_runs():  # the second factor's runs are the first's (same input, same bits)
                return [self.run(quick=quick, perturb=f) for f in perturbs]
        measured = measure(quick)
        return [judge(measured, f) for f in perturbs]


def within(measured: float, predicted: float, tol: float) -> bool:
    return bool(np.isfinite(measured) and abs(measured - predicted) <= tol)


def mean_se(samples) -> tuple[float, float]:
    """Mean and standard error over independent replicates."""
    a = np.asarray(samples, dtype=float)
    a = a[np.isfinite(a)]
    if a.size < 2:
        return (float(a.mean()) if a.size else math.nan), math.inf
    return float(a.mean()), float(a.std(ddof=1) / math.sqrt(a.size))


def ratio_of_means_se(num, den, n_boot: int = 400, seed: int = 0) -> tuple[float, float]:
    """Ratio of means Σnum/Σden over replicates and its bootstrap standard error (docs/theory.md:
    ratio statistics are compared as ratio-of-means, SE by bootstrap over replicates)."""
    num, den = np.asarray(num, float), np.asarray(den, float)
    est = float(num.sum() / den.sum())
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(num), size=(n_boot, len(num)))
    boots = num[idx].sum(1) / den[idx].sum(1)
    return est, float(boots.std(ddof=1))
