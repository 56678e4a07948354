"""R replicas, each under its own event schedule, trained as one batched learner.

Under ``run.schedules = "shared"`` (the default) the R replicas of a task share one simulated
cluster: one clock, one order of dispatches, the same versions in every batch. Under
``"independent"`` replica r is the run with master seed ``run.seed + r``: its own timing stream,
sampling stream and initial weights (``docs/system.md#independent-schedules``). That is only
possible in one batched tensor when the timing cannot depend on the policy (a task with
``fixed_length``, no partial rollouts), because then each replica's schedule can be simulated
first (:func:`sandbox.system.schedule.record_schedule`, the real cluster), and the learners replayed
through them afterwards:

* the replicas advance through their schedules in waves, one operation per replica per wave, and
  stop at their next ``TAKE``; a wave samples the groups dispatched in it with each replica's
  weights of the version its schedule admitted (the last versions are kept in a ring, as deep as the
  largest lag any schedule reaches) and rewards the groups finished in it, each replica drawing from
  its own generator (:class:`sandbox.tasks.draws.RowGenerators`) in its schedule's order;
* when every replica stands at ``TAKE`` b, the learner trains batch b on each replica's own groups
  in its schedule's order, in one batched step.

So replica r draws the same numbers, samples with the same weights and trains on the same batches
as the separate run with seed ``run.seed + r``: every metric is the same to the bit, except an
evaluation computed as a matrix product over the replicas (the bandit's expected reward), whose
last bit depends on R (``tests/system/test_independent_schedules.py``).
The metrics row of a step averages the replicas, clock and system columns included; each replica's
own clock and system columns are in ``replicas.npz``. The jobs table and the event log are replica
0's.
"""

from __future__ import annotations

import math
import multiprocessing
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from sandbox.base.processes import pool_context
from sandbox.scenario.model import check_independent  # noqa: F401 (the scenario's own check, re-exported: the runner asks it here)
from sandbox.system.cluster import ClusterResult, Job
from sandbox.system.records import MetricRows
from sandbox.system.schedule import DISPATCH, FINISH, SYSTEM_COLUMNS, TAKE, Schedule, record_schedule
from sandbox.tasks.draws import RowGenerators
from sandbox.tasks.rollouts import Rollouts

_TOKEN_FIELDS = ("tokens", "behaviour_logp", "token_versions", "lengths", "ended", "version_logp")
"""The per-token and per-response fields of a group; ``rewards`` is kept beside them once drawn.
``version_logp`` is None under the exact engine (then neither stored nor copied)."""


def replica_seeds(run, replicas: int) -> list[dict[str, int]]:
    """Per replica, the three stream seeds of the separate run with master seed ``run.seed + r``."""
    return [run.model_copy(update={"seed": run.seed + r}).seeds() for r in range(replicas)]


@dataclass
class _Slots:
    """Rollout fields of groups in a leading-index store: ``(*lead, G, T)`` per token field."""

    tensors: dict[str, torch.Tensor]

    @classmethod
    def like(cls, lead: tuple[int, ...], ro: Rollouts, rewards: torch.Tensor | None) -> _Slots:
        def alloc(t: torch.Tensor) -> torch.Tensor:
            return torch.zeros(lead + tuple(t.shape[1:]), dtype=t.dtype)

        tensors = {f: alloc(getattr(ro, f)) for f in _TOKEN_FIELDS if getattr(ro, f) is not None}
        if rewards is not None:
            tensors["rewards"] = alloc(rewards)
        return cls(tensors)

    def put(self, index: tuple, ro: Rollouts, rewards: torch.Tensor | None = None) -> None:
        for f in _TOKEN_FIELDS:
            if f in self.tensors:
                self.tensors[f][index] = getattr(ro, f)
        if rewards is not None:
            self.tensors["rewards"][index] = rewards

    def get(self, index: tuple, group_size: int, with_rewards: bool) -> Rollouts:
        t = {f: self.tensors[f][index] for f in _TOKEN_FIELDS if f in self.tensors}
        return Rollouts(**t, group_size=group_size, rewards=self.tensors["rewards"][index] if with_rewards else None)


