"""The explorer's grid: which runs ``sandbox explore`` precomputes, their time estimate, and running them.

A grid has a task. The teaching task is the delayed noisy quadratic (SGD; docs/theory.md T1): its optimum
is finite, so a stale gradient with a large step overshoots and the run diverges, and the
staleness-aware learning rate η/max(1, τ) (Zhang et al., IJCAI 2016) prevents it. The bit-string
task is the contrast where staleness has little to lose (every gradient pushes every bit towards 1).

One grid point is one run of a lag bound ``k_max`` (``max_lag``, AReaL's
admission rule: docs/system.md#max_lag), a learning rate, a method, a delay tail and an engine; its
seeds are the task's replicas (``task.replicas``: one run, independent policies). For each (tail,
engine, learning rate) a synchronous run with no stabilizer is the reference. The methods are those of
``sandbox demo stabilizers``: TIS (Ionides 2008; Yao et al. 2025), VCPO's ESS-scaled learning rate
(arXiv 2602.17616), GAC (arXiv 2603.01501) and M2PO's second-moment mask (arXiv 2510.01161).

The time estimate of a grid: :func:`sandbox.scenario.budget.estimate` gives each run's relative cost; the
second run is timed (the first absorbs the start-up cost) and the grid's estimate is that time scaled
by the summed relative costs (the budget's constants are those of a development machine; one timed run
calibrates them to this one). A grid over the budget is refused with that estimate before any other run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from itertools import product

from sandbox.scenario.api import Scenario, validate_scenario
from sandbox.scenario.budget import estimate, format_seconds

# method -> (correction, stabilizers, label)
METHODS: dict[str, tuple[dict, list, str]] = {
    "none": ({"name": "none"}, [], "no correction"),
    "tis": ({"name": "tis", "level": "sequence", "C": 8.0}, [], "TIS (sequence, C = 8)"),
    "vcpo": ({"name": "tis", "level": "sequence", "C": 8.0}, [{"name": "vcpo_lr"}], "VCPO ESS learning rate (+ TIS)"),
    "gac": ({"name": "none"}, [{"name": "gac"}], "GAC (gradient alignment control)"),
    "m2po": ({"name": "m2po_mask"}, [], "M2PO second-moment mask"),
    "staleness_lr": (
        {"name": "none"},
        [{"name": "staleness_lr", "rule": "inverse"}],
        "staleness-aware LR η/max(1, τ) (Zhang et al. 2016)",
    ),
}
#: the methods that act on each task (the quadratic has no importance weights: no TIS, VCPO, M2PO)
TASK_METHODS: dict[str, tuple[str, ...]] = {
    "bitstring": ("none", "tis", "vcpo", "gac", "m2po", "staleness_lr"),
    "quadratic": ("none", "staleness_lr", "gac"),
}
# task -> (score column, score label, higher is better, target, label)
TASKS: dict[str, tuple[str, str, bool, float, str]] = {
    "bitstring": (
        "eval/expected_reward",
        "expected reward",
        True,
        0.9,
        "bit-string (GRPO, Adam): nothing to lose to staleness",
    ),
    "quadratic": ("eval/loss", "loss", False, 0.5, "delayed noisy quadratic (SGD): where staleness bites"),
}
# tail -> (generation-time distribution with mean 1 s, label)
TAILS: dict[str, tuple[dict, str]] = {
    "exponential": ({"kind": "exponential", "mean": 1.0}, "exponential (mean 1 s)"),
    "heavy": (
        {"kind": "pareto", "alpha": 1.5, "scale": 1.0 / 3.0},
        "heavy: Pareto α = 1.5 (mean 1 s, infinite variance)",
    ),
}
# engine -> (engine table, label)
ENGINES: dict[str, tuple[dict, str]] = {
    "exact": ({"name": "exact"}, "exact sampler (no mismatch)"),
    "logit_noise": ({"name": "logit_noise", "scale": 0.3}, "logit noise σ = 0.3 on the sampler"),
}


class GridError(ValueError):
    """A grid that names an unknown value or whose estimated time exceeds the budget."""


@dataclass(frozen=True)
class Grid:
    """The axes and the shared settings of the explorer's runs."""

    task: str = "bitstring"
    lags: tuple[int, ...] = (1, 4, 16)
    lrs: tuple[float, ...] = (0.1, 0.3, 1.0)
    methods: tuple[str, ...] = ("none", "tis", "vcpo", "gac", "m2po")
    tails: tuple[str, ...] = tuple(TAILS)
    engines: tuple[str, ...] = tuple(ENGINES)
    replicas: int = 3
    steps: int = 80
    horizon: int = 32
    num_workers: int = 16
    group_size: int = 8
    groups_per_step: int = 4
    train_time: float = 0.25
    eval_every: int = 2
    seed: int = 0
    timeline_seconds: float = 30.0  # the part of the event log the page draws
    budget_seconds: float = 600.0

    def __post_init__(self):
        if self.task not in TASKS:
            raise GridError(f"grid.task: {self.task!r} not among {', '.join(TASKS)}")
        wrong = [m for m in self.methods if m in METHODS and m not in TASK_METHODS[self.task]]
        if wrong:
            raise GridError(
                f"grid.methods: {wrong} do not act on the {self.task} task (expected some of "
                f"{', '.join(TASK_METHODS[self.task])})"
            )
        if self.task == "quadratic" and tuple(self.engines) != ("exact",):
            raise GridError(f"grid.engines: {self.engines!r}; the quadratic task has no sampler, expected ('exact',)")
        for name, values, known in (
            ("methods", self.methods, METHODS),
            ("tails", self.tails, TAILS),
            ("engines", self.engines, ENGINES),
        ):
            bad = [v for v in values if v not in known]
            if bad or not values:
                raise GridError(f"grid.{name}: {bad or 'empty'} not among {', '.join(known)}")
        if not self.lags or any(int(k) != k or k < 0 for k in self.lags):
            raise GridError(f"grid.lags: {self.lags!r} must be non-empty integers >= 0")
        if not self.lrs or any(not (lr > 0 and math.isfinite(lr)) for lr in self.lrs):
            raise GridError(f"grid.lrs: {self.lrs!r} must be non-empty positive numbers")
        for name in ("replicas", "steps", "horizon", "num_workers", "group_size", "groups_per_step", "eval_every"):
            if getattr(self, name) < 1:
                raise GridError(f"grid.{name}: {getattr(self, name)!r} must be >= 1")

    def with_(self, **kw) -> Grid:
        return replace(self, **kw)


