"""Issue 28: a run written to a directory streams its finished jobs and its event log to disk
(sandbox.system.spill). The tables assembled from the files are bitwise the ones built in memory,
what stays in memory during the simulation is bounded (not a function of the run's length), and the
spill directory is gone when the run ends, whatever happens."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from sandbox.run.runner import EVENT_COLUMNS, prepare_run, run_scenario
from sandbox.scenario.api import validate_scenario
from sandbox.system.cluster import EventLog, JobRecords
from sandbox.system.spill import PREFIX, Spill, column_kind

STALENESS = {
    "drop": {"kind": "max_lag", "k_max": 1, "enforcement": "drop", "queue_capacity": 6},
    "throttle": {"kind": "max_lag", "k_max": 2, "enforcement": "throttle"},
    "sync": {"kind": "sync"},
}


def _scenario(steps: int, staleness: dict, partial: bool = False):
    system = {"num_workers": 6, "generation_time": {"kind": "exponential", "mean": 1.0}, "staleness": staleness}
    if partial:
        system.update(partial_rollouts=True, generation_time={"kind": "cost_model", "per_token": 0.05})
    return validate_scenario(
        {
            "task": {"name": "bitstring", "horizon": 8, "replicas": 2},
            "system": system,
            "algorithm": {"group_size": 4, "groups_per_step": 2},
            "run": {"steps": steps, "figures": False, "eval_every": 10},
        }
    )


def _tables(scn, spill):
    _, learner, cluster = prepare_run(scn, spill=spill)
    res = cluster.run(scn.run.steps)
    return res.jobs.to_frame(), res.events.to_frame(EVENT_COLUMNS), res, cluster


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few records, so that a short run spills many times (the real size is 4096)."""
    monkeypatch.setattr(JobRecords, "FLUSH", 5)
    monkeypatch.setattr(EventLog, "FLUSH", 7)


@pytest.mark.parametrize("kind", sorted(STALENESS))
def test_spilled_tables_are_bitwise_the_tables_in_memory(kind, small_chunks, tmp_path):
    scn = _scenario(60, STALENESS[kind])
    jobs0, events0, _, _ = _tables(scn, None)
    spill = Spill(tmp_path)
    jobs1, events1, res, cluster = _tables(scn, spill)
    assert len(res.jobs._chunks) > 3 and res.events._spilled > 0  # it did spill, many times
    assert len(cluster.jobs._live) < 2 * 6 + 5  # running + queued + one chunk waiting, not every job
    for a, b in ((jobs0, jobs1), (events0, events1)):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
        assert list(a.dtypes) == list(b.dtypes)
        for c in a.columns:  # bitwise, NaN payloads and -0.0 included
            x, y = a[c].to_numpy(), b[c].to_numpy()
            assert x.dtype == y.dtype and (x.tobytes() == y.tobytes() if x.dtype != object else list(x) == list(y)), c
    if kind == "drop":
        assert (jobs1.dropped_at >= 0).any()  # dropped jobs were retired too
    # reading one job or event reads the spill back: the same records as the run kept in memory
    again_jobs, again_events, res0, _ = _tables(scn, None)
    _, _, res1, _ = _tables(scn, Spill(tmp_path))
    assert [(j.id, j.consume_step, j.dropped_at, j.finish_time) for j in res1.jobs] == [
        (j.id, j.consume_step, j.dropped_at, j.finish_time) for j in res0.jobs
    ]
    assert list(res1.events) == list(res0.events) and res1.events[3] == res0.events[3]
    spill.close()
    assert not spill.dir.exists()


def test_partial_rollouts_spill_the_same_tables(small_chunks, tmp_path):
    scn = _scenario(40, STALENESS["throttle"], partial=True)
    jobs0, events0, _, _ = _tables(scn, None)
    jobs1, events1, _, _ = _tables(scn, Spill(tmp_path))
    pd.testing.assert_frame_equal(jobs0, jobs1, check_exact=True)
    pd.testing.assert_frame_equal(events0, events1, check_exact=True)


def test_values_columns_cannot_hold_exactly_stay_in_memory(small_chunks, tmp_path, monkeypatch):
    """A job value that is not a plain int or float (here a numpy integer) cannot be written as a
    typed column without changing what pandas infers: those jobs stay in the column table and the
    table is still the one built from the objects."""
    scn = _scenario(30, STALENESS["throttle"])
    original = JobRecords.retire

    def retire(self, jobs):
        for j in jobs:
            if j.id % 7 == 0:
                j.segments = np.int64(j.segments)
        original(self, jobs)

    monkeypatch.setattr(JobRecords, "retire", retire)
    _, learner, cluster = prepare_run(scn, spill=Spill(tmp_path))
    res = cluster.run(scn.run.steps)
    built = pd.DataFrame([{**_record(j)} for j in res.jobs])
    pd.testing.assert_frame_equal(res.jobs.to_frame(), built, check_exact=True)


def _record(j):
    from sandbox.system.cluster import job_record

    return job_record(j)


def test_column_kind():
    assert column_kind([1, 2, -3]) == "i"
    assert column_kind([1, 2.5, float("nan")]) == "f"
    assert column_kind([1.0]) == "f"
    assert column_kind([np.int64(1)]) is None
    assert column_kind([True]) is None  # a bool is not an int column
    assert column_kind([2**53 + 1]) is None
    assert column_kind(["x"]) is None
    assert column_kind([1, -(2**53), 2**53]) == "i" and column_kind([1, -(2**53) - 1]) is None
    assert column_kind([0.5, 2, True]) is None and column_kind([]) == "i"


def test_run_scenario_removes_the_spill_directory(tmp_path, small_chunks):
    scn = _scenario(30, STALENESS["drop"])
    out = tmp_path / "run"
    a = run_scenario(scn, out)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(PREFIX)]
    b = run_scenario(scn)  # in memory: the same result
    pd.testing.assert_frame_equal(a.jobs, b.jobs, check_exact=True)
    pd.testing.assert_frame_equal(a.events, b.events, check_exact=True)
    assert a.summary == b.summary or str(a.summary) == str(b.summary)


def test_a_failed_run_leaves_no_spill_directory(tmp_path, monkeypatch):
    from sandbox.system import cluster as cluster_mod
    from sandbox.system.heap_loop import HeapCluster

    def boom(self, steps):
        raise RuntimeError("boom")

    monkeypatch.setattr(cluster_mod.Cluster, "run", boom)
    monkeypatch.setattr(HeapCluster, "run", boom)  # the engine of every run (sandbox/system/heap_loop.py)
    with pytest.raises(RuntimeError, match="boom"):
        run_scenario(_scenario(10, STALENESS["sync"]), tmp_path / "run")
    assert os.listdir(tmp_path) == []
