"""Row 6's floor: how fast a timing-only run can be while it does the same work as the cluster.

The prototype here (:func:`floor_run`) is one ``heapq`` event loop for a plain system or one of
continuous-batching engines (no partial rollouts, no split group) that keeps everything the simulator's output depends on: the same model
objects (a :class:`~sandbox.system.heap_loop.HeapCluster`'s control, weight store, workload, trainer,
random stream, job records, event log and metrics rows), the same method calls on them in the same order
(``control.admit`` / ``on_dispatch`` / ``on_finish`` / ``take`` / ``could_take`` / ``on_publish``,
``workload.sample`` / ``finish``, ``Cluster._draw``, ``_release``, ``_emit``, ``worker_utilisation``,
``store.publish``), and the same records (a :class:`~sandbox.system.cluster.Job` per job, a tuple per
event, a row per step). What it drops is every cost of the event loop that is not a call of the model:
no generator, no process table, the bodies of ``Cluster._worker`` and ``Cluster._learner`` as steps of the
loop (the workers' ``dispatch`` and ``finish``, the learner's ``learn`` and ``trained``), each waiter a
plain int in its round. On engines the workers' ``dispatch`` is ``Cluster._generate_on_engine``'s body (the
workload's ``sample``, the engine config's ``lengths`` from the cluster's stream, ``misfit``, the engine's
``submit``, whose event calls ``finish`` and ``dispatch``), and each engine runs as the heap loop's
:class:`~sandbox.system.heap_loop.EngineSteps` (the engine's own ``step_cost``, ``_sync_needed``,
``_do_sync``, ``_admit``, ``_least_left``, ``_rearm``, ``_finish_ended``; one heap entry per batch).
``--only engines`` (``bench_system.engine_system``: 64 workers on 8 engines, B = 16, G = 8, partial /
drain / abort syncs) times the simpy cluster, the heap loop with each engine as its process (the loop before
``EngineSteps``, :class:`ProcessEngines`), the heap loop and the prototype, after checking each side's
tables, engine counters and lengths against simpy's.

Before timing, each case checks that the prototype's jobs table, event log, rows and clock are the simpy
cluster's to the bit. Then the lean bare simpy model (``bench_system.py``), the simpy ``Cluster``, the
heap loop and the prototype run interleaved ``--repeats`` times; printed: min / median ms and the ratios
simpy / side (min-vs-min / median of paired). A second loop, :func:`bare_run`, keeps the same heap keys,
rounds and draws but none of the model's objects (a list buffer, two counters, no records, the rules of
``max_lag``/``drop`` inlined; its clock and finish times are checked against simpy's too): what is left of
the time when the model's own calls are gone. ``--profile``: where the time is, per source file (cProfile),
in the prototype and in a continuous-batching system on both loops.

Usage: python benchmarks/bench_timing_floor.py [--repeats 5] [--steps 1000] [--only plain|engines]
[--engine-steps 40] [--profile]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
from heapq import heappop, heappush

import numpy as np
from _timing import interleaved
from bench_system import bare_simpy_lean, plain

from sandbox.base.gc_pause import paused_cyclic_gc
from sandbox.system.cluster import Cluster, ClusterResult, Job, SimulationError
from sandbox.system.config import SystemConfig
from sandbox.system.heap_loop import (
    _ANY,
    _DISPATCH,
    _DONE,
    _END,
    _EVENT,
    _HOLD,
    _ROUND,
    _START,
    _VISIBLE,
    NORMAL,
    URGENT,
    HeapCluster,
)
from sandbox.system.timing_only import CountingTrainer, TimingOnlyWorkload, simulate_timing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LEARN, _TRAINED = 20, 21  # the learner's start and the end of its training hold (the kernel's kinds are 0-9)
_LEARNER = -1  # the learner's entry in a round (a worker is its id, in a run of parked workers)


@paused_cyclic_gc()
def floor_run(
    cfg: SystemConfig, steps: int, B: int, G: int = 1, seed: int = 0, record_events: bool = True, keep=None
) -> ClusterResult:
    """``simulate_timing(cfg, steps, B, G, seed, record_events)`` of a plain system or one of
    continuous-batching engines, as one loop (module docstring); returns the :class:`ClusterResult`.
    ``keep``: a list the cluster is appended to (its engines' counters)."""
    cluster = HeapCluster(cfg, TimingOnlyWorkload(), CountingTrainer(), B, G, seed, record_events=record_events)
    if keep is not None:
        keep.append(cluster)
    engines = cluster.engines
    if cfg.partial_rollouts or cluster.parts != 1 or cluster.updates_per_batch != 1:
        raise ValueError("floor_run: no partial rollouts, no split group")
    if engines is not None:  # each engine's process as steps of the loop (the heap loop's EngineSteps)
        cluster._engine_steps()
        gen, rng, lengths_of = cfg.generation_time, cluster.rng, cluster.lengths
        draw_lengths, per_engine = gen.lengths, gen.workers_per_engine
        on_done = [lambda _, wid=wid: (finish(wid), dispatch(wid)) for wid in range(len(cluster.speeds))]
    env = cluster.env
    heap, order = env.heap, env.order
    control, store, workload, trainer = cluster.control, cluster.store, cluster.workload, cluster.trainer
    buffer, jobs, events = cluster.buffer, cluster.jobs, cluster.events
    admit, on_dispatch, on_finish = control.admit, control.on_dispatch, control.on_finish
    take, could_take, on_publish = control.take, control.could_take, control.on_publish
    sample, finish_payload, add_job = workload.sample, workload.finish, jobs.append
    train, release, emit, draw = trainer.train, cluster._release, cluster._emit, cluster._draw
    utilisation, notify = cluster.worker_utilisation, cluster._notify
    running_since, speeds, log = cluster.running_since, cluster.speeds, cluster._log
    current: list[Job | None] = [None] * len(speeds)
    batches = steps
    # the learner's state between its steps
    step, wait_start, last_time = 0, 0.0, 0.0
    batch: list = []
    result = None
    duration = 0.0

    def park(wid: int) -> None:
        rnd = cluster._round
        if rnd and type(rnd[-1]) is list:
            rnd[-1].append(wid)
        else:
            rnd.append([wid])

    def dispatch(wid: int) -> None:
        admission = admit(store.visible, len(buffer))
        if admission is None:
            park(wid)
            return
        version, target, now = admission.version, admission.target_step, env.now
        job = Job(len(jobs), wid, version, now, target)
        on_dispatch(job)
        add_job(job)
        running_since[job.id] = now
        if log is not None:
            log((now, "dispatch", wid, job.id, version, -1 if target is None else target))
        current[wid] = job
        if engines is not None:  # Cluster._generate_on_engine: the group submitted to the worker's engine
            engine = engines[wid // per_engine]
            weights = store.get(version)
            job.payload = payload = sample(weights, version, G)
            job.tail_version = version
            lengths = draw_lengths(rng, payload, G, job.id, version)
            problem = engine.misfit(lengths)
            if problem is not None:
                raise SimulationError(problem)
            lengths_of[job.id] = lengths
            engine.submit(job, lengths, version, weights).callbacks.append(on_done[wid])
            return
        job.payload = payload = sample(store.get(version), version, G)
        job.tail_version = version
        heappush(
            heap, (now + draw("generation_time", payload.decode_steps, speeds[wid]), NORMAL, next(order), _DONE, wid)
        )

    def finish(wid: int) -> None:
        job = current[wid]
        job.payload = payload = finish_payload(job.payload)
        job.finish_time = now = env.now
        cluster.busy_done += now - running_since.pop(job.id)
        cluster.samples_generated += int(payload.num_responses)
        on_finish(job)
        buffer.append(job)
        if log is not None:
            log((now, "finish", wid, job.id, job.tail_version, -1))
        notify()

    def learn() -> None:
        """The learner's take loop, then its step up to the training hold (``Cluster._learner``)."""
        nonlocal batch, result, duration
        while True:
            taken = take(step, buffer)
            if taken.dropped:
                for job in taken.dropped:
                    job.dropped_at = step
                    cluster._event("drop", job.worker, job.id, job.head_version, step)
                release(taken.dropped)
            if taken.batch is not None:
                break
            if taken.dropped:
                notify()
            cluster._round.append(_LEARNER)
            return
        batch = taken.batch
        notify()
        now = env.now
        for job in batch:
            job.consume_time = now
            job.consume_step = step
        if log is not None:
            log((now, "consume", -1, -1, -1, step))
        result = train(step, batch, now)
        release(batch)
        duration = draw("train_time", result.tokens * result.passes)
        if log is not None:
            log((now, "train_start", -1, -1, -1, step))
        heappush(heap, (now + duration, NORMAL, next(order), _TRAINED, None))

    def trained() -> bool:
        """The rest of the learner's step after the hold; whether the learner's process ends."""
        nonlocal step, wait_start, last_time
        cluster.learner_busy += duration
        if log is not None:
            log((env.now, "train_end", -1, -1, -1, step))
        cluster.samples_consumed += sum(j.num_samples for j in batch)
        cluster.tokens_consumed += result.tokens
        on_publish(step + 1)
        store.publish(step + 1, result.weights, draw("sync_delay"))
        if log is not None:
            log((env.now, "publish", -1, -1, step + 1, -1))
            events.tidy()
        now = env.now
        row = {
            "time": now,
            "step": step,
            "system/step_time": now - last_time,
            "system/learner_wait": now - wait_start - duration,
            "system/dropped": control.dropped,
            "system/buffer": len(buffer),
            "throughput/samples_per_s": cluster.samples_consumed / now if now > 0 else math.nan,
            "throughput/tokens_per_s": cluster.tokens_consumed / now if now > 0 else math.nan,
            "throughput/generated_per_s": cluster.samples_generated / now if now > 0 else math.nan,
            "util/workers": utilisation(),
            "util/learner": cluster.learner_busy / now if now > 0 else math.nan,
        }
        last_time = now
        row.update(result.metrics)
        emit(row)
        notify()
        if result.stop:
            cluster.status = "diverged"
            return True
        step += 1
        if step == batches:
            cluster.status = "completed"
            return True
        cluster.learner_step = step
        wait_start = env.now
        learn()
        return False

    for wid in range(len(speeds)):
        heappush(heap, (0.0, URGENT, next(order), _DISPATCH, wid))
    heappush(heap, (0.0, URGENT, next(order), _LEARN, None))
    while True:
        if not heap:
            raise SimulationError(cluster._stuck_reason())
        env.now, _, at, kind, arg = heappop(heap)
        if kind == _HOLD:
            if at == arg.hold:
                arg.on_hold()
        elif kind == _ANY:
            arg.on_any()
        elif kind == _DONE:
            finish(arg)
            dispatch(arg)
        elif kind == _ROUND:
            for entry in arg:
                if type(entry) is not list:  # the learner
                    if could_take(step, buffer):
                        learn()
                    else:
                        cluster._round.append(entry)
                    continue
                for i, wid in enumerate(entry):
                    if not cluster._admissible():
                        rnd = cluster._round
                        if rnd and type(rnd[-1]) is list:
                            rnd[-1].extend(entry[i:])
                        else:
                            rnd.append(entry[i:])
                        break
                    dispatch(wid)
        elif kind == _TRAINED:
            if trained():
                heappush(heap, (env.now, NORMAL, next(order), _END, None))
        elif kind == _EVENT:
            callbacks, arg.callbacks = arg.callbacks, None
            for callback in callbacks:
                callback(arg)
        elif kind == _VISIBLE:  # a publication's sync (heap_loop.HeapWeightStore)
            store._sync(*arg)
        elif kind == _DISPATCH:
            dispatch(arg)
        elif kind == _START:
            arg.start()
        elif kind == _LEARN:
            cluster.learner_step, wait_start = 0, env.now
            learn()
        else:  # _END
            break
    return ClusterResult(
        status=cluster.status,
        steps_done=len(cluster.rows),
        sim_time=env.now,
        jobs=jobs,
        events=events,
        rows=cluster.rows,
        dropped=control.dropped,
        lengths=cluster.lengths,
    )


def bare_run(steps: int, workers: int, B: int, capacity: int, seed: int = 0) -> tuple[float, list[float]]:
    """The schedule of :func:`plain` with none of the model: the same heap keys, rounds and draws as
    :func:`floor_run` (so the same clock and finish times, checked), with the ``max_lag``/``drop`` rules
    inlined on a list buffer and two counters, no job record, event log or row. Returns the clock and the
    jobs' finish times."""
    rng = np.random.default_rng(seed)
    exponential = rng.exponential
    heap: list[tuple] = []
    order = iter(range(1 << 62))
    buffer: list[int] = []
    finish_time: list[float] = []
    version_of: list[int] = []
    rnd: list = []  # the current round: _LEARNER or a run (list) of parked workers
    running = visible = step = 0
    now = 0.0

    def notify() -> None:
        nonlocal rnd
        if rnd:
            heappush(heap, (now, NORMAL, next(order), _ROUND, rnd))
            rnd = []

    def dispatch(wid: int) -> None:
        nonlocal running
        if len(buffer) + running >= capacity:
            if rnd and type(rnd[-1]) is list:
                rnd[-1].append(wid)
            else:
                rnd.append([wid])
            return
        running += 1
        job = len(finish_time)
        finish_time.append(math.nan)
        version_of.append(visible)
        current[wid] = job
        heappush(heap, (now + float(exponential(1.0)) / 1.0, NORMAL, next(order), _DONE, wid))

    def learn() -> None:
        if len(buffer) < B:
            rnd.append(_LEARNER)
            return
        del buffer[:B]
        notify()
        heappush(heap, (now + 0.2, NORMAL, next(order), _TRAINED, None))

    current = [0] * workers
    for wid in range(workers):
        heappush(heap, (0.0, URGENT, next(order), _DISPATCH, wid))
    heappush(heap, (0.0, URGENT, next(order), _LEARN, None))
    while True:
        now, _, _, kind, arg = heappop(heap)
        if kind == _DONE:
            job = current[arg]
            finish_time[job] = now
            running -= 1
            buffer.append(job)
            notify()
            dispatch(arg)
        elif kind == _ROUND:
            for entry in arg:
                if type(entry) is not list:
                    if len(buffer) >= B:
                        learn()
                    else:
                        rnd.append(entry)
                    continue
                for i, wid in enumerate(entry):
                    if len(buffer) + running >= capacity:
                        if rnd and type(rnd[-1]) is list:
                            rnd[-1].extend(entry[i:])
                        else:
                            rnd.append(entry[i:])
                        break
                    dispatch(wid)
        elif kind == _TRAINED:
            heappush(heap, (now, URGENT, next(order), _EVENT, step + 1))  # the sync: visible at once
            notify()
            step += 1
            if step == steps:
                heappush(heap, (now, NORMAL, next(order), _END, None))
            else:
                learn()
        elif kind == _EVENT:
            visible = arg
            notify()
        elif kind == _DISPATCH:
            dispatch(arg)
        elif kind == _LEARN:
            learn()
        else:
            return now, finish_time


CASES = {  # name: (system, steps, groups per step, record events)
    "16 workers, B=8, capacity 64, events": (plain(16, 64), None, 8, True),
    "16 workers, no events": (plain(16, 64), None, 8, False),
    "1024 workers, B=64, capacity 128, 10 steps": (plain(1024, 128), 10, 64, True),
}


def _same(got: ClusterResult, ref: ClusterResult) -> bool:
    columns = ["t", "kind", "worker", "job", "version", "step"]
    return (
        got.jobs.to_frame().equals(ref.jobs.to_frame())
        and got.rows.to_frame().equals(ref.rows.to_frame())
        and got.events.to_frame(columns).equals(ref.events.to_frame(columns))
        and got.sim_time == ref.sim_time
        and got.status == ref.status
    )


def profile_shares(label: str, fn, *args, **kwargs) -> None:
    """cProfile of ``fn(*args, **kwargs)``: its own time (``tottime``) summed per source file, as a share of
    the run (cProfile's per-call overhead inflates small functions: read the shares, not the times)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(fn, *args, **kwargs)
    shares: dict[str, float] = {}
    for (path, _, func), (_, _, tottime, _, _) in pstats.Stats(profiler).stats.items():
        if "simpy" in path.split(os.sep):
            where = "simpy"
        elif path.startswith(os.sep):
            where = os.path.relpath(path, ROOT)
        else:  # "~": a built-in; "<string>": the __init__ dataclasses generate (Job, the payload, Admission)
            where = "dataclass __init__" if path == "<string>" else f"built-in {func}"
        shares[where] = shares.get(where, 0.0) + tottime
    total = sum(shares.values())
    print(f"cProfile, {label}: own time per file")
    for where, t in sorted(shares.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {100 * t / total:5.1f}%  {where}")


def profiles(steps: int) -> None:
    """The prototype on the first case, and a continuous-batching system (``bench_system.engine_system``,
    partial syncs, 40 steps) in the prototype, on the heap loop and on simpy: where the time is once the loop
    is gone."""
    from bench_system import engine_system

    cfg, _, B, events = next(iter(CASES.values()))
    profile_shares(f"the prototype, first case, {steps} steps", floor_run, cfg, steps, B, record_events=events)
    profile_shares(
        "the prototype, engines (partial syncs, 40 steps)", floor_run, engine_system("partial"), 40, 16, 8, 0, False
    )
    for engine in ("heap", "simpy"):
        profile_shares(
            f"engines (64 workers on 8, B=16, G=8, partial syncs, 40 steps) on the {engine} loop",
            simulate_timing,
            engine_system("partial"),
            40,
            16,
            8,
            record_events=False,
            engine=engine,
        )


def call_costs() -> None:
    """The model's calls of a job and of a learner step timed alone (``timeit``, the min of 5 × 20,000) on a
    fresh 16-worker cluster's own objects (buffer empty, 16 jobs running), in µs a call."""
    import timeit

    cfg, _, B, _ = next(iter(CASES.values()))
    cluster = HeapCluster(cfg, TimingOnlyWorkload(), CountingTrainer(), B, 1, 0)
    control, store, workload = cluster.control, cluster.store, cluster.workload
    for k in range(16):
        cluster.running_since[k] = 0.1 * k
    cluster.env.now = 5.0
    row = {"time": 1.0, "step": 3, "system/step_time": 0.1, "system/learner_wait": 0.2, "system/dropped": 0}
    row |= {"system/buffer": 3, "throughput/samples_per_s": 1.0, "throughput/tokens_per_s": 0.0}
    row |= {"throughput/generated_per_s": 2.0, "util/workers": 0.9, "util/learner": 0.3}
    calls = {
        "control.admit": lambda: control.admit(0, 3),
        "Job(...)": lambda: Job(1, 2, 0, 4.0, None),
        "workload.sample": lambda: workload.sample(0, 0, 1),
        "Cluster._draw (exponential)": lambda: cluster._draw("generation_time", 0, 1.0),
        "  of which rng.exponential": lambda: float(cluster.rng.exponential(1.0)),
        "control.could_take (empty buffer)": lambda: control.could_take(0, []),
        "control.take (empty buffer)": lambda: control.take(0, []),
        "Cluster._draw (constant)": lambda: cluster._draw("train_time", 0),
        "Cluster.worker_utilisation (16 running)": cluster.worker_utilisation,
        "MetricRows.append (11 columns)": lambda: cluster.rows.append(row),
        "empty call": lambda: None,
    }
    print("the model's calls timed alone (µs a call):")
    for name, fn in calls.items():
        print(f"  {name:40s} {min(timeit.repeat(fn, number=20_000, repeat=5)) / 20_000 * 1e6:6.2f}")
    v = [0]

    def publish() -> None:  # a publication and its sync, run to the end (the heap's entries processed)
        v[0] += 1
        store.publish(v[0], v[0], cluster._draw("sync_delay"))
        heap = cluster.env.heap
        while heap:
            event = heappop(heap)[4]
            if event.__class__ is not list:
                callbacks, event.callbacks = event.callbacks, None
                for callback in callbacks:
                    callback(event)
        cluster._round = []
        cluster.events._pending.clear()

    print(
        f"  {'store.publish and its sync':40s} {min(timeit.repeat(publish, number=20_000, repeat=5)) / 2e4 * 1e6:6.2f}"
    )


class ProcessEngines(HeapCluster):
    """The heap loop with each continuous-batching engine run as its process (``Engine._run`` resumed through
    the kernel's ``Timeout`` and ``AnyOf`` events): the heap loop before :class:`EngineSteps`."""

    def _engine_steps(self) -> None:
        pass


@paused_cyclic_gc()
def timing_run(cls, cfg: SystemConfig, steps: int, B: int, G: int, record_events: bool, keep=None) -> ClusterResult:
    """``simulate_timing`` on the cluster class ``cls``; ``keep``: a list the cluster is appended to."""
    cluster = cls(cfg, TimingOnlyWorkload(), CountingTrainer(), B, G, 0, record_events=record_events)
    if keep is not None:
        keep.append(cluster)
    return cluster.run(steps)


def engine_counters(cluster) -> list[tuple]:
    return [(e.busy, e.steps, e.syncs, e.kv_used, e.decoded, e.version) for e in cluster.engines]


ENGINE_CASES = {  # name: (sync mode, record events); 64 workers on 8 engines, B = 16, G = 8
    "engines, partial syncs": ("partial", False),
    "engines, partial syncs, events": ("partial", True),
    "engines, drain": ("drain", False),
    "engines, abort": ("abort", False),
}


def engine_floor(steps: int, repeats: int) -> None:
    """The continuous-batching cases (``bench_system.engine_system``): each side's tables, engine counters and
    lengths checked against the simpy cluster's, then the sides timed interleaved."""
    from bench_system import engine_system

    sides = {
        "simpy Cluster": lambda cfg, ev, keep=None: timing_run(Cluster, cfg, steps, 16, 8, ev, keep),
        "heap, engine processes": lambda cfg, ev, keep=None: timing_run(ProcessEngines, cfg, steps, 16, 8, ev, keep),
        "heap loop": lambda cfg, ev, keep=None: timing_run(HeapCluster, cfg, steps, 16, 8, ev, keep),
        "floor prototype": lambda cfg, ev, keep=None: floor_run(cfg, steps, 16, 8, record_events=ev, keep=keep),
    }
    for name, (mode, events) in ENGINE_CASES.items():
        cfg = engine_system(mode)
        runs = {side: ([], fn) for side, fn in sides.items()}
        results = {side: fn(cfg, events, keep) for side, (keep, fn) in runs.items()}
        ref, ref_engines = results["simpy Cluster"], engine_counters(runs["simpy Cluster"][0][0])
        for side, res in results.items():
            if not (
                _same(res, ref)
                and dict(res.lengths) == dict(ref.lengths)
                and engine_counters(runs[side][0][0]) == ref_engines
            ):
                raise SystemExit(f"{name}: {side}'s tables differ from the simpy cluster's")
        times = interleaved({side: lambda fn=fn: fn(cfg, events) for side, fn in sides.items()}, repeats)
        jobs, batches = len(ref.jobs), sum(c[1] for c in ref_engines)
        print_against_simpy(f"{name}, {steps} steps ({jobs} jobs, {batches} engine decode steps):", times, 24)


def print_against_simpy(title: str, times: dict[str, list[float]], width: int) -> None:
    """Each side's min / median ms and simpy Cluster / side (min-vs-min / median of paired ratios)."""
    print(title)
    sp = times["simpy Cluster"]
    for side, ts in times.items():
        paired = statistics.median(a / b for a, b in zip(sp, ts))
        print(
            f"  {side:{width}s} {min(ts) * 1e3:7.1f} / {statistics.median(ts) * 1e3:7.1f}"
            f"   simpy Cluster / it {min(sp) / min(ts):5.2f}x / {paired:5.2f}x",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--engine-steps", type=int, default=40, help="learner steps of the continuous-batching cases")
    ap.add_argument("--only", choices=("plain", "engines"), help="only the plain or the continuous-batching cases")
    ap.add_argument("--profile", action="store_true", help="also where the time is, per source file (cProfile)")
    args = ap.parse_args()
    if args.profile:
        profiles(args.steps)
        call_costs()
    print(f"load average {os.getloadavg()[0]:.1f}; {args.repeats} interleaved repeats; ms min / median")
    if args.only != "plain":
        engine_floor(args.engine_steps, args.repeats)
    for name, (cfg, steps, B, events) in CASES.items() if args.only != "engines" else ():
        steps = steps or args.steps
        ref = simulate_timing(cfg, steps, B, record_events=events, engine="simpy")
        if not _same(floor_run(cfg, steps, B, record_events=events), ref):
            raise SystemExit(f"{name}: the prototype's tables differ from the simpy cluster's")
        W, cap = cfg.num_workers, cfg.staleness.queue_capacity
        clock, finish_times = bare_run(steps, W, B, cap)
        ref_finish = ref.jobs.to_frame()["finish_time"].to_numpy()
        if clock != ref.sim_time or not np.array_equal(np.array(finish_times), ref_finish, equal_nan=True):
            raise SystemExit(f"{name}: the bare loop's schedule differs from the simpy cluster's")
        times = interleaved(
            {
                "lean bare simpy": lambda: bare_simpy_lean(steps, W, B, cap, 0),
                "bare heapq loop": lambda: bare_run(steps, W, B, cap),
                "simpy Cluster": lambda: simulate_timing(cfg, steps, B, record_events=events, engine="simpy"),
                "heap loop": lambda: simulate_timing(cfg, steps, B, record_events=events, engine="heap"),
                "floor prototype": lambda: floor_run(cfg, steps, B, record_events=events),
            },
            args.repeats,
        )
        print_against_simpy(f"{name}, {steps} steps:", times, 16)


if __name__ == "__main__":
    main()
