"""One run: build the task, the learner and the cluster from a scenario, simulate, record.

``run_scenario`` is the programmatic entry point (the CLI, sweeps and checks call it). It returns
a :class:`RunResult` holding the per-step metrics, the per-replica arrays, the jobs and the event
log; with ``out_dir`` it also writes the run directory (see :mod:`sandbox.base.outputs`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from sandbox.algorithms import build_policy_loss
from sandbox.analysis.collapse import collapsed
from sandbox.analysis.divergence import growth_divergence
from sandbox.analysis.time_to_target import REPLICA_KEYS, Curves, is_synchronous, standalone_fields
from sandbox.base import progress
from sandbox.base.figure_worker import deferred as figures_deferred
from sandbox.base.heap import release_free_heap
from sandbox.base.lazy_tables import Loader, TableField, empty_table, held, parquet_file
from sandbox.base.outputs import StagedDir, write_json, write_npz, write_table, write_text
from sandbox.engines import make_engine
from sandbox.learner.trainer import DivergenceBounds, OracleLearner, PolicyLearner
from sandbox.run.replay import IndependentReplay, check_independent, replica_seeds
from sandbox.run.writers import Tracking, Writers, check_writers, run_name
from sandbox.scenario.api import Scenario, ScenarioError, dump_scenario
from sandbox.scenario.budget import check_budget
from sandbox.system.cluster import EventLog, JobRecords, job_record
from sandbox.system.heap_loop import HeapCluster
from sandbox.system.records import MetricRows
from sandbox.system.spill import Spill
from sandbox.system.workload import OracleWorkload, PolicyWorkload
from sandbox.tasks import TASKS, OracleTask, PolicyTask, make_task

EVENT_COLUMNS = ["time", "kind", "worker", "job", "version", "step"]


@dataclass
class RunResult:
    """A run's outcome. ``jobs`` and ``events`` read as tables; a written run's are read from its files
    on each use and not held (:mod:`sandbox.base.lazy_tables`; ``lazy_tables.held`` tells which)."""

    scenario: Scenario
    status: str
    metrics: pd.DataFrame
    jobs: pd.DataFrame = TableField()
    events: pd.DataFrame = TableField()
    replica_metrics: dict[str, np.ndarray]
    diverged_at: np.ndarray
    summary: dict = field(default_factory=dict)
    lengths: dict = field(default_factory=dict)
    """Job id → its sequences' response lengths, from an inference-engine run (ClusterResult.lengths)."""


def build_learner(scn: Scenario, task, params, learner_cls=None):
    kw = dict(
        optimizer_cfg=scn.algorithm.optimizer,
        total_steps=scn.run.steps,
        bounds=DivergenceBounds(scn.run.max_loss, scn.run.max_param_norm),
        eval_every=scn.run.eval_every,
        stabilizers=list(scn.algorithm.stabilizers),
    )
    if scn.algorithm.updates_per_batch > 1:  # mini-batch updates (docs/system.md#mini-batches)
        kw.update(minibatches=scn.algorithm.minibatches, epochs=scn.algorithm.epochs)
    if scn.run.metrics != "standard":  # docs/system.md#metric-levels
        kw.update(metrics=scn.run.metrics, figures=scn.run.figures)
    if isinstance(task, OracleTask):
        return (learner_cls or OracleLearner)(task, params, **kw)
    if scn.algorithm.proximal != "behaviour":
        kw["proximal"] = scn.algorithm.proximal
    loss = build_policy_loss(scn.algorithm.objective, scn.algorithm.correction)
    return (learner_cls or PolicyLearner)(task, loss, params, **kw)


def check_runnable(scn: Scenario) -> None:
    """Settings that are valid for export (a GPU run can have them) but that the simulator cannot run."""
    if not issubclass(TASKS[scn.task.name].impl, PolicyTask):
        return  # a gradient oracle applies raw gradients: the objective is not used
    if build_policy_loss(scn.algorithm.objective, scn.algorithm.correction).needs_reference_logp:
        raise ScenarioError(
            [
                "algorithm.objective.beta_kl: no task of the simulator supplies reference-policy log-probs, so a KL "
                "penalty to π_ref cannot be computed in a run; use beta_kl = 0 here (the value is still exported by "
                "`sandbox export`, and the method library takes extras['ref_logp'])"
            ]
        )


