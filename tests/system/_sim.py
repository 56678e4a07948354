"""Timing-only harness for system tests: a workload and trainer that do no learning."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sandbox.system.cluster import Cluster, TrainResult
from sandbox.system.config import SystemConfig


@dataclass
class Work:
    version: int
    decode_steps: int = 10
    token_count: int = 10
    num_responses: int = 1


class TimingOnlyWorkload:
    """No learning: the payload only remembers the version it was generated with."""

    def sample(self, weights, version, group_size):
        assert weights == version  # the worker really holds the weights of its admitted version
        return Work(version)

    def finish(self, payload):
        return payload


class CountingTrainer:
    def initial_weights(self):
        return 0

    def train(self, step, jobs, now):
        return TrainResult(weights=step + 1)


def simulate(steps=300, B=4, seed=0, workload=None, **system):
    cfg = SystemConfig(**system)
    cluster = Cluster(cfg, workload or TimingOnlyWorkload(), CountingTrainer(), groups_per_step=B, group_size=1, seed=seed)
    return cluster, cluster.run(steps)


def lags(res):
    consumed = [j for j in res.jobs if j.consume_step >= 0]
    return np.array([j.consume_step - j.head_version for j in consumed]), consumed


