"""Pareto type I delay (``docs/system.md#pareto``): a heavy tail, mean alpha·scale/(alpha − 1)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator

from sandbox.system.delays.base import DELAYS, Delay


class ParetoDelay(Delay):
    """Pareto type I: P(X > x) = (scale/x)^alpha for x ≥ scale. Heavy tail; mean finite iff alpha > 1."""

    kind: Literal["pareto"] = "pareto"
    alpha: float = Field(2.5, gt=0, description="Tail index (> 1: the mean is infinite when alpha <= 1).")
    scale: float = Field(0.5, gt=0, description="Minimum duration x_m in seconds (> 0).")

    @field_validator("alpha")
    @classmethod
    def _finite_mean_alpha(cls, v):
        if v <= 1:
            raise ValueError(
                "alpha <= 1 gives an infinite mean duration (mean = alpha·scale/(alpha − 1) needs alpha > 1): "
                "single samples would dominate the simulated clock and throughput would not converge; "
                "use alpha > 1 (e.g. 1.2 for a very heavy tail)"
            )
        return v

    def sample(self, rng, tokens=0):
        return float(self.scale * (1.0 + rng.pareto(self.alpha)))

    def expected(self, tokens=0.0):
        return math.inf if self.alpha <= 1 else self.alpha * self.scale / (self.alpha - 1)

    def cdf(self):
        from scipy import stats

        return stats.pareto(self.alpha, scale=self.scale).cdf


DELAYS.register(ParetoDelay, ParetoDelay)
