"""Empirical delay (``docs/system.md#empirical``): resamples a measured trace of durations."""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from sandbox.system.delays.base import DELAYS, Delay


class EmpiricalDelay(Delay):
    """Resamples (with replacement) from a measured trace of durations."""

    kind: Literal["empirical"] = "empirical"
    values: list[float] = Field(..., min_length=1, description="Observed durations in seconds (each >= 0).")

    check_settings: ClassVar[dict] = {"values": [0.5, 1.0, 1.5]}
    """A tiny trace for the component checker (``sandbox.component_check``)."""

    @model_validator(mode="after")
    def _non_negative(self):
        bad = [v for v in self.values if not (v >= 0 and math.isfinite(v))]
        if bad:
            raise ValueError(f"values must be finite and >= 0, got {bad[:3]}")
        return self

    def sample(self, rng, tokens=0):
        return float(self.values[int(rng.integers(len(self.values)))])

    def expected(self, tokens=0.0):
        return float(np.mean(self.values))


DELAYS.register(EmpiricalDelay, EmpiricalDelay)
