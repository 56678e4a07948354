"""The cluster as a plain heap event loop: :class:`~sandbox.system.cluster.Cluster`'s schedule without
simpy's per-event objects, for timing-only and learning runs alike (:func:`cluster_class`).

The simpy model (``sandbox/system/cluster.py``) processes its events in the order of the key
``(time, priority, scheduling order)`` (simpy 4.1 ``Environment.schedule``: ``(now + delay, priority,
eid)``, with process starts and the sync of a publication ``URGENT``, everything else ``NORMAL``). This
loop keeps one heap with the same key and schedules, in the same order, every event that has a
callback there: the start of each worker and of the learner, a worker's generation timeout, the
learner's training timeout, the sync of a publication, its delayed visibility, each round of the
:class:`~sandbox.system.cluster.Signal` that has a waiter, and the end of the learner (which stops the
run, after the events ahead of it at that time). Events with no callback (``WeightStore.changed`` with
no partial rollout waiting on it) are left out: they change no other event's place. The workers and
the learner are the cluster's own code paths, as generators that yield what they wait for, and every
draw, workload and trainer call, control call and record is made in the same order, so the jobs table,
the event log and the rows are the simpy cluster's to the bit (``tests/base/test_heap_loop.py``: every
shipped scenario; ``tests/system/test_cluster_wakeups.py``: 160 random systems with ties), and a learning
run's numbers with them (``tools/fingerprint.py``).

Covers the systems whose workers sample in one piece (no ``system.partial_rollouts``, no inference
engine model such as ``generation_time.kind = "continuous_batching"``): those keep the simpy cluster,
whose ``AnyOf`` wake-ups and engine processes this loop does not model (:func:`supports`).
"""

from __future__ import annotations

import math
from heapq import heappop, heappush
from itertools import count

from sandbox.system.cluster import Cluster, ClusterResult, Job, SimulationError

URGENT, NORMAL = 0, 1  # simpy.events.URGENT / NORMAL
_START, _RESUME, _ROUND, _SYNC, _VISIBLE, _STOP = range(6)
_GATED = object()  # a worker waits for admission (Signal.wait(gated=True))
_WAIT = object()  # the learner waits for the next round (Signal.wait())
_LEARNER = object()  # the learner's place in a round


def supports(cfg, groups_per_step: int, group_size: int) -> bool:
    """Whether :class:`HeapCluster` models ``cfg`` with this batch: one-piece generation (no partial rollouts, no
    engine model) and groups that are one worker's job (a work-conserving synchronous step that splits groups over
    idle workers, ``ControlConfig.group_parts`` > 1, runs on simpy)."""
    if cfg.partial_rollouts or getattr(cfg.generation_time, "engine_model", False):
        return False
    return cfg.staleness.group_parts(groups_per_step, group_size, cfg.num_workers) == 1


def cluster_class(cfg, groups_per_step: int, group_size: int) -> type[Cluster]:
    """:class:`HeapCluster` where it models ``cfg`` and this batch, else the simpy :class:`Cluster` (same constructor)."""
    return HeapCluster if supports(cfg, groups_per_step, group_size) else Cluster


class _Clock:
    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0.0


