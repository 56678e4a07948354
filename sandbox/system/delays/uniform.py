"""Uniform delay on [low, high] (``docs/system.md#uniform``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from sandbox.system.delays.base import DELAYS, Delay


class UniformDelay(Delay):
    """Uniform on [low, high]."""

    kind: Literal["uniform"] = "uniform"
    low: float = Field(0.5, ge=0, description="Lower end in seconds (>= 0).")
    high: float = Field(1.5, gt=0, description="Upper end in seconds (> low).")

    @model_validator(mode="after")
    def _ordered(self):
        if self.high <= self.low:
            raise ValueError(f"high must be greater than low (got low={self.low}, high={self.high})")
        return self

    def sample(self, rng, tokens=0):
        return float(rng.uniform(self.low, self.high))

    def expected(self, tokens=0.0):
        return (self.low + self.high) / 2

    def cdf(self):
        from scipy import stats

        return stats.uniform(self.low, self.high - self.low).cdf


DELAYS.register(UniformDelay, UniformDelay)
