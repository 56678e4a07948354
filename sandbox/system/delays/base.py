"""The delay-model registry and the base every delay model extends.

A delay model is a pydantic config (validated, documented knobs) that is its own implementation:
``sample`` draws a duration from the system-timing random stream, ``expected`` gives its mean. It
is one module of this package registered with ``DELAYS.register(Config, Config)``; the ``kind``
field is its name in scenario files. Models: ``docs/system.md#<kind>``.

Every parameter is finite (no ``inf``/``nan``) and every model's mean duration must be at most
:data:`MAX_MEAN_SECONDS`: the simulated clock is a float sum of durations, and a mean beyond that makes
single samples overflow it (or the figures' axes) to ``inf``. Heavy tails stay expressible: Pareto with
``alpha > 1``, lognormal with ``median·e^{σ²/2} <= MAX_MEAN_SECONDS``.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, model_validator

from sandbox.base.registry import Registry

DELAYS: Registry = Registry("delay model", key="kind", plugins="delay")

MAX_MEAN_SECONDS = 1e12
"""Largest accepted mean duration, in simulated seconds (about 31,700 years)."""


class Delay(BaseModel):
    """A duration distribution in simulated seconds; ``tokens`` is the work of the job (the longest
    response of a generation job, the token count of a training batch) for models that charge it."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    per_token_model: ClassVar[bool] = False
    """Whether the model times a generation token by token (``prefill`` and ``per_token_time(rng)``),
    which in-flight weight updates (``system.partial_rollouts``) need."""

    mean_check_note: ClassVar[str] = ""
    """Appended to the finite-mean error when a model checks something other than ``expected()``."""

    @model_validator(mode="after")
    def _finite_mean(self):
        try:
            mean = self._mean_for_check()
        except OverflowError:
            mean = math.inf
        if not mean <= MAX_MEAN_SECONDS:
            raise ValueError(
                f"{self.kind}: the mean duration is {mean:.3g} s; it must be finite and at most "  # type: ignore[attr-defined]
                f"{MAX_MEAN_SECONDS:.0e} s, or samples overflow the simulated clock to inf" + self.mean_check_note
            )
        return self

    def _mean_for_check(self) -> float:
        return self.expected()

    def sample(self, rng: np.random.Generator, tokens: int = 0) -> float:  # pragma: no cover
        raise NotImplementedError

    def expected(self, tokens: float = 0.0) -> float:  # pragma: no cover
        """Expected duration (``inf`` when it does not exist)."""
        raise NotImplementedError

    # -- what the rest of the house asks (defaults: unknown) -------------------------------------------
    def cdf(self):
        """The distribution's CDF as a vectorised callable of seconds, or ``None`` (default) when no
        closed form is declared (the throughput claims' theory then has no prediction for it)."""
        return None

    def fixed_value(self) -> float | None:
        """The duration when it is always the same (``constant``), else ``None`` (default)."""
        return None
