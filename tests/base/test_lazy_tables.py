"""``sandbox.base.lazy_tables``: a written run's ``RunResult`` reads its jobs and events tables from its
files on each use (issue 28), the same tables an in-memory run holds; slim takes their empty columns
from the files' schema."""

from __future__ import annotations

import pandas as pd
import pytest

from sandbox.base.lazy_tables import Loader, TableField, empty_table, held
from sandbox.run.runner import RunResult, run_scenario, slim
from sandbox.scenario.api import validate_scenario


def _scenario(steps: int):
    return validate_scenario(
        {
            "task": {"name": "bitstring", "horizon": 8, "replicas": 2},
            "system": {
                "num_workers": 4,
                "generation_time": {"kind": "exponential", "mean": 1.0},
                "staleness": {"kind": "max_lag", "k_max": 1, "enforcement": "drop", "queue_capacity": 4},
            },
            "algorithm": {"group_size": 4, "groups_per_step": 2},
            "run": {"steps": steps, "figures": False, "eval_every": 10},
        }
    )


def test_a_written_run_reads_its_tables_from_its_files(tmp_path):
    out = tmp_path / "run"
    written, memory = run_scenario(_scenario(40), out), run_scenario(_scenario(40))
    for name in ("jobs", "events"):
        loader = held(written, name)
        assert isinstance(loader, Loader) and loader.path == out / f"{name}.parquet"
        assert isinstance(held(memory, name), pd.DataFrame)
        got, want = getattr(written, name), getattr(memory, name)
        assert len(want) > 40 and got is not getattr(written, name)  # built on each read, not kept
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        pd.testing.assert_frame_equal(empty_table(written, name), want.iloc[:0], check_exact=True)
    assert written.summary == memory.summary or str(written.summary) == str(memory.summary)
    thin = slim(written)
    for name in ("jobs", "events"):
        assert isinstance(held(thin, name), pd.DataFrame) and len(getattr(thin, name)) == 0
        assert list(getattr(thin, name).columns) == list(getattr(memory, name).columns)


def test_a_table_field_takes_a_table_or_a_loader_only():
    field = RunResult.__dict__["jobs"]
    assert isinstance(field, TableField)
    r = RunResult.__new__(RunResult)
    with pytest.raises(TypeError, match="jobs: a pandas DataFrame or a Loader, not list"):
        r.jobs = [1, 2]
    r.jobs = Loader(lambda: pd.DataFrame({"a": [1]}), "a table built by hand")
    assert r.jobs.a.tolist() == [1] and empty_table(r, "jobs").columns.tolist() == ["a"]