def prepare_run(
    scn: Scenario, on_step: Callable[[dict], None] | None = None, learner_cls=None, spill: Spill | None = None
):
    """Task, learner and cluster for a scenario, ready to ``cluster.run(steps)``. ``learner_cls``
    lets a check substitute an instrumented learner (same constructor); ``spill``: the cluster streams
    its finished jobs and events there (:mod:`sandbox.system.spill`)."""
    check_runnable(scn)
    seeds = scn.run.seeds()
    task = make_task(scn.task)
    task.engine = make_engine(scn.engine)
    params = task.init_params(torch.Generator().manual_seed(seeds["init"]))
    learner = build_learner(scn, task, params, learner_cls)
    gen = torch.Generator().manual_seed(seeds["sampling"])
    workload = (
        OracleWorkload(task, gen)
        if isinstance(task, OracleTask)
        else PolicyWorkload(task, gen, ahead=scn.algorithm.groups_per_step)
    )
    cluster = HeapCluster(  # the heap event loop: the simpy cluster's schedule, bitwise
        scn.system,
        workload,
        learner,
        groups_per_step=scn.algorithm.groups_per_step,
        group_size=scn.algorithm.group_size,
        seed=seeds["system"],
        on_step=on_step,
        record_events=scn.run.record_events,
        updates_per_batch=scn.algorithm.updates_per_batch,
        spill=spill,
    )
    return task, learner, cluster


def prepare_independent(scn: Scenario, on_step: Callable[[dict], None] | None = None, learner_cls=None, spill=None):
    """Task, learner and :class:`sandbox.run.replay.IndependentReplay` for ``run.schedules = "independent"``:
    replica r starts from the initial weights of the separate run with master seed ``run.seed + r``.
    ``spill`` is not used (the replay keeps its records in memory; see :mod:`sandbox.run.replay`)."""
    check_runnable(scn)
    check_independent(scn)
    task = make_task(scn.task)
    task.engine = make_engine(scn.engine)
    seeds = replica_seeds(scn.run, task.replicas)
    one = make_task(scn.task.model_copy(update={"replicas": 1}))
    inits = [one.init_params(torch.Generator().manual_seed(s["init"])) for s in seeds]
    params = {k: torch.cat([p[k] for p in inits]) for k in inits[0]}
    learner = build_learner(scn, task, params, learner_cls)
    return task, learner, IndependentReplay(scn, task, learner, seeds, on_step)


def run_scenario(
    scn: Scenario,
    out_dir: str | Path | None = None,
    on_step: Callable[[dict], None] | None = None,
    learner_cls=None,
    force: bool = False,
    label: str = "",
    color: str | None = None,
    group: str = "",
    name: str = "",
) -> RunResult:
    """Simulate ``scn``; refuses it first (:class:`sandbox.scenario.budget.BudgetError`) when its estimated
    memory exceeds the memory available, unless ``force``. ``label`` (the variant's name) and
    ``color`` (its colour in the comparison figure) are used by the run's figures.

    With ``out_dir`` and trackers in ``run.writers`` (:mod:`sandbox.report.writers`), the run's stage
    is opened before the simulation and every metrics row is streamed to the trackers as the learner
    produces it; the tracker run is named ``name`` (default :func:`sandbox.report.writers.run_name`)
    in group ``group``. In an open progress session (:mod:`sandbox.base.progress`) the phases are shown:
    the LM warm start when it trains, "simulating" (steps), "figures", "writing"."""
    if not force:
        check_budget(scn)
    trackers = out_dir is not None and bool(set(scn.run.writers) - {"files"})
    if trackers:  # fail before simulating, not after
        check_writers(scn.run.writers)
    prepare = prepare_independent if scn.run.schedules == "independent" else prepare_run
    with ExitStack() as stack:
        hooks = [on_step] if on_step is not None else []
        writers = stage = None
        if trackers:
            staged = StagedDir(Path(out_dir))
            stage = stack.enter_context(staged)
            writers = Writers(scn, Tracking(stage, name or run_name(scn, out_dir, label), group))
            stack.callback(writers.abort)  # a no-op once finished
            hooks.insert(0, writers.log)
        shown: list = []  # the "simulating" task, once the warm start (in prepare) is over
        if progress.active():  # one row per optimizer step; run.steps counts optimizer steps
            hooks.append(lambda row: shown and shown[0].advance_to(int(row["step"]) + 1, step_info(row)))
        spill = _spill(out_dir, stack) if prepare is prepare_run else None
        task, learner, cluster = prepare(scn, _fan_out(hooks), learner_cls, spill)
        threads = scn.run.threads or task.default_threads
        previous = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        try:
            with progress.task("simulating" + (f" {label}" if label else ""), total=scn.run.steps, unit="steps") as sim:
                shown.append(sim)
                res = cluster.run(scn.run.steps)
        finally:
            torch.set_num_threads(previous)
        if out_dir is not None:  # the simulation's freed pages back before the tables are built (sandbox/base/heap.py)
            release_free_heap()
        # a written run's jobs and events tables are built from the records when read (the summary,
        # then each file's writer), not held; then read from the written files (sandbox/base/lazy_tables.py)
        lazy = out_dir is not None and isinstance(res.jobs, JobRecords) and isinstance(res.events, EventLog)
        result = _result(scn, res, learner, lazy=lazy)
        if out_dir is not None:
            release_free_heap()  # what building the tables freed (the records, pandas's transients) back too
            if stage is None:
                write_run_dir(result, Path(out_dir), label=label, color=color)
            else:
                _write_into(stage, result, label, color, writers)
            _clear(res.jobs)  # written: the records (and their spilled files) go
            _clear(res.events)
    if stage is not None:  # its stage moved into place: a table read from it is read there now
        _moved(result, stage, Path(out_dir))
    return result


