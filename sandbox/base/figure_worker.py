"""Drawing a run's figures in worker processes while the next variant simulates.

``sandbox run`` of a scenario with variants used to draw each variant's figures in the command's own
process between two variants, so the figures' time added to the simulation's (about two thirds of a
default quickstart run, ``benchmarks/README.md`` row 7). Inside ``with FigureWorkers() as workers``
the runner leaves them out (:func:`deferred`) and the command hands them to ``workers.submit``: a
child process forked there draws them from the finished result it inherits (copy-on-write: nothing
is serialised, the child starts in milliseconds and holds the figures' own memory, which it returns
when it exits), while the command goes on with the next variant. The block waits for every child
when it ends, which is before the command moves its run directory into place; the files are those
the same functions write in the command's own process, byte for byte (the same code on the same
data; ``tests/base/test_figure_worker.py`` compares every file of a run directory).

Why ``fork`` here and a fork server for sweeps (:mod:`sandbox.base.processes`): a figure needs the
variant's tables and matplotlib, both already in the command; a fresh process would import
matplotlib, pandas and the scenario model again (more than the figures of a quickstart variant
take) and receive the tables through a pipe. The child runs matplotlib, numpy and pandas only:
never torch, whose thread pools are what makes forking a torch process unsafe.

A child is a :func:`sandbox.base.processes.fork_call` (the fork, the pipe, the reaping and the exception
sent back are there, shared with :func:`sandbox.base.processes.forked_map`). The rules it keeps:

- it dies with the command: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` and a watch thread on the
  command's pid (:func:`sandbox.base.processes.die_with_parent`, :func:`sandbox.base.processes.watch_process`);
  it writes through fresh ``sys.stdout``/``sys.stderr`` objects and leaves with ``os._exit``;
- Ctrl-C is the command's: the child ignores SIGINT and takes SIGTERM's default action
  (``ignore_interrupt=True``); the command,
  stopping (an exception leaving the block: Ctrl-C, SIGTERM as Ctrl-C, an error), kills its children
  with SIGKILL and reaps them before its staging directory is removed, so nothing is written into a
  run directory after the command gave it up;
- an exception in a child is sent back pickled and raised again in the command, the same type and
  message it would have raised there (the CLI prints it as it always did: an ``OSError`` such as a
  full disk, an :class:`~sandbox.base.outputs.OutputError`); a child that ends without a word (killed,
  crashed) raises :class:`~sandbox.base.outputs.OutputError` naming the figures and the signal. The first
  failure in submission order is raised; the other children are then killed.

At most :attr:`FigureWorkers.max_workers` children run at once (the CPUs this process may use):
``submit`` waits for the oldest beyond that.
"""

from __future__ import annotations

import contextvars
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sandbox.base.outputs import OutputError
from sandbox.base.processes import ChildLost, Forked, ForkedError, fork_call

_DEFERRED: contextvars.ContextVar[bool] = contextvars.ContextVar("sandbox_figures_deferred", default=False)
#: Worker processes are forked on Linux only (``fork`` is missing on Windows and unsafe with macOS's
#: system frameworks); elsewhere :class:`FigureWorkers` is off and the figures are drawn as before.
FORK = sys.platform.startswith("linux") and hasattr(os, "fork")
#: Tests only: seconds a child sleeps before drawing (so that a test can stop the command meanwhile).
PAUSE_ENV = "SANDBOX_TEST_FIGURE_PAUSE"


def deferred() -> bool:
    """Whether the figures of the run being written are drawn by the caller's :class:`FigureWorkers`
    (inside :meth:`FigureWorkers.deferring`): the runner then writes every other file and no figure."""
    return _DEFERRED.get()


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class FigureWorkers:
    """``with FigureWorkers() as workers:`` draw figures in forked children (module docstring);
    where ``workers.enabled`` is False (no fork, :data:`FORK`) the caller draws them itself.

    ``workers.submit(what, fn, *args, **kwargs)`` forks a child that calls ``fn(*args, **kwargs)``
    and goes on (``prepare``, when given, is called once before the first fork: what each child
    would otherwise load again, such as :func:`sandbox.run.plots.warm_up`); ``with
    workers.deferring():`` marks a run whose figures the caller submits itself (:func:`deferred`).
    A normal exit of the block waits for every child and raises the first failure; an exception
    leaving the block kills and reaps the children first."""

    def __init__(
        self, max_workers: int | None = None, prepare: Callable[[], Any] | None = None, enabled: bool | None = None
    ):
        #: False where there is no fork (:data:`FORK`): the caller then lets the runner draw, as before
        self.enabled = FORK if enabled is None else bool(enabled and FORK)
        self.max_workers = max(1, max_workers or available_cpus())
        self._prepare = prepare  # called once, before the first fork: what every child would load again
        self._children: list[Forked] = []
        self._parent = os.getpid()

    def __enter__(self) -> FigureWorkers:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.wait()
        else:
            self.kill()
        return False

    @property
    def running(self) -> int:
        """Children not yet waited for."""
        return len(self._children)

    @contextmanager
    def deferring(self) -> Iterator[None]:
        """Inside the block the runner leaves the figures to the caller (:func:`deferred`)."""
        token = _DEFERRED.set(True)
        try:
            yield
        finally:
            _DEFERRED.reset(token)

    def submit(self, what: str, fn: Callable[..., Any], *args, **kwargs) -> None:
        """Fork a child calling ``fn(*args, **kwargs)``; ``what`` names its work in an error. Waits for
        the oldest children first while :attr:`max_workers` run (raising a failure among them)."""
        if os.getpid() != self._parent:
            raise RuntimeError("FigureWorkers is used by the process that opened it only")
        if not self.enabled:
            raise RuntimeError("FigureWorkers.submit needs fork (FigureWorkers.enabled is False)")
        while len(self._children) >= self.max_workers:
            self._join(self._children[0])
        if self._prepare is not None:
            prepare, self._prepare = self._prepare, None
            prepare()

        def draw() -> None:
            if os.environ.get(PAUSE_ENV):
                time.sleep(float(os.environ[PAUSE_ENV]))
            fn(*args, **kwargs)

        self._children.append(fork_call(draw, what, ignore_interrupt=True))

    def wait(self) -> None:
        """Wait for every child in submission order; the first failure is raised (the others killed)."""
        try:
            while self._children:
                self._join(self._children[0])
        except BaseException:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL every running child and reap it (an exception leaving the block: nothing more is drawn)."""
        children, self._children = self._children, []
        for child in children:
            child.kill()

    def _join(self, child: Forked) -> None:
        """Wait for ``child`` and raise its failure (an :class:`OutputError` naming how a child that
        gave no result ended); it is reaped (killed first if the wait is interrupted)."""
        try:
            child.result()
        except ForkedError as exc:
            raise OutputError(str(exc)) from None
        except ChildLost as exc:
            raise OutputError(f"{child.what} were not drawn: their worker process {exc}") from None
        finally:
            child.kill()  # a no-op once reaped
            self._children.remove(child)