class IndependentReplay:
    """Trains ``learner`` (R replicas) through one recorded schedule per replica."""

    def __init__(self, scn, task, learner, seeds: list[dict[str, int]], on_step=None):
        self.scn, self.task, self.learner, self.on_step = scn, task, learner, on_step
        self.seeds = seeds
        self.R = len(seeds)
        self.B = scn.algorithm.groups_per_step
        self.G = scn.algorithm.group_size
        self.S = scn.algorithm.updates_per_batch

    def record(self, steps: int) -> list[Schedule]:
        """Every replica's schedule, simulated in ``run.processes`` processes (each schedule depends
        on its seed alone, so the result does not depend on how many)."""
        a = self.scn.algorithm
        jobs = [
            (
                self.scn.system,
                steps,
                self.B,
                self.G,
                self.task.max_len,
                s["system"],
                a.minibatches,
                a.epochs,
                r == 0,
                self.scn.run.record_events,
            )
            for r, s in enumerate(self.seeds)
        ]
        processes = min(self.scn.run.processes, len(jobs))
        if processes <= 1 or multiprocessing.current_process().daemon:  # a daemonic worker may not start children
            return [_record(job) for job in jobs]
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        try:
            with ProcessPoolExecutor(processes, mp_context=pool_context()) as pool:
                return list(pool.map(_record, jobs, chunksize=max(1, len(jobs) // (4 * processes))))
        except BrokenProcessPool:  # workers that cannot start (a __main__ read from stdin): same schedules here
            warnings.warn(
                "run.processes: the worker processes could not start; simulating the schedules in this "
                "process (same numbers, slower)",
                RuntimeWarning,
                stacklevel=2,
            )
            return [_record(job) for job in jobs]

    def run(self, steps: int, schedules: list[Schedule] | None = None) -> ClusterResult:
        schedules = self.record(steps) if schedules is None else schedules
        R, B, G, S = self.R, self.B, self.G, self.S
        learner, task = self.learner, self.task
        batches = schedules[0].batches
        offsets = np.cumsum([0] + [len(s.ops) for s in schedules])
        ops = np.concatenate([s.ops for s in schedules])
        args = np.concatenate([s.args for s in schedules])
        job_base = np.cumsum([0] + [len(s.job_version) for s in schedules])
        version = np.concatenate([s.job_version for s in schedules])
        worker = np.concatenate([s.job_worker for s in schedules])
        jbatch = np.concatenate([s.job_batch for s in schedules])
        jslot = np.concatenate([s.job_slot for s in schedules])
        depth, ahead = _ring_sizes(schedules)
        workers = len(self.scn.system.speeds())
        system = np.stack([s.system for s in schedules], 1)  # (batches, R, columns)

        weights = learner.initial_weights()
        history = {k: torch.zeros((depth,) + tuple(v.shape), dtype=v.dtype) for k, v in weights.items()}
        for k, v in weights.items():
            history[k][0] = v
        gens = [torch.Generator().manual_seed(s["sampling"]) for s in self.seeds]
        inflight: _Slots | None = None
        pending: _Slots | None = None
        cursor = offsets[:-1].copy()
        rows = MetricRows(capacity=steps)  # typed columns, not a dict per step; its frame is pd.DataFrame(rows)
        status = "completed"
        for b in range(batches):
            while True:
                kinds = ops[cursor]
                moving = kinds != TAKE
                if not moving.any():
                    break
                jobs = job_base[:-1] + args[cursor]
                dispatch = np.flatnonzero(kinds == DISPATCH)
                if dispatch.size:
                    rows_t = torch.from_numpy(dispatch)
                    j = jobs[dispatch]
                    v = version[j]
                    vt = torch.from_numpy(v % depth)
                    params = {k: h[vt, rows_t] for k, h in history.items()}
                    group = Rollouts.empty(dispatch.size, G)
                    ro = task.generate(params, group, RowGenerators([gens[r] for r in dispatch]), torch.from_numpy(v))
                    if inflight is None:
                        inflight = _Slots.like((R, workers), ro, None)
                    inflight.put((rows_t, torch.from_numpy(worker[j])), ro)
                finish = np.flatnonzero(kinds == FINISH)
                if finish.size:
                    rows_t = torch.from_numpy(finish)
                    j = jobs[finish]
                    ro = inflight.get((rows_t, torch.from_numpy(worker[j])), G, with_rewards=False)
                    rewards = task.rewards(ro, RowGenerators([gens[r] for r in finish]))
                    kept = jbatch[j] >= 0
                    if kept.any():
                        if pending is None:
                            pending = _Slots.like((ahead, R, B), ro, rewards)
                        k = torch.from_numpy(np.flatnonzero(kept))
                        index = (torch.from_numpy(jbatch[j][kept] % ahead), rows_t[k], torch.from_numpy(jslot[j][kept]))
                        pending.put(index, _take_rows(ro, k), rewards[k])
                cursor[moving] += 1
            taken = args[cursor]
            if (taken != b).any():  # a schedule out of step with the others: a bug, not an input error
                raise AssertionError(f"replicas stand at batches {sorted(set(taken.tolist()))}, expected {b}")
            cursor += 1
            payloads = [pending.get((b % ahead, slice(None), s), G, with_rewards=True) for s in range(B)]
            batch_jobs = [Job(id=-1, worker=-1, head_version=-1, dispatch_time=math.nan, payload=p) for p in payloads]
            result = learner.train(b, batch_jobs, math.nan)
            for k, w in result.weights.items():
                history[k][(b + 1) % depth] = w
            sys_row = dict(zip(SYSTEM_COLUMNS, system[b].mean(0).tolist()))
            step_rows = [result.metrics] if result.step_metrics is None else result.step_metrics
            for i, metrics in enumerate(step_rows):
                row = {**sys_row, "step": b * S + i, **metrics}  # one row per optimizer step, as the cluster emits them
                rows.append(row)
                if self.on_step is not None:
                    self.on_step(row)
            for entry in learner.replica_rows[-len(step_rows) :]:
                entry.update({c: system[b, :, i] for i, c in enumerate(SYSTEM_COLUMNS)})
            if result.stop:
                status = "diverged"
                break
        first = schedules[0]
        return ClusterResult(
            status=status,
            steps_done=len(rows),
            sim_time=float(np.mean([s.sim_time for s in schedules])),
            jobs=first.jobs or [],
            events=first.events or [],
            rows=rows,
            dropped=int(first.system[-1, SYSTEM_COLUMNS.index("system/dropped")]) if first.batches else 0,
        )


def _record(job: tuple) -> Schedule:
    *args, keep_jobs, record_events = job
    return record_schedule(*args, keep_jobs=keep_jobs, record_events=record_events)


def _take_rows(ro: Rollouts, index: torch.Tensor) -> Rollouts:
    return Rollouts(
        **{f: getattr(ro, f)[index] for f in _TOKEN_FIELDS if getattr(ro, f) is not None}, group_size=ro.group_size
    )


def _ring_sizes(schedules: list[Schedule]) -> tuple[int, int]:
    """(versions to keep, batches to buffer ahead): one more than the largest lag between a dispatch's
    version and the learner's, and than the largest number of batches a finished group waits for."""
    depth, ahead = 1, 1
    for s in schedules:
        trained = np.cumsum(s.ops == TAKE) - (s.ops == TAKE)  # batches trained before each operation
        d = s.ops == DISPATCH
        lag = trained[d] - s.job_version[s.args[d]]
        if lag.size:
            if lag.min() < 0:
                raise AssertionError("a schedule samples with a version the learner has not made yet")
            depth = max(depth, int(lag.max()) + 1)
        f = s.ops == FINISH
        wait = s.job_batch[s.args[f]] - trained[f]
        wait = wait[s.job_batch[s.args[f]] >= 0]
        if wait.size:
            ahead = max(ahead, int(wait.max()) + 1)
    return depth, ahead
