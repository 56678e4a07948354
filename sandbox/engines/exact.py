"""The exact engine: the sampler is the trainer (``docs/engines.md#exact``)."""

from __future__ import annotations

from typing import Literal

from sandbox.engines.base import ENGINES, Engine, EngineBase


class ExactEngineConfig(EngineBase):
    """The sampler's distribution and reported log-probs are the trainer's at the sampling version (the default)."""

    name: Literal["exact"] = "exact"


@ENGINES.register(ExactEngineConfig)
class ExactEngine(Engine):
    """Never called: a task seeing :attr:`exact` runs its own sampling code, so nothing is drawn and
    ``behaviour_logp`` is ``version_logp`` (no number changes)."""

    exact = True
