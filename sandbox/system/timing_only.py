"""System-only simulation: the cluster's timing with no learning at all.

Useful for throughput and staleness studies of a configuration (how much lag does this cluster
produce, how idle are the workers) and as the baseline of the simulator benchmark. The payload
only remembers the version it was generated with; each learner step publishes the next integer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sandbox.base.gc_pause import paused_cyclic_gc
from sandbox.system.cluster import Cluster, ClusterResult, TrainResult
from sandbox.system.config import SystemConfig
from sandbox.system.heap_loop import HeapCluster


@dataclass(slots=True)
class TimingPayload:
    """A group with no content: its version and sizes. Generated in segments (``system.partial_rollouts``)
    it also keeps, per decoded token position, the version that produced it (every response has the same
    ``decode_steps`` positions, so one version per position stands for all of the group's responses)."""

    version: int
    decode_steps: int = 0
    token_count: int = 0
    num_responses: int = 1
    versions: tuple[int, ...] = ()

    @property
    def width(self) -> int:
        """Token positions decoded so far."""
        return len(self.versions)

    def truncate(self, positions: int) -> TimingPayload:
        """The group cut to its first ``positions`` token positions (an interrupted segment)."""
        versions = self.versions[:positions]
        return TimingPayload(
            self.version, len(versions), len(versions) * self.num_responses, self.num_responses, versions
        )

    def oldest_version(self) -> np.ndarray:
        """Per response, the oldest version among its tokens (the version generating it when it has none)."""
        return np.full(self.num_responses, min(self.versions, default=self.version))

    def newest_version(self) -> np.ndarray:
        """Per response, the newest version among its tokens (the version generating it when it has none)."""
        return np.full(self.num_responses, max(self.versions, default=self.version))


class TimingOnlyWorkload:
    """Groups of ``decode_steps`` tokens per response and no content (the weights are the version number)."""

    def __init__(self, decode_steps: int = 0):
        self.decode_steps = decode_steps

    @staticmethod
    def _check(weights, version) -> None:
        if weights != version:  # the worker must hold exactly the weights of its admitted version
            raise AssertionError(f"worker holds weights {weights} for version {version}")

    def sample(self, weights, version, group_size):
        self._check(weights, version)
        return TimingPayload(version, self.decode_steps, self.decode_steps * group_size, group_size)

    def begin(self, group_size: int) -> TimingPayload:
        """An empty group to generate in segments (:meth:`extend`)."""
        return TimingPayload(0, 0, 0, group_size)

    def extend(self, weights, payload: TimingPayload, version: int) -> TimingPayload:
        """``payload`` continued to its ``decode_steps`` positions with the weights of ``version``."""
        self._check(weights, version)
        n, G = self.decode_steps, payload.num_responses
        versions = payload.versions + (version,) * max(n - payload.width, 0)
        return TimingPayload(version, len(versions), len(versions) * G, G, versions)

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
    decode_steps: int = 0,
) -> ClusterResult:
    """Run ``steps`` learner steps of the system alone. ``engine``: ``"heap"`` the plain heap event loop
    (:mod:`sandbox.system.heap_loop`: the same tables to the bit, without simpy's per-event objects) or
    ``"simpy"`` the simpy cluster (the reference the heap loop is tested against). ``decode_steps``: the
    tokens of every response (what per-token delay models and partial rollouts charge; 0: none)."""
    if engine not in ("heap", "simpy"):
        raise ValueError(f"engine: expected 'heap' or 'simpy', got {engine!r}")
    if type(decode_steps) is not int or decode_steps < 0:
        raise ValueError(f"decode_steps: expected an int >= 0, got {decode_steps!r}")
    cls = HeapCluster if engine == "heap" else Cluster
    cluster = cls(
        cfg,
        TimingOnlyWorkload(decode_steps),
        CountingTrainer(),
        groups_per_step,
        group_size,
        seed,
        record_events=record_events,
    )
    return cluster.run(steps)
