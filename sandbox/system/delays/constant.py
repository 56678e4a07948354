"""Constant delay: always ``value`` seconds (``docs/system.md#constant``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandbox.system.delays.base import DELAYS, Delay


class ConstantDelay(Delay):
    """Always ``value`` seconds."""

    kind: Literal["constant"] = "constant"
    value: float = Field(1.0, ge=0, description="Duration in simulated seconds (>= 0).")

    def sample(self, rng, tokens=0):
        return self.value

    def expected(self, tokens=0.0):
        return self.value

    def cdf(self):
        import numpy as np

        return lambda x: (np.asarray(x) >= self.value).astype(float)

    def fixed_value(self):
        return self.value


DELAYS.register(ConstantDelay, ConstantDelay)
