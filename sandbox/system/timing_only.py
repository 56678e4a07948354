"""System-only simulation: the cluster's timing with no learning at all.

Useful for throughput and staleness studies of a configuration (how much lag does this cluster
produce, how idle are the workers) and as the baseline of the simulator benchmark. The payload
only remembers the version it was generated with; each learner step publishes the next integer.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandbox.base.gc_pause import paused_cyclic_gc
from sandbox.system.cluster import Cluster, ClusterResult, TrainResult
from sandbox.system.config import SystemConfig
from sandbox.system.heap_loop import HeapCluster


@dataclass
class TimingPayload:
    version: int
    decode_steps: int = 0
    token_count: int = 0
    num_responses: int = 1


class TimingOnlyWorkload:
    def __init__(self, decode_steps: int = 0):
        self.decode_steps = decode_steps

    def sample(self, weights, version, group_size):
        if weights != version:  # the worker must hold exactly the weights of its admitted version
            raise AssertionError(f"worker holds weights {weights} for version {version}")
        return TimingPayload(version, self.decode_steps, self.decode_steps * group_size, group_size)

    def finish(self, payload):
        return payload


class CountingTrainer:
    def initial_weights(self):
        return 0

    def train(self, step, jobs, now):
        return TrainResult(weights=step + 1)


@paused_cyclic_gc()  # the cluster is garbage once this returns (sandbox/base/gc_pause.py)
def simulate_timing(
    cfg: SystemConfig,
    steps: int,
    groups_per_step: int,
    group_size: int = 1,
    seed: int = 0,
    record_events: bool = True,
    engine: str = "heap",
) -> ClusterResult:
    """Run ``steps`` learner steps of the system alone. ``engine``: ``"heap"`` the plain heap event loop
    (:mod:`sandbox.system.heap_loop`: the same tables to the bit, without simpy's per-event objects) or
    ``"simpy"`` the simpy cluster (the reference the heap loop is tested against)."""
    if engine not in ("heap", "simpy"):
        raise ValueError(f"engine: expected 'heap' or 'simpy', got {engine!r}")
    cls = HeapCluster if engine == "heap" else Cluster
    cluster = cls(
        cfg, TimingOnlyWorkload(), CountingTrainer(), groups_per_step, group_size, seed, record_events=record_events
    )
    return cluster.run(steps)
