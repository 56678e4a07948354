"""The cluster on a plain heap event loop: :class:`~sandbox.system.cluster.Cluster`'s own processes and
schedule without simpy's per-event objects, for every system (timing-only and learning runs alike).

The simpy model (``sandbox/system/cluster.py``) processes its events in the order of the key ``(time,
priority, scheduling order)`` (simpy 4.1 ``Environment.schedule``: ``(now + delay, priority, eid)``,
process starts and the sync of a publication ``URGENT``, everything else ``NORMAL``). This loop keeps one
heap with the same key and runs the cluster's processes (its worker and learner generators, the
continuous-batching engines of ``sandbox/system/delays/continuous_batching.py``, the weight store's
sync) unchanged; only what they wait on differs (:meth:`Cluster._bind_waits`):

* the common waits are plain values, no object: a worker's or the learner's hold is the float it
  lasts (one heap entry), a worker waiting for admission is the marker ``_GATED`` and the learner waiting
  for the next change ``_WAIT``; each round of :class:`~sandbox.system.cluster.Signal` that has a waiter
  is one heap entry resuming them in the signal's order (a gated run stops at the first worker the
  admission test refuses and re-parks the rest, as ``Signal._wake`` does);
* everything else is an :class:`Event` of this module: the subset of simpy 4.1's ``Event`` (``succeed``,
  ``triggered``, ``processed``, callbacks run in registration order when it is processed), ``Timeout``,
  ``AnyOf`` (``a | b``: triggered by the first of its events to be processed, then scheduled itself, and
  its check removed from the other; ``simpy.events.Condition``) and ``Process`` (started ``URGENT``; a
  generator yielding an already processed event goes on at once) that the engines' wake-ups and syncs,
  a group's end on its engine, partial rollouts (``done | store.changed``) and the weight store use.

Four shortcuts, each the same schedule with less work:

* in a plain system (no engine, no partial rollouts, no split group) the worker process is two steps of
  the loop itself, ``start`` and ``finish`` (:meth:`HeapCluster._plain_steps`): the body of
  :meth:`Cluster._worker` with the same calls in the same order, started where the worker processes would
  have started, without a generator to resume; a round tries a parked worker with its ``start`` alone,
  whose ``control.admit`` is the round's admission test (:attr:`HeapCluster._plain_admits`), and the
  generation time is :meth:`Cluster._draw`'s body with the delay's ``sample`` bound once (not when
  ``Cluster._worker``, ``_admissible`` or ``_draw`` is replaced);
* a publication's sync is one heap entry ``_VISIBLE`` where the urgent event was
  (:class:`HeapWeightStore`), which runs the store's own ``_sync``;
* each continuous-batching engine's process is steps of the loop (:class:`EngineSteps`): a batch is one
  heap entry where the process had a timeout, a condition ``finish | wake`` and a generator to resume,
  with the same calls in the same order; not when ``Engine._run`` is replaced;
* the learner waiting for a batch is resumed only when ``Control.could_take`` says its take could drop
  or select something; otherwise it stays in the next round, where it would have re-parked itself (a take
  that finds nothing changes nothing: ``tests/system/test_learner_wakeups.py``); the first take of each
  step is tried under the same test (``Cluster._could_take``).

Every draw, workload, trainer and control call and every record is made in the same order as on simpy,
so the jobs table, the event log and the rows are the simpy cluster's to the bit
(``tests/base/test_heap_loop.py``: every shipped scenario, engines, partial rollouts and split
synchronous steps; ``tests/system/test_cluster_wakeups.py``: 160 random systems with ties), and a
learning run's numbers with them (``tools/fingerprint.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from heapq import heappop, heappush
from inspect import GEN_CREATED, getgeneratorstate
from itertools import count
from typing import Any

from sandbox.system.cluster import _CLUSTER_DRAW, Cluster, Job, SimulationError, WeightStore
from sandbox.system.delays.continuous_batching import Engine

URGENT, NORMAL = 0, 1  # simpy.events.URGENT / NORMAL
_RESUME, _ROUND, _EVENT, _END, _DISPATCH, _DONE, _START, _HOLD, _ANY, _VISIBLE = range(10)
_GATED = object()  # a worker waits for admission (Signal.wait(gated=True))
_WAIT = object()  # the learner waits for the next round (Signal.wait())
_PENDING = object()  # an event's value before it is triggered (simpy.events.PENDING)


class Event:
    """simpy 4.1's ``Event`` as far as the cluster's processes use it: ``callbacks`` (``None`` once
    processed), ``succeed``, ``triggered``, ``processed`` and ``|``."""

    __slots__ = ("env", "callbacks", "_value")

    def __init__(self, env: Kernel):
        self.env = env
        self.callbacks: list[Callable] | None = []
        self._value: Any = _PENDING

    @property
    def triggered(self) -> bool:
        return self._value is not _PENDING

    @property
    def processed(self) -> bool:
        return self.callbacks is None

    @property
    def value(self) -> Any:
        return self._value

    def succeed(self, value: Any = None) -> Event:
        if self._value is not _PENDING:
            raise RuntimeError(f"{self!r} has already been triggered")
        self._value = value
        self.env.schedule(self)
        return self

    def __or__(self, other: Event) -> AnyOf:
        return AnyOf(self.env, (self, other))


class AnyOf(Event):
    """``a | b`` (``simpy.events.Condition`` with ``any_events``): when the first of its events is
    processed it is scheduled at that time; when it is processed, its check leaves the other event."""

    __slots__ = ("_events",)

    def __init__(self, env: Kernel, events: tuple[Event, ...]):
        self.env, self.callbacks, self._value = env, [], _PENDING
        self._events = events
        # not kept on self: a bound method held by its own object is a reference cycle, which would keep every
        # AnyOf alive until the next collection instead of freeing it when it is processed
        check = self._check
        for event in events:
            if event.callbacks is None:
                check(event)
            else:
                event.callbacks.append(check)
        self.callbacks.append(self._remove_checks)

    def _check(self, event: Event) -> None:
        if self._value is _PENDING:  # self.succeed(), inline
            self._value = None
            env = self.env
            heappush(env.heap, (env.now, NORMAL, next(env.order), _EVENT, self))

    def _remove_checks(self, event: Event) -> None:
        check = self._check  # equal to the one registered (the same function of the same object)
        for other in self._events:
            callbacks = other.callbacks
            if callbacks and check in callbacks:
                callbacks.remove(check)


class Kernel:
    """The heap and the clock: what a simpy ``Environment`` offers the cluster (``now``, ``schedule``,
    ``event``, ``timeout``, ``process``), on heap entries ``(time, priority, order, kind, argument)``."""

    __slots__ = ("now", "heap", "order", "processes")

    def __init__(self) -> None:
        self.now = 0.0
        self.heap: list[tuple] = []
        self.order = count()
        self.processes: list = []  # generators, by process number

    def schedule(self, event, priority: int = NORMAL, delay: float = 0) -> None:
        """``event`` (this module's or a ``simpy.Event`` built on this kernel) processed at ``now + delay``."""
        heappush(self.heap, (self.now + delay, priority, next(self.order), _EVENT, event))

    def event(self) -> Event:
        return Event(self)

    def timeout(self, delay: float, value: Any = None) -> Event:
        event = Event(self)
        event._value = value
        heappush(self.heap, (self.now + delay, NORMAL, next(self.order), _EVENT, event))
        return event

    def process(self, generator) -> int:
        """Start ``generator`` now (``URGENT``, as simpy's ``Initialize``); returns its process number."""
        self.processes.append(generator)
        who = len(self.processes) - 1
        heappush(self.heap, (self.now, URGENT, next(self.order), _RESUME, who))
        return who


_CLUSTER_WORKER = Cluster._worker
"""The worker process the plain steps copy (:meth:`HeapCluster._plain_steps`), as defined."""

_CLUSTER_ADMISSIBLE = Cluster._admissible
"""The admission test of a round's gated worker as defined (:attr:`HeapCluster._plain_admits`)."""

_ENGINE_RUN = Engine._run
"""The engine process the engine steps copy (:class:`EngineSteps`), as defined."""
_IDLE, _STEP, _FINISH, _TARGET, _PREFILL, _SYNC = range(6)  # what an engine's steps wait for


class EngineSteps:
    """:meth:`Engine._run <sandbox.system.delays.continuous_batching.Engine._run>` of one engine as steps of
    the heap loop, the same calls in the same order and the same schedule, without a generator to resume, a
    timeout ``Event`` per batch and an ``AnyOf`` per batch:

    * a hold (a batch's last step, an arrival's step boundary, a prefill) is one heap entry ``_HOLD`` of the
      time the timeout would have had; a hold the engine stopped waiting for stays in the heap, stale
      (:attr:`hold` names the live one), as the abandoned timeout does;
    * ``finish | wake`` is a flag: the first of the two to be processed schedules the entry ``_ANY`` now,
      where the condition would have been scheduled, and the engine goes on when it is processed
      (:meth:`on_any`), as the condition's callbacks would have resumed it; when the batch's hold ends with
      nothing else due at that time (the heap's first entry is later), that entry would be the next one
      processed, so the engine goes on at once (the usual case: one heap entry per batch);
    * the engine's wake event (``Engine._wake``, triggered by ``Engine.submit``) and a sync's hold (the
      generator ``Engine._do_sync``, run as it is) stay events. :attr:`on_wake` is registered once on each
      wake event, in place of the condition's check or the process's resume, and acts only where one of them
      would have been registered: on the engine's current wake (a replaced one had its check removed when
      its condition was processed), while the engine is idle or stepping with its condition not triggered.

    Every other call is the engine's own (``_sync_needed``, ``_do_sync``, ``_admit``, ``_least_left``,
    ``_rearm``, ``_finish_ended``, ``cfg.step_cost``), so a replaced one changes both loops alike; a
    replaced ``_run`` makes :class:`HeapCluster` run the engine's process instead."""

    __slots__ = ("engine", "env", "heap", "order", "state", "hold", "wake", "pending", "finished", "on_wake")
    __slots__ += ("cost", "k", "prefill", "begin", "j", "sync", "drain", "step_cost", "sync_needed", "prefill_each")

    def __init__(self, engine: Engine, env: Kernel):
        self.engine, self.env, self.heap, self.order = engine, env, env.heap, env.order
        self.state, self.hold, self.sync, self.wake = _IDLE, -1, None, None
        self.on_wake = self._on_wake  # bound once

    def start(self) -> None:
        """The process's start: what ``Engine._run`` binds once, then its loop."""
        engine = self.engine
        cfg = engine.cfg
        self.drain = cfg.sync == "drain"
        self.step_cost, self.sync_needed = cfg.step_cost, engine._sync_needed
        self.prefill_each = cfg.prefill_per_token * cfg.prompt_tokens
        self.advance()

    def _hold(self, delay: float) -> None:
        """``env.timeout(delay)``, the engine waiting for it: one heap entry."""
        self.hold = order = next(self.order)
        heappush(self.heap, (self.env.now + delay, NORMAL, order, _HOLD, self))

    def _any(self) -> None:
        """The condition ``finish | wake`` triggered: scheduled now (``AnyOf._check``)."""
        self.pending = True
        heappush(self.heap, (self.env.now, NORMAL, next(self.order), _ANY, self))

    def advance(self) -> None:
        """``Engine._run``'s loop from its top until the engine waits."""
        engine, sync_needed, drain = self.engine, self.sync_needed, self.drain
        while True:
            sync = sync_needed()
            if sync and (not drain or not engine.running):
                if self._sync(engine._do_sync(), None):
                    continue
                return
            admitted = engine._admit() if engine.waiting and not sync else 0
            running = engine.running
            if not running:
                engine._rearm()
                wake = engine._wake
                if wake.callbacks is None:  # already processed: the process goes on at once
                    continue
                self.state = _IDLE
                if wake is not self.wake:
                    wake.callbacks.append(self.on_wake)
                    self.wake = wake
                return
            prefill = self.prefill_each * admitted
            cost = self.step_cost(len(running))
            k = engine._least_left()
            self.begin = self.env.now + prefill  # the first step's start
            engine._rearm()
            if k <= 0:  # only sequences that end at their prefill
                if prefill > 0:
                    self.prefill, self.state = prefill, _PREFILL
                    self._hold(prefill)
                    return
                engine._finish_ended()
                continue
            self.prefill, self.cost, self.k = prefill, cost, k
            self.state, self.finished, self.pending = _STEP, False, False
            self._hold(prefill + k * cost)
            wake = engine._wake
            if wake.callbacks is None:  # already processed: the condition triggers at once
                self._any()
            elif wake is not self.wake:
                wake.callbacks.append(self.on_wake)
                self.wake = wake
            return

    def _sync(self, steps, value: Any) -> bool:
        """Run the sync's generator on; whether it ended (else it holds, and :meth:`_synced` goes on)."""
        while True:
            try:
                event = steps.send(value)
            except StopIteration:
                return True
            if event.callbacks is None:
                value = event._value
                continue
            self.sync, self.state = steps, _SYNC
            event.callbacks.append(self._synced)
            return False

    def _synced(self, event) -> None:
        if self._sync(self.sync, event._value):
            self.advance()

    def _on_wake(self, event) -> None:
        """A wake processed: if it is the engine's current one, the idle engine goes on and a stepping
        one's condition triggers (unless its hold already did); otherwise nothing waited on it."""
        if event is not self.engine._wake:
            return
        state = self.state
        if state == _IDLE:
            self.advance()
        elif state == _STEP and not self.pending:
            self._any()

    def on_hold(self) -> None:
        """The live hold ended (the loop checks :attr:`hold`)."""
        state = self.state
        if state == _STEP:  # the batch's last step: the condition triggers, unless the wake did
            self.finished = True
            if self.pending:
                return
            heap = self.heap
            if heap and heap[0][0] <= self.env.now:
                self._any()
            else:  # nothing else is due now: the condition would be the next entry processed (on_any)
                self._stepped(self.k)
        elif state == _PREFILL:
            self.engine.busy += self.prefill
            self.engine._finish_ended()
            self.advance()
        else:  # _FINISH (zero-cost steps after an arrival) or _TARGET (an arrival's step boundary)
            self._stepped(self.j)

    def on_any(self) -> None:
        """The condition processed: the engine goes on."""
        self.state = _FINISH  # no longer waiting on the wake
        if self.finished or self.cost <= 0:  # zero-cost steps: all k end at the prefill's end
            self.j = self.k
            if not self.finished:  # the batch's hold stays live
                return
            self._stepped(self.k)
            return
        self.hold = -1  # the batch's hold is abandoned
        env, start, cost, k = self.env, self.begin, self.cost, self.k
        t = env.now  # an arrival: go on to the next step boundary, then re-plan
        j = 0 if t <= start else min(k, math.ceil((t - start) / cost))
        if j > 0 and start + (j - 1) * cost >= t:
            j -= 1
        target = start + j * cost
        if target > env.now:
            self.j, self.state = j, _TARGET
            self._hold(target - env.now)
            return
        self._stepped(j)

    def _stepped(self, j: int) -> None:
        engine = self.engine
        engine.busy += self.prefill + j * self.cost
        engine.steps += j
        engine.decoded += j  # every sequence in flight decoded j tokens
        engine._finish_ended()
        self.advance()


class HeapWeightStore(WeightStore):
    """The weight store on the heap loop: a publication's sync is one heap entry ``_VISIBLE`` with the key
    the urgent event had (:meth:`WeightStore._schedule_sync`), no event object and no callback."""

    def _schedule_sync(self, version: int, delay: float) -> None:
        env = self.env
        heappush(env.heap, (env.now, URGENT, next(env.order), _VISIBLE, (version, delay)))


class HeapCluster(Cluster):
    """:class:`Cluster` run by a plain heap event loop (same arguments; see the module docstring)."""

    weight_store = HeapWeightStore

    def _environment(self) -> Kernel:
        return Kernel()

    def _bind_waits(self) -> None:
        self._sleep = float  # the hold itself: one heap entry, no object
        self._could_take = self.control.could_take  # the learner's first take of a step: as its wake-ups
        self._park = lambda: _GATED
        self._wait = lambda: _WAIT
        self._round: list = []  # the current round's waiters: a process number, or a run (list) of parked workers
        self._notify = self._notify_round

    def _notify_round(self) -> None:
        """``Signal.notify``: the round with a waiter is scheduled now, and a new round begins."""
        if self._round:
            env = self.env
            heappush(env.heap, (env.now, NORMAL, next(env.order), _ROUND, self._round))
            self._round = []

    @property
    def _plain(self) -> bool:
        """Whether every job is one worker's group generated in one piece (no engine, no partial
        rollouts, no split group): the workers then run as :meth:`_run_until`'s own steps."""
        return (
            self.engines is None
            and not self.cfg.partial_rollouts
            and self.parts == 1
            and type(self)._worker is _CLUSTER_WORKER  # the steps below copy it: not when it is replaced
        )

    def _start_workers(self) -> None:
        if not self._plain:
            return super()._start_workers()
        env = self.env
        for wid in range(len(self.speeds)):  # each worker's start, where its process would have started
            heappush(env.heap, (env.now, URGENT, next(env.order), _DISPATCH, wid))

    def _run_until(self, learner: int) -> None:
        env = self.env
        heap, order, processes = env.heap, env.order, env.processes
        admissible, could_take, buffer = self._admissible, self.control.could_take, self.buffer

        def park(who: int) -> None:
            rnd = self._round
            if rnd and type(rnd[-1]) is list:
                rnd[-1].append(who)
            else:
                rnd.append([who])

        def resume(who: int, value: Any = None) -> None:
            generator = processes[who]
            while True:
                try:
                    cmd = generator.send(value)
                except StopIteration:  # the process event: it ends the run when it is the learner's
                    heappush(heap, (env.now, NORMAL, next(order), _END, who))
                    return
                if type(cmd) is float:
                    heappush(heap, (env.now + cmd, NORMAL, next(order), _RESUME, who))
                    return
                if cmd is _GATED:
                    park(who)
                    return
                if cmd is _WAIT:
                    self._round.append(who)
                    return
                if cmd.callbacks is None:  # already processed: simpy's process goes on at once
                    value = cmd._value
                    continue
                cmd.callbacks.append(wakers[who])
                return

        def wake(who: int, event) -> None:
            resume(who, event._value)

        wakers = [partial(wake, who) for who in range(len(processes))]  # every process has started by now
        start = finish = None
        if self._plain:
            start, finish = self._plain_steps()
        # a gated run tried by the plain step itself: its admission is the test (see _plain_admits)
        tries = start if start is not None and self._plain_admits else None
        self._engine_steps()
        store = self.store
        while True:
            if not heap:
                raise SimulationError(self._stuck_reason())
            env.now, _, at, kind, arg = heappop(heap)
            if kind == _DONE:
                finish(arg)
                if not start(arg):  # park(arg), inline
                    rnd = self._round
                    if rnd and type(rnd[-1]) is list:
                        rnd[-1].append(arg)
                    else:
                        rnd.append([arg])
            elif kind == _ROUND:
                for entry in arg:
                    if type(entry) is not list:  # an ungated waiter: the learner, waiting to take
                        if could_take(self.learner_step, buffer):
                            resume(entry)
                        else:  # its take would change nothing: it waits on, where it would re-wait
                            self._round.append(entry)
                        continue
                    for i, who in enumerate(entry):
                        if tries is not None:
                            if tries(who):
                                continue
                        elif admissible():
                            if start is None:
                                resume(who)
                            elif not start(who):
                                park(who)
                            continue
                        rnd = self._round  # refused: the rest of the run re-parks, in order (Signal._wake)
                        if rnd and type(rnd[-1]) is list:
                            rnd[-1].extend(entry[i:])
                        else:
                            rnd.append(entry[i:])
                        break
            elif kind == _RESUME:
                resume(arg)
            elif kind == _EVENT:
                callbacks, arg.callbacks = arg.callbacks, None
                for callback in callbacks:
                    callback(arg)
            elif kind == _VISIBLE:
                store._sync(*arg)
            elif kind == _HOLD:
                if at == arg.hold:  # else a hold the engine stopped waiting for
                    arg.on_hold()
            elif kind == _ANY:
                arg.on_any()
            elif kind == _DISPATCH:
                if not start(arg):
                    park(arg)
            elif kind == _START:
                arg.start()
            elif arg == learner:  # _END of the learner's process
                return

    def _engine_steps(self) -> None:
        """Each engine's process, not started yet, replaced by its :class:`EngineSteps`, started where the
        process would have started (its start entry keeps its key); not when ``Engine._run`` is replaced."""
        if self.engines is None or any(type(engine)._run is not _ENGINE_RUN for engine in self.engines):
            return
        processes = self.env.processes
        steps = {
            engine.process: EngineSteps(engine, self.env)
            for engine in self.engines
            if getgeneratorstate(processes[engine.process]) == GEN_CREATED
        }
        heap = self.env.heap
        for i, (time, priority, at, kind, arg) in enumerate(heap):
            if kind == _RESUME and arg in steps:
                heap[i] = (time, priority, at, _START, steps[arg])

    @property
    def _plain_admits(self) -> bool:
        """Whether a parked worker of a plain system is tried by its dispatch step alone: in a plain system
        no part of a split group ever waits, so the admission test a round makes before resuming a gated
        worker (:meth:`Cluster._admissible`) is ``control.admit`` with the arguments the worker's own next
        call has, nothing running in between; the step's own call answers both (one call instead of two,
        ``admit`` being pure). Not when ``_admissible`` is replaced."""
        return type(self)._admissible is _CLUSTER_ADMISSIBLE

    def _plain_steps(self) -> tuple[Callable[[int], bool], Callable[[int], None]]:
        """:meth:`Cluster._worker` of a plain system (:attr:`_plain`) as two steps of the loop, the same
        calls in the same order: ``start(w)`` (ask for admission; start a job and hold for its generation
        time and return True, or return False: the caller parks the worker) and ``finish(w)`` (the held job
        enters the buffer)."""
        env, heap, order = self.env, self.env.heap, self.env.order
        control, store, workload, buffer, jobs = self.control, self.store, self.workload, self.buffer, self.jobs
        admit, on_dispatch, on_finish = control.admit, control.on_dispatch, control.on_finish
        sample, finish_payload, add_job = workload.sample, workload.finish, jobs.append
        running_since, speeds, G, log = self.running_since, self.speeds, self.G, self._log
        draw = self._draw  # the cluster's own (a subclass or a planted bug in tests/checks changes it here too)
        # the cluster's own draw: its body below, the generation time's sample bound once (not when replaced)
        own_draw = getattr(draw, "__func__", None) is _CLUSTER_DRAW
        sample_time, rng, bad_draw = self.cfg.generation_time.sample, self.rng, self._bad_draw
        after_end = self._after_end()
        current: list[Job | None] = [None] * len(speeds)  # the job each worker holds

        def start(wid: int) -> bool:
            admission = admit(store.visible, len(buffer))
            if admission is None:
                return False
            version, target, now = admission.version, admission.target_step, env.now
            job = Job(len(jobs), wid, version, now, target)
            on_dispatch(job)
            add_job(job)
            running_since[job.id] = now
            if log is not None:
                log((now, "dispatch", wid, job.id, version, -1 if target is None else target))
            if after_end is not None and self.status != "running" and (payload := after_end(G)) is not None:
                job.payload, job.tail_version = payload, version  # never generated (Cluster._after_end)
                return True
            job.payload = payload = sample(store.get(version), version, G)
            job.tail_version = version
            if own_draw:  # draw("generation_time", payload.decode_steps, speeds[wid]), one frame less
                tokens, speed = payload.decode_steps, speeds[wid]
                try:
                    duration = sample_time(rng, tokens) / speed
                except OverflowError:
                    duration = math.inf
                if not (math.isfinite(duration) and duration >= 0):
                    bad_draw("generation_time", duration, tokens, speed)
            else:
                duration = draw("generation_time", payload.decode_steps, speeds[wid])
            current[wid] = job
            heappush(heap, (now + duration, NORMAL, next(order), _DONE, wid))
            return True

        def finish(wid: int) -> None:
            job = current[wid]
            job.payload = payload = finish_payload(job.payload)
            job.finish_time = now = env.now
            self.busy_done += now - running_since.pop(job.id)
            self.samples_generated += int(payload.num_responses)
            on_finish(job)
            buffer.append(job)
            if log is not None:
                log((now, "finish", wid, job.id, job.tail_version, -1))
            rnd = self._round  # self._notify(), inline (_notify_round)
            if rnd:
                heappush(heap, (now, NORMAL, next(order), _ROUND, rnd))
                self._round = []

        return start, finish
