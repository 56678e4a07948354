"""Capacity planning (``sandbox plan``, ``docs/plan.md``): throughput, staleness, utilisation and
drops of a scenario's cluster over a grid of worker counts × staleness bounds, from system-only
simulations (no learning), and optionally time-to-target from learning runs.

**Configurations.** For every worker count ``w`` and bound ``k`` the scenario (with its ``--set``
overrides, variants ignored) gets ``system.num_workers = w`` and the staleness control of
:func:`staleness_for`: ``k = 0`` is ``sync``; otherwise the scenario's control keeps its kind with
its bound set to ``k`` (``max_lag.k_max``, ``fixed_lag.k``, ``async_ratio.alpha``); a control with
no bound (``sync``) becomes ``max_lag`` with ``k_max = k`` and AReaL's ``throttle`` enforcement
(``docs/system.md#max_lag``). ``k = 0`` is always planned: it is every row's baseline. Per-worker
speeds are resampled to ``w`` workers by quantile (:func:`worker_speeds_for`). Each configuration
is validated as a scenario, so a bad combination is refused naming its field.

**Simulation.** Seed ``i`` (0 … seeds − 1) sets ``run.seed = i``; the timing stream is
``run.seeds()["system"]``, the stream a learning run with that seed uses, so for delays that do not
depend on tokens the plan's schedule is the learning run's schedule exactly. ``--steps`` learner steps
(consumed batches; default ``ceil(run.steps / (minibatches × epochs))``) of
:class:`sandbox.system.cluster.Cluster` run with a payload that only records versions: every
response is charged the task's response length (:func:`response_tokens`), which matters only for
``cost_model`` / ``trace`` delays (exact for the bit-string and bandit tasks, an upper bound on the
length, hence on generation time, for the LM and gym tasks, whose lengths vary).

**Columns** (one row per configuration; means over seeds unless stated):

* ``steps_per_s``, ``groups_per_s``, ``samples_per_s``, ``tokens_per_s``: learner steps, groups,
  responses and tokens trained on per simulated second, ``count / sim_time`` over the whole run
  (``tokens_per_s`` is empty for the gradient-oracle task); ``generated_groups_per_s`` counts every
  finished group, dropped ones included; ``samples_per_s_sd`` the standard deviation over seeds;
* ``speedup_vs_sync``: mean over seeds of ``sim_time(sync, w, seed) / sim_time(config, seed)``, the
  same steps under common random numbers (``speedup_sd`` its standard deviation);
* ``lag_mean``, ``lag_p50``, ``lag_p95``, ``lag_max``: lag ``step − head version``
  (``docs/system.md#counting-convention``, in published versions) of every consumed group, pooled
  over seeds; quantiles are the smallest lag with at least that fraction of groups at or below it
  (``numpy.quantile(method="inverted_cdf")``, numpy 2.4);
* ``util_workers``: busy worker-seconds / (``w`` × sim_time), ``util_learner``: training seconds /
  sim_time (the simulator's ``util/*`` at the last step);
* ``dropped_fraction``: dropped groups / (dropped + consumed), the share of groups that reached the
  learner's queue and were discarded as over-stale.

**Learning** (``--learn``): every configuration is also trained, ``learn_seeds`` runs each
(``run.seed = 0 …``), and :func:`sandbox.analysis.time_to_target.compare` gives its time-to-target
and its end-to-end speed-up against the synchronous configuration with the same workers
(``docs/time_to_target.md``; the target is the scenario's ``run.target``, measured against that
baseline).

**Size.** Before simulating, :func:`estimate_plan` estimates the wall time (system part from
per-step and per-wake-up costs measured on the development machine, learning part from
:func:`sandbox.scenario.budget.estimate`) and the peak memory of one simulation; :func:`check_plan` refuses a
plan above :data:`MAX_SECONDS` or the available memory with the estimate and what drives it. The
system-only time estimate was 0.85x-2.1x the measured time on the development machine (shipped
scenarios, 8-256 workers; docs/plan.md#size-limits).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sandbox.base.errors import ScenarioError
from sandbox.system.cluster import ClusterResult, TrainResult
from sandbox.system.heap_loop import HeapCluster
from sandbox.system.staleness import CONTROLS
from sandbox.tasks import TASKS

UNBOUNDED_KIND = "max_lag"
"""A control without a bound (``sync``) is planned as this kind (throttle enforcement)."""
DEFAULT_K_MAX = "0,1,2,4,8"

MAX_SECONDS = 1800.0
"""A plan estimated above this wall time (30 minutes) is refused unless forced."""
SYSTEM_STEP_S = 40e-6
"""Per learner step of a system-only simulation (take, train event, publish, metrics row)."""
SYSTEM_GROUP_S = 25e-6
"""Per group generated (admission, job record, generation event, buffer)."""
WAKE_S = 4e-6
"""Per wake-up of a waiting worker (``sandbox.scenario.budget.WAKE_S``): idle workers wake at each of the
``groups_per_step + 3`` signals of a step."""
GROUP_BYTES = 600
"""Kept per group during one simulation: the job record and its payload."""
STEP_BYTES = 1500
"""Kept per learner step: the metrics row."""
WORKER_BYTES = 2048
"""Per simulated worker: its simpy process (``sandbox.scenario.budget.WORKER_BYTES``)."""

COLUMNS = {
    "workers": "system.num_workers",
    "k_max": "the staleness bound planned (0 = synchronous)",
    "control": "the staleness control simulated, with its bound",
    "steps_per_s": "learner steps per simulated second",
    "groups_per_s": "groups trained on per simulated second",
    "samples_per_s": "responses trained on per simulated second",
    "samples_per_s_sd": "standard deviation of samples_per_s over seeds",
    "tokens_per_s": "tokens trained on per simulated second (empty: the task has no tokens)",
    "generated_groups_per_s": "groups finished per simulated second, dropped ones included",
    "speedup_vs_sync": "mean over seeds of sim_time(sync, same workers) / sim_time(this)",
    "speedup_sd": "standard deviation of the per-seed speed-up",
    "lag_mean": "mean lag (published versions) of the consumed groups",
    "lag_p50": "median lag",
    "lag_p95": "95th percentile of the lag",
    "lag_max": "largest lag",
    "util_workers": "busy fraction of the rollout workers",
    "util_learner": "busy fraction of the learner",
    "dropped_fraction": "dropped / (dropped + consumed) groups",
    "sim_time": "simulated seconds for the planned steps (mean over seeds)",
}
LEARN_COLUMNS = {
    "target_level": "target of the headline metric (docs/time_to_target.md)",
    "reached_units": "replicas x seeds that reached the target / all",
    "time_to_target": "mean simulated seconds to the target",
    "time_to_target_ci_low": "95% bootstrap interval of time_to_target, low end",
    "time_to_target_ci_high": "95% bootstrap interval of time_to_target, high end",
    "speedup_end_to_end": "time to target of sync (same workers) / this one's",
    "speedup_end_to_end_ci_low": "95% bootstrap interval of the end-to-end speed-up, low end",
    "speedup_end_to_end_ci_high": "95% bootstrap interval of the end-to-end speed-up, high end",
    "sample_efficiency_vs_sync": "samples sync needs / samples this one needs to reach the target",
    "speedup_reason": "why the end-to-end speed-up is empty, if it is",
}


def option_error(option: str, message: str) -> ScenarioError:
    return ScenarioError([f"{option}: {message}"], "option")


LIST_MAXIMUM = 1_000_000
"""The largest value of an option's integer list (workers, staleness bounds, concurrency, trainer GPUs):
each value sizes a simulation's lists, so a larger one is refused before any is built."""