class HeapCluster(Cluster):
    """:class:`Cluster` run by a plain heap event loop (same arguments; see the module docstring)."""

    def __init__(self, cfg, *args, **kwargs):
        super().__init__(cfg, *args, **kwargs)
        if self.engines is not None or cfg.partial_rollouts or self.parts > 1:  # what Cluster derived from cfg + batch
            raise ValueError(
                "HeapCluster models one-piece generation of whole groups only (no partial_rollouts, no "
                "engine model, no group split over workers)"
            )
        self.env = _Clock()  # what Cluster's own methods read (``env.now``)
        self.visible = 0

    def run(self, steps: int) -> ClusterResult:
        clock = self.env
        heap: list = []
        seq = count()
        rnd: list = []  # the current round's waiters: _LEARNER, or a run (list) of parked worker ids
        control, log = self.control, self._log

        def notify() -> None:
            nonlocal rnd
            if rnd:
                heappush(heap, (clock.now, NORMAL, next(seq), _ROUND, rnd))
                rnd = []

        def park(wid: int) -> None:
            if rnd and type(rnd[-1]) is list:
                rnd[-1].append(wid)
            else:
                rnd.append([wid])

        def make_visible(version: int) -> None:
            if version > self.visible:
                self.visible = version
                if log is not None:
                    log((clock.now, "visible", -1, -1, version, -1))
                self.store.visible = version
                self.store.prune(
                    control.oldest_needed_version(version)
                )  # the weights through the WeightStore's own API
                notify()

        def publish(version: int, delay: float) -> None:  # WeightStore.publish: its sync, urgent at now
            heappush(heap, (clock.now, URGENT, next(seq), _SYNC, (version, delay)))

        self._notify, self._publish = notify, publish
        procs = [self._worker_steps(w) for w in range(len(self.speeds))]
        procs.append(self._learner_steps(-(-steps // self.updates_per_batch)))
        learner = len(procs) - 1
        for who in range(len(procs)):
            heappush(heap, (0.0, URGENT, next(seq), _START, who))

        def resume(who: int) -> None:
            try:
                cmd = procs[who].send(None)
            except StopIteration:  # the learner returned: its process event ends the run
                heappush(heap, (clock.now, NORMAL, next(seq), _STOP, who))
                return
            if cmd is _GATED:
                park(who)
            elif cmd is _WAIT:
                rnd.append(_LEARNER)
            else:
                heappush(heap, (clock.now + cmd, NORMAL, next(seq), _RESUME, who))

        admissible = self._admissible
        while True:
            if not heap:
                raise SimulationError(self._stuck_reason())
            clock.now, _, _, kind, arg = heappop(heap)
            if kind == _RESUME or kind == _START:
                resume(arg)
            elif kind == _ROUND:
                for entry in arg:
                    if entry is _LEARNER:
                        resume(learner)
                        continue
                    for i, wid in enumerate(entry):
                        if not admissible():  # the rest of the run re-parks, in order (Signal._wake)
                            if rnd and type(rnd[-1]) is list:
                                rnd[-1].extend(entry[i:])
                            else:
                                rnd.append(entry[i:])
                            break
                        resume(wid)
            elif kind == _SYNC:
                version, delay = arg
                if delay > 0:
                    heappush(heap, (clock.now + delay, NORMAL, next(seq), _VISIBLE, version))
                else:
                    make_visible(version)
            elif kind == _VISIBLE:
                make_visible(arg)
            else:  # _STOP
                break
        return ClusterResult(
            status=self.status,
            steps_done=len(self.rows),
            sim_time=clock.now,
            jobs=self.jobs,
            events=self.events,
            rows=self.rows,
            dropped=self.control.dropped,
            lengths=self.lengths,
        )

    def _admissible(self) -> bool:
        return self.control.admit(self.visible, len(self.buffer)) is not None

    def _worker_steps(self, wid: int):
        """:meth:`Cluster._worker` for one-piece generation: yields ``_GATED`` or a timeout's delay."""
        speed = self.speeds[wid]
        clock, control, workload, store = self.env, self.control, self.workload, self.store
        buffer, jobs, running_since, log, G = self.buffer, self.jobs, self.running_since, self._log, self.G
        draw = self._draw
        while True:
            admission = control.admit(self.visible, len(buffer))
            if admission is None:
                yield _GATED
                continue
            version = admission.version
            job = Job(
                id=len(jobs),
                worker=wid,
                head_version=version,
                target_step=admission.target_step,
                dispatch_time=clock.now,
            )
            control.on_dispatch(job)
            jobs.append(job)
            running_since[job.id] = job.dispatch_time
            if log is not None:
                log(
                    (
                        clock.now,
                        "dispatch",
                        wid,
                        job.id,
                        version,
                        -1 if admission.target_step is None else admission.target_step,
                    )
                )
            job.payload = payload = workload.sample(store.get(version), version, G)
            job.tail_version = version
            yield draw("generation_time", payload.decode_steps, speed)
            job.payload = payload = workload.finish(job.payload)
            job.finish_time = now = clock.now
            self.busy_done += now - running_since.pop(job.id)
            self.samples_generated += int(payload.num_responses)
            control.on_finish(job)
            buffer.append(job)
            if log is not None:
                log((now, "finish", wid, job.id, job.tail_version, -1))
            self._notify()

    def _learner_steps(self, batches: int):
        """:meth:`Cluster._learner`: yields ``_WAIT`` or a timeout's delay."""
        clock, control, buffer, log = self.env, self.control, self.buffer, self._log
        notify = self._notify
        last_time = 0.0
        for step in range(batches):
            wait_start = clock.now
            while True:
                taken = control.take(step, buffer)
                if taken.dropped:
                    for job in taken.dropped:
                        job.dropped_at = step
                        self._event("drop", job.worker, job.id, job.head_version, step)
                    self._release(taken.dropped)
                if taken.batch is not None:
                    break
                if taken.dropped:
                    notify()
                yield _WAIT
            batch = taken.batch
            notify()
            now = clock.now
            for job in batch:
                job.consume_time = now
                job.consume_step = step
            if log is not None:
                log((now, "consume", -1, -1, -1, step))
            result = self.trainer.train(step, batch, now)
            self._release(batch)
            duration = self._draw("train_time", result.tokens * result.passes)
            if log is not None:
                log((clock.now, "train_start", -1, -1, -1, step))
            yield duration
            self.learner_busy += duration
            if log is not None:
                log((clock.now, "train_end", -1, -1, -1, step))
            self.samples_consumed += sum(j.num_samples for j in batch)
            self.tokens_consumed += result.tokens
            control.on_publish(step + 1)
            self.store.snapshots[step + 1] = result.weights  # WeightStore.publish, whose sync is scheduled below
            self.store.latest = step + 1
            self._publish(step + 1, self._draw("sync_delay"))
            if log is not None:
                log((clock.now, "publish", -1, -1, step + 1, -1))
                self.events.tidy()
            now = clock.now
            row = {
                "time": now,
                "step": step,
                "system/step_time": now - last_time,
                "system/learner_wait": now - wait_start - duration,
                "system/dropped": control.dropped,
                "system/buffer": len(buffer),
                "throughput/samples_per_s": self.samples_consumed / now if now > 0 else math.nan,
                "throughput/tokens_per_s": self.tokens_consumed / now if now > 0 else math.nan,
                "throughput/generated_per_s": self.samples_generated / now if now > 0 else math.nan,
                "util/workers": self.worker_utilisation(),
                "util/learner": self.learner_busy / now if now > 0 else math.nan,
            }
            last_time = now
            if result.step_metrics is None:
                row.update(result.metrics)
                self._emit(row)
            else:
                for i, metrics in enumerate(result.step_metrics):
                    self._emit({**row, "step": step * self.updates_per_batch + i, **metrics})
            notify()
            if result.stop:
                self.status = "diverged"
                return
        self.status = "completed"
