"""Synchronous (on-policy) control (``docs/system.md#sync``): lag 0 always."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandbox.system.staleness.base import CONTROLS, Admission, Control, ControlConfig, Dispatch, spread_parts


class SyncControlConfig(ControlConfig):
    """On-policy: workers generate only with the newest version, B groups per version; the
    learner waits for all of them (lag 0 always). Workers idle while the learner trains.

    ``dispatch = "work_conserving"`` (default) spreads a step's samples over the whole fleet, as verl,
    TRL, OpenRLHF and AReaL spread a step's batch over every rollout engine: with fewer groups than
    workers (B < W) each group is split into ``min(G, ceil(W/B))`` parts that free workers take, and the
    learner receives the group when its last part finishes. ``"group_per_worker"`` is the older model:
    one worker generates a whole group, so with B < W only B workers are ever busy."""

    kind: Literal["sync"] = "sync"
    dispatch: Dispatch = Field(
        "work_conserving",
        description="'work_conserving': a step's samples are spread over all workers (groups split into parts "
        "when B < W); 'group_per_worker': one worker generates each whole group (B < W leaves workers idle).",
    )

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

    def group_parts(self, groups_per_step, group_size, num_workers):
        return spread_parts(groups_per_step, group_size, num_workers, self.dispatch)


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
