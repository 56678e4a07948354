"""Synchronous rounds with streamed updates: verl's "stream off policy pipeline" (``docs/system.md#stream_sync``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandbox.system.staleness.base import CONTROLS, Admission, Control, ControlConfig, Dispatch, spread_parts


class StreamSyncControlConfig(ControlConfig):
    """Rounds of ``m = sync_every`` learner steps: the rollout side generates the round's ``m·B`` groups
    with the weights of the round's first step only (it syncs once per round), and the learner trains
    on every ``B`` of them as they finish instead of waiting for the whole round (verl
    fully_async_policy with ``staleness_threshold = 0`` and ``trigger_parameter_sync_step = m``; verl
    documentation advance/fully_async, "stream off policy pipeline"). With ``staleness_threshold = s > 0``
    the rollout side may run ``⌊s·m·B⌋`` groups beyond the round with the round's weights (verl's "async
    stream pipeline": at most ``(1 + s)·m·B − num_stale_samples`` per sync, the stale excess of the last
    round counted against the next)."""

    kind: Literal["stream_sync"] = "stream_sync"
    sync_every: int = Field(
        4,
        ge=1,
        description="Learner steps per weight sync of the rollout side (verl trigger_parameter_sync_step; 1 = sync).",
    )
    staleness_threshold: float = Field(
        0.0,
        ge=0,
        description="Extra groups per round, as a fraction of the round's m·B, that the rollout side may "
        "generate ahead with the round's weights (verl async_training.staleness_threshold; 0 = stream off-policy pipeline).",
    )

    def extra(self, groups_per_step: int) -> int:
        """``⌊s·m·B⌋``: groups a round may generate beyond its own ``m·B``."""
        return int(self.staleness_threshold * self.sync_every * groups_per_step)

    dispatch: Dispatch = Field(
        "work_conserving",
        description="As sync's: 'work_conserving' splits groups over idle workers when the round's m·B groups are "
        "fewer than the workers; 'group_per_worker': one worker per group.",
    )

    def group_parts(self, groups_per_step, group_size, num_workers):
        return spread_parts(self.sync_every * groups_per_step, group_size, num_workers, self.dispatch)

    def ahead_groups(self, groups_per_step, num_workers):
        return self.sync_every * groups_per_step + self.extra(groups_per_step), "the groups of the round"

    def drops_stale(self):
        return False

    def max_in_flight(self, groups_per_step):
        return self.sync_every * groups_per_step + self.extra(groups_per_step)

    def is_synchronous(self):
        return self.sync_every == 1 and self.staleness_threshold == 0

    def fixed_lag(self):
        return 0 if self.is_synchronous() else None


@CONTROLS.register(StreamSyncControlConfig)
class StreamSyncControl(Control):
    """Round ``r`` starts when the learner publishes version ``R = m·r``. A worker is admitted, with
    version ``R``, once ``R`` is visible and while ``consumed + buffered + running < (R + m)·B``; the
    learner takes the first ``B`` finished groups per step (FIFO). A group consumed at step
    ``R + j`` has lag ``j`` (0 ≤ j < m); ``m = 1`` is exactly ``sync``. With ``staleness_threshold`` s the
    bound is ``(R + m)·B + ⌊s·m·B⌋`` (the extra groups, generated with version ``R``, are consumed in the
    next round, lag up to ``2m − 1``)."""

    def __init__(self, cfg: StreamSyncControlConfig, groups_per_step: int):
        super().__init__(cfg, groups_per_step)
        self.m = cfg.sync_every
        self.extra = cfg.extra(groups_per_step)
        self.learner_version = 0

    def round_start(self) -> int:
        """``m·⌊learner version / m⌋``: the version the current round generates with."""
        return self.m * (self.learner_version // self.m)

    def on_publish(self, version):
        self.learner_version = version

    def admit(self, visible, buffer_len):
        start = self.round_start()
        if visible >= start and self.active(buffer_len) < (start + self.m) * self.B + self.extra:
            return Admission(start)
        return None

    def oldest_needed_version(self, visible):
        return min(visible, self.round_start())
