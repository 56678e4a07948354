"""Bounded-lag streaming control (``docs/system.md#max_lag``): AReaL's admission rule
``(η + v + 1)·B − (accepted + running)`` (AReaL 1.0.4, ``areal/infra/staleness_manager.py``) or a
bounded queue with drop-on-dequeue (prime-rl git 559b4477, TRL 1.16.0 AsyncGRPO)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandbox.system.staleness.base import CONTROLS, Admission, Control, ControlConfig, remove_where


class MaxLagControlConfig(ControlConfig):
    """Asynchronous streaming with a bound k_max on the version gap. ``throttle``: AReaL-style
    admission (generation waits while dispatched-but-unconsumed work exceeds (k_max + v + 1)·B),
    plus a hard drop of any job that still ends up over the bound (counted as ``dropped``).
    ``drop``: workers generate freely into a bounded queue; over-stale jobs are dropped when dequeued."""

    kind: Literal["max_lag"] = "max_lag"
    k_max: int = Field(2, ge=0, description="Maximum lag in versions (AReaL examples use 2-4; docs suggest 2-8).")
    enforcement: Literal["throttle", "drop"] = Field(
        "throttle", description="'throttle' (admission) or 'drop' (on dequeue)."
    )
    queue_capacity: int | None = Field(
        None, ge=1, description="For 'drop': max groups queued or running (default (k_max + 1)·B)."
    )

    bound_field = "k_max"

    @classmethod
    def describe_bound(cls, data):
        return f"{super().describe_bound(data)} ({data['enforcement']})"

    def ahead_groups(self, groups_per_step, num_workers):
        if self.enforcement == "throttle":
            return (self.k_max + 1) * groups_per_step, "groups queued ahead"
        return self.queue_capacity or (self.k_max + 1) * groups_per_step, "the queue"

    def drops_stale(self):
        return self.enforcement == "drop"

    def max_in_flight(self, groups_per_step):
        if self.enforcement == "throttle":
            return (self.k_max + 1) * groups_per_step
        return self.queue_capacity or (self.k_max + 1) * groups_per_step

    def batch_problem(self, groups_per_step):
        B = groups_per_step
        if self.enforcement == "drop" and self.queue_capacity is not None and self.queue_capacity < B:
            return (
                f"system.staleness.queue_capacity: {self.queue_capacity} is less than algorithm.groups_per_step = {B}: "
                "with enforcement = 'drop' at most queue_capacity groups are queued or running, so a batch of "
                f"groups_per_step groups can never be formed and no learner step would ever complete; use "
                f"queue_capacity >= {B} (or leave it unset: (k_max + 1)·groups_per_step)"
            )
        return None


@CONTROLS.register(MaxLagControlConfig)
class MaxLagControl(Control):
    """Admission by the throttle rule or the queue capacity; at dequeue every job with
    ``step − head_version > k_max`` is dropped; FIFO otherwise."""

    streaming = True

    def __init__(self, cfg: MaxLagControlConfig, groups_per_step: int):
        super().__init__(cfg, groups_per_step)
        self.capacity = cfg.queue_capacity or (cfg.k_max + 1) * groups_per_step

    def admit(self, visible, buffer_len):
        if self.cfg.enforcement == "throttle":
            ok = self.active(buffer_len) < (visible + self.cfg.k_max + 1) * self.B
        else:
            ok = buffer_len + self.running < self.capacity
        return Admission(visible) if ok else None

    def none_stale(self, step, buffer):
        """No buffered job is over the bound (known without scanning the buffer)."""
        return self.buffered.covers(buffer) and step - self.buffered.min_head() <= self.cfg.k_max

    def drop_stale(self, step, buffer):
        if self.none_stale(step, buffer):
            return []  # nothing to scan
        return remove_where(buffer, lambda job: step - job.head_version > self.cfg.k_max)

    def stuck_reason(self):
        if self.cfg.enforcement == "drop":
            return (
                f"the queue capacity {self.capacity} (system.staleness.queue_capacity, default "
                f"(k_max + 1)·groups_per_step) cannot supply a batch; raise it to at least groups_per_step"
            )
        return super().stuck_reason()
