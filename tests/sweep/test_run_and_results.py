"""Running a sweep in-process and in a process pool; the results tables and their loader;
failed runs are recorded and do not stop the others."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from sandbox.sweep.api import load_metrics, load_results, parse_sweep, run_sweep
from sandbox.sweep.results import RESULTS

SUMMARY_COLS = [
    "final_loss",
    "throughput_samples_per_s",
    "staleness_mean",
    "steps_done",
    "sim_time",
    "diverged_replicas",
]


def test_inline_sweep_results_and_loader(tiny_raw, tmp_path):
    spec = parse_sweep(tiny_raw)
    out = run_sweep(spec, tmp_path / "sw", workers=1, progress=False)
    assert out.ran == 8 and out.skipped == 0 and out.failed == 0
    df = load_results(tmp_path / "sw")
    assert len(df) == 8
    for col in [
        "id",
        "system.staleness.k",
        "algorithm.optimizer.lr",
        "seed",
        "status",
        "error",
        "wall_s",
        *SUMMARY_COLS,
    ]:
        assert col in df.columns, col
    assert set(df.status) <= {"completed", "diverged"}
    assert sorted(df["system.staleness.k"].unique()) == [0, 2]
    k2 = df[df["system.staleness.k"] == 2]
    assert (k2.staleness_mean > 1.0).all()
    m = load_metrics(tmp_path / "sw")
    assert {"id", "step", "time", "eval/loss", "system.staleness.k", "seed"} <= set(m.columns)
    assert set(m.id) == set(df.id)
    assert len(m) == int(df.steps_done.sum())
    # re-running computes nothing
    again = run_sweep(spec, tmp_path / "sw", workers=1, progress=False)
    assert again.ran == 0 and again.skipped == 8
    # deleting the table: the loader rebuilds it from the run directories
    (tmp_path / "sw" / RESULTS).unlink()
    pd.testing.assert_frame_equal(
        load_results(tmp_path / "sw").drop(columns="wall_s"), df.drop(columns="wall_s"), check_dtype=False
    )


def test_failed_run_is_recorded_and_others_finish(tiny_raw, tmp_path, monkeypatch):
    import sandbox.run.runner as runner

    real = runner.run_scenario

    def flaky(scn, out_dir=None, **kw):
        if scn.algorithm.optimizer.lr == 0.5 and scn.system.staleness.k == 2:
            raise RuntimeError("simulated failure")
        return real(scn, out_dir, **kw)

    monkeypatch.setattr(runner, "run_scenario", flaky)
    spec = parse_sweep(tiny_raw)
    out = run_sweep(spec, tmp_path / "sw", workers=1, progress=False)
    df = out.results
    bad = df[(df["algorithm.optimizer.lr"] == 0.5) & (df["system.staleness.k"] == 2)]
    assert len(bad) == 2 and (bad.status == "failed").all()
    assert bad.error.str.contains("simulated failure").all()
    assert (df.drop(bad.index).status != "failed").all()
    err = json.loads((tmp_path / "sw" / "runs" / bad.id.iloc[0] / "error.json").read_text())
    assert "Traceback" in err["traceback"]
    # failed runs count as done ...
    assert run_sweep(spec, tmp_path / "sw", workers=1, progress=False).ran == 0
    # ... unless retried
    monkeypatch.setattr(runner, "run_scenario", real)
    retried = run_sweep(spec, tmp_path / "sw", workers=1, progress=False, retry_failed=True)
    assert retried.ran == 2 and (retried.results.status != "failed").all()


def test_diverged_runs_are_results(tiny_raw, tmp_path):
    tiny_raw["grid"] = {"algorithm.optimizer.lr": [3.0]}
    tiny_raw["seeds"] = [0]
    tiny_raw["set"] = {"run.max_loss": 100.0, "run.steps": 60}
    out = run_sweep(parse_sweep(tiny_raw), tmp_path / "sw", workers=1, progress=False)
    row = out.results.iloc[0]
    assert row.status == "diverged" and row.error == ""
    assert max(json.loads(row.diverged_at)) >= 0


@pytest.mark.slow
def test_process_pool_matches_inline(tiny_raw, tmp_path):
    tiny_raw["seeds"] = [0]
    spec = parse_sweep(tiny_raw)
    a = run_sweep(spec, tmp_path / "a", workers=1, progress=False).results.set_index("id")
    b = run_sweep(spec, tmp_path / "b", workers=2, progress=False).results.set_index("id")
    pd.testing.assert_series_equal(a.final_loss, b.final_loss.loc[a.index])


def test_ray_backend_missing_is_a_clear_error(tiny_raw, tmp_path):
    try:
        import ray  # noqa: F401

        pytest.skip("ray is installed")
    except ImportError:
        pass
    from sandbox.sweep.api import SweepError

    with pytest.raises(SweepError, match=r'pip install -c constraints-cpu.txt -e "\.\[ray\]"'):
        run_sweep(parse_sweep(tiny_raw), tmp_path / "sw", backend="ray", progress=False)


@pytest.mark.slow
def test_ray_backend_starts_and_stops_its_own_local_cluster(tiny_raw, tmp_path):
    """Without a running Ray cluster the backend starts a local one and shuts it down at the end
    (faults, resume and bitwise equality with the local backend: tests/sweep/test_ray_faults.py)."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    tiny_raw["seeds"] = [0]
    tiny_raw["grid"] = {"system.staleness.k": [0, 2]}
    out = run_sweep(parse_sweep(tiny_raw), tmp_path / "sw", backend="ray", workers=2, progress=False)
    assert out.ran == 2 and set(out.results.status) == {"completed"}
    assert not ray.is_initialized()
