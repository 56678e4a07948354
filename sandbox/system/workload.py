"""Adapters between tasks and the cluster: what a worker computes when it holds some weights."""

from __future__ import annotations

import torch

from sandbox.tasks.base import OracleTask, Params, PolicyTask
from sandbox.tasks.rollouts import Rollouts


class PolicyWorkload:
    """Samples groups of responses from a :class:`PolicyTask` with the sampling stream."""

    def __init__(self, task: PolicyTask, gen: torch.Generator):
        self.task = task
        self.gen = gen

    def sample(self, weights: Params, version: int, group_size: int) -> Rollouts:
        return self.task.sample_group(weights, group_size, self.gen, version)

    def begin(self, group_size: int) -> Rollouts:
        return self.task.new_group(group_size, self.gen)

    def extend(self, weights: Params, payload: Rollouts, version: int) -> Rollouts:
        return self.task.generate(weights, payload, self.gen, version)

    def finish(self, payload: Rollouts) -> Rollouts:
        payload.rewards = self.task.rewards(payload, self.gen)
        return payload


class OracleWorkload:
    """Evaluates noisy gradients of an :class:`OracleTask` at the held weights."""

    def __init__(self, task: OracleTask, gen: torch.Generator):
        self.task = task
        self.gen = gen

    def sample(self, weights: Params, version: int, group_size: int):
        return self.task.gradient(weights, group_size, self.gen, version)

    def finish(self, payload):
        return payload
