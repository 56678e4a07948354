"""The local process pool under faults: a worker process killed mid-sweep breaks the pool, the runs
in flight are run again (alone) and the sweep finishes with the same numbers as an undisturbed one;
a run whose process dies on every try is recorded as failed (``worker_died``) after ``retries + 1``
tries while the other runs finish, and the next invocation runs it again.

The first test kills a real worker (SIGKILL, found as a child of the forkserver); the second
replaces the pool with one whose victim's future always breaks, which is how a dead worker shows
(:class:`concurrent.futures.process.BrokenProcessPool`), to count the tries exactly."""

from __future__ import annotations

import json
import os
import signal
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool

import pandas as pd
import pytest

import sandbox.sweep.execute as execute
from sandbox.sweep.api import parse_sweep, run_sweep
from sandbox.sweep.results import RESULTS, run_dir

psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.slow


def _table(out) -> pd.DataFrame:
    df = pd.read_parquet(out / RESULTS).drop(columns=["wall_s"], errors="ignore")
    return df.sort_values("id").reset_index(drop=True)


def _pool_workers() -> list:
    """The worker processes of the sandbox's pools: children of this process's forkserver."""
    server = [c for c in psutil.Process().children() if "forkserver" in " ".join(c.cmdline())]
    return [w for s in server for w in s.children()]


def test_a_killed_worker_is_replaced_and_the_results_are_unchanged(tiny_raw, tmp_path, monkeypatch):
    spec = parse_sweep(tiny_raw)  # 2 x 2 grid x 2 seeds: 8 runs
    clean = run_sweep(spec, tmp_path / "clean", workers=2, progress=False)
    assert (clean.ran, clean.failed) == (8, 0)

    killed: list[int] = []

    def kill_one(row) -> None:
        if not killed:
            workers = _pool_workers()
            assert workers, "no pool worker found to kill"
            killed.append(workers[0].pid)
            os.kill(workers[0].pid, signal.SIGKILL)

    alone: list[str] = []
    run_alone = execute._run_alone
    monkeypatch.setattr(execute, "_run_alone", lambda spec, r, *a: (alone.append(r.id), run_alone(spec, r, *a)))
    faulty = run_sweep(parse_sweep(tiny_raw), tmp_path / "faulty", workers=2, progress=False, on_result=kill_one)
    assert killed and (faulty.ran, faulty.failed) == (8, 0)
    assert 1 <= len(alone) <= 2  # the pool broke: the runs in flight then ran again, alone
    pd.testing.assert_frame_equal(_table(tmp_path / "faulty"), _table(tmp_path / "clean"))


class _BreakingPool:
    """Stands in for ProcessPoolExecutor: runs each task in this process, except the victim's,
    whose future raises BrokenProcessPool (every submit is logged)."""

    log: list[str] = []
    victim = ""

    def __init__(self, max_workers, mp_context=None, initializer=None, initargs=()):
        self._processes = {}

    def submit(self, fn, rid, *args):
        _BreakingPool.log.append(rid)
        fut: Future = Future()
        if rid == _BreakingPool.victim:
            fut.set_exception(BrokenProcessPool("a process in the process pool was terminated abruptly"))
        else:
            fut.set_result(fn(rid, *args))
        return fut

    def shutdown(self, wait=True, cancel_futures=False):
        pass


def test_a_run_that_always_kills_its_worker_is_recorded_and_run_again(tiny_raw, tmp_path, monkeypatch):
    spec = parse_sweep(tiny_raw)
    victim = spec.runs[3].id
    monkeypatch.setattr(execute, "ProcessPoolExecutor", _BreakingPool)
    monkeypatch.setattr(_BreakingPool, "log", [])
    monkeypatch.setattr(_BreakingPool, "victim", victim)
    out = run_sweep(spec, tmp_path / "sw", workers=2, progress=False, retries=2)
    assert (out.ran, out.failed) == (8, 1)
    tries = {rid: _BreakingPool.log.count(rid) for rid in set(_BreakingPool.log)}
    assert tries.pop(victim) == 1 + 3  # in the shared pool, then alone retries + 1 times
    # the other run in flight with it when the pool broke ran once more, alone; the rest ran once
    assert sorted(tries.values()) in ([1] * 6 + [2], [1] * 7)
    err = json.loads((run_dir(tmp_path / "sw", victim) / "error.json").read_text())
    assert err["worker_died"] and err["tries"] == 3 and "died on each of 3 tries" in err["error"]
    row = out.results.set_index("id").loc[victim]
    assert row.status == "failed" and "died" in row.error

    # the next invocation runs only the victim again (a worker death is not a result of the run)
    monkeypatch.setattr(_BreakingPool, "victim", "")
    _BreakingPool.log.clear()
    again = run_sweep(parse_sweep(tiny_raw), tmp_path / "sw", workers=2, progress=False)
    assert (again.ran, again.skipped, again.failed) == (1, 7, 0) and _BreakingPool.log == [victim]
