"""Cost-model delay (``docs/system.md#cost_model``): the duration follows the work itself,
``prefill + per_token · tokens``, where ``tokens`` is the longest response of a generation job (a
batch decodes until its longest sequence ends) or the token count of a training batch."""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from sandbox.system.delays.base import DELAYS, Delay


class CostModelDelay(Delay):
    """Duration driven by the work: ``prefill + per_token · tokens``, optionally with
    multiplicative log-normal jitter ``exp(N(0, jitter²))`` (jitter 0 = deterministic)."""

    kind: Literal["cost_model"] = "cost_model"
    prefill: float = Field(0.05, ge=0, description="Fixed cost per job (prompt prefill / step overhead), seconds.")
    per_token: float = Field(
        0.01, ge=0, description="Seconds per decoded token (generation) or per batch token (training)."
    )
    jitter: float = Field(0.0, ge=0, description="Log-normal multiplicative noise σ (0 = none).")

    per_token_model: ClassVar[bool] = True
    mean_check_note: ClassVar[str] = " (cost_model: checked as max(prefill + per_token, 1)·e^{jitter²/2})"

    def sample(self, rng, tokens=0):
        base = self.prefill + self.per_token * tokens
        return float(base * math.exp(rng.normal(0.0, self.jitter))) if self.jitter > 0 else base

    def expected(self, tokens=0.0):
        return (self.prefill + self.per_token * tokens) * math.exp(self.jitter**2 / 2)

    def _mean_for_check(self) -> float:
        # Checked per token of work and with at least 1 s, so that the jitter factor e^{σ²/2} is
        # bounded too when prefill = per_token = 0.
        return max(self.prefill + self.per_token, 1.0) * math.exp(self.jitter**2 / 2)

    def per_token_time(self, rng: np.random.Generator) -> float:
        """Decode time per token for one segment of an in-flight generation (jittered)."""
        return self.per_token * math.exp(rng.normal(0.0, self.jitter)) if self.jitter > 0 else self.per_token


DELAYS.register(CostModelDelay, CostModelDelay)