#: The teaching task: 16 workers, 2 groups of 8 samples per step (a synchronous step splits them over
#: all 16 workers), SGD; at k_max = 16 the realised mean lag is about 5.6 (exponential delays), where
#: T1's critical step for a fixed delay is about 0.26, and lr = 1 diverges.
QUADRATIC = Grid(
    task="quadratic",
    lags=(2, 4, 16),
    lrs=(0.3, 0.6, 1.0),
    methods=TASK_METHODS["quadratic"],
    engines=("exact",),
    replicas=3,
    steps=120,
    group_size=8,
    groups_per_step=2,
    train_time=0.05,
    eval_every=5,
    timeline_seconds=10.0,
    budget_seconds=300.0,
)
#: The default page: the quadratic first, the bit-string as the contrast.
DEFAULT_PAGE: tuple[Grid, ...] = (QUADRATIC, Grid())
#: ``--quick``: two lags and two learning rates, fewer steps and replicas (under 2 minutes on 2 cores).
QUICK = Grid(lags=(2, 16), lrs=(0.3, 1.0), tails=("exponential",), replicas=2, steps=50, budget_seconds=90.0)
QUICK_QUADRATIC = QUADRATIC.with_(lags=(2, 16), lrs=(0.3, 1.0), tails=("exponential",), budget_seconds=60.0)
QUICK_PAGE: tuple[Grid, ...] = (QUICK_QUADRATIC, QUICK)


@dataclass(frozen=True)
class Point:
    """One run of the grid; ``lag = None`` is the synchronous reference (method "none")."""

    tail: str
    engine: str
    lr: float
    method: str
    lag: int | None

    @property
    def key(self) -> str:
        lag = "sync" if self.lag is None else str(self.lag)
        return f"{self.tail}|{self.engine}|{lag}|{self.lr:g}|{self.method}"


