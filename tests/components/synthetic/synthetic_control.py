"""A synthetic staleness control for the component checker: admit while fewer than two batches past
the visible version are dispatched and unconsumed (max_lag's throttle with k = 1, written anew). It
declares nothing: no bound field, no budget facts, no on-policy answer."""

from __future__ import annotations

from typing import Literal

from sandbox.system.staleness.base import CONTROLS, Admission, Control, ControlConfig


class SyntheticControlConfig(ControlConfig):
    """Synthetic control: one batch of lag at most, by admission (component checker)."""

    kind: Literal["synthetic_control"] = "synthetic_control"


@CONTROLS.register(SyntheticControlConfig)
class SyntheticControl(Control):
    streaming = True

    def admit(self, visible, buffer_len):
        return Admission(visible) if self.active(buffer_len) < (visible + 2) * self.B else None