def parse_int_list(text: str | None, option: str, minimum: int, example: str, maximum: int = LIST_MAXIMUM) -> list[int]:
    """``"8,16,32"`` → ``[8, 16, 32]`` (sorted, duplicates removed); a :class:`ScenarioError` naming
    ``option`` for an empty list, a non-integer or a value below ``minimum`` or above ``maximum``."""
    items = [t.strip() for t in (text or "").split(",")]
    if not text or not all(items):
        raise option_error(
            option, f"expected a comma-separated list of integers >= {minimum} (e.g. {example}), got {text!r}"
        )
    values = []
    for item in items:
        try:
            value = int(item)
        except ValueError:
            raise option_error(
                option, f"{item!r} is not an integer; expected integers >= {minimum} (e.g. {example})"
            ) from None
        if value < minimum:
            raise option_error(option, f"{value} is below {minimum}; expected integers >= {minimum} (e.g. {example})")
        if value > maximum:
            raise option_error(
                option, f"{value:,} is above {maximum:,}; expected integers <= {maximum:,} (e.g. {example})"
            )
        values.append(value)
    return sorted(set(values))


# ------------------------------------------------------------------------------------------------
# configurations
# ------------------------------------------------------------------------------------------------


def staleness_for(staleness: dict, k: int) -> dict:
    """The ``system.staleness`` table of bound ``k`` from the scenario's (a resolved dict):
    ``sync`` for ``k = 0``; the same kind with its bound field (``ControlConfig.bound_field``) set to
    ``k`` (its other knobs kept); ``max_lag`` with ``k_max = k`` for a kind with no bound."""
    if k == 0:
        return {"kind": "sync"}
    bounded = _control_config(staleness["kind"]).with_bound(staleness, k)
    return bounded if bounded is not None else {"kind": UNBOUNDED_KIND, "k_max": k}