def _spill(out_dir: str | Path | None, stack: ExitStack) -> Spill | None:
    """A run written to ``out_dir`` streams its finished jobs and events to a private directory beside
    it (removed when the run ends; memory bounded in the run's length). None without an
    output directory, or when its parent does not exist yet (the records then stay in memory)."""
    if out_dir is None:
        return None
    parent = Path(out_dir).parent
    if not parent.is_dir():
        return None
    try:
        spill = Spill(parent)
    except OSError:  # no room or no permission there: the output directory's own error comes later
        return None
    stack.callback(spill.close)
    return spill


STEP_INFO_NAMES = {"eval/expected_reward": "reward", "reward/mean": "reward", "eval/loss": "loss"}
"""The headline metric's column (in order of preference, as sandbox.analysis.time_to_target.HEADLINE) and
the name the progress line gives it: a task whose metric is a loss (quadratic) shows ``loss=``."""


def step_info(row: dict) -> str:
    """The progress text of a metrics row: simulated time and the task's headline metric, by its own name."""
    col = next((c for c in STEP_INFO_NAMES if c in row), "eval/expected_reward")
    value = row.get(col)
    t = row.get("time", math.nan)
    v = "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"
    return f"t={t:.1f}s  {STEP_INFO_NAMES[col]}={v}"


def _fan_out(hooks: list[Callable[[dict], None]]) -> Callable[[dict], None] | None:
    """One per-step callback calling ``hooks`` in order (trackers first, then the caller's, then progress)."""
    if not hooks:
        return None
    if len(hooks) == 1:
        return hooks[0]

    def on_step(row: dict) -> None:
        for h in hooks:
            h(row)

    return on_step


TABLES_READ_LATER = ("jobs", "events")
"""The tables a written run does not hold (:mod:`sandbox.base.lazy_tables`)."""


def _result(scn: Scenario, res, learner, lazy: bool = False) -> RunResult:
    """The run's tables from the cluster's records; each record is emptied once its table is built
    (``clear``), so a record and its table are not both held until the run ends (the peak
    memory of a run is at its end, where it held both). ``lazy`` (a written run whose records are a
    :class:`JobRecords` and an :class:`EventLog`): the jobs and events tables are built from the
    records on each read instead (:mod:`sandbox.base.lazy_tables`), and the records are kept for that (the
    caller clears them once the files are written)."""
    rows = res.rows
    metrics = rows.to_frame() if hasattr(rows, "to_frame") else pd.DataFrame(rows)
    _clear(rows)
    log = res.events
    if lazy:
        jobs = Loader(res.jobs.to_frame, "the run's job records")
        events = Loader(lambda: log.to_frame(EVENT_COLUMNS), "the run's event log")
    else:
        jobs = res.jobs.to_frame() if hasattr(res.jobs, "to_frame") else pd.DataFrame([job_record(j) for j in res.jobs])
        _clear(res.jobs)
        events = log.to_frame(EVENT_COLUMNS) if hasattr(log, "to_frame") else pd.DataFrame(log, columns=EVENT_COLUMNS)
        _clear(log)
    replica = _stack_replica_rows(learner.replica_rows, learner.R)
    result = RunResult(
        scenario=scn,
        status=res.status,
        metrics=metrics,
        jobs=jobs,
        events=events,
        replica_metrics=replica,
        diverged_at=learner.diverged_at.copy(),
        lengths=getattr(res, "lengths", {}),
    )
    result.summary = summarize(result, res.sim_time)
    return result


def _clear(record) -> None:
    """Empty one of the cluster's records (:class:`MetricRows`, :class:`JobRecords`, :class:`EventLog`)
    once its table is built (the replay of independent schedules returns the same record types)."""
    if isinstance(record, (MetricRows, JobRecords, EventLog)):
        record.clear()


