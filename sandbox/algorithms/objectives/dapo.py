"""DAPO clip-higher with token-mean aggregation (Yu et al. arXiv 2503.14476;
``docs/methods/objectives.md#dapo``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandbox.algorithms._tensor import Aggregation
from sandbox.algorithms.objectives.base import (
    OBJECTIVES,
    AdvantageKnob,
    ClipKnobs,
    ClipSurrogate,
    KnobAdvantage,
    Objective,
    OpobKnobs,
)


class DAPOConfig(ClipKnobs, AdvantageKnob, OpobKnobs):
    """DAPO clip-higher with token-mean over the batch (arXiv 2503.14476; docs/methods/objectives.md#dapo).
    Data-side tricks (dynamic sampling, overlong shaping) are in :mod:`sandbox.algorithms.shaping`."""

    name: Literal["dapo"] = "dapo"
    eps_low: float = Field(0.2, ge=0.0, le=1.0, description="DAPO ε_low = 0.2.")
    eps_high: float = Field(
        0.28, ge=0.0, allow_inf_nan=True, description="DAPO clip-higher ε_high = 0.28; inf = no upper clip."
    )
    aggregation: Aggregation = Field("token_mean", description="DAPO: token-mean over the whole batch.")

    def validate_group_size(self, group_size: int) -> None:
        super().validate_group_size(group_size)
        self._check_adv_group(group_size)


@OBJECTIVES.register(DAPOConfig)
class DAPO(ClipSurrogate, KnobAdvantage, Objective):
    """Critic-free advantage of the ``advantage`` knob with the asymmetric (clip-higher) PPO surrogate."""
