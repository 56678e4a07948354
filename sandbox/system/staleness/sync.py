"""Synchronous (on-policy) control (``docs/system.md#sync``): lag 0 always."""

from __future__ import annotations

from typing import Literal

from .base import CONTROLS, Admission, Control, ControlConfig


class SyncControlConfig(ControlConfig):
    """On-policy: workers generate only with the newest version, B groups per version; the
    learner waits for all of them (lag 0 always). Workers idle while the learner trains."""

    kind: Literal["sync"] = "sync"

    bound_field = None  # k = 0 by definition

    def ahead_groups(self, groups_per_step, num_workers):
        return groups_per_step, "the groups of the next step"

    def drops_stale(self):
        return False

    def max_in_flight(self, groups_per_step):
        return groups_per_step

    def is_synchronous(self):
        return True

    def fixed_lag(self):
        return 0


@CONTROLS.register(SyncControlConfig)
class SyncControl(Control):
    """Admits a job only while the visible version is the learner's newest and fewer than B groups
    of that version were dispatched; consumes in completion order."""

    def __init__(self, cfg: SyncControlConfig, groups_per_step: int):
        super().__init__(cfg, groups_per_step)
        self.learner_version = 0

    def on_publish(self, version):
        self.learner_version = version

    def admit(self, visible, buffer_len):
        if visible == self.learner_version and self.active(buffer_len) < (visible + 1) * self.B:
            return Admission(visible)
        return None