def slim(result: RunResult) -> RunResult:
    """What ``sandbox run`` keeps of a written variant for the outputs across its variants (the
    comparison figure, the time-to-target comparison, the run table): the metrics, the summary and
    the per-replica arrays that time-to-target reads; the jobs and events tables, already written,
    are dropped (zero rows, same columns)."""
    return replace(
        result,
        jobs=empty_table(result, "jobs"),
        events=empty_table(result, "events"),
        replica_metrics={k: v for k, v in result.replica_metrics.items() if k in REPLICA_KEYS},
    )


def _stack_replica_rows(rows, replicas: int) -> dict[str, np.ndarray]:
    """``{metric: (steps, R)}``; steps where a metric was not computed (evaluations) hold NaN.
    ``rows``: the learner's :class:`sandbox.system.records.ReplicaColumns`, or a list of per-step dicts."""
    if hasattr(rows, "arrays"):
        return rows.arrays()
    keys = sorted({k for r in rows for k in r})
    out = {}
    for k in keys:
        arr = np.full((len(rows), replicas), np.nan)
        for i, r in enumerate(rows):
            v = r.get(k)
            if v is not None:
                arr[i] = v  # broadcast and cast to float64 by the assignment
        out[k] = arr
    return out


def _tail_mean(series: pd.Series, frac: float = 0.1) -> float:
    s = series.dropna()
    if s.empty:
        return math.nan
    n = max(1, int(len(s) * frac))
    return float(s.iloc[-n:].mean())


def summarize(result: RunResult, sim_time: float) -> dict:
    m, jobs = result.metrics, result.jobs  # one read of the jobs table (a written run builds it here)
    consume_step = jobs.consume_step.to_numpy()  # the columns, not a filtered copy of the table
    consumed = consume_step >= 0
    lags = consume_step[consumed] - jobs.head_version.to_numpy()[consumed]
    hist = {int(k): int(v) for k, v in zip(*np.unique(lags, return_counts=True))} if len(lags) else {}
    col = lambda name: _tail_mean(m[name]) if name in m else math.nan  # noqa: E731
    diverged = [int(s) for s in result.diverged_at if s >= 0]
    out = {
        "title": result.scenario.title,
        "status": result.status,
        "steps_done": int(len(m)),
        "sim_time": float(sim_time),
        "diverged_replicas": len(diverged),
        "replicas": int(len(result.diverged_at)),
        "diverged_at": [int(s) for s in result.diverged_at],
        "final_reward": col("reward/mean"),
        "final_expected_reward": col("eval/expected_reward"),
        "final_loss": col("eval/loss"),
        "throughput_samples_per_s": float(m["throughput/samples_per_s"].iloc[-1]) if len(m) else math.nan,
        "staleness_mean": float(lags.mean()) if len(lags) else math.nan,
        "staleness_max": int(lags.max()) if len(lags) else -1,
        "staleness_hist": hist,
        "ess_ratio_mean": float(m["is/ess_ratio"].mean()) if "is/ess_ratio" in m else math.nan,
        "grad_cos_mean": float(m["grad/cos_prev"].mean()) if "grad/cos_prev" in m else math.nan,
        # steps with a defined cosine (NaN where there is no previous gradient or either gradient is zero)
        "grad_cos_defined": int(m["grad/cos_prev"].notna().sum()) if "grad/cos_prev" in m else 0,
        "dropped": int((jobs.dropped_at >= 0).sum()) if len(jobs) else 0,
        "jobs": int(len(jobs)),
        "util_workers": float(m["util/workers"].iloc[-1]) if len(m) else math.nan,
        "util_learner": float(m["util/learner"].iloc[-1]) if len(m) else math.nan,
    }
    out.update(_divergence(result, out))
    per_replica = result.replica_metrics or {  # one replica: its columns of the metrics table
        k.replace("/", "__"): m[k].to_numpy(dtype=float)[:, None]
        for k in ("eval/expected_reward", "reward/mean", "grad/norm")
        if k in m
    }
    dead = collapsed(out["diverged_at"], per_replica)
    out["collapsed_replicas"] = int(sum(dead))
    out["collapsed"] = [bool(d) for d in dead]
    out.update(_time_to_target(result, out))
    if result.lengths and (result.scenario.system.staleness.drops_stale() or out["dropped"] > 0):
        from sandbox.analysis.drop_bias import drop_bias  # scipy: loaded only by a run whose staleness drops groups

        gen = result.scenario.system.generation_time
        prompt_of = gen.prompt_of if getattr(gen, "prompts", None) is not None else None
        out["drop_bias"] = drop_bias(jobs, result.lengths, prompt_of)  # docs/system.md#drop-bias
    return out


