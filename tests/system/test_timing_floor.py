"""Row 6's floor (``benchmarks/bench_timing_floor.py``) does the work it claims: the prototype that keeps the
model's calls gives the simpy cluster's jobs table, event log, rows and clock to the bit on plain systems of
every kind it accepts and on continuous-batching engines (with their counters and lengths), follows a planted
bug in a model method as the cluster does, and the bare loop (no model) keeps the same schedule (its clock and
every job's finish time)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from sandbox.system.cluster import Cluster
from sandbox.system.config import SystemConfig
from sandbox.system.delays.continuous_batching import ContinuousBatchingDelay
from sandbox.system.staleness.max_lag import MaxLagControl
from sandbox.system.timing_only import simulate_timing

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_system import engine_system  # noqa: E402
from bench_timing_floor import bare_run, engine_counters, floor_run, plain, timing_run  # noqa: E402

EVENT_COLUMNS = ["t", "kind", "worker", "job", "version", "step"]

SYSTEMS = {
    "max_lag drop, capacity-bound": (plain(6, 8), 4),
    "max_lag drop, stale jobs dropped": (
        SystemConfig(
            num_workers=8,
            generation_time={"kind": "lognormal", "median": 1.0, "sigma": 1.0},
            staleness={"kind": "max_lag", "k_max": 1, "enforcement": "drop"},
        ),
        2,
    ),
    "max_lag throttle, mixed speeds, random sync delay": (
        SystemConfig(
            num_workers=5,
            worker_speeds=[1.0, 0.5, 2.0, 1.0, 0.25],
            sync_delay={"kind": "exponential", "mean": 0.1},
            train_time={"kind": "exponential", "mean": 0.3},
            staleness={"kind": "max_lag", "k_max": 2},
        ),
        3,
    ),
    "sync": (SystemConfig(num_workers=4, staleness={"kind": "sync"}), 4),
    "async_ratio": (SystemConfig(num_workers=6, staleness={"kind": "async_ratio", "alpha": 0.5}), 3),
    "fixed_lag": (SystemConfig(num_workers=6, staleness={"kind": "fixed_lag", "k": 1}), 3),
}


def _tables(res) -> tuple:
    return (res.jobs.to_frame(), res.events.to_frame(EVENT_COLUMNS), res.rows.to_frame(), res.sim_time, res.status)


def _assert_same(got, ref) -> None:
    got, ref = _tables(got), _tables(ref)
    assert len(got[0]) > 0 and len(got[2]) > 0
    for a, b in zip(got[:3], ref[:3]):
        assert a.equals(b)
    assert got[3:] == ref[3:]


@pytest.mark.parametrize("events", [True, False])
@pytest.mark.parametrize("name", list(SYSTEMS))
def test_the_prototype_gives_the_simpy_clusters_tables(name, events):
    cfg, B = SYSTEMS[name]
    for seed in (0, 3):
        ref = simulate_timing(cfg, 60, B, seed=seed, record_events=events, engine="simpy")
        _assert_same(floor_run(cfg, 60, B, seed=seed, record_events=events), ref)
    if name == "max_lag drop, stale jobs dropped":
        assert ref.dropped > 0


@pytest.mark.parametrize("method", ["admit", "_draw"])
def test_the_prototype_follows_a_planted_bug(monkeypatch, method):
    """A planted bug in a control's rule or in the cluster's draw changes the prototype's output as it changes
    the simpy cluster's: the prototype calls the model's methods, it holds no copy of them."""
    cfg, B = SYSTEMS["max_lag drop, capacity-bound"]
    clean = floor_run(cfg, 40, B)
    if method == "admit":
        original = MaxLagControl.admit
        monkeypatch.setattr(MaxLagControl, "admit", lambda self, visible, n: original(self, visible, n + 1))
    else:
        original = Cluster._draw
        monkeypatch.setattr(Cluster, "_draw", lambda self, *a: 1.5 * original(self, *a))
    planted, ref = floor_run(cfg, 40, B), simulate_timing(cfg, 40, B, engine="simpy")
    _assert_same(planted, ref)
    assert not planted.jobs.to_frame().equals(clean.jobs.to_frame())


@pytest.mark.parametrize(("workers", "B", "capacity", "steps"), [(16, 8, 64, 200), (64, 16, 24, 20), (3, 2, 3, 100)])
def test_the_bare_loop_keeps_the_schedule(workers, B, capacity, steps):
    ref = simulate_timing(plain(workers, capacity), steps, B, engine="simpy")
    clock, finish_times = bare_run(steps, workers, B, capacity)
    assert clock == ref.sim_time
    assert np.array_equal(np.array(finish_times), ref.jobs.to_frame()["finish_time"].to_numpy(), equal_nan=True)


def _engines(rng: np.random.Generator, i: int) -> SystemConfig:
    """A random continuous-batching system (every sync mode, caps, prefill, sync time, controls)."""
    return SystemConfig(
        num_workers=int(rng.integers(2, 10)),
        generation_time={
            "kind": "continuous_batching",
            "step_base": float(rng.choice([0.0, 0.01])),
            "step_per_sequence": float(rng.choice([0.0, 0.001])),
            "workers_per_engine": int(rng.integers(1, 4)),
            "sync": ["drain", "abort", "partial"][i % 3],
            "sync_time": float(rng.choice([0.0, 0.05])),
            "length_median": float(rng.integers(2, 30)),
            "length_sigma": 0.8,
            "max_tokens": 64,
            "prefill_per_token": float(rng.choice([0.0, 0.001])),
            "prompt_tokens": 10,
            "max_sequences": [None, 4][i % 2],
            "kv_capacity_tokens": [None, 300][(i // 2) % 2],
        },
        train_time={"kind": "exponential", "mean": 0.3},
        sync_delay={"kind": "constant", "value": float(rng.choice([0.0, 0.1]))},
        staleness={"kind": ["max_lag", "sync", "async_ratio", "fixed_lag", "stream_sync"][i % 5]},
    )


def _engine_run_matches(cfg: SystemConfig, steps: int, B: int, G: int, events: bool = True) -> tuple:
    kept, ref_kept = [], []
    got = floor_run(cfg, steps, B, G, record_events=events, keep=kept)
    ref = timing_run(Cluster, cfg, steps, B, G, events, keep=ref_kept)
    _assert_same(got, ref)
    assert dict(got.lengths) == dict(ref.lengths) and len(got.lengths) == len(got.jobs)
    counters = engine_counters(kept[0])
    assert counters == engine_counters(ref_kept[0]) and sum(c[1] for c in counters) > 0
    return got, counters


@pytest.mark.parametrize("sync", ["partial", "drain", "abort"])
def test_the_prototype_gives_the_simpy_clusters_tables_on_the_benchs_engines(sync):
    _engine_run_matches(engine_system(sync), 6, 16, 8, events=sync == "partial")


def test_the_prototype_gives_the_simpy_clusters_tables_on_random_engines():
    rng = np.random.default_rng(4848)
    for i in range(10):
        _engine_run_matches(_engines(rng, i), 10, int(rng.integers(1, 4)), int(rng.integers(1, 5)))


def test_the_prototype_follows_a_planted_engine_bug(monkeypatch):
    """The prototype's engines call the model's ``step_cost``: an engine that ignores its batch changes its
    tables as it changes the simpy cluster's."""
    cfg = engine_system("partial")
    clean, _ = _engine_run_matches(cfg, 4, 16, 8)
    monkeypatch.setattr(ContinuousBatchingDelay, "step_cost", lambda self, n: self.step_base + self.step_per_sequence)
    planted, _ = _engine_run_matches(cfg, 4, 16, 8)
    assert not planted.jobs.to_frame().equals(clean.jobs.to_frame())
