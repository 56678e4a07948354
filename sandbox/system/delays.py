"""Delay models: how long a rollout job, a learner step or a weight sync takes, in simulated seconds.

Each model is a pydantic config (validated, documented knobs) with a ``sample`` method drawing from
the system-timing random stream. ``cost_model`` makes the duration follow the work itself:
``prefill + per_token · tokens`` where ``tokens`` is the longest response of a generation job
(a batch decodes until its longest sequence ends) or the token count of a training batch.

Every parameter is finite (no ``inf``/``nan``) and every model's mean duration must be at most
:data:`MAX_MEAN_SECONDS`: the simulated clock is a float sum of durations, and a mean beyond that makes
single samples overflow it (or the figures' axes) to ``inf``. Heavy tails stay expressible: Pareto with
``alpha > 1``, lognormal with ``median·e^{σ²/2} <= MAX_MEAN_SECONDS``.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_MEAN_SECONDS = 1e12
"""Largest accepted mean duration, in simulated seconds (about 31,700 years)."""


class _Delay(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="after")
    def _finite_mean(self):
        try:
            mean = self._mean_for_check()
        except OverflowError:
            mean = math.inf
        if not mean <= MAX_MEAN_SECONDS:
            raise ValueError(
                f"{self.kind}: the mean duration is {mean:.3g} s; it must be finite and at most "  # type: ignore[attr-defined]
                f"{MAX_MEAN_SECONDS:.0e} s, or samples overflow the simulated clock to inf"
                + (" (cost_model: checked as max(prefill + per_token, 1)·e^{jitter²/2})" if self.kind == "cost_model" else "")
            )
        return self

    def _mean_for_check(self) -> float:
        return self.expected()

    def sample(self, rng: np.random.Generator, tokens: int = 0) -> float:  # pragma: no cover
        raise NotImplementedError

    def expected(self, tokens: float = 0.0) -> float:  # pragma: no cover
        """Expected duration (``inf`` when it does not exist)."""
        raise NotImplementedError


class ConstantDelay(_Delay):
    """Always ``value`` seconds."""

    kind: Literal["constant"] = "constant"
    value: float = Field(1.0, ge=0, description="Duration in simulated seconds (>= 0).")

    def sample(self, rng, tokens=0):
        return self.value

    def expected(self, tokens=0.0):
        return self.value


class ExponentialDelay(_Delay):
    """Exponential with the given mean (rate μ = 1/mean): the memoryless worker of T6."""

    kind: Literal["exponential"] = "exponential"
    mean: float = Field(1.0, gt=0, description="Mean duration in seconds (> 0).")

    def sample(self, rng, tokens=0):
        return float(rng.exponential(self.mean))

    def expected(self, tokens=0.0):
        return self.mean


class GammaDelay(_Delay):
    """Gamma(shape k, scale θ): mean kθ; k < 1 is more variable than exponential."""

    kind: Literal["gamma"] = "gamma"
    shape: float = Field(2.0, gt=0, description="Shape k (> 0).")
    scale: float = Field(0.5, gt=0, description="Scale θ in seconds (> 0).")

    def sample(self, rng, tokens=0):
        return float(rng.gamma(self.shape, self.scale))

    def expected(self, tokens=0.0):
        return self.shape * self.scale


class LognormalDelay(_Delay):
    """Log-normal with the given median and log-standard-deviation σ (mean = median·e^{σ²/2}).
    Long-tailed LLM response lengths are commonly modelled this way (theory.md T6 example)."""

    kind: Literal["lognormal"] = "lognormal"
    median: float = Field(1.0, gt=0, description="Median duration in seconds (> 0).")
    sigma: float = Field(0.6, gt=0, description="Standard deviation of log-duration (> 0).")

    def sample(self, rng, tokens=0):
        return float(rng.lognormal(math.log(self.median), self.sigma))

    def expected(self, tokens=0.0):
        return self.median * math.exp(self.sigma**2 / 2)


class ParetoDelay(_Delay):
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


class UniformDelay(_Delay):
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


class EmpiricalDelay(_Delay):
    """Resamples (with replacement) from a measured trace of durations."""

    kind: Literal["empirical"] = "empirical"
    values: list[float] = Field(..., min_length=1, description="Observed durations in seconds (each >= 0).")

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


class CostModelDelay(_Delay):
    """Duration driven by the work: ``prefill + per_token · tokens``, optionally with
    multiplicative log-normal jitter ``exp(N(0, jitter²))`` (jitter 0 = deterministic)."""

    kind: Literal["cost_model"] = "cost_model"
    prefill: float = Field(0.05, ge=0, description="Fixed cost per job (prompt prefill / step overhead), seconds.")
    per_token: float = Field(0.01, ge=0, description="Seconds per decoded token (generation) or per batch token (training).")
    jitter: float = Field(0.0, ge=0, description="Log-normal multiplicative noise σ (0 = none).")

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


DelayConfig = Annotated[
    Union[
        ConstantDelay,
        ExponentialDelay,
        GammaDelay,
        LognormalDelay,
        ParetoDelay,
        UniformDelay,
        EmpiricalDelay,
        CostModelDelay,
    ],
    Field(discriminator="kind"),
]
