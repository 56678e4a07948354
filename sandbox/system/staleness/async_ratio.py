"""ROLL Flash's asynchronous ratio α (arXiv 2510.11345; ``docs/system.md#async_ratio``)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator

from sandbox.system.staleness.base import CONTROLS, Admission, Control, ControlConfig, remove_where

MAX_ASYNC_RATIO = 1e6


class AsyncRatioControlConfig(ControlConfig):
    """ROLL Flash's asynchronous ratio α: the rollout side runs ahead by at most α batches; at
    step n groups dispatched before version n − ceil(α) are discarded, and for fractional α only
    a fraction (α mod 1) of the batch may come from the oldest admissible version."""

    kind: Literal["async_ratio"] = "async_ratio"
    alpha: float = Field(
        1.0,
        ge=0,
        le=MAX_ASYNC_RATIO,
        description="Asynchronous ratio α in [0, 1e6] (0 = synchronous; ROLL examples use 1). Finite: a ratio "
        "at or above run.steps already never binds.",
    )

    @field_validator("alpha", mode="before")
    @classmethod
    def _finite_alpha(cls, v):
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(
                "alpha must be finite: it counts the batches the rollout side may run ahead; for an "
                f"effectively unbounded ratio use a finite alpha >= run.steps (at most {MAX_ASYNC_RATIO:.0e})"
            )
        return v

    bound_field = "alpha"
    bound_type = float

    def ahead_groups(self, groups_per_step, num_workers):
        return (math.ceil(self.alpha) + 1) * groups_per_step, "groups queued ahead"

    def drops_stale(self):
        return True

    def max_in_flight(self, groups_per_step):
        return int(math.floor((1 + self.alpha) * groups_per_step))


@CONTROLS.register(AsyncRatioControlConfig)
class AsyncRatioControl(Control):
    """Admits while ``active < floor((v + 1 + α)·B)``; at step n drops jobs with head version below
    ``n − ceil(α)`` and, for fractional α, all but ``round((α mod 1)·B)`` jobs of version
    ``n − ceil(α)``; FIFO otherwise."""

    streaming = True

    def __init__(self, cfg: AsyncRatioControlConfig, groups_per_step: int):
        super().__init__(cfg, groups_per_step)
        self.window = math.ceil(cfg.alpha)
        frac = cfg.alpha - math.floor(cfg.alpha)
        self.oldest_quota = round(frac * groups_per_step) if frac > 0 else None

    def admit(self, visible, buffer_len):
        if self.active(buffer_len) < math.floor((visible + 1 + self.cfg.alpha) * self.B + 1e-9):
            return Admission(visible)
        return None

    def none_stale(self, step, buffer):
        """Nothing below the window and no quota to count at its edge (known without scanning the buffer)."""
        if not self.buffered.covers(buffer):
            return False
        oldest, oldest_ok = self.buffered.min_head(), step - self.window
        return oldest > oldest_ok or (oldest == oldest_ok and (self.oldest_quota is None or self.window == 0))

    def drop_stale(self, step, buffer):
        if self.none_stale(step, buffer):
            return []
        oldest_ok = step - self.window
        quota = [self.oldest_quota]

        def too_old(job):
            if job.head_version < oldest_ok:
                return True
            if self.oldest_quota is not None and job.head_version == oldest_ok and self.window > 0:
                if quota[0] <= 0:
                    return True
                quota[0] -= 1
            return False

        # The quota is recounted over the whole buffer at every attempt, so a step that has to
        # wait never admits more than the quota from the oldest version.
        return remove_where(buffer, too_old)
