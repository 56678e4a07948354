"""The heap event loop (``sandbox/system/heap_loop.py``) against the simpy cluster: on every shipped
scenario whose system it models, the jobs table, the event log, the rows, the clock and the status of a
timing-only run are the simpy cluster's to the bit (issue 48); the scenarios it does not model (partial
rollouts, an inference-engine model) run on simpy through ``simulate_timing``."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.scenario.api import load_scenario
from sandbox.system.cluster import Cluster
from sandbox.system.heap_loop import HeapCluster, supports
from sandbox.system.timing_only import (
    CountingTrainer,
    TimingOnlyWorkload,
    simulate_timing,
)

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p for p in (ROOT / "scenarios").rglob("*.toml") if "sweeps" not in p.parts)
STEPS = 40


def _run(cls, scn, seed: int, record_events: bool = True):
    a = scn.algorithm
    cluster = cls(
        scn.system,
        TimingOnlyWorkload(),
        CountingTrainer(),
        a.groups_per_step,
        a.group_size,
        seed,
        record_events=record_events,
    )
    return cluster.run(min(scn.run.steps, STEPS))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: str(p.relative_to(ROOT / "scenarios")))
def test_the_simpy_clusters_tables_on_every_shipped_scenario(path):
    scn, _ = load_scenario(path, [])
    a = scn.algorithm
    if not supports(scn.system, a.groups_per_step, a.group_size):  # partial rollouts, an engine, split groups
        with pytest.raises(ValueError, match="one-piece"):
            HeapCluster(scn.system, TimingOnlyWorkload(), CountingTrainer(), a.groups_per_step, a.group_size, 0)
        return
    for seed in (0, 7):
        ref, got = _run(Cluster, scn, seed), _run(HeapCluster, scn, seed)
        assert len(got.jobs) > 0 and len(got.events) > 0
        assert got.jobs.to_frame().equals(ref.jobs.to_frame())
        assert got.events.to_frame(["t", "kind", "worker", "job", "version", "step"]).equals(
            ref.events.to_frame(["t", "kind", "worker", "job", "version", "step"])
        )
        assert got.rows.to_frame().equals(ref.rows.to_frame())
        assert (got.sim_time, got.status, got.steps_done, got.dropped) == (
            ref.sim_time,
            ref.status,
            ref.steps_done,
            ref.dropped,
        )


def test_without_events_and_through_simulate_timing():
    scn, _ = load_scenario(ROOT / "scenarios" / "max_lag_drop.toml", [])
    a = scn.algorithm
    ref = simulate_timing(
        scn.system, STEPS, a.groups_per_step, a.group_size, seed=3, record_events=False, engine="simpy"
    )
    got = simulate_timing(scn.system, STEPS, a.groups_per_step, a.group_size, seed=3, record_events=False)
    assert len(got.events) == 0 and got.dropped == ref.dropped
    assert got.jobs.to_frame().equals(ref.jobs.to_frame()) and got.rows.to_frame().equals(ref.rows.to_frame())
    assert not got.jobs.to_frame().equals(
        simulate_timing(scn.system, STEPS, a.groups_per_step, a.group_size, seed=4, record_events=False).jobs.to_frame()
    )  # the comparison can fail
    with pytest.raises(ValueError, match="engine"):
        simulate_timing(scn.system, 2, 1, engine="fast")


def test_an_engine_model_runs_on_simpy():
    scn, _ = load_scenario(
        ROOT / "scenarios" / "max_lag.toml",
        [
            "system.generation_time={kind='continuous_batching', step_base=0.01, step_per_sequence=0.001, length_median=20}"
        ],
    )
    assert not supports(scn.system, scn.algorithm.groups_per_step, scn.algorithm.group_size)
    a = scn.algorithm
    got = simulate_timing(scn.system, 5, a.groups_per_step, a.group_size, seed=0)
    ref = simulate_timing(scn.system, 5, a.groups_per_step, a.group_size, seed=0, engine="simpy")
    assert got.steps_done == 5 and got.jobs.to_frame().equals(ref.jobs.to_frame())
