"""The discrete-event model of an asynchronous RL cluster, in simulated seconds.

Processes: one per rollout worker and one learner. A worker asks the staleness control for
admission, takes the weights of the admitted version from the :class:`WeightStore`, lets the
:class:`Workload` really sample with them, and holds for the sampled duration; the finished job
enters the buffer. The learner takes a batch when the control allows it, lets the
:class:`Trainer` really update the weights, holds for the training time, and publishes the new
version, which becomes visible to workers after the sync delay. Staleness is never set: it is
whatever this timing produces.

The processes are written once, against the waits :meth:`Cluster._bind_waits` supplies: this class
runs them on simpy (the reference), :class:`sandbox.system.heap_loop.HeapCluster` on a plain heap
event loop with the same event order (what every run uses).

The control owns its counts and rules (``sandbox/system/staleness/``): the cluster reports
dispatches, finishes and publications to it and asks it for admission and batches, never editing
its state.

Memory: every job stays in ``Cluster.jobs`` (the jobs table is built from them), but its payload
(the rollouts or gradients) is replaced by a :class:`ReleasedPayload` holding its sample count as
soon as the learner has trained on it or the control dropped it, so the tensors alive at once are
those of the running, queued and training jobs, whatever ``run.steps``. What does grow with
the run is its records (:mod:`sandbox.system.records`): the jobs (slotted :class:`Job`
objects, about 400 B each), the metrics rows as a :class:`~sandbox.system.records.MetricRows`
(about 9 B a value) and the event log as columns (:class:`EventLog`, 41 B per event); the tables
are built from them, bitwise the ones built from the objects. A cluster given a
:class:`~sandbox.system.spill.Spill` (a run written to a directory) streams its finished jobs and its
events to disk as it goes, so that during the simulation only the jobs in flight stay in memory.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import simpy
from simpy.events import URGENT

from sandbox.base.errors import ScenarioError
from sandbox.system.config import SystemConfig
from sandbox.system.records import ColumnTable, MetricRows
from sandbox.system.spill import Spill, column_kind
from sandbox.system.staleness import Control, make_control


class SimulationError(ScenarioError):
    """A scenario that validated but cannot be simulated (a drawn duration that is not finite, a
    schedule that can never complete a learner step); names the field at fault, like load errors."""

    def __init__(self, problem: str):
        super().__init__([problem], "scenario (found while simulating)")


class Payload(Protocol):
    """What a job produces (rollouts or gradient samples): what the cluster reads of it."""

    @property
    def decode_steps(self) -> int:
        """Decode steps of the job (its longest response): the ``tokens`` of ``generation_time``."""

    @property
    def token_count(self) -> int:
        """Tokens the learner trains on (read by trainers through :class:`Job`)."""

    @property
    def num_responses(self) -> int:
        """Samples in the job (throughput counts)."""


class PartialPayload(Payload, Protocol):
    """A payload that can be generated in segments (``system.partial_rollouts``): every token
    records the version that produced it."""

    @property
    def width(self) -> int:
        """Token positions decoded so far."""

    def truncate(self, positions: int) -> PartialPayload:
        """The payload cut to its first ``positions`` token positions (an interrupted segment)."""

    def truncate_each(self, positions: list[int]) -> PartialPayload:
        """The payload with response ``i`` cut to its first ``positions[i]`` tokens (an engine's sequences
        at a weight sync, ``generation_time.mixed_versions``)."""

    def oldest_version(self) -> Any:
        """Per response, the oldest version among its tokens (a tensor with ``.min()``)."""

    def newest_version(self) -> Any:
        """Per response, the newest version among its tokens (a tensor with ``.max()``)."""


class Workload(Protocol):
    """The compute a worker does: sample with given weights (the simulator supplies the time)."""

    def sample(self, weights: Any, version: int, group_size: int) -> Payload: ...

    def begin(self, group_size: int) -> PartialPayload:
        """An empty payload to continue with :meth:`extend` (partial rollouts only)."""

    def extend(self, weights: Any, payload: PartialPayload, version: int) -> PartialPayload:
        """Continue ``payload`` to completion with ``weights`` (partial rollouts only)."""

    def finish(self, payload: Payload) -> Payload:
        """Final touch when the job completes (e.g. compute rewards)."""

    # Optional: ``dispatched_after_end(group_size) -> Payload | None``, the payload of a job dispatched after the
    # learner's process has ended, never generated (only its ``num_responses`` is read); see Cluster._after_end.


@dataclass(frozen=True, slots=True)
class ReleasedPayload:
    """What a job keeps of its payload once consumed or dropped: the count the jobs table and the
    throughput read (``samples``). Anything else read from it afterwards is an AttributeError.
    Immutable, so one instance per count is shared by every job (:func:`released`)."""

    num_responses: int


_RELEASED: dict[int, ReleasedPayload] = {}


def released(num_responses: int) -> ReleasedPayload:
    """The shared :class:`ReleasedPayload` of ``num_responses`` samples (a job keeps a pointer, not
    an object of its own: about 100 B less per job over a run)."""
    n = int(num_responses)
    out = _RELEASED.get(n)
    if out is None:
        out = _RELEASED.setdefault(n, ReleasedPayload(n))
    return out


class EventLog:
    """The event log ``(time, kind, worker, job, version, step)``, one ``array`` per field: 41 B an
    event instead of a 6-tuple and a float object (about 130 B), the largest record a cluster keeps
    per step (about 24 events). Reads as a sequence of those tuples (iteration, ``len``, indexing,
    ``==`` with a list of tuples), so ``pd.DataFrame(log, columns=EVENT_COLUMNS)`` and every
    comparison see exactly the tuples a list would have held."""

    __slots__ = (
        "time",
        "kind",
        "worker",
        "job",
        "version",
        "step",
        "kinds",
        "_codes",
        "_pending",
        "_spill",
        "_spilled",
    )

    FLUSH = 4096
    """Events appended as tuples and moved into the arrays this many at a time: six ``array.append``
    calls per event cost about 2 us, a tuple append and one batched ``extend`` per field a tenth."""

    FIELDS = (
        ("time", "d", np.float64),
        ("kind", "b", np.int8),
        ("worker", "q", np.int64),
        ("job", "q", np.int64),
        ("version", "q", np.int64),
        ("step", "q", np.int64),
    )
    """The arrays: name, ``array`` typecode, numpy dtype."""

    def __init__(self, spill: Spill | None = None) -> None:
        """``spill``: each batch of ``FLUSH`` events moved into the arrays is then appended to the
        spill's files (``events.<field>``) and leaves memory (:mod:`sandbox.system.spill`)."""
        self.time, self.kind = array("d"), array("b")
        self.worker, self.job, self.version, self.step = array("q"), array("q"), array("q"), array("q")
        self.kinds: list[str] = []
        self._codes: dict[str, int] = {}
        self._pending: list[tuple] = []
        self._spill = spill
        self._spilled = 0  # events in the spill's files (the oldest ones)

    def append(self, event: tuple) -> None:
        pending = self._pending
        pending.append(event)
        if len(pending) >= self.FLUSH:
            self._flush()

    @property
    def add(self) -> Callable[[tuple], None]:
        """The bound ``append`` of the list the events wait in: the cluster's hot path appends with
        it (one C call an event) and calls :meth:`tidy` once a learner step, so the list holds at most
        ``FLUSH`` events plus those of one step."""
        return self._pending.append

    def tidy(self) -> None:
        """Move the waiting events into the arrays once there are ``FLUSH`` of them."""
        if len(self._pending) >= self.FLUSH:
            self._flush()

    def _flush(self) -> None:
        """Move the waiting events into the arrays; with a spill, then the arrays into its files."""
        self._move()
        if self._spill is not None and len(self.time) >= self.FLUSH:
            for name, _, dtype in self.FIELDS:
                self._spill.append("events." + name, np.frombuffer(getattr(self, name), dtype=dtype))
            self._spilled += len(self.time)
            for name, code, _ in self.FIELDS:
                setattr(self, name, array(code))

    def _materialize(self) -> None:
        """Read the spilled events back into the arrays (for reads one event at a time); the log
        stays in memory from then on."""
        self._move()
        if self._spill is None:
            return
        if self._spilled:
            for name, code, dtype in self.FIELDS:
                old = array(code, self._spill.read("events." + name, dtype).tobytes())
                old.extend(getattr(self, name))
                setattr(self, name, old)
                self._spill.drop("events." + name)
            self._spilled = 0
        self._spill = None

    def _move(self) -> None:
        pending = self._pending
        if not pending:
            return
        time, kind, worker, job, version, step = zip(*pending)
        codes = self._codes
        for k in dict.fromkeys(kind):  # first-appearance order, as one append at a time gave
            if k not in codes:
                codes[k] = len(self.kinds)
                self.kinds.append(k)
        # each column converted into an array first: extending an array by an array is a copy, by a
        # tuple a conversion and an append per value (twice as long)
        self.time.extend(array("d", time))
        self.kind.extend(array("b", [codes[k] for k in kind]))
        self.worker.extend(array("q", worker))
        self.job.extend(array("q", job))
        self.version.extend(array("q", version))
        self.step.extend(array("q", step))
        pending.clear()

    def __len__(self) -> int:
        return self._spilled + len(self.time) + len(self._pending)

    def clear(self) -> None:
        """Drop every event (the arrays' buffers and spilled files go; the kinds seen so far keep their codes)."""
        self.time, self.kind = array("d"), array("b")
        self.worker, self.job, self.version, self.step = array("q"), array("q"), array("q"), array("q")
        self._pending.clear()  # the same list: the bound append handed out by ``add`` stays valid
        if self._spill is not None:
            for name, _, _ in self.FIELDS:
                self._spill.drop("events." + name)
        self._spilled = 0

    def _row(self, i: int) -> tuple:
        self._materialize()
        return (self.time[i], self.kinds[self.kind[i]], self.worker[i], self.job[i], self.version[i], self.step[i])

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._row(k) for k in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError("event index out of range")
        return self._row(i % n)

    def __iter__(self):
        self._materialize()
        kinds = self.kinds
        return zip(self.time, (kinds[c] for c in self.kind), self.worker, self.job, self.version, self.step)

    def __eq__(self, other) -> bool:
        if isinstance(other, (EventLog, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EventLog({len(self)} events)"

    def to_frame(self, columns: list[str]):
        """``pd.DataFrame(list(self), columns=columns)``, bitwise, built from the columns (the list of
        tuples it replaces was about 14 KB a step on the quickstart, at the end of the run)."""
        import pandas as pd

        self._move()
        if not len(self):
            return pd.DataFrame(self, columns=columns)
        kinds = np.empty(len(self.kinds), dtype=object)
        kinds[:] = self.kinds
        data = []
        for name, _, dtype in self.FIELDS:  # the spilled events first, then those in memory
            a = np.frombuffer(getattr(self, name), dtype=dtype)
            if self._spilled:  # read straight into the column: no second copy of it
                full = np.empty(self._spilled + len(a), dtype=dtype)
                self._spill.read_into("events." + name, full[: self._spilled])
                full[self._spilled :] = a
                a = full
            else:
                a = a.copy()
            data.append(kinds[a] if name == "kind" else a)
        # copy=False: the columns are this table's own arrays; pandas then keeps them as they are
        # instead of copying them into one block per dtype (same values, same parquet bytes)
        return pd.DataFrame(dict(zip(columns, data)), copy=False)


@dataclass
class TrainResult:
    weights: Any
    tokens: int = 0
    metrics: dict = field(default_factory=dict)
    stop: bool = False
    step_metrics: list[dict] | None = None
    """One metrics dict per optimizer step when the batch took several (``algorithm.minibatches`` ×
    ``epochs`` > 1; each becomes its own row); ``None``: ``metrics`` is the batch's only step."""
    passes: int = 1
    """Passes over the batch's tokens (``algorithm.epochs``): ``train_time`` is charged ``passes × tokens``."""


class Trainer(Protocol):
    def initial_weights(self) -> Any: ...

    def train(self, step: int, jobs: list[Job], now: float) -> TrainResult: ...


@dataclass(slots=True)
class Job:
    id: int
    worker: int
    head_version: int
    dispatch_time: float
    target_step: int | None = None
    finish_time: float = math.nan
    consume_time: float = math.nan
    consume_step: int = -1
    dropped_at: int | None = None
    segments: int = 1
    tail_version: int = -1
    payload: Payload | ReleasedPayload | None = None
    parts_left: int = 0
    """Parts of a split group still generating (work-conserving synchronous steps); 0 otherwise."""

    @property
    def num_samples(self) -> int:
        return int(self.payload.num_responses)


#: The columns of the jobs table (``jobs.parquet``), in order; :func:`job_record` gives a job's row.
JOB_COLUMNS = (
    "job",
    "worker",
    "head_version",
    "tail_version",
    "target_step",
    "dispatch_time",
    "finish_time",
    "consume_time",
    "consume_step",
    "dropped_at",
    "segments",
    "samples",
)


def job_record(j: Job) -> dict:
    """A job's row of the jobs table (``target_step`` and ``dropped_at``: -1 for None; ``samples``: 0
    while it has no payload)."""
    return {
        "job": j.id,
        "worker": j.worker,
        "head_version": j.head_version,
        "tail_version": j.tail_version,
        "target_step": -1 if j.target_step is None else j.target_step,
        "dispatch_time": j.dispatch_time,
        "finish_time": j.finish_time,
        "consume_time": j.consume_time,
        "consume_step": j.consume_step,
        "dropped_at": -1 if j.dropped_at is None else j.dropped_at,
        "segments": j.segments,
        "samples": j.num_samples if j.payload is not None else 0,
    }


def _job_columns(jobs: list[Job]) -> list[list]:
    """The values of :func:`job_record` for ``jobs``, column by column (in :data:`JOB_COLUMNS` order)."""
    return [
        [j.id for j in jobs],
        [j.worker for j in jobs],
        [j.head_version for j in jobs],
        [j.tail_version for j in jobs],
        [-1 if j.target_step is None else j.target_step for j in jobs],
        [j.dispatch_time for j in jobs],
        [j.finish_time for j in jobs],
        [j.consume_time for j in jobs],
        [j.consume_step for j in jobs],
        [-1 if j.dropped_at is None else j.dropped_at for j in jobs],
        [j.segments for j in jobs],
        [j.num_samples if j.payload is not None else 0 for j in jobs],
    ]


class JobRecords:
    """``Cluster.jobs``: every job of the run, by id, as its :class:`Job` (a finished one keeps the
    shared :func:`released` payload). Retiring finished jobs into a
    :class:`~sandbox.system.records.ColumnTable` row (about 110 B instead of about 400 B) was tried and
    removed: one row put per job cost about 15 us in the simulation loop. Reads as the list of jobs
    (``len``, indexing, iteration); :meth:`to_frame` is the jobs table, bitwise the one built from the
    objects through the column table, as the metrics rows are (built column by column when every job
    is in memory and its values are ints or floats, as below).

    With a ``spill`` (:mod:`sandbox.system.spill`), finished jobs (:meth:`retire`: consumed or
    dropped, nothing changes them again) leave memory: they wait in a list and every ``FLUSH`` of them
    become one chunk of typed columns appended to the spill's files ``jobs.<column>`` (about 1 us a
    job, in batches). :meth:`to_frame` assembles the table from the files and the jobs still in memory,
    column by column, as the column table would have built it (int64 where every value is an int,
    float64 otherwise). Jobs with values the typed columns cannot hold exactly stay in the column
    table, and then so does everything (:meth:`_materialize`), as does a read of one spilled job."""

    __slots__ = ("_live", "_table", "_n", "_spill", "_retired", "_chunks")

    FLUSH = 4096

    def __init__(self, spill: Spill | None = None) -> None:
        self._live: dict[int, Job] = {}
        self._table = ColumnTable()
        self._n = 0
        self._spill = spill
        self._retired: list[Job] = []  # finished jobs not yet written
        self._chunks: list[tuple[int, tuple[str, ...]]] = []  # per spilled chunk: its rows, each column's kind

    def append(self, job: Job) -> None:
        if job.id != self._n:
            raise ValueError(f"job ids are their index: got {job.id}, expected {self._n}")
        self._live[job.id] = job
        self._n += 1

    def retire(self, jobs: list[Job]) -> None:
        """Finished ``jobs`` leave memory for the spill (nothing without one)."""
        if self._spill is None:
            return
        live, out = self._live, self._retired
        for job in jobs:
            out.append(live.pop(job.id))
        if len(out) >= self.FLUSH:
            self._write()

    def _write(self) -> None:
        jobs, self._retired = self._retired, []
        cols = _job_columns(jobs)
        kinds = tuple(column_kind(c) for c in cols)
        if None in kinds:  # a value the typed columns cannot hold exactly: these rows stay in memory
            for j in jobs:
                self._table.put(j.id, job_record(j))
            return
        for name, kind, values in zip(JOB_COLUMNS, kinds, cols):
            self._spill.append("jobs." + name, np.array(values, dtype=np.int64 if kind == "i" else np.float64))
        self._chunks.append((len(jobs), kinds))

    def _spilled_column(self, name: str) -> list[np.ndarray]:
        """Column ``name``'s spilled chunks, as written (int64 or float64)."""
        raw = self._spill.read("jobs." + name, np.int64)
        c = JOB_COLUMNS.index(name)
        parts, start = [], 0
        for rows, kinds in self._chunks:
            part = raw[start : start + rows]
            parts.append(part.view(np.float64) if kinds[c] == "f" else part)
            start += rows
        return parts

    def _materialize(self) -> None:
        """Every job not in memory into the column table (rows with the values that were written); the
        records stay in memory from then on."""
        if self._spill is None:
            return
        if self._chunks:
            cols = {name: self._spilled_column(name) for name in JOB_COLUMNS}
            for c in range(len(self._chunks)):
                values = [cols[name][c].tolist() for name in JOB_COLUMNS]
                for row in zip(*values):
                    self._table.put(row[0], dict(zip(JOB_COLUMNS, row)))
            for name in JOB_COLUMNS:
                self._spill.drop("jobs." + name)
            self._chunks = []
        for job in self._retired:
            self._table.put(job.id, job_record(job))
        self._retired = []
        self._spill = None

    def __len__(self) -> int:
        return self._n

    def _job(self, i: int) -> Job:
        job = self._live.get(i)
        if job is not None:
            return job
        self._materialize()
        r = self._table.row(i)
        return Job(
            id=r["job"],
            worker=r["worker"],
            head_version=r["head_version"],
            dispatch_time=r["dispatch_time"],
            target_step=None if r["target_step"] == -1 else r["target_step"],
            finish_time=r["finish_time"],
            consume_time=r["consume_time"],
            consume_step=r["consume_step"],
            dropped_at=None if r["dropped_at"] == -1 else r["dropped_at"],
            segments=r["segments"],
            tail_version=r["tail_version"],
            payload=released(r["samples"]),
        )

    def __getitem__(self, i):
        n = self._n
        if isinstance(i, slice):
            return [self._job(k) for k in range(*i.indices(n))]
        if not -n <= i < n:
            raise IndexError("job index out of range")
        return self._job(i % n)

    def __iter__(self):
        return (self._job(i) for i in range(self._n))

    def clear(self) -> None:
        """Drop every job (ids start again at 0; spilled files go)."""
        if self._spill is not None:
            for name in JOB_COLUMNS:
                self._spill.drop("jobs." + name)
        self._live, self._table, self._n, self._retired, self._chunks = {}, ColumnTable(), 0, [], []

    def nbytes(self) -> int:
        """Bytes held by the retired jobs' columns (the live jobs are the cluster's working set)."""
        return self._table.nbytes()

    def to_frame(self):
        """The jobs table: ``pd.DataFrame([job_record(j) for j in jobs])``, bitwise."""
        rest = list(self._live.values()) + self._retired
        if (self._chunks or (rest and len(rest) == self._n)) and not len(self._table):
            # Every row spilled or in memory (no spill, or none yet: the usual run): the columns built at once,
            # the values and types the column table's rows would give (``column_kind``: ints, or floats and
            # ints exactly representable; anything else takes the row-by-row path).
            cols = _job_columns(rest)
            kinds = [column_kind(c) for c in cols]
            if None not in kinds:
                return self._assemble(cols, kinds)
        self._materialize()
        for job in self._live.values():  # rows of the jobs still live (rewritten if called again)
            self._table.put(job.id, job_record(job))
        return self._table.to_frame()

    def _assemble(self, rest: list[list], rest_kinds: list[str]):
        """The table from the spilled chunks and the jobs in memory (``rest``: their columns), one
        column at a time, placed by job id."""
        import pandas as pd

        n = self._n
        ids = np.concatenate(self._spilled_column("job")) if self._chunks else np.empty(0, dtype=np.int64)
        rest_ids = np.array(rest[0], dtype=np.int64)
        seen = np.zeros(n, dtype=bool)
        seen[ids] = True
        seen[rest_ids] = True
        if len(ids) + len(rest_ids) != n or not seen.all():
            raise RuntimeError(f"jobs table: {len(ids)} spilled and {len(rest_ids)} jobs in memory for {n} ids")
        out = {}
        for c, name in enumerate(JOB_COLUMNS):
            kinds = [k[c] for _, k in self._chunks] + ([rest_kinds[c]] if rest_ids.size else [])
            dtype = np.int64 if all(k == "i" for k in kinds) else np.float64
            data = np.empty(n, dtype=dtype)
            if self._chunks:
                data[ids] = np.concatenate([p.astype(dtype, copy=False) for p in self._spilled_column(name)])
            if rest_ids.size:
                data[rest_ids] = np.array(rest[c], dtype=dtype)
            out[name] = data
        return pd.DataFrame(out, copy=False)  # the table's own arrays, not copied into blocks

    def __repr__(self) -> str:
        return f"JobRecords({self._n} jobs, {len(self._live)} live)"


class Signal:
    """Wakes the processes waiting for 'something changed' (buffer, versions, counts), with the
    same schedule as one broadcast simpy event that every waiter yields and ``notify`` succeeds
    (then replaces), minus the wake-ups that would change nothing.

    It is that broadcast event, except for *gated* waiters (workers waiting for admission): they
    park on their own events, and each run of consecutive gated waiters is one callback of the
    round's event, at the place their callbacks would have been. Simpy 4.1 runs an event's
    callbacks in registration order when it is processed (``Environment.step``), so the ungated
    waiters (the learner) keep their places among the workers. A run's callback resumes its
    waiters in order while ``gate()`` holds, as their own wake-ups would have; at the first that
    fails, the rest of the run re-parks in the current round, in order, without being resumed:
    ``gate`` is the waiters' own admission test, a pure function of the cluster's state, and
    nothing runs between a failed test and the end of the run, so each of them would have failed
    and re-parked. A notify with no waiter schedules nothing (the broadcast's event would have no
    callback; skipping it leaves the order of all other events, by time then scheduling order,
    unchanged).
    """

    def __init__(self, env: simpy.Environment, gate: Callable[[], bool]):
        self.env = env
        self._gate = gate
        self._event = env.event()
        self._tail: tuple[Callable, list] | None = None  # the gated run last added to the round

    def wait(self, gated: bool = False) -> simpy.Event:
        """The event to yield until the next round; ``gated``: resumed only when the gate holds."""
        if not gated:
            return self._event
        parked = self.env.event()
        self._run().append(parked)
        return parked

    def notify(self) -> None:
        if self._event.callbacks:  # someone waits: the round's event fires
            self._event.succeed()
            self._event = self.env.event()
            self._tail = None

    def _run(self) -> list[simpy.Event]:
        """The run of gated waiters at the end of the current round (a new one if a non-gated
        waiter came last)."""
        callbacks = self._event.callbacks
        if self._tail is None or not callbacks or callbacks[-1] is not self._tail[0]:
            run: list[simpy.Event] = []
            self._tail = (lambda fired: self._wake(fired, run), run)
            callbacks.append(self._tail[0])
        return self._tail[1]

    def _wake(self, fired: simpy.Event, run: list[simpy.Event]) -> None:
        gate = self._gate
        for i, parked in enumerate(run):
            if not gate():  # nothing runs until the run's end: the rest would fail too
                self._run().extend(run[i:])
                return
            callbacks, parked.callbacks = parked.callbacks, None
            for callback in callbacks:  # the process resumes now, as if it had yielded ``fired``
                callback(fired)


class _Urgent(simpy.Event):
    """An event that runs ``callback`` at the current time ahead of the normal events, where a simpy
    process started now would begin (its start event, ``simpy.events.Initialize`` in simpy 4.1, is
    scheduled urgent): the sync of a publication keeps the place a sync process had in the event
    order, without a process, a generator and the end-of-process event per step."""

    def __init__(self, env: simpy.Environment, callback: Callable[[simpy.Event], None]):
        super().__init__(env)
        self.callbacks.append(callback)
        self._ok, self._value = True, None
        env.schedule(self, URGENT)


class WeightStore:
    """Published weight versions; version v becomes visible to workers after the sync delay.

    :attr:`changed` (an event triggered with the version each time a newer one becomes visible) is made
    when first asked for: a visibility nobody waits on triggers no event (an event without callbacks does
    nothing when processed; skipping it leaves the order of every other event, by time then scheduling
    order, unchanged)."""

    def __init__(self, env: simpy.Environment, weights0: Any, on_visible: Callable[[int], None]):
        self.env = env
        self.snapshots: dict[int, Any] = {0: weights0}
        self.latest = 0
        self.visible = 0
        self._changed = None
        self._on_visible = on_visible

    @property
    def changed(self):
        """The event the next newer visible version triggers (with that version)."""
        if self._changed is None:
            self._changed = self.env.event()
        return self._changed

    def get(self, version: int) -> Any:
        return self.snapshots[version]

    def publish(self, version: int, weights: Any, delay: float) -> None:
        self.snapshots[version] = weights
        self.latest = version
        self._schedule_sync(version, delay)

    def _schedule_sync(self, version: int, delay: float) -> None:
        """:meth:`_sync` now, ahead of the normal events (where a sync process started now would begin)."""
        _Urgent(self.env, lambda _: self._sync(version, delay))

    def _sync(self, version: int, delay: float) -> None:
        if delay > 0:
            self.env.timeout(delay).callbacks.append(lambda _: self._make_visible(version))
        else:
            self._make_visible(version)

    def _make_visible(self, version: int) -> None:
        if version > self.visible:
            self.visible = version
            event, self._changed = self._changed, None
            if event is not None:
                event.succeed(version)
            self._on_visible(version)

    def prune(self, oldest_needed: int) -> None:
        for v in [v for v in self.snapshots if v < oldest_needed]:
            del self.snapshots[v]


@dataclass
class ClusterResult:
    status: str
    steps_done: int
    sim_time: float
    jobs: JobRecords | list[Job]
    events: EventLog | list[tuple]
    rows: MetricRows | list[dict]
    dropped: int
    lengths: dict[int, list[int]] = field(default_factory=dict)
    """Per job id, the response length of each sequence of its group as the inference engine decoded it
    (``system.generation_time.kind = "continuous_batching"``; a regenerated group: its last lengths);
    empty without an engine. Read by :mod:`sandbox.analysis.drop_bias`."""


class Cluster:
    """Runs ``steps`` learner steps of the asynchronous system described by ``cfg``."""

    weight_store: type[WeightStore] = WeightStore
    """The weight store's class (the heap event loop schedules its syncs itself)."""

    def __init__(
        self,
        cfg: SystemConfig,
        workload: Workload,
        trainer: Trainer,
        groups_per_step: int,
        group_size: int,
        seed: int,
        on_step: Callable[[dict], None] | None = None,
        record_events: bool = True,
        updates_per_batch: int = 1,
        keep_payloads: bool = False,
        spill: Spill | None = None,
    ):
        """``keep_payloads``: keep every job's payload until the run ends (for tests that inspect
        the rollouts afterwards; a job dispatched after the learner's end holds what :meth:`_after_end`
        gave it); by default each is released once consumed or dropped.
        ``spill``: finished jobs and the event log are streamed to its files as the run goes on
        (:mod:`sandbox.system.spill`; the tables are the same)."""
        self.cfg = cfg
        self.updates_per_batch = updates_per_batch
        self.workload = workload
        self.trainer = trainer
        self.B = groups_per_step
        self.G = group_size
        self.rng = np.random.default_rng(seed)
        self.env = self._environment()
        self.control: Control = make_control(cfg.staleness, groups_per_step)
        self.store = self.weight_store(self.env, trainer.initial_weights(), self._on_visible)
        self._bind_waits()
        self.buffer: list[Job] = []
        self.jobs = JobRecords(spill)
        self.events = EventLog(spill)
        self.record_events = record_events
        self._log = self.events.add if record_events else None  # None: no event is recorded
        self.keep_payloads = keep_payloads
        self.on_step = on_step
        self.speeds = cfg.speeds()
        self.busy_done = 0.0  # worker-seconds of finished jobs
        self.running_since: dict[int | tuple[int, int], float] = {}  # job id, or (group id, worker) of a part
        self.learner_busy = 0.0
        self.samples_consumed = 0
        self.tokens_consumed = 0
        self.samples_generated = 0
        self.rows = MetricRows()
        self.status = "running"
        gen = cfg.generation_time
        self.engines = (
            gen.build_engines(self.env, len(self.speeds), self._resample, self._resume)
            if getattr(gen, "engine_model", False)
            else None
        )
        self.lengths: dict[int, list[int]] = {}  # job id -> its sequences' lengths (engine runs only)
        plain = self.engines is None and not cfg.partial_rollouts
        self.parts = cfg.staleness.group_parts(groups_per_step, group_size, len(self.speeds)) if plain else 1
        """Parts each group is split into (``ControlConfig.group_parts``; 1: a group is one worker's job)."""
        self.pending_parts: deque[tuple[Job, int]] = deque()  # (group, samples) of parts no worker took yet

    # -- the event loop (what a subclass with another loop replaces: sandbox/system/heap_loop.py) ----------
    def _environment(self) -> simpy.Environment:
        """The environment the processes, the weight store and the engines schedule their events in."""
        return simpy.Environment()

    def _bind_waits(self) -> None:
        """The waits the worker and learner processes yield, one implementation for every event loop:
        ``_sleep(d)`` (hold for ``d`` seconds), ``_park()`` (a free worker waits for admission),
        ``_wait()`` (the learner waits for the next change) and ``_notify()`` (something changed); and
        ``_could_take``: None, or ``Control.could_take``, asked before the first take of each step (a take
        it says could change nothing is not tried: the learner waits at once)."""
        self.signal = signal = Signal(self.env, self._admissible)
        self._could_take = None  # the learner's take is always tried (see HeapCluster._bind_waits)
        self._sleep = self.env.timeout
        self._park = lambda: signal.wait(gated=True)
        self._wait = signal.wait
        self._notify = signal.notify

    def _start_workers(self) -> None:
        """Start one :meth:`_worker` process per worker, in worker order (before the learner's)."""
        for wid in range(len(self.speeds)):
            self.env.process(self._worker(wid))

    def _run_until(self, learner: simpy.Process) -> None:
        """Process events until the learner's process ends; an empty schedule before that is a stuck
        simulation (:meth:`_stuck_reason`)."""
        try:
            self.env.run(until=learner)
        except RuntimeError as exc:
            if "No scheduled events left" not in str(exc):
                raise
            raise SimulationError(self._stuck_reason()) from None

    # -- bookkeeping -------------------------------------------------------------------------
    def _event(self, kind: str, worker: int = -1, job: int = -1, version: int = -1, step: int = -1) -> None:
        """Record an event (the hot path appends the tuple through ``self._log`` itself)."""
        if self._log is not None:
            self._log((self.env.now, kind, worker, job, version, step))

    def _on_visible(self, version: int) -> None:
        if self._log is not None:
            self._log((self.env.now, "visible", -1, -1, version, -1))
        self.store.prune(self.control.oldest_needed_version(self.store.visible))
        self._notify()

    def _release(self, jobs: list[Job]) -> int:
        """Free the payloads of jobs the learner has trained on or the control dropped; returns their
        samples (the sum of their :attr:`Job.num_samples`)."""
        if self.keep_payloads:
            return sum(job.num_samples for job in jobs)
        samples = 0
        for job in jobs:
            # the Job (slots) stays as it is: retiring it into the column table here cost about 15 us a
            # job, about 60% of a system-only step (benchmarks/bench_system.py row 1), for ~300 B
            job.payload = payload = released(job.payload.num_responses)
            samples += payload.num_responses
        self.jobs.retire(jobs)
        return samples

    def worker_utilisation(self) -> float:
        now = self.env.now
        if now <= 0:
            return 0.0
        running_since = self.running_since
        running = sum(now - t for t in running_since.values()) if running_since else 0  # sum() of nothing: 0
        return (self.busy_done + running) / (len(self.speeds) * now)

    def _draw(self, name: str, tokens: int = 0, speed: float = 1.0) -> float:
        """A duration from ``system.<name>``; a non-finite one is an error naming the field (it would
        stop the clock at inf and surface much later as a crash in the figures)."""
        delay = getattr(self.cfg, name)
        try:
            value = delay.sample(self.rng, tokens) / speed
        except OverflowError:
            value = math.inf
        if not (math.isfinite(value) and value >= 0):
            self._bad_draw(name, value, tokens, speed)
        return value

    def _bad_draw(self, name: str, value: float, tokens: int, speed: float):
        """Raise the error of a drawn duration that is not finite and >= 0 (see :meth:`_draw`)."""
        raise SimulationError(
            f"system.{name}: drew a duration of {value} s from {getattr(self.cfg, name).model_dump()} "
            f"(tokens={tokens}{f', worker speed {speed:g}' if speed != 1.0 else ''}); durations must be finite "
            "and >= 0: lower the mean or the spread"
        )

    def _after_end(self) -> Callable[[int], Payload | None] | None:
        """The workload's ``dispatched_after_end`` when the cluster may use it, else None. A job dispatched once
        the learner's process has ended (at its last publication: ``status`` is no longer ``"running"``) is
        recorded in the jobs table and the event log, but the run ends before it could finish and nothing reads
        its rollouts or its generation time: it takes that payload (whose ``num_responses`` the jobs table reads)
        instead of ``workload.sample``, and no duration is drawn for it (the draw of the cost model reads the
        decoded length). None where the workload has no such method or ``_draw`` is not this class's (replaced by
        a subclass or a test): every job is then sampled and timed."""
        if getattr(self._draw, "__func__", None) is not _CLUSTER_DRAW:
            return None
        return getattr(self.workload, "dispatched_after_end", None)

    def _admissible(self) -> bool:
        """Whether a free worker would be admitted now (the test of :meth:`_worker`; pure)."""
        return bool(self.pending_parts) or self.control.admit(self.store.visible, len(self.buffer)) is not None

    # -- processes -----------------------------------------------------------------------------
    def _worker(self, wid: int):
        speed = self.speeds[wid]
        env, control, store, workload = self.env, self.control, self.store, self.workload
        sleep, park, notify = self._sleep, self._park, self._notify
        buffer, jobs, running_since = self.buffer, self.jobs, self.running_since  # mutated in place only
        log, draw, G = self._log, self._draw, self.G
        pending = self.pending_parts
        after_end = self._after_end()
        split, engines, in_flight = self.parts > 1, self.engines is not None, self.cfg.partial_rollouts  # fixed per run
        while True:
            if pending:  # a part of a split group waits: take it before any new group
                job, samples = pending.popleft()
                yield from self._generate_part(job, wid, speed, samples)
                continue
            admission = control.admit(store.visible, len(buffer))
            if admission is None:
                yield park()
                continue
            version = admission.version
            job = Job(
                id=len(jobs),
                worker=wid,
                head_version=version,
                target_step=admission.target_step,
                dispatch_time=env.now,
            )
            control.on_dispatch(job)
            jobs.append(job)
            if split:
                yield from self._split(job, wid, speed, version)
                continue
            running_since[job.id] = job.dispatch_time
            if log is not None:
                log(
                    (
                        env.now,
                        "dispatch",
                        wid,
                        job.id,
                        version,
                        -1 if admission.target_step is None else admission.target_step,
                    )
                )
            if engines:
                yield from self._generate_on_engine(job, wid, version)
            elif in_flight:
                yield from self._generate_in_flight(job, speed)
            else:
                if after_end is not None and self.status != "running" and (payload := after_end(G)) is not None:
                    job.payload, job.tail_version = payload, version  # never generated (_after_end)
                    return
                job.payload = payload = workload.sample(store.get(version), version, G)
                job.tail_version = version
                yield sleep(draw("generation_time", payload.decode_steps, speed))
            job.payload = payload = workload.finish(job.payload)
            job.finish_time = now = env.now
            self.busy_done += now - running_since.pop(job.id)
            self.samples_generated += int(payload.num_responses)
            control.on_finish(job)
            buffer.append(job)
            if log is not None:
                log((now, "finish", wid, job.id, job.tail_version, -1))
            notify()

    def _split(self, job: Job, wid: int, speed: float, version: int):
        """Sample the group ``job`` once with the weights of ``version`` and split its ``G`` samples into
        :attr:`parts` near-equal parts (sizes differ by at most one); this worker generates the first,
        the others wait in :attr:`pending_parts` for free workers
        (``docs/system.md#work-conserving-synchronous-steps``)."""
        G, parts = self.G, self.parts
        job.payload = self.workload.sample(self.store.get(version), version, G)
        job.tail_version = version
        job.parts_left = parts
        sizes = [G // parts + (1 if i < G % parts else 0) for i in range(parts)]
        self.pending_parts.extend((job, n) for n in sizes[1:])
        self._notify()
        yield from self._generate_part(job, wid, speed, sizes[0])

    def _generate_part(self, job: Job, wid: int, speed: float, samples: int):
        """Generate ``samples`` of the split group ``job`` on worker ``wid``. A duration model of whole
        groups is scaled by ``samples / G`` (a worker produces samples at a fixed rate); a per-token model
        (``cost_model``, ``trace`` fit) is charged the group's longest response unscaled, as the part's
        sequences are decoded in one batch (an upper bound: the part's own longest may be shorter). The
        group enters the buffer when its last part finishes, so the learner only ever sees whole groups."""
        env, log, running_since = self.env, self._log, self.running_since
        key = (job.id, wid)
        start = running_since[key] = env.now
        if log is not None:
            log((start, "dispatch", wid, job.id, job.head_version, -1))
        duration = self._draw("generation_time", job.payload.decode_steps, speed)
        if not self.cfg.generation_time.per_token_model:
            duration *= samples / self.G
        yield self._sleep(duration)
        now = env.now
        self.busy_done += now - running_since.pop(key)
        if log is not None:
            log((now, "finish", wid, job.id, job.tail_version, -1))
        job.parts_left -= 1
        if job.parts_left:
            return
        job.payload = payload = self.workload.finish(job.payload)
        job.finish_time = now
        self.samples_generated += int(payload.num_responses)
        self.control.on_finish(job)
        self.buffer.append(job)
        self._notify()

    def _generate_on_engine(self, job: Job, wid: int, version: int):
        """Generate on the worker's inference engine (``system.generation_time.kind =
        "continuous_batching"``): the group's sequences are stepped by the engine's batch; the worker
        waits for the last one (``sandbox/system/delays/continuous_batching.py``)."""
        gen = self.cfg.generation_time
        engine = self.engines[wid // gen.workers_per_engine]
        weights = self.store.get(version)
        job.payload = payload = self.workload.sample(weights, version, self.G)
        job.tail_version = version
        lengths = gen.lengths(self.rng, payload, self.G, job.id, version)
        problem = engine.misfit(lengths)
        if problem is not None:
            raise SimulationError(problem)
        self.lengths[job.id] = lengths
        yield engine.submit(job, lengths, version, weights)

    def _resample(self, job: Job, version: int, weights: Any) -> list[int]:
        """An aborted group regenerated from its first token with ``weights`` of ``version``
        (``sync = "abort"``): a new payload, head and tail version ``version``; its new lengths."""
        job.payload = payload = self.workload.sample(weights, version, self.G)
        job.head_version = job.tail_version = version
        job.segments += 1
        self._event("abort", job.worker, job.id, version)
        lengths = self.cfg.generation_time.lengths(self.rng, payload, self.G, job.id, version)
        problem = self.engines[0].misfit(lengths)
        if problem is not None:
            raise SimulationError(problem)
        self.lengths[job.id] = lengths
        return lengths

    def _resume(self, job: Job, version: int, weights: Any, positions: list[int]) -> list[int]:
        """A group cut at a weight sync and continued under ``weights`` of ``version``
        (``system.generation_time.mixed_versions``): sequence ``i`` keeps its first ``positions[i]`` tokens
        (``truncate_each``) and the workload's ``extend`` samples the rest, stamped with ``version``; the
        head version is the oldest that produced a token, the tail the newest. Returns the new lengths."""
        cut = job.payload.truncate_each(positions)
        job.payload = payload = self.workload.extend(weights, cut, version)
        job.head_version = int(payload.oldest_version().min().item())
        job.tail_version = int(payload.newest_version().max().item())
        job.segments += 1
        self._event("switch", job.worker, job.id, version)
        lengths = self.cfg.generation_time.lengths(self.rng, payload, self.G, job.id, version)
        self.lengths[job.id] = lengths
        return lengths

    def _generate_in_flight(self, job: Job, speed: float):
        """Decode in segments; when a newer version becomes visible mid-generation the tokens
        decoded so far are kept and the rest is regenerated with the new weights."""
        cost = self.cfg.generation_time
        version = job.head_version
        payload = self.workload.begin(self.G)
        prefill = cost.prefill / speed
        if prefill > 0:
            yield self.env.timeout(prefill)
            version = self.store.visible if self.store.visible > version else version
        while True:
            start_width = payload.width
            full = self.workload.extend(self.store.get(version), payload, version)
            steps = full.decode_steps - start_width
            per_token = cost.per_token_time(self.rng) / speed
            started = self.env.now
            done = self.env.timeout(steps * per_token)
            yield done | self.store.changed
            elapsed_tokens = int((self.env.now - started) / per_token) if per_token > 0 else steps
            if done.processed or elapsed_tokens >= steps:
                payload = full
                break
            payload = full.truncate(start_width + elapsed_tokens)
            version = self.store.visible
            job.segments += 1
            self._event("switch", job.worker, job.id, version)
        job.payload = payload
        job.tail_version = int(payload.newest_version().max().item())
        # Lag is counted from the oldest version that produced a token (the head version).
        job.head_version = int(payload.oldest_version().min().item())

    def _learner(self, batches: int):
        env, control, buffer, log = self.env, self.control, self.buffer, self._log
        sleep, wait, notify = self._sleep, self._wait, self._notify
        tidy, utilisation = self.events.tidy, self.worker_utilisation
        last_time = 0.0
        could_take = self._could_take
        for step in range(batches):
            self.learner_step = step  # the step the learner waits to take (HeapCluster's wake-up test)
            wait_start = env.now
            ready = could_take is None or could_take(step, buffer)  # False: a take would change nothing
            while True:
                if ready:
                    taken = control.take(step, buffer)
                    if taken.dropped:
                        for job in taken.dropped:
                            job.dropped_at = step
                            self._event("drop", job.worker, job.id, job.head_version, step)
                        self._release(taken.dropped)
                    if taken.batch is not None:
                        break
                    if taken.dropped:
                        notify()  # drops free admission capacity
                yield wait()
                ready = True  # resumed (by the heap loop only when its take could change something)
            batch = taken.batch
            notify()  # the buffer shrank: throttled workers may go on
            now = env.now
            for job in batch:
                job.consume_time = now
                job.consume_step = step
            if log is not None:
                log((now, "consume", -1, -1, -1, step))
            result = self.trainer.train(step, batch, now)
            samples = self._release(batch)
            duration = self._draw("train_time", result.tokens * result.passes)
            if log is not None:
                log((env.now, "train_start", -1, -1, -1, step))
            yield sleep(duration)
            self.learner_busy += duration
            if log is not None:
                log((env.now, "train_end", -1, -1, -1, step))
            self.samples_consumed += samples
            self.tokens_consumed += result.tokens
            control.on_publish(step + 1)
            self.store.publish(step + 1, result.weights, self._draw("sync_delay"))
            now = env.now
            if log is not None:
                log((now, "publish", -1, -1, step + 1, -1))
                tidy()
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
                "util/workers": utilisation(),
                "util/learner": self.learner_busy / now if now > 0 else math.nan,
            }
            last_time = now
            if result.step_metrics is None:
                row.update(result.metrics)
                self._emit(row)
            else:  # one row per optimizer step; the system columns are the batch's, repeated
                for i, metrics in enumerate(result.step_metrics):
                    self._emit({**row, "step": step * self.updates_per_batch + i, **metrics})
            notify()
            if result.stop:
                self.status = "diverged"
                return
        self.status = "completed"

    def _emit(self, row: dict) -> None:
        self.rows.append(row)
        if self.on_step is not None:
            self.on_step(row)

    def _stuck_reason(self) -> str:
        """Why every process is waiting: no event can ever fire again, so the learner's next step
        can never complete (the config-level cases are refused when the scenario is loaded)."""
        step = len(self.rows) // self.updates_per_batch
        state = (
            f"learner step {step} waits for {self.B} groups (algorithm.groups_per_step) with {len(self.buffer)} "
            f"in the buffer, {self.control.running} running and no worker admitted"
        )
        return f"system.staleness: the simulation can make no progress: {state}; {self.control.stuck_reason()}"

    def run(self, steps: int) -> ClusterResult:
        """Simulate ``steps`` optimizer steps: ``ceil(steps / updates_per_batch)`` consumed batches (the
        trainer stops a last batch after the ``steps``-th optimizer step)."""
        self._start_workers()
        self._run_until(self.env.process(self._learner(-(-steps // self.updates_per_batch))))
        return ClusterResult(
            status=self.status,
            steps_done=len(self.rows),
            sim_time=self.env.now,
            jobs=self.jobs,
            events=self.events,
            rows=self.rows,
            dropped=self.control.dropped,
            lengths=self.lengths,
        )


_CLUSTER_DRAW = Cluster._draw
"""The draw as defined (:meth:`Cluster._after_end` stands down when another one is in place)."""
