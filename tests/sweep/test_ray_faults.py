"""The Ray sweep backend on a local two-CPU Ray cluster (started once for the module): the same
results as the local backend bit for bit, a worker process killed mid-sweep is retried, a run whose
worker dies on every try is recorded as failed while the others finish and is run again on resume,
and a resumed sweep runs only what is unfinished.

The fault is a SIGKILL the Ray task sends its own worker process (the run's task is replaced by a
wrapper, pickled to the workers by value); a marker file in the test's directory makes it happen
once, or on every try."""

from __future__ import annotations

import copy
import json
import os
import signal
from pathlib import Path

import pandas as pd
import pytest
import torch

import sandbox.sweep.execute as execute
from sandbox.sweep.api import load_results, parse_sweep, run_sweep
from sandbox.sweep.results import METRICS, RESULTS

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow

RUN_TASK = execute.execute_run_packed  # what the backend sends to Ray


@pytest.fixture(scope="module")
def ray_cluster():
    """One local cluster for the module, as the backend starts it (the backend uses a running one)."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(**execute.ray_init_args(2, None))
    yield
    ray.shutdown()


@pytest.fixture
def spec(tiny_raw):
    tiny_raw["seeds"] = [0]  # 2 x 2 grid: 4 runs
    return parse_sweep(tiny_raw)


def _killing(log: Path, victim: str, always: bool):
    """A stand-in for the run task: logs each try; kills its own worker process when running
    ``victim`` (the first time only, or on every try)."""
    marker = log.with_suffix(".killed")

    def task(rid, data, meta):
        with open(log, "a") as fh:
            fh.write(rid + "\n")
        if rid == victim and (always or not marker.exists()):
            marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return RUN_TASK(rid, data, meta)

    return task


def _tries(log: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for rid in log.read_text().split():
        counts[rid] = counts.get(rid, 0) + 1
    return counts


def _table(out: Path, name: str) -> pd.DataFrame:
    df = pd.read_parquet(out / name)
    df = df.drop(columns=[c for c in ("wall_s",) if c in df])
    return df.sort_values([c for c in ("id", "step") if c in df]).reset_index(drop=True)


def test_ray_results_equal_the_local_backend_bitwise_and_resume_runs_nothing(ray_cluster, spec, tmp_path):
    on_ray = run_sweep(spec, tmp_path / "ray", backend="ray", workers=2, progress=False)
    assert (on_ray.ran, on_ray.skipped, on_ray.failed) == (4, 0, 0)
    local = run_sweep(spec, tmp_path / "local", backend="local", workers=1, progress=False)
    assert local.ran == 4
    # every number of the results and metrics tables, bit for bit (wall time aside)
    pd.testing.assert_frame_equal(
        _table(tmp_path / "ray", RESULTS), _table(tmp_path / "local", RESULTS), check_exact=True
    )
    ray_metrics, local_metrics = _table(tmp_path / "ray", METRICS), _table(tmp_path / "local", METRICS)
    assert len(ray_metrics) == 4 * 20
    pd.testing.assert_frame_equal(ray_metrics, local_metrics, check_exact=True)
    again = run_sweep(spec, tmp_path / "ray", backend="ray", workers=2, progress=False)
    assert (again.ran, again.skipped) == (0, 4)


def test_worker_killed_mid_sweep_is_retried(ray_cluster, spec, tmp_path, monkeypatch):
    victim = spec.runs[1].id
    log = tmp_path / "tries.log"
    monkeypatch.setattr(execute, "execute_run_packed", _killing(log, victim, always=False))
    out = run_sweep(spec, tmp_path / "sw", backend="ray", workers=2, progress=False, retries=1)
    assert log.with_suffix(".killed").exists(), "the fault never happened"
    assert _tries(log) == {r.id: (2 if r.id == victim else 1) for r in spec.runs}
    assert (out.ran, out.failed) == (4, 0) and set(out.results.status) == {"completed"}
    # the retried run is the run: the same numbers as running it in this process
    monkeypatch.undo()
    alone = tmp_path / "alone"
    threads = torch.get_num_threads()
    try:
        execute.execute_run(victim, spec.runs[1].data, str(alone), {})  # sets one torch thread, as workers do
    finally:
        torch.set_num_threads(threads)
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "sw" / "runs" / victim / "metrics.parquet"),
        pd.read_parquet(alone / "metrics.parquet"),
        check_exact=True,
    )


def test_worker_dying_on_every_try_is_recorded_and_resume_completes_it(ray_cluster, spec, tmp_path, monkeypatch):
    victim = spec.runs[2].id
    log = tmp_path / "tries.log"
    monkeypatch.setattr(execute, "execute_run_packed", _killing(log, victim, always=True))
    first = run_sweep(spec, tmp_path / "sw", backend="ray", workers=2, progress=False, retries=1)
    assert _tries(log)[victim] == 2  # the first try and one retry
    assert (first.ran, first.failed) == (4, 1)
    row = first.results.set_index("id").loc[victim]
    assert (
        row.status == "failed" and "worker process running it died on each of 2 tries (WorkerCrashedError" in row.error
    )
    assert set(first.results.drop(index=first.results.index[first.results.id == victim]).status) == {"completed"}
    err = json.loads((tmp_path / "sw" / "runs" / victim / "error.json").read_text())
    assert err["worker_died"] is True and err["tries"] == 2
    assert load_results(tmp_path / "sw", refresh_tables=True).set_index("id").loc[victim].status == "failed"
    finished = {p.parent.name: p.stat().st_mtime_ns for p in (tmp_path / "sw" / "runs").glob("*/summary.json")}
    assert len(finished) == 3

    # resumed without the fault and without --retry-failed: only the dead run runs, and completes
    monkeypatch.setattr(execute, "execute_run_packed", _killing(log, "none", always=True))
    log.unlink()
    resumed = run_sweep(spec, tmp_path / "sw", backend="ray", workers=2, progress=False)
    assert (resumed.ran, resumed.skipped, resumed.failed) == (1, 3, 0)
    assert _tries(log) == {victim: 1}
    assert set(resumed.results.status) == {"completed"}
    assert not (tmp_path / "sw" / "runs" / victim / "error.json").exists()
    for rid, mtime in finished.items():
        assert (tmp_path / "sw" / "runs" / rid / "summary.json").stat().st_mtime_ns == mtime, f"{rid} was recomputed"


def test_a_run_that_raises_is_not_retried_by_ray_nor_on_resume(ray_cluster, spec, tmp_path, monkeypatch):
    """Ray's max_retries is for dead workers only: a run whose code raises is a result (failed)."""
    victim = spec.runs[-1].id
    spec.runs[-1].data = copy.deepcopy(spec.runs[-1].data)
    spec.runs[-1].data["task"]["dim"] = "not a number"  # the run's validation raises inside the task
    log = tmp_path / "tries.log"
    monkeypatch.setattr(execute, "execute_run_packed", _killing(log, "none", always=True))
    # force: skip the planning-time memory check, which would validate (and refuse) the run first
    first = run_sweep(spec, tmp_path / "sw", backend="ray", workers=2, progress=False, retries=2, force=True)
    assert _tries(log)[victim] == 1
    row = first.results.set_index("id").loc[victim]
    assert row.status == "failed" and "task.dim" in row.error and "worker process" not in row.error
    assert run_sweep(spec, tmp_path / "sw", backend="ray", workers=2, progress=False, force=True).ran == 0


def test_a_killed_workers_temporary_directory_is_removed(ray_cluster, spec, tmp_path, monkeypatch):
    """The worker is killed while its run's temporary directory exists (named as execute_run_packed
    names it: ``sandbox-<id>-<pid>-*``): the sweep removes it (issue 28: one was left per killed worker)."""
    victim = spec.runs[0].id
    marker = tmp_path / "scratch.txt"

    def task(rid, data, meta):
        if rid == victim and not marker.exists():
            import tempfile

            marker.write_text(tempfile.mkdtemp(prefix=f"sandbox-{rid}-{os.getpid()}-"))
            Path(marker.read_text(), rid).mkdir()
            os.kill(os.getpid(), signal.SIGKILL)
        return RUN_TASK(rid, data, meta)

    monkeypatch.setattr(execute, "execute_run_packed", task)
    out = run_sweep(spec, tmp_path / "sw", backend="ray", workers=2, progress=False, retries=1)
    assert marker.exists(), "the fault never happened"
    assert (out.ran, out.failed) == (4, 0)
    assert not Path(marker.read_text()).exists()
