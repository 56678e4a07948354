"""A replica's event schedule, simulated without learning, as the ordered list of what it asks of a
learner: sample a group with version v, finish (reward) a group, train on a batch.

When the timing cannot depend on the policy (every response has the task's fixed length, so the
decode steps and tokens that the delays may read are known in advance), the cluster's schedule is
a function of the system seed alone. :func:`record_schedule` runs the real :class:`Cluster`
with a workload and a trainer that only record the calls the cluster makes, in the order it makes
them; :mod:`sandbox.run.replay` then drives R batched learners through R such schedules
(``run.schedules = "independent"``, ``docs/system.md#independent-schedules``). The recording is
the same simulation as a run's, so a replica replayed from it sees the same versions, batches and
clock as a separate run with its seeds.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from sandbox.base.gc_pause import paused_cyclic_gc
from sandbox.system.cluster import Job, TrainResult
from sandbox.system.config import SystemConfig
from sandbox.system.heap_loop import HeapCluster

DISPATCH, FINISH, TAKE = 0, 1, 2
"""Operation kinds of a schedule, in the order the cluster calls the workload and the trainer."""

SYSTEM_COLUMNS = (
    "time",
    "system/step_time",
    "system/learner_wait",
    "system/dropped",
    "system/buffer",
    "throughput/samples_per_s",
    "throughput/tokens_per_s",
    "throughput/generated_per_s",
    "util/workers",
    "util/learner",
)
"""The cluster's columns of a metrics row (:meth:`Cluster._learner`), kept per batch."""


@dataclass
class Schedule:
    """One replica's schedule: ``ops[i]`` is an operation kind and ``args[i]`` its job id
    (``DISPATCH``, ``FINISH``) or its batch index (``TAKE``)."""

    ops: np.ndarray
    args: np.ndarray
    job_version: np.ndarray
    """``(jobs,)`` the version each job samples with (its admitted version)."""
    job_worker: np.ndarray
    """``(jobs,)`` the worker that ran it, or with groups split over workers its in-flight slot
    (:func:`in_flight_slots`): where the replay keeps its rollouts."""
    job_batch: np.ndarray
    """``(jobs,)`` the batch that consumed it, -1 if dropped or still in flight at the end."""
    job_slot: np.ndarray
    """``(jobs,)`` its position in that batch (the learner's order), -1 if not consumed."""
    system: np.ndarray
    """``(batches, len(SYSTEM_COLUMNS))`` the cluster's row per consumed batch (clock, throughput,
    utilisation), as an array: a replica's schedule costs tens of bytes per group, not a dict per step."""
    sim_time: float
    jobs: list[Job] | None = None
    """The job records (kept for one replica only: the jobs table and timeline figures)."""
    events: list[tuple] | None = None

    @property
    def batches(self) -> int:
        return len(self.system)


@dataclass
class _Recorded:
    """A recorded job's payload: what the cluster reads (sizes) plus its id."""

    id: int
    decode_steps: int
    token_count: int
    num_responses: int


class _RecordingWorkload:
    def __init__(self, decode_steps: int, log: list[tuple[int, int]]):
        self.decode_steps = decode_steps
        self.log = log
        self.versions: list[int] = []

    def sample(self, weights, version, group_size):
        job = len(self.versions)
        self.versions.append(version)
        self.log.append((DISPATCH, job))
        return _Recorded(job, self.decode_steps, self.decode_steps * group_size, group_size)

    def finish(self, payload):
        self.log.append((FINISH, payload.id))
        return payload


