"""The cluster's :class:`Signal` skips the wake-ups that change nothing, yet every simulated number
is that of one broadcast simpy event that every waiter yields (the scheme it replaces, kept here as
the reference): random scenarios of every staleness control give identical jobs, events and rows.
Likewise the weight store's sync, an urgent event instead of one simpy process per publication, keeps
every number of the process it replaces (also kept here as a reference)."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

import sandbox.system.cluster as cluster_mod
from sandbox.system.config import SystemConfig
from sandbox.system.timing_only import simulate_timing


class BroadcastSignal:
    """The reference: one shared simpy event; every waiter yields it, ``notify`` succeeds it and
    makes a new one, so every waiting process is resumed on every change."""

    def __init__(self, env: simpy.Environment, gate=None):
        self.env = env
        self._event = env.event()

    def wait(self, gated: bool = False) -> simpy.Event:
        return self._event

    def notify(self) -> None:
        if not self._event.triggered:
            self._event.succeed()
        self._event = self.env.event()


ClusterSignal = cluster_mod.Signal


class ProcessSyncStore(cluster_mod.WeightStore):
    """The reference sync: one simpy process per publication, waiting out the sync delay."""

    def publish(self, version, weights, delay):
        self.snapshots[version] = weights
        self.latest = version
        self.env.process(self._sync_process(version, delay))

    def _sync_process(self, version, delay):
        if delay > 0:
            yield self.env.timeout(delay)
        self._make_visible(version)


class CountingSignal(ClusterSignal):
    """The cluster's Signal, counting the parked workers it resumed (a resumed one's event has no
    callbacks left; a re-parked one's still has its process's)."""

    resumed = 0

    def _wake(self, fired, run):
        waiting = list(run)
        super()._wake(fired, run)
        CountingSignal.resumed += sum(parked.callbacks is None for parked in waiting)


def _random_config(rng: np.random.Generator) -> tuple[SystemConfig, int]:
    groups = int(rng.integers(1, 9))
    kind = rng.choice(["max_lag_throttle", "max_lag_drop", "async_ratio", "fixed_lag", "sync"])
    staleness = {
        "max_lag_throttle": {"kind": "max_lag", "k_max": int(rng.integers(0, 4)), "enforcement": "throttle"},
        "max_lag_drop": {
            "kind": "max_lag",
            "k_max": int(rng.integers(0, 3)),
            "enforcement": "drop",
            "queue_capacity": int(rng.integers(groups, 4 * groups + 2)),
        },
        "async_ratio": {"kind": "async_ratio", "alpha": float(rng.choice([0.0, 0.5, 1.0, 1.25, 2.0, 3.0]))},
        "fixed_lag": {"kind": "fixed_lag", "k": int(rng.integers(0, 4))},
        "sync": {"kind": "sync"},
    }[str(kind)]
    generation = [
        {"kind": "exponential", "mean": float(rng.uniform(0.2, 2.0))},
        {"kind": "constant", "value": float(rng.choice([0.0, 0.5, 1.0]))},  # ties: many same-time events
        {"kind": "empirical", "values": [0.5, 1.0, 1.0, 2.0]},
    ][int(rng.integers(0, 3))]
    cfg = SystemConfig(
        num_workers=int(rng.integers(1, 40)),
        generation_time=generation,
        train_time={"kind": "constant", "value": float(rng.choice([0.0, 0.2, 1.0]))},
        sync_delay={"kind": "constant", "value": float(rng.choice([0.0, 0.0, 0.3]))},
        staleness=staleness,
    )
    return cfg, groups


def _job_table(result) -> list[tuple]:
    return [
        (
            j.id,
            j.worker,
            j.head_version,
            j.tail_version,
            j.target_step,
            j.dispatch_time,
            j.finish_time,
            j.consume_time,
            j.consume_step,
            j.dropped_at,
        )
        for j in result.jobs
    ]


def _run(cfg, groups, seed, signal_cls, monkeypatch, store_cls=cluster_mod.WeightStore):
    with monkeypatch.context() as patch:
        patch.setattr(cluster_mod, "Signal", signal_cls)
        patch.setattr(cluster_mod, "WeightStore", store_cls)
        return simulate_timing(cfg, 12, groups, seed=seed, engine="simpy")


@pytest.mark.parametrize("chunk", range(4))
def test_random_scenarios_match_the_broadcast_reference(chunk, monkeypatch):
    rng = np.random.default_rng(1000 + chunk)
    for case in range(40):
        cfg, groups = _random_config(rng)
        seed = int(rng.integers(0, 2**31))
        reference = _run(cfg, groups, seed, BroadcastSignal, monkeypatch, ProcessSyncStore)
        lean = _run(cfg, groups, seed, ClusterSignal, monkeypatch)
        where = f"case {chunk}/{case}: {cfg.model_dump()} B={groups} seed={seed}"
        assert _job_table(lean) == _job_table(reference), where
        assert lean.events == reference.events, where
        assert lean.rows == reference.rows, where
        assert (lean.status, lean.sim_time, lean.dropped) == (
            reference.status,
            reference.sim_time,
            reference.dropped,
        ), where
        heap = simulate_timing(cfg, 12, groups, seed=seed, engine="heap")  # the plain heap event loop (issue 48)
        assert _job_table(heap) == _job_table(reference), where
        assert heap.events == reference.events and heap.rows == reference.rows, where
        assert (heap.status, heap.sim_time, heap.dropped) == (
            reference.status,
            reference.sim_time,
            reference.dropped,
        ), where


def test_failed_admissions_are_not_resumed(monkeypatch):
    """With many throttled workers, a round resumes only the admitted workers and the learner:
    far fewer resumes than waiting processes times rounds, the broadcast's cost."""
    cfg = SystemConfig(
        num_workers=200,
        generation_time={"kind": "exponential", "mean": 1.0},
        train_time={"kind": "constant", "value": 0.5},
        staleness={"kind": "max_lag", "k_max": 0, "enforcement": "throttle"},
    )
    monkeypatch.setattr(CountingSignal, "resumed", 0)
    monkeypatch.setattr(cluster_mod, "Signal", CountingSignal)
    result = simulate_timing(cfg, 20, 4, seed=3, engine="simpy")  # the simpy Signal under test
    # Every resumed worker is admitted: a dispatch (the broadcast resumes ~all 196 idle ones per change).
    assert 0 < CountingSignal.resumed <= len(result.jobs) < 200 * 20


def test_stuck_simulation_still_reports_the_control():
    """A control that can never supply a batch still ends with the stuck error (no event left)."""
    cfg = SystemConfig(
        num_workers=4,
        staleness={"kind": "max_lag", "k_max": 1, "enforcement": "drop", "queue_capacity": 2},
    )
    with pytest.raises(cluster_mod.SimulationError, match="queue capacity 2"):
        simulate_timing(cfg, 3, 4)
