"""Progress of the long commands: one helper that every command reports through (docs/index.md#progress).

A command opens a :func:`session` around its work; the code doing the work, however deep (a run's
simulation, the LM warm start, a claim's batch of runs), opens labelled :func:`task` s in it::

    with progress.session(progress.enabled(quiet)):
        with progress.task("simulating", total=steps, unit="steps") as t:
            for ...:
                t.advance()

Without an open session (the programmatic API, the tests, a worker process) a task costs nothing
and prints nothing. In a session every task is one row on **stderr**: description, bar, done/total,
elapsed time and an ETA computed from the completed units (remaining = elapsed × (total − done) /
done). Uneven units are weighted (``weights=``: one number per unit, e.g. the estimated seconds of
each run from :mod:`sandbox.scenario.budget`); the done/total column still counts units. A task opened inside
another is shown indented under it and removed when it ends; a top-level task stays on screen.

The display is on only when stderr is a terminal and the command was not asked to be quiet
(:func:`enabled`), so piped output and the tests stay exactly as without it. ``SANDBOX_PROGRESS=1``
forces it on (a CI log), ``SANDBOX_PROGRESS=0`` off. :func:`recording` installs a sink that records
the tasks instead of drawing them (what the tests read).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

ENV = "SANDBOX_PROGRESS"


class Sink(Protocol):
    """Where the tasks of a session go: the rich display or a recording."""

    def start(
        self, key: int, description: str, total: float | None, count: int | None, unit: str, depth: int
    ) -> None: ...

    def update(
        self, key: int, completed: float, done: int, description: str, info: str, total: float | None, count: int | None
    ) -> None: ...

    def stop(self, key: int, depth: int) -> None: ...

    def close(self) -> None: ...


class Task:
    """One labelled piece of work: :meth:`advance` per finished unit. Inert outside a session."""

    def __init__(
        self,
        reporter: _Reporter | None,
        key: int,
        description: str,
        count: int | None,
        weights: Sequence[float] | None,
        unit: str,
        depth: int,
    ):
        self._r, self.key, self.description, self.unit, self.depth = reporter, key, description, unit, depth
        self.count = count
        self._weights = [max(float(w), 0.0) for w in weights] if weights is not None else None
        self.total = (
            (sum(self._weights) or None) if self._weights is not None else (float(count) if count is not None else None)
        )
        self.done = 0
        self.completed = 0.0
        self.info = ""

    def _weight(self, start: int, n: int) -> float:
        if self._weights is None:
            return float(n)
        return sum(self._weights[start : start + n])

    def advance(self, n: int = 1, info: str | None = None) -> None:
        """``n`` more units finished (their weights are added to the completed work)."""
        self.completed += self._weight(self.done, n)
        self.done += n
        if info is not None:
            self.info = info
        self._push()

    def advance_to(self, done: int, info: str | None = None) -> None:
        """Set the finished units to ``done`` (never backwards)."""
        if done > self.done:
            self.advance(done - self.done, info)
        elif info is not None:
            self.update(info=info)

    def update(self, description: str | None = None, info: str | None = None, total: int | None = None) -> None:
        """Change the label, the free text after the counts, or the number of units (unweighted tasks)."""
        if description is not None:
            self.description = description
        if info is not None:
            self.info = info
        if total is not None and self._weights is None:
            self.count, self.total = total, float(total)
        self._push()

    def _push(self) -> None:
        if self._r is not None:
            self._r.sink.update(
                self.key, self.completed, self.done, self.description, self.info, self.total, self.count
            )


@dataclass
class _Reporter:
    sink: Sink
    pid: int = field(default_factory=os.getpid)
    depth: int = 0
    next_key: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


_CURRENT: _Reporter | None = None


def _active() -> _Reporter | None:
    r = _CURRENT
    return r if r is not None and r.pid == os.getpid() else None  # a forked worker never draws


def active() -> bool:
    """Whether a session is open in this process (tasks are shown or recorded)."""
    return _active() is not None


def enabled(quiet: bool = False) -> bool:
    """The display is on: not ``quiet``, and stderr is a terminal (``SANDBOX_PROGRESS`` overrides)."""
    if quiet:
        return False
    env = os.environ.get(ENV, "").strip()
    if env in ("0", "1"):
        return env == "1"
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextmanager
def task(
    description: str, total: int | None = None, *, weights: Sequence[float] | None = None, unit: str = ""
) -> Iterator[Task]:
    """A task in the open session (shown under the current one); ``total`` units (None: a phase
    without a count), or one weight per unit in ``weights``."""
    r = _active()
    count = len(weights) if weights is not None else total
    if r is None:
        yield Task(None, -1, description, count, weights, unit, 0)
        return
    with r.lock:
        key = r.next_key
        r.next_key += 1
        depth = r.depth
        r.depth += 1
    t = Task(r, key, description, count, weights, unit, depth)
    r.sink.start(key, description, t.total, count, unit, depth)
    try:
        yield t
    finally:
        r.depth -= 1
        r.sink.stop(key, depth)


def phase(description: str):
    """A step of a command without units (e.g. "figures"): a task with no count."""
    return task(description)


@contextmanager
def session(on: bool, sink: Sink | None = None) -> Iterator[None]:
    """Open the display for the duration of a command (``on``: :func:`enabled`). A session already
    open in this process is reused, so a command's helpers may open one too."""
    global _CURRENT
    if _active() is not None or not (on or sink is not None):
        yield
        return
    sink = sink if sink is not None else RichSink()
    _CURRENT = _Reporter(sink)
    try:
        yield
    finally:
        _CURRENT = None
        sink.close()