class _RecordingTrainer:
    """Consumes a batch as the learner would: ``minibatches × epochs`` optimizer steps, cut at
    ``total_steps``; reports the tokens of the first pass, as :class:`sandbox.learner.trainer.Learner` does."""

    def __init__(self, log: list[tuple[int, int]], minibatches: int, epochs: int, total_steps: int):
        self.log = log
        self.minibatches, self.epochs, self.total_steps = minibatches, epochs, total_steps
        self.batches: dict[int, tuple[int, int]] = {}

    def initial_weights(self):
        return 0

    def train(self, step, jobs, now):
        self.log.append((TAKE, step))
        batches = self.batches
        for slot, job in enumerate(jobs):
            batches[job.payload.id] = (step, slot)
        m = self.minibatches
        parts = min(m, max(self.total_steps - step * m * self.epochs, 0))  # mini-batches trained in the first pass
        tokens = jobs[0].payload.token_count * (len(jobs) // m) * parts  # every group has the same fixed length
        return TrainResult(weights=step + 1, tokens=tokens, passes=self.epochs)


def in_flight_slots(ops: np.ndarray, args: np.ndarray, jobs: int) -> np.ndarray:
    """Per job, a slot no other job holds while it is in flight (from its ``DISPATCH`` to its
    ``FINISH``): the smallest free one. The replay keeps a group's rollouts in its slot. A worker is such
    a slot when every group is one worker's job; a group split over several workers
    (docs/system.md#work-conserving-synchronous-steps) leaves its first worker free for other work while
    its last part runs, so split runs use these slots instead. At most ``num_workers`` groups are ever in
    flight (a new group is admitted only when no part waits, so every in-flight group has a running
    part), so the slots fit the replay's ``(R, workers)`` table."""
    out = np.full(jobs, -1, dtype=np.int64)
    free: list[int] = []
    used = 0
    for kind, job in zip(ops.tolist(), args.tolist()):
        if kind == DISPATCH:
            if free:
                out[job] = heapq.heappop(free)
            else:
                out[job], used = used, used + 1
        elif kind == FINISH:
            heapq.heappush(free, int(out[job]))
    return out


@paused_cyclic_gc()  # the cluster is garbage once this returns (sandbox/base/gc_pause.py)
def record_schedule(
    cfg: SystemConfig,
    steps: int,
    groups_per_step: int,
    group_size: int,
    decode_steps: int,
    seed: int,
    minibatches: int = 1,
    epochs: int = 1,
    keep_jobs: bool = False,
    record_events: bool = False,
) -> Schedule:
    """Simulate the system for ``steps`` optimizer steps with every response ``decode_steps`` long and
    record its schedule; ``keep_jobs`` keeps the job records (and, with ``record_events``, the log)."""
    log: list[tuple[int, int]] = []
    workload = _RecordingWorkload(decode_steps, log)
    trainer = _RecordingTrainer(log, minibatches, epochs, steps)
    cluster = HeapCluster(
        cfg,
        workload,
        trainer,
        groups_per_step,
        group_size,
        seed,
        record_events=keep_jobs and record_events,
        updates_per_batch=minibatches * epochs,
    )
    res = cluster.run(steps)
    ops = np.array([k for k, _ in log], dtype=np.int8)
    args = np.array([a for _, a in log], dtype=np.int64)
    n = len(workload.versions)
    batch = np.full(n, -1, dtype=np.int64)
    slot = np.full(n, -1, dtype=np.int64)
    for job, (b, s) in trainer.batches.items():
        batch[job], slot[job] = b, s
    return Schedule(
        ops=ops,
        args=args,
        job_version=np.asarray(workload.versions, dtype=np.int64),
        job_worker=(
            np.array([j.worker for j in res.jobs], dtype=np.int64)
            if cluster.parts == 1
            else in_flight_slots(ops, args, len(workload.versions))
        ),
        job_batch=batch,
        job_slot=slot,
        system=np.array([[row[c] for c in SYSTEM_COLUMNS] for row in res.rows], dtype=np.float64).reshape(
            -1, len(SYSTEM_COLUMNS)
        ),
        sim_time=res.sim_time,
        jobs=res.jobs if keep_jobs else None,
        events=res.events if keep_jobs else None,
    )
