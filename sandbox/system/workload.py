"""Adapters between tasks and the cluster: what a worker computes when it holds some weights."""

from __future__ import annotations

from collections import deque

import torch

from sandbox.tasks.base import OracleTask, Params, PolicyTask
from sandbox.tasks.rollouts import Rollouts


class PolicyWorkload:
    """Samples groups of responses from a :class:`PolicyTask` with the sampling stream.

    A task with ``sample_groups`` (the LM: each group draws its tokens from its own stream, seeded when the
    group is made, ``LMTask.new_group``) is sampled ahead: the groups a cluster dispatches one after the other
    with the same weights (a synchronous step dispatches ``groups_per_step`` at one instant) are made in
    advance from the sampling stream and decoded in one batch. How many: as many as the last run of calls with
    the same weights held, at most ``ahead`` (the runner's ``groups_per_step``). A group decoded under weights
    it is not dispatched with is decoded again from its start under the right ones (a wrong guess costs that
    decode), and a group's numbers are a function of its prompt, its seed and the weights alone
    (``LMTask.sample_groups``), so the run's numbers do not depend on how many are made ahead
    (``tests/lm/test_lm_group_batching.py``)."""

    def __init__(self, task: PolicyTask, gen: torch.Generator, ahead: int = 1):
        self.task = task
        self.gen = gen
        self._batched = hasattr(task, "sample_groups")
        self._queue: deque[list] = deque()  # [new group, the weights it was decoded with (or None), the result]
        self._most = self._ahead = max(1, ahead)
        self._run, self._run_weights = 0, None  # calls so far with the weights of the current run

    def sample(self, weights: Params, version: int, group_size: int) -> Rollouts:
        if not self._batched:
            return self.task.sample_group(weights, group_size, self.gen, version)
        if weights is not self._run_weights:
            if self._run_weights is not None:
                self._ahead = min(self._run, self._most)
            self._run, self._run_weights = 0, weights
        self._run += 1
        queue = self._queue
        if not queue or queue[0][1] is not weights:
            want = max(1, self._ahead - self._run + 1)
            while len(queue) < want:
                queue.append([self.task.new_group(group_size, self.gen), None, None])
            stale = [entry for entry in list(queue)[:want] if entry[1] is not weights]
            for entry, out in zip(stale, self.task.sample_groups(weights, [e[0] for e in stale], version)):
                entry[1], entry[2] = weights, out
        if queue[0][0].group_size != group_size:
            raise ValueError(f"a group of {group_size} responses asked for, {queue[0][0].group_size} made ahead")
        return queue.popleft()[2]

    def dispatched_after_end(self, group_size: int) -> Rollouts | None:
        """The payload of a group the cluster dispatches after the learner's last step
        (``Cluster._after_end``: recorded in the jobs table, never finished nor trained on): the group begun as
        :meth:`sample` begins it (the one made ahead, else a new one: its prompt and the seed of its stream drawn
        from the sampling stream), not decoded (a synchronous run of n steps dispatches n + 1 batches of groups:
        the last one is recorded only). None (the cluster then samples the group) for a task sampled group by
        group, or when :meth:`sample` is not this class's own (replaced)."""
        if not self._batched or getattr(self.sample, "__func__", None) is not _OWN_SAMPLE:
            return None
        group = self._queue.popleft()[0] if self._queue else self.task.new_group(group_size, self.gen)
        if group.group_size != group_size:
            raise ValueError(f"a group of {group_size} responses asked for, {group.group_size} made ahead")
        return group

    def begin(self, group_size: int) -> Rollouts:
        if self._queue:  # made ahead: drawn from the stream already
            return self._queue.popleft()[0]
        return self.task.new_group(group_size, self.gen)

    def extend(self, weights: Params, payload: Rollouts, version: int) -> Rollouts:
        return self.task.generate(weights, payload, self.gen, version)

    def finish(self, payload: Rollouts) -> Rollouts:
        payload.rewards = self.task.rewards(payload, self.gen)
        return payload


_OWN_SAMPLE = PolicyWorkload.sample
"""``PolicyWorkload.sample`` as defined (:meth:`PolicyWorkload.dispatched_after_end` stands down for another)."""


class OracleWorkload:
    """Evaluates noisy gradients of an :class:`OracleTask` at the held weights."""

    def __init__(self, task: OracleTask, gen: torch.Generator):
        self.task = task
        self.gen = gen

    def sample(self, weights: Params, version: int, group_size: int):
        return self.task.gradient(weights, group_size, self.gen, version)

    def finish(self, payload):
        return payload