def _divergence(result: RunResult, summary: dict) -> dict:
    """The status and the per-replica divergence steps with the growth rule of a loss added to the
    learner's hard limits (sandbox.analysis.divergence, docs/time_to_target.md#divergence)."""
    scn = result.scenario
    at = [int(s) for s in result.diverged_at]
    why = [
        f"replica {r}: a hard limit at step {s} (non-finite, |loss| > run.max_loss or weight norm > run.max_param_norm)"
        for r, s in enumerate(at)
        if s >= 0
    ]
    curves = Curves.build(result.metrics, result.replica_metrics, summary, at, False, scn.run.target, scn.run.seed)
    if curves is not None and not curves.higher_is_better:
        grown, text = growth_divergence(curves.step, curves.values, scn.run.max_loss_growth, scn.run.target.window)
        at = [a if a >= 0 else g for a, g in zip(at, grown)]
        why += [text] if text else []
    diverged = [s for s in at if s >= 0]
    status = summary["status"]
    if status == "completed" and at and len(diverged) == len(at):
        status = "diverged"
    return {"status": status, "diverged_replicas": len(diverged), "diverged_at": at, "divergence": "; ".join(why)}


def _time_to_target(result: RunResult, summary: dict) -> dict:
    """The run's time-to-target against its own target rule (docs/time_to_target.md); a run of a
    ``sandbox run`` with variants or of a sweep is compared again against its synchronous baseline."""
    scn = result.scenario
    curves = Curves.build(
        result.metrics,
        result.replica_metrics,
        summary,
        summary["diverged_at"],
        is_synchronous(scn.system.staleness),
        scn.run.target,
        scn.run.seed,
    )
    return standalone_fields(curves)


def _moved(result: RunResult, stage: Path, out: Path) -> None:
    """The tables ``result`` reads from files of ``stage`` are read from ``out`` (where the stage moved)."""
    for name in TABLES_READ_LATER:
        was = held(result, name)
        if isinstance(was, Loader) and was.path is not None and was.path.parent == stage:
            setattr(result, name, parquet_file(out / was.path.name))


def write_run_dir(result: RunResult, out: Path, label: str = "", color: str | None = None) -> None:
    """Write the run into a staging directory, then move it into ``out`` (replacing a previous run
    there): an interrupted write leaves ``out`` as it was (:class:`sandbox.base.outputs.StagedDir`).
    Trackers in ``run.writers`` are written here from the finished result (:func:`run_scenario`
    streams them instead, step by step)."""
    with StagedDir(out) as stage:
        writers = None
        if set(result.scenario.run.writers) - {"files"}:
            writers = Writers(result.scenario, Tracking(stage, run_name(result.scenario, out, label)))
            try:
                for row in result.metrics.to_dict("records"):
                    writers.log(row)
            except BaseException:
                writers.abort()
                raise
        _write_into(stage, result, label, color, writers)
    _moved(result, stage, out)


def _write_into(stage: Path, result: RunResult, label: str, color: str | None, writers) -> None:
    """The run's files into ``stage``; ``writers`` (the run's open trackers, or None) are finished
    before summary.json, which is written last: its presence marks a complete run."""
    suffix = f" {label}" if label else ""
    with progress.phase("writing" + suffix):
        write_text(stage / "scenario.toml", dump_scenario(result.scenario))
        for name in ("metrics", "jobs", "events"):  # one table at a time: a loader's is built here, then freed
            write_table(stage / f"{name}.parquet", getattr(result, name))
            was = held(result, name) if name in TABLES_READ_LATER else None
            if isinstance(was, Loader) and was.path is None:  # built from the records: from the file now
                setattr(result, name, parquet_file(stage / f"{name}.parquet"))  # the figures read it there
            # each table's arrow copy and parquet buffers, freed, back to the system before the next
            # is converted (glibc keeps them otherwise: the peaks of the three conversions add up;
            # measured in sandbox/base/heap.py)
            release_free_heap()
        write_npz(stage / "replicas.npz", {k.replace("/", "__"): v for k, v in result.replica_metrics.items()})
    if result.scenario.run.figures and not figures_deferred():  # `sandbox run` draws them in a worker process
        from sandbox.run.plots import default_figures  # matplotlib: loaded only when the run draws figures

        with progress.phase("figures" + suffix):
            default_figures(
                result, stage / "figures", label=label, color=color, formats=result.scenario.run.figure_formats
            )
    if writers is not None:
        with progress.phase("trackers" + suffix):
            writers.finish(result)
    write_json(stage / "summary.json", result.summary)  # moved in last: its presence marks a complete run
