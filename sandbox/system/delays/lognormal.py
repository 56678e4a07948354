"""Log-normal delay (``docs/system.md#lognormal``): mean median·e^{σ²/2}."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from sandbox.system.delays.base import DELAYS, Delay


class LognormalDelay(Delay):
    """Log-normal with the given median and log-standard-deviation σ (mean = median·e^{σ²/2}).
    Long-tailed LLM response lengths are commonly modelled this way (docs/theory.md#t6 example)."""

    kind: Literal["lognormal"] = "lognormal"
    median: float = Field(1.0, gt=0, description="Median duration in seconds (> 0).")
    sigma: float = Field(0.6, gt=0, description="Standard deviation of log-duration (> 0).")

    def sample(self, rng, tokens=0):
        return float(rng.lognormal(math.log(self.median), self.sigma))

    def expected(self, tokens=0.0):
        return self.median * math.exp(self.sigma**2 / 2)

    def cdf(self):
        from theory.order_statistics import lognormal_cdf

        return lognormal_cdf(self.median, self.sigma)


DELAYS.register(LognormalDelay, LognormalDelay)