def points(grid: Grid) -> list[Point]:
    """Every run of ``grid``: the synchronous references first, then the asynchronous runs."""
    refs = [Point(t, e, lr, "none", None) for t, e, lr in product(grid.tails, grid.engines, grid.lrs)]
    runs = [
        Point(t, e, lr, m, k) for t, e, k, lr, m in product(grid.tails, grid.engines, grid.lags, grid.lrs, grid.methods)
    ]
    return refs + runs


def scenario(grid: Grid, p: Point) -> Scenario:
    """The scenario of one grid point (same seed for every point: same initial policies and streams)."""
    correction, stabilizers, _ = METHODS[p.method]
    staleness = {"kind": "sync"} if p.lag is None else {"kind": "max_lag", "k_max": p.lag}
    if grid.task == "quadratic":  # the T1-T3 testbed of scenarios/delayed_quadratic.toml (λ_max = 1)
        return validate_scenario(
            {
                "title": f"explore quadratic {p.key}",
                "task": {
                    "name": "quadratic",
                    "dim": 200,
                    "eig_min": 0.01,
                    "eig_max": 1.0,
                    "noise_std": 0.05,
                    "replicas": grid.replicas,
                },
                "system": {
                    "num_workers": grid.num_workers,
                    "generation_time": TAILS[p.tail][0],
                    "train_time": {"kind": "constant", "value": grid.train_time},
                    "staleness": staleness,
                },
                "algorithm": {
                    "group_size": grid.group_size,
                    "groups_per_step": grid.groups_per_step,
                    "stabilizers": stabilizers,
                    "optimizer": {"name": "sgd", "lr": p.lr},
                },
                "run": {
                    "steps": grid.steps,
                    "seed": grid.seed,
                    "eval_every": grid.eval_every,
                    "figures": False,
                    "record_events": True,
                },
            }
        )
    return validate_scenario(
        {
            "title": f"explore {p.key}",
            "task": {"name": "bitstring", "horizon": grid.horizon, "threshold": 0.7, "replicas": grid.replicas},
            "engine": ENGINES[p.engine][0],
            "system": {
                "num_workers": grid.num_workers,
                "generation_time": TAILS[p.tail][0],
                "train_time": {"kind": "constant", "value": grid.train_time},
                "staleness": staleness,
            },
            "algorithm": {
                "group_size": grid.group_size,
                "groups_per_step": grid.groups_per_step,
                "objective": {"name": "grpo"},
                "correction": correction,
                "stabilizers": stabilizers,
                "optimizer": {"name": "adam", "lr": p.lr},
            },
            "run": {
                "steps": grid.steps,
                "seed": grid.seed,
                "eval_every": grid.eval_every,
                "figures": False,
                "record_events": True,
            },
        }
    )


@dataclass
class Estimate:
    runs: int
    seconds: float
    per_run: list[float] = field(default_factory=list)

    def describe(self) -> str:
        return f"{self.runs} runs, about {format_seconds(self.seconds)}"


def estimate_grid(grid: Grid, measured: float | None = None, calibrate: int = 0) -> Estimate:
    """The estimated wall time of the grid: :func:`sandbox.scenario.budget.estimate` per run, summed; with
    ``measured`` (the measured seconds of run number ``calibrate``) every run's estimate is rescaled by
    ``measured / estimate(that run)``."""
    per = [estimate(scenario(grid, p)).seconds for p in points(grid)]
    if measured is not None and per[calibrate] > 0:
        per = [x * measured / per[calibrate] for x in per]
    return Estimate(len(per), float(sum(per)), per)


def check_grid(grid: Grid, measured: float | None = None, calibrate: int = 0) -> Estimate:
    """The estimate, or :class:`GridError` when it exceeds ``grid.budget_seconds``."""
    est = estimate_grid(grid, measured, calibrate)
    first_seconds = measured
    if est.seconds > grid.budget_seconds:
        raise GridError(
            f"grid too large: {est.describe()} ({'calibrated on its first run' if first_seconds else 'uncalibrated'}),"
            f" over the budget of {format_seconds(grid.budget_seconds)}; use fewer lags, learning rates, "
            "methods, tails or engines, fewer steps or replicas (or raise the budget)"
        )
    return est
