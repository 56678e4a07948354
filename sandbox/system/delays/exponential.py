"""Exponential delay (``docs/system.md#exponential``): the memoryless worker for which the
order-statistics results of ``docs/theory.md#t6`` are exact."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandbox.system.delays.base import DELAYS, Delay


class ExponentialDelay(Delay):
    """Exponential with the given mean (rate μ = 1/mean): the memoryless worker of T6."""

    kind: Literal["exponential"] = "exponential"
    mean: float = Field(1.0, gt=0, description="Mean duration in seconds (> 0).")

    def sample(self, rng, tokens=0):
        return float(rng.exponential(self.mean))

    def expected(self, tokens=0.0):
        return self.mean

    def cdf(self):
        from scipy import stats

        return stats.expon(scale=self.mean).cdf


DELAYS.register(ExponentialDelay, ExponentialDelay)
