"""A synthetic delay model for the component checker: Weibull(shape k, scale λ), mean λ·Γ(1 + 1/k). It
declares no CDF and no fixed value."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from sandbox.system.delays.base import DELAYS, Delay


class SyntheticDelay(Delay):
    """Synthetic delay: Weibull with shape k and scale λ (component checker)."""

    kind: Literal["synthetic_delay"] = "synthetic_delay"
    shape: float = Field(1.5, gt=0, description="Weibull shape k.")
    scale: float = Field(1.0, gt=0, description="Weibull scale λ in seconds.")

    def sample(self, rng, tokens=0):
        return float(self.scale * rng.weibull(self.shape))

    def expected(self, tokens=0.0):
        return self.scale * math.gamma(1 + 1 / self.shape)


DELAYS.register(SyntheticDelay, SyntheticDelay)
