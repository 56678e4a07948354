"""Gamma delay (``docs/system.md#gamma``): mean kθ, variance kθ²."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandbox.system.delays.base import DELAYS, Delay


class GammaDelay(Delay):
    """Gamma(shape k, scale θ): mean kθ; k < 1 is more variable than exponential."""

    kind: Literal["gamma"] = "gamma"
    shape: float = Field(2.0, gt=0, description="Shape k (> 0).")
    scale: float = Field(0.5, gt=0, description="Scale θ in seconds (> 0).")

    def sample(self, rng, tokens=0):
        return float(rng.gamma(self.shape, self.scale))

    def expected(self, tokens=0.0):
        return self.shape * self.scale

    def cdf(self):
        from scipy import stats

        return stats.gamma(self.shape, scale=self.scale).cdf


DELAYS.register(GammaDelay, GammaDelay)
