"""The staleness-control registry and the :class:`Control` base every control extends.

A control decides which rollouts may be generated (admission) and which may be consumed, and owns
the counts its rules depend on. The cluster only asks and reports:

* ``admit(visible, buffer_len)`` → the weight version a free worker should generate with (and, for
  ``fixed_lag``, the learner step the job is destined for), or ``None`` to wait;
* ``on_dispatch(job)`` / ``on_finish(job)`` → a job started / entered the buffer;
* ``take(step, buffer)`` → a :class:`Take`: the jobs learner step ``step`` consumes (``None`` to
  wait; consumption is counted by the control) and the over-stale jobs it discarded from the buffer;
* ``on_publish(version)`` → the learner published ``version``;
* ``oldest_needed_version(visible)`` and ``stuck_reason()`` → what may be pruned, and why no work is
  admitted when the simulation can make no progress.

Counting convention (``docs/system.md#counting-convention``): one version per optimizer step; a
job's lag at step ``s`` is ``s − head_version`` where the head version is the oldest version that
produced any of its tokens (with in-flight updates later tokens may be newer). Units: B = groups
per step. Each control is one module of this package, its config next to its class
(``docs/system.md#<kind>``).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from sandbox.base.registry import Registry

CONTROLS: Registry = Registry("staleness control", key="kind", plugins="staleness")

Dispatch = Literal["work_conserving", "group_per_worker"]


def spread_parts(groups: int, group_size: int, num_workers: int, dispatch: Dispatch) -> int:
    """Parts per group of a work-conserving synchronous step: ``min(G, ceil(W / groups))`` when there are
    fewer groups than workers (``theory.split_batch.parts_per_group``), else 1 (every worker already has a
    group to take while work waits); ``group_per_worker``: always 1."""
    if dispatch == "group_per_worker" or groups >= num_workers:
        return 1
    return max(1, min(group_size, math.ceil(num_workers / groups)))


class ControlConfig(BaseModel):
    """Base of every staleness-control config (strict keys, finite numbers), and what the rest of the
    house asks about a control (``CONTRIBUTING.md#what-a-component-declares``). Every answer has a
    default, so a control that declares nothing still runs in ``run``, ``plan``, the budget estimate and
    the claims; the defaults are conservative and say so:

    * :attr:`bound_field` / :meth:`with_bound` / :meth:`describe_bound`: the field ``sandbox plan
      --k-max`` sets (default ``None``: no bound, planned as ``max_lag``);
    * :meth:`ahead_groups`, :meth:`kept_versions`, :meth:`drops_stale`: the budget estimate's groups
      alive ahead of the learner, the weight versions kept, and whether over-stale groups are generated
      and discarded (extra work);
    * :meth:`max_in_flight`: the most groups ever running at once (the throughput claims; ``None``:
      unknown);
    * :meth:`is_synchronous` and :meth:`fixed_lag`: on-policy detection (time to target's reference
      runs) and a deterministic lag (the delayed-SGD stability boundary of the figures);
    * :meth:`batch_problem`: a cross-field check against ``algorithm.groups_per_step``;
    * :meth:`group_parts`: how many workers share one group (a synchronous step spread over the fleet)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    bound_field: ClassVar[str | None] = None
    """The field holding the staleness bound (``sandbox plan --k-max`` sets it), or ``None``."""
    bound_type: ClassVar[type] = int
    """The bound's type (``float`` for a ratio)."""

    @classmethod
    def with_bound(cls, data: dict[str, Any], k: int) -> dict[str, Any] | None:
        """The table ``data`` (this control's, resolved) with its bound set to ``k``; ``None`` when the
        control has no bound (the plan then uses ``max_lag``)."""
        if cls.bound_field is None:
            return None
        return {**data, cls.bound_field: cls.bound_type(k)}

    @classmethod
    def describe_bound(cls, data: dict[str, Any]) -> str:
        """A short label of the control and its bound (``plan`` tables)."""
        kind = data["kind"]
        if cls.bound_field is None:
            return kind
        value = data[cls.bound_field]
        return (
            f"{kind} {cls.bound_field}={value:g}" if isinstance(value, float) else f"{kind} {cls.bound_field}={value}"
        )

    def ahead_groups(self, groups_per_step: int, num_workers: int) -> tuple[float, str]:
        """Groups the control lets exist ahead of the batch being trained (queued or generating), and
        what they are, for the memory estimate. Default (unknown): one per worker plus one batch, an
        estimate, not a bound."""
        return (
            num_workers + groups_per_step,
            f"groups ahead: unknown for {self.kind!r}, estimated conservatively as workers + one batch",
        )

    def kept_versions(self) -> int:
        """Weight snapshots the store keeps at once (the memory estimate). Default 2."""
        return 2

    def drops_stale(self) -> bool:
        """Whether over-stale groups are generated and then discarded (the budget and plan count up to
        one queue's worth more work per batch). Default True: the conservative answer."""
        return True

    def max_in_flight(self, groups_per_step: int) -> int | None:
        """The most groups ever running at once, or ``None`` when unknown (default)."""
        return None

    def is_synchronous(self) -> bool:
        """Whether every batch is generated by the learner's current weights (on-policy). Default False."""
        return False

    def fixed_lag(self) -> int | None:
        """The lag every batch has, when it is deterministic (``sync``: 0); default ``None``."""
        return None

    def batch_problem(self, groups_per_step: int) -> str | None:
        """Why no batch of ``groups_per_step`` groups could ever form under this control, or ``None``."""
        return None

    def group_parts(self, groups_per_step: int, group_size: int, num_workers: int) -> int:
        """Into how many parts the cluster splits each group so that idle workers share a step's work
        (``docs/system.md#work-conserving-synchronous-steps``). Default 1: a group is one worker's job."""
        return 1


@dataclass(slots=True)
class Admission:
    """The version a free worker generates with (and, for ``fixed_lag``, the step its job is destined for)."""

    version: int
    target_step: int | None = None


class Take(NamedTuple):
    """One attempt of the learner to take a batch (a named tuple: one is made on every wake-up)."""

    batch: list | None
    """The jobs consumed by the step, or ``None``: wait for more."""
    dropped: list
    """Jobs removed from the buffer as over-stale during this attempt, in buffer order."""


class BufferIndex:
    """The head versions of the jobs reported finished and not yet taken out by :meth:`Control.take`,
    so a drop rule can tell in O(log n) that no buffered job is over-stale instead of rescanning the
    buffer on every wake-up of the learner. A min-heap of ``(head_version, job id)`` with lazy
    deletion (Python ``heapq``): a discarded job's entry stays until it reaches the top, and the heap
    is rebuilt from the live entries once the dead ones outnumber them (:meth:`discard`), so it holds
    at most about twice the buffer whatever the run's length. A control that never asks for the
    minimum (``sync``) would otherwise keep an entry per job of the run (about 90 B a job,
    740 B a step on the quickstart). The minimum is the same either way: ``(head_version, id)`` pairs
    are distinct, so the heap's top is the smallest live pair however the heap is arranged."""

    SLACK = 64
    """Dead entries tolerated beyond the live ones before a rebuild (a rebuild costs O(live))."""

    def __init__(self):
        self._heap: list[tuple[int, int]] = []
        self._live: set[int] = set()

    def __len__(self) -> int:
        return len(self._live)

    def add(self, job) -> None:
        self._live.add(job.id)
        heapq.heappush(self._heap, (job.head_version, job.id))

    def discard(self, jobs) -> None:
        live = self._live
        for job in jobs:
            live.discard(job.id)
        if len(self._heap) > 2 * len(live) + self.SLACK:  # amortised O(1) a discard
            self._heap = [e for e in self._heap if e[1] in live]
            heapq.heapify(self._heap)

    def covers(self, buffer: list) -> bool:
        """Whether the index holds the buffer's jobs: every job of ``buffer`` was reported through
        ``on_finish`` and every other reported job left through ``take`` (the cluster's buffer); a
        buffer assembled by hand is simply scanned."""
        return len(self._live) == len(buffer)

    def min_head(self) -> float:
        """The smallest head version among the indexed jobs (``inf`` when none)."""
        heap = self._heap
        while heap and heap[0][1] not in self._live:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf


class Control:
    """Shared bookkeeping: counts of groups in each state (dropped groups leave the count).

    ``running``, ``consumed`` and ``dropped`` are read-only to callers: only the control's own
    methods change them, from what the cluster reports. A subclass that overrides :meth:`on_finish`
    or :meth:`take` calls the base method (it keeps :attr:`buffered`, the index of the buffer's
    head versions that the drop rules read)."""

    streaming: bool = False
    """Whether workers generate continuously with the newest visible version, so that a generation
    may span versions (needed by ``system.partial_rollouts``)."""

    def __init__(self, cfg, groups_per_step: int):
        self.cfg = cfg
        self.B = groups_per_step
        self.running = 0
        self.consumed = 0
        self.dropped = 0
        self.buffered = BufferIndex()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._rules_as_defined = _rules_of(cls)

    def active(self, buffer_len: int) -> int:
        return self.consumed + buffer_len + self.running

    # -- what the cluster asks ---------------------------------------------------------------------
    def admit(self, visible: int, buffer_len: int) -> Admission | None:  # pragma: no cover
        raise NotImplementedError

    def take(self, step: int, buffer: list) -> Take:
        """Discard what step ``step`` may never consume, then select its batch (both from ``buffer``,
        in place); the batch counts as consumed."""
        dropped = self.drop_stale(step, buffer)
        if dropped:
            self.dropped += len(dropped)
            self.buffered.discard(dropped)
        batch = self.select(step, buffer)
        if batch is not None:
            self.consumed += len(batch)
            self.buffered.discard(batch)
        return Take(batch, dropped)

    def could_take(self, step: int, buffer: list) -> bool:
        """Whether :meth:`take` at step ``step`` could drop or select anything from ``buffer`` now;
        ``False`` only when it certainly would not (nothing stale: :meth:`none_stale`, and no batch:
        :meth:`no_batch`). A take that finds nothing changes nothing, so the heap event loop skips the
        learner's wake-up then (``sandbox/system/heap_loop.py``). A control with a ``take`` of its own is
        always asked, and so is a control whose rules were replaced after its class was defined (a rule patched
        onto the class, e.g. a planted bug: the shortcuts below vouch for the rules as written, not for a
        replacement)."""
        cls = type(self)
        if cls.take is not _CONTROL_TAKE or _rules_replaced(cls):
            return True
        return not (self.none_stale(step, buffer) and self.no_batch(step, buffer))

    def none_stale(self, step: int, buffer: list) -> bool:
        """``True`` only when :meth:`drop_stale` would certainly drop nothing (a control with a drop rule
        overrides it with its rule's own shortcut). Default: whether the control keeps the base rule
        (drops none)."""
        return type(self).drop_stale is _CONTROL_DROP_STALE

    def no_batch(self, step: int, buffer: list) -> bool:
        """``True`` only when :meth:`select` would certainly return ``None`` (a control with its own
        selection overrides it). Default: with the base rule (FIFO), fewer than ``B`` jobs in the buffer."""
        return type(self).select is _CONTROL_SELECT and len(buffer) < self.B

    def oldest_needed_version(self, visible: int) -> int:
        """Snapshots older than this are never handed out again."""
        return visible

    def stuck_reason(self) -> str:
        """Why no work is admitted when no event can fire any more (the simulation is stuck)."""
        return f"the staleness control {self.cfg.model_dump()} admits no more work"

    # -- what the cluster reports ------------------------------------------------------------------
    def on_dispatch(self, job) -> None:
        """A worker started ``job`` (after a successful :meth:`admit`)."""
        self.running += 1

    def on_finish(self, job) -> None:
        """``job`` finished and enters the buffer."""
        self.running -= 1
        self.buffered.add(job)

    def on_publish(self, version: int) -> None:
        """The learner published ``version`` (visible to workers after the sync delay)."""

    # -- the rules a control overrides -------------------------------------------------------------
    def drop_stale(self, step: int, buffer: list) -> list:
        """Remove from ``buffer`` and return the jobs step ``step`` may never consume. Default: none."""
        return []

    def select(self, step: int, buffer: list) -> list | None:
        """Remove and return the batch of step ``step``, or ``None`` to wait. Default: FIFO
        (completion order)."""
        if len(buffer) < self.B:
            return None
        batch = buffer[: self.B]
        del buffer[: self.B]
        return batch


_SHORTCUT_RULES = ("take", "drop_stale", "select", "none_stale", "no_batch")
"""The rules :meth:`Control.could_take` answers for: it vouches for them as their classes define them."""


def _rules_of(cls: type) -> tuple:
    return tuple(getattr(cls, name) for name in _SHORTCUT_RULES)


def _rules_replaced(cls: type) -> bool:
    """Whether a rule of ``cls`` (its own or inherited) is no longer the function it had when ``cls`` was
    defined: replaced on the class or on a base class since."""
    return _rules_of(cls) != cls._rules_as_defined


Control._rules_as_defined = _rules_of(Control)
_CONTROL_TAKE, _CONTROL_DROP_STALE, _CONTROL_SELECT = Control.take, Control.drop_stale, Control.select
"""The base rules as written (a replacement patched onto ``Control`` is not them)."""


def remove_where(buffer: list, too_old) -> list:
    """Remove the jobs for which ``too_old(job)`` holds from ``buffer`` (asked in buffer order) and
    return them: drop-on-dequeue as in prime-rl (git 559b4477) and TRL's AsyncGRPO (trl 1.16.0)."""
    dropped, kept = [], []
    for job in buffer:
        (dropped if too_old(job) else kept).append(job)
    if dropped:
        buffer[:] = kept
    return dropped