# ------------------------------------------------------------------------------------------------
# sinks
# ------------------------------------------------------------------------------------------------


@dataclass
class Recorded:
    """What a :class:`RecordingSink` saw of one task."""

    description: str
    total: float | None
    count: int | None
    unit: str
    depth: int
    updates: list[tuple[int, float, str]] = field(default_factory=list)  # (done, completed, info)
    descriptions: list[str] = field(default_factory=list)
    stopped: bool = False


class RecordingSink:
    """Records every task (the tests read :attr:`tasks`, in the order they started)."""

    def __init__(self):
        self.tasks: dict[int, Recorded] = {}
        self.events: list[tuple[str, str]] = []  # ("start" | "stop", description)
        self.closed = False

    def start(self, key, description, total, count, unit, depth):
        self.tasks[key] = Recorded(description, total, count, unit, depth, descriptions=[description])
        self.events.append(("start", description))

    def update(self, key, completed, done, description, info, total, count):
        rec = self.tasks[key]
        rec.updates.append((done, completed, info))
        rec.total, rec.count = total, count
        if description != rec.descriptions[-1]:
            rec.descriptions.append(description)

    def stop(self, key, depth):
        self.tasks[key].stopped = True
        self.events.append(("stop", self.tasks[key].description))

    def close(self):
        self.closed = True

    def labels(self) -> list[str]:
        """Every label a task had, in order."""
        return [d for t in self.tasks.values() for d in t.descriptions]


@contextmanager
def recording() -> Iterator[RecordingSink]:
    """A session whose tasks are recorded, not drawn (for the tests)."""
    sink = RecordingSink()
    global _CURRENT
    previous = _CURRENT
    _CURRENT = _Reporter(sink)
    try:
        yield sink
    finally:
        _CURRENT = previous


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "ETA -:--:--"
    s = int(round(seconds))
    return f"ETA {s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def eta_seconds(elapsed: float | None, completed: float, total: float | None) -> float | None:
    """Remaining time from the completed work: elapsed × (total − completed) / completed; None
    before the first unit is done or without a total."""
    if total is None or elapsed is None or completed <= 0:
        return None
    return max(elapsed * (total - completed) / completed, 0.0)


class RichSink:
    """The display: one rich progress row per task on stderr, columns description, bar, done/total,
    info, elapsed and ETA."""

    def __init__(self, console=None):
        from rich.console import Console
        from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
        from rich.text import Text

        class Count(ProgressColumn):
            def render(self, task):
                count = task.fields.get("count")
                if count is None:
                    return Text("")
                unit = task.fields.get("unit") or ""
                return Text(f"{task.fields.get('done', 0)}/{count}{' ' + unit if unit else ''}")

        class Eta(ProgressColumn):
            max_refresh = 0.5

            def render(self, task):
                if task.total is None:
                    return Text("")
                if task.finished:
                    return Text("done", style="progress.remaining")
                return Text(
                    format_eta(eta_seconds(task.elapsed, task.completed, task.total)), style="progress.remaining"
                )

        forced = os.environ.get(ENV, "").strip() == "1"
        self.console = console or Console(stderr=True, force_terminal=True if forced else None)
        try:
            stdout_tty = sys.stdout.isatty()
        except (AttributeError, ValueError):
            stdout_tty = False
        self.progress = Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(bar_width=24),
            Count(),
            TextColumn("{task.fields[info]}", markup=False),
            TimeElapsedColumn(),
            Eta(),
            console=self.console,
            transient=False,
            redirect_stdout=stdout_tty,  # prints to a terminal's stdout go above the rows; piped stdout is untouched
            redirect_stderr=True,
        )
        self.ids: dict[int, object] = {}
        self.progress.start()

    def start(self, key, description, total, count, unit, depth):
        label = "  " * depth + description
        self.ids[key] = self.progress.add_task(label, total=total, count=count, done=0, unit=unit, info="", depth=depth)

    def update(self, key, completed, done, description, info, total, count):
        tid = self.ids.get(key)
        if tid is None:
            return
        depth = (
            self.progress.tasks[self.progress.task_ids.index(tid)].fields.get("depth", 0)
            if tid in self.progress.task_ids
            else 0
        )
        self.progress.update(
            tid,
            completed=completed,
            total=total,
            description="  " * depth + description,
            info=info,
            done=done,
            count=count,
        )

    def stop(self, key, depth):
        tid = self.ids.pop(key, None)
        if tid is None or tid not in self.progress.task_ids:
            return
        if depth > 0:
            self.progress.remove_task(tid)
        else:
            self.progress.stop_task(tid)

    def close(self):
        self.progress.stop()


__all__ = [
    "ENV",
    "RecordingSink",
    "RichSink",
    "Task",
    "active",
    "enabled",
    "eta_seconds",
    "format_eta",
    "phase",
    "recording",
    "session",
    "task",
]