def _control_config(kind: str):
    return CONTROLS[kind].config


def describe_control(staleness: dict) -> str:
    """The control and its bound in a few words (``ControlConfig.describe_bound``)."""
    return _control_config(staleness["kind"]).describe_bound(staleness)


def worker_speeds_for(speeds: list[float] | None, workers: int) -> list[float] | None:
    """The scenario's per-worker speeds resampled to ``workers`` workers by quantile: worker ``i``
    gets ``speeds[floor(i · n / workers)]`` (``n`` the scenario's count), which keeps the shares of
    fast and slow workers (exactly when ``workers`` is a multiple of ``n``)."""
    if speeds is None:
        return None
    n = len(speeds)
    return [speeds[(i * n) // workers] for i in range(workers)]


def response_tokens(task) -> tuple[int | None, bool]:
    """(tokens charged per response, whether every response has exactly that length): the
    bit-string horizon and the bandit's single token exactly; the LM's ``max_new_tokens`` (default
    ``max_answer_len + 2``, as the task) and gym's episode step limit as upper bounds; ``None`` for
    the gradient oracle, which has no tokens. What the task declares (``Task.response_length``)."""
    return TASKS.entry_for(task).impl.response_length(task)


@dataclass
class Configuration:
    workers: int
    k_max: int
    scenario: Any  # a validated sandbox.scenario.api.Scenario
    control: str

    @property
    def label(self) -> str:
        return f"w={self.workers},k={self.k_max}"


def build_configurations(
    raw: dict, workers: list[int], k_values: list[int], source: str = "scenario"
) -> list[Configuration]:
    """One validated scenario per (workers, k) from the scenario's raw dict (``--set`` applied),
    k = 0 added; :class:`ScenarioError` naming the configuration and the field when one is invalid."""
    from sandbox.scenario.api import validate_scenario
    from sandbox.scenario.load import apply_overrides

    base = {k: v for k, v in raw.items() if k != "variants"}
    base_scn = validate_scenario(base, source)
    staleness = base_scn.system.staleness.model_dump(mode="json")
    speeds = base_scn.system.worker_speeds
    out = []
    for w in workers:
        for k in sorted({0, *k_values}):
            st = staleness_for(staleness, k)
            ov: dict[str, Any] = {"system.num_workers": w, "system.staleness": st}
            if speeds is not None:
                ov["system.worker_speeds"] = worker_speeds_for(speeds, w)
            if k == 0 and base_scn.system.partial_rollouts:
                ov["system.partial_rollouts"] = False  # sync never changes weights mid-generation
            scn = validate_scenario(apply_overrides(base, ov), f"{source}, plan configuration workers={w}, k_max={k}")
            out.append(Configuration(w, k, scn, describe_control(scn.system.staleness.model_dump(mode="json"))))
    return out


# ------------------------------------------------------------------------------------------------
# the system-only simulation
# ------------------------------------------------------------------------------------------------


@dataclass
class PlanPayload:
    """A group that records only which version produced each token position (every response
    has ``length`` tokens, so one row of positions stands for all of them)."""

    versions: np.ndarray  # (positions,) int64
    length: int
    num_responses: int

    @property
    def width(self) -> int:
        return int(self.versions.shape[0])

    @property
    def decode_steps(self) -> int:
        return self.width

    @property
    def token_count(self) -> int:
        return self.width * self.num_responses

    def truncate(self, positions: int) -> PlanPayload:
        return PlanPayload(self.versions[:positions], self.length, self.num_responses)

    def oldest_version(self) -> np.ndarray:
        return self.versions[:1] if self.width else np.zeros(1, dtype=np.int64)

    def newest_version(self) -> np.ndarray:
        return self.versions[-1:] if self.width else np.zeros(1, dtype=np.int64)


class PlanWorkload:
    """What a worker does in a system-only plan: nothing but record versions (the simulator draws
    the time). Supports in-flight weight updates (``system.partial_rollouts``)."""

    def __init__(self, length: int):
        self.length = length

    def sample(self, weights, version, group_size):
        if weights != version:  # the worker must hold exactly the weights of its admitted version
            raise AssertionError(f"worker holds weights {weights} for version {version}")
        return PlanPayload(np.full(self.length, version, dtype=np.int64), self.length, group_size)

    def begin(self, group_size):
        return PlanPayload(np.zeros(0, dtype=np.int64), self.length, group_size)

    def extend(self, weights, payload, version):
        rest = np.full(self.length - payload.width, version, dtype=np.int64)
        return PlanPayload(np.concatenate([payload.versions, rest]), self.length, payload.num_responses)

    def finish(self, payload):
        return payload


class PlanTrainer:
    """Publishes the next integer per step and reports the batch's tokens and passes, so that a
    ``cost_model`` ``train_time`` is charged as in a learning run."""

    def __init__(self, passes: int = 1):
        self.passes = passes

    def initial_weights(self):
        return 0

    def train(self, step, jobs, now):
        return TrainResult(weights=step + 1, tokens=sum(j.payload.token_count for j in jobs), passes=self.passes)


def system_seed(scn, seed: int) -> int:
    """The timing-stream seed of ``run.seed = seed`` (``RunConfig.seeds``)."""
    return scn.run.model_copy(update={"seed": seed}).seeds()["system"]


def default_steps(scn) -> int:
    """Learner steps (consumed batches) of the scenario's run."""
    return -(-scn.run.steps // scn.algorithm.updates_per_batch)


def simulate(scn, steps: int, seed: int) -> ClusterResult:
    """``steps`` learner steps of ``scn``'s system alone, with the timing stream of ``run.seed = seed``."""
    tokens, _ = response_tokens(scn.task)
    cluster = HeapCluster(
        scn.system,
        PlanWorkload(tokens or 0),
        PlanTrainer(scn.algorithm.epochs),
        scn.algorithm.groups_per_step,
        scn.algorithm.group_size,
        system_seed(scn, seed),
        record_events=False,
    )
    return cluster.run(steps)


@dataclass
class SeedMeasure:
    """One seed of one configuration."""

    sim_time: float
    steps: int
    consumed: int  # groups
    samples: int
    generated: int  # groups finished, dropped included
    dropped: int
    util_workers: float
    util_learner: float
    lags: np.ndarray  # lag of every consumed group


def measure(res: ClusterResult) -> SeedMeasure:
    consumed = [j for j in res.jobs if j.consume_step >= 0]
    last = res.rows[-1] if res.rows else {}
    return SeedMeasure(
        sim_time=float(res.sim_time),
        steps=len(res.rows),
        consumed=len(consumed),
        samples=sum(j.num_samples for j in consumed),
        generated=sum(1 for j in res.jobs if not math.isnan(j.finish_time)),
        dropped=int(res.dropped),
        util_workers=float(last.get("util/workers", math.nan)),
        util_learner=float(last.get("util/learner", math.nan)),
        lags=np.array([j.consume_step - j.head_version for j in consumed], dtype=np.int64),
    )


def _mean(xs) -> float:
    return float(np.mean(xs)) if len(xs) else math.nan


def _sd(xs) -> float:
    return float(np.std(xs, ddof=1)) if len(xs) > 1 else math.nan


def summarize(config: Configuration, seeds: list[SeedMeasure], sync: list[SeedMeasure]) -> dict[str, Any]:
    """The row of one configuration (module docstring) from its seeds and its synchronous baseline's."""
    tokens, _ = response_tokens(config.scenario.task)
    rate = lambda count: [getattr(m, count) / m.sim_time for m in seeds]  # noqa: E731
    lags = np.concatenate([m.lags for m in seeds]) if seeds else np.zeros(0, dtype=np.int64)
    speedup = [s.sim_time / m.sim_time for s, m in zip(sync, seeds)]
    taken = sum(m.dropped + m.consumed for m in seeds)
    samples = rate("samples")
    return {
        "workers": config.workers,
        "k_max": config.k_max,
        "control": config.control,
        "steps_per_s": _mean(rate("steps")),
        "groups_per_s": _mean(rate("consumed")),
        "samples_per_s": _mean(samples),
        "samples_per_s_sd": _sd(samples),
        "tokens_per_s": _mean([s * tokens for s in samples]) if tokens else math.nan,
        "generated_groups_per_s": _mean(rate("generated")),
        "speedup_vs_sync": _mean(speedup),
        "speedup_sd": _sd(speedup),
        "lag_mean": float(lags.mean()) if lags.size else math.nan,
        "lag_p50": int(np.quantile(lags, 0.5, method="inverted_cdf")) if lags.size else -1,
        "lag_p95": int(np.quantile(lags, 0.95, method="inverted_cdf")) if lags.size else -1,
        "lag_max": int(lags.max()) if lags.size else -1,
        "util_workers": _mean([m.util_workers for m in seeds]),
        "util_learner": _mean([m.util_learner for m in seeds]),
        "dropped_fraction": sum(m.dropped for m in seeds) / taken if taken else math.nan,
        "sim_time": _mean([m.sim_time for m in seeds]),
    }


# ------------------------------------------------------------------------------------------------
# size
# ------------------------------------------------------------------------------------------------


@dataclass
class PlanEstimate:
    """Estimated wall time (seconds) of the whole plan and peak memory (bytes) of its largest run."""

    seconds: float
    memory: float
    terms: list[tuple[str, float]] = field(default_factory=list)  # (what, seconds)
    memory_what: str = ""

    def describe(self) -> str:
        from sandbox.scenario.budget import format_seconds

        what, secs = max(self.terms, key=lambda t: t[1])
        return f"about {format_seconds(self.seconds)} (mostly {what}: {format_seconds(secs)})"


def _drops(scn) -> bool:
    return scn.system.staleness.drops_stale()


def estimate_plan(
    configs: list[Configuration], steps: int, seeds: int, learn_seeds: int = 0, learn_steps: int | None = None
) -> PlanEstimate:
    """Wall time: per system-only simulation ``steps × (SYSTEM_STEP_S + w·(B + 3)·WAKE_S) + groups ×
    SYSTEM_GROUP_S`` with ``groups = steps·B`` plus, for controls that drop, up to ``w`` more per step;
    plus, with learning, :func:`sandbox.scenario.budget.estimate` of every learning run. Memory: the largest
    system-only simulation (groups, steps, workers kept), or the largest learning run's estimate."""
    from sandbox.scenario.budget import estimate

    sys_s, peak, peak_what = 0.0, 0.0, ""
    learn_s = 0.0
    for c in configs:
        B, w = c.scenario.algorithm.groups_per_step, c.scenario.system.num_workers
        groups = steps * (B + (w if _drops(c.scenario) else 0))
        sys_s += seeds * (steps * (SYSTEM_STEP_S + w * (B + 3) * WAKE_S) + groups * SYSTEM_GROUP_S)
        mem = groups * GROUP_BYTES + steps * STEP_BYTES + w * WORKER_BYTES
        if mem > peak:
            peak, peak_what = mem, f"system-only simulation of {c.label}: {groups} groups, {steps} steps, {w} workers"
        if learn_seeds:
            lscn = learn_scenario(c.scenario, 0, learn_steps)
            b = estimate(lscn)
            learn_s += learn_seeds * b.seconds
            if b.memory > peak:
                peak, peak_what = b.memory, f"learning run of {c.label} ({b.main_memory().what})"
    terms = [(f"{len(configs) * seeds} system-only simulations", sys_s)]
    if learn_seeds:
        terms.append((f"{len(configs) * learn_seeds} learning runs", learn_s))
    return PlanEstimate(sys_s + learn_s, peak, terms, peak_what)


def check_plan(
    est: PlanEstimate, force: bool = False, available: float | None = None, max_seconds: float = MAX_SECONDS
) -> None:
    """Refuse (:class:`ScenarioError`) a plan estimated above ``max_seconds`` or above the available
    memory, naming the options that size it; ``force`` skips the refusal."""
    from sandbox.scenario.budget import available_memory, format_bytes, format_seconds

    if force:
        return
    problems = []
    if est.seconds > max_seconds:
        problems.append(
            f"--workers/--k-max/--seeds/--steps: this plan would take {est.describe()}, above the "
            f"{format_seconds(max_seconds)} limit; plan fewer or smaller configurations (fewer --workers or --k-max "
            "values, fewer --seeds or --steps"
            + (", fewer --learn-seeds or --learn-steps" if len(est.terms) > 1 else "")
            + "), or pass --force"
        )
    avail = available_memory() if available is None else available
    if avail is not None and est.memory > avail:
        problems.append(
            f"--workers/--steps: the largest run needs about {format_bytes(est.memory)} of memory but "
            f"{format_bytes(avail)} is available ({est.memory_what}); plan smaller configurations, or pass --force"
        )
    if problems:
        raise ScenarioError(problems, "plan")


# ------------------------------------------------------------------------------------------------
# learning runs
# ------------------------------------------------------------------------------------------------


def learn_scenario(scn, seed: int, steps: int | None):
    """The learning run of a configuration: ``run.seed = seed``, ``run.steps = steps`` (optimizer
    steps; default the scenario's), no figures and no event log (nothing is written)."""
    run = {"seed": seed, "figures": False, "record_events": False}
    if steps is not None:
        run["steps"] = steps
    return scn.model_copy(update={"run": scn.run.model_copy(update=run)})


def learn(
    configs: list[Configuration],
    seeds: int,
    steps: int | None,
    on_run: Callable[[Configuration, int], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Train every configuration ``seeds`` times; per configuration label, the time-to-target
    columns (:data:`LEARN_COLUMNS`) against the synchronous configuration with the same workers."""
    from sandbox.analysis.time_to_target import Arm, Curves, compare
    from sandbox.run.runner import run_scenario

    arms = []
    for c in configs:
        runs = []
        for s in range(seeds):
            res = run_scenario(learn_scenario(c.scenario, s, steps), None, force=True)
            curves = Curves.from_result(res)
            if curves is not None:
                runs.append(curves)
            if on_run is not None:
                on_run(c, s)
        arms.append(Arm(c.label, runs))
    baseline = {c.label: f"w={c.workers},k=0" for c in configs}
    comp = compare(arms, baseline, kind="configuration")
    out = {}
    for c in configs:
        f = comp.config_fields(c.label) if c.label in comp.levels else {}
        out[c.label] = {
            "target_level": f.get("target_level"),
            "reached_units": f.get("reached_units", "0/0"),
            "time_to_target": f.get("time_to_target"),
            "time_to_target_ci_low": f.get("time_to_target_ci_low"),
            "time_to_target_ci_high": f.get("time_to_target_ci_high"),
            "speedup_end_to_end": f.get("speedup_vs_sync"),
            "speedup_end_to_end_ci_low": f.get("speedup_ci_low"),
            "speedup_end_to_end_ci_high": f.get("speedup_ci_high"),
            "sample_efficiency_vs_sync": f.get("sample_efficiency_vs_sync"),
            "speedup_reason": f.get("speedup_reason", "the runs logged no headline metric"),
        }
    return out


# ------------------------------------------------------------------------------------------------
# the plan
# ------------------------------------------------------------------------------------------------


@dataclass
class CapacityPlan:
    title: str
    source: str
    steps: int
    seeds: int
    workers: list[int]
    k_values: list[int]
    base_control: str
    bound_field: str
    tokens_per_response: int | None
    tokens_exact: bool
    rows: list[dict[str, Any]]
    lag_histograms: dict[str, dict[int, int]]  # label -> {lag: consumed groups, all seeds}
    learn_seeds: int = 0
    learn_steps: int | None = None
    scenario_toml: str = ""
    system_seconds: float = 0.0  # wall time of the system-only part (printed, never written)
    figure_formats: tuple[str, ...] = ("png",)  # the base scenario's run.figure_formats

    @property
    def learned(self) -> bool:
        return self.learn_seeds > 0

    def frame(self):
        import pandas as pd

        cols = list(COLUMNS) + (list(LEARN_COLUMNS) if self.learned else [])
        return pd.DataFrame(self.rows, columns=cols)

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "scenario": self.source,
            "steps": self.steps,
            "seeds": list(range(self.seeds)),
            "workers": self.workers,
            "k_max": self.k_values,
            "scenario_control": self.base_control,
            "k_max_sets": self.bound_field,
            "tokens_per_response": self.tokens_per_response,
            "tokens_per_response_exact": self.tokens_exact,
            "learn_seeds": list(range(self.learn_seeds)),
            "learn_steps": self.learn_steps,
            "columns": {**COLUMNS, **(LEARN_COLUMNS if self.learned else {})},
            "rows": [{k: _json_value(v) for k, v in r.items()} for r in self.rows],
            "lag_histograms": {k: {str(lag): n for lag, n in h.items()} for k, h in self.lag_histograms.items()},
        }


def _json_value(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def bound_field_text(staleness) -> str:
    """What ``--k-max`` sets for the scenario's control, in words."""
    kind, bound = staleness.kind, type(staleness).bound_field
    if bound is None:
        return (
            f"system.staleness.k_max of {UNBOUNDED_KIND} (enforcement throttle), the scenario's {kind} having no "
            "bound; k_max = 0 runs sync"
        )
    kept = {k: v for k, v in staleness.model_dump(mode="json").items() if k not in ("kind", bound) and v is not None}
    others = ", ".join(f"{k} {v}" for k, v in kept.items())
    return f"system.staleness.{bound} ({kind}{', ' + others if others else ''}); k_max = 0 runs sync"


def run_plan(
    raw: dict,
    source: str,
    workers: list[int],
    k_values: list[int],
    seeds: int = 3,
    steps: int | None = None,
    learn_seeds: int = 0,
    learn_steps: int | None = None,
    on_config: Callable[[Configuration], None] | None = None,
    on_run: Callable[[Configuration, int], None] | None = None,
    configs: list[Configuration] | None = None,
) -> CapacityPlan:
    """The whole plan (module docstring) of the scenario ``raw`` (its dict with ``--set`` applied)."""
    from sandbox.scenario.api import dump_scenario, validate_scenario

    base_scn = validate_scenario({k: v for k, v in raw.items() if k != "variants"}, source)
    if seeds > 1 and base_scn.run.system_seed is not None:
        raise ScenarioError(
            [
                f"run.system_seed: pinned to {base_scn.run.system_seed}, so every --seeds value would replay one timing "
                "schedule; remove it (the timing seed then derives from run.seed) or pass --seeds 1"
            ],
            source,
        )
    configs = configs if configs is not None else build_configurations(raw, workers, k_values, source)
    steps = steps if steps is not None else default_steps(base_scn)
    tokens, exact = response_tokens(base_scn.task)
    t0 = time.perf_counter()
    measures: dict[str, list[SeedMeasure]] = {}
    for c in configs:
        measures[c.label] = [measure(simulate(c.scenario, steps, s)) for s in range(seeds)]
        if on_config is not None:
            on_config(c)
    system_seconds = time.perf_counter() - t0
    rows, hists = [], {}
    for c in configs:
        sync = measures[f"w={c.workers},k=0"]
        rows.append(summarize(c, measures[c.label], sync))
        lags = np.concatenate([m.lags for m in measures[c.label]])
        values, counts = np.unique(lags, return_counts=True)
        hists[c.label] = {int(v): int(n) for v, n in zip(values, counts)}
    if learn_seeds:
        learned = learn(configs, learn_seeds, learn_steps, on_run)
        for row, c in zip(rows, configs):
            row.update(learned[c.label])
    return CapacityPlan(
        title=base_scn.title or Path(source).stem,
        source=source,
        steps=steps,
        seeds=seeds,
        workers=sorted({c.workers for c in configs}),
        k_values=sorted({c.k_max for c in configs}),
        base_control=describe_control(base_scn.system.staleness.model_dump(mode="json")),
        bound_field=bound_field_text(base_scn.system.staleness),
        tokens_per_response=tokens,
        tokens_exact=exact,
        rows=rows,
        lag_histograms=hists,
        learn_seeds=learn_seeds,
        learn_steps=learn_steps,
        scenario_toml=dump_scenario(base_scn),
        system_seconds=system_seconds,
        figure_formats=tuple(base_scn.run.figure_formats),
    )


def _cell(v, spec: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return format(v, spec)


def plan_table(plan: CapacityPlan):
    """The plan as a rich table (one row per configuration)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(f"plan: {plan.title} ({plan.steps} steps, {plan.seeds} seed{'s' * (plan.seeds > 1)})"))
    cols = ["workers", "k_max", "steps/s", "groups/s", "samples/s"]
    if plan.tokens_per_response:
        cols.append("tokens/s")
    cols += ["vs sync", "lag mean", "lag p50/p95/max", "busy workers", "busy learner", "dropped"]
    for c in cols:
        table.add_column(c, justify="right")
    previous = None
    for r in plan.rows:
        cells = [
            str(r["workers"]) if r["workers"] != previous else "",
            "sync" if r["k_max"] == 0 else str(r["k_max"]),
            _cell(r["steps_per_s"], ".3g"),
            _cell(r["groups_per_s"], ".3g"),
            _cell(r["samples_per_s"], ".3g"),
        ]
        previous = r["workers"]
        if plan.tokens_per_response:
            cells.append(_cell(r["tokens_per_s"], ".4g"))
        cells += [
            _cell(r["speedup_vs_sync"], ".2f") + "x",
            _cell(r["lag_mean"], ".2f"),
            f"{r['lag_p50']}/{r['lag_p95']}/{r['lag_max']}",
            _cell(r["util_workers"], ".0%"),
            _cell(r["util_learner"], ".0%"),
            _cell(r["dropped_fraction"], ".1%"),
        ]
        table.add_row(*cells)
    return table


def _interval(v, lo, hi, spec: str, unit: str = "") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    ci = f" [{lo:{spec}}, {hi:{spec}}]" if lo is not None and hi is not None else ""
    return f"{v:{spec}}{unit}{ci}"


def learn_table(plan: CapacityPlan):
    """The learning runs of the plan as a rich table: time to target and end-to-end speed-up (with
    their 95% bootstrap intervals) beside the system-only speed-up."""
    from rich.markup import escape
    from rich.table import Table

    level = next((r["target_level"] for r in plan.rows if r.get("target_level") is not None), None)
    target = f"target {level:.3g}" if level is not None else "no target"
    table = Table(
        title=escape(f"learning runs: {plan.title} ({plan.learn_seeds} seed{'s' * (plan.learn_seeds > 1)}, {target})")
    )
    for c in (
        "workers",
        "k_max",
        "reached",
        "to target (s)",
        "end to end vs sync",
        "throughput vs sync (system)",
        "samples needed vs sync",
    ):
        table.add_column(c, justify="right")
    previous = None
    for r in plan.rows:
        eff = r.get("sample_efficiency_vs_sync")
        e2e = _interval(
            r.get("speedup_end_to_end"),
            r.get("speedup_end_to_end_ci_low"),
            r.get("speedup_end_to_end_ci_high"),
            ".2f",
            "x",
        )
        if e2e == "-" and r.get("speedup_reason"):
            e2e = escape(r["speedup_reason"])
        table.add_row(
            str(r["workers"]) if r["workers"] != previous else "",
            "sync" if r["k_max"] == 0 else str(r["k_max"]),
            str(r.get("reached_units")),
            _interval(r.get("time_to_target"), r.get("time_to_target_ci_low"), r.get("time_to_target_ci_high"), ".3g"),
            e2e,
            _cell(r["speedup_vs_sync"], ".2f") + "x",
            _cell(1 / eff, ".2f") + "x" if eff else "-",
        )
        previous = r["workers"]
    return table
