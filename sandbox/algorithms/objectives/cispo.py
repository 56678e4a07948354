"""CISPO (MiniMax-M1, arXiv 2506.13585; ``docs/methods/objectives.md#cispo``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandbox.algorithms._tensor import Aggregation
from sandbox.algorithms.objectives.base import (
    OBJECTIVES,
    AdvantageKnob,
    KnobAdvantage,
    Objective,
    OpobKnobs,
    Surrogate,
    SurrogateInput,
    cispo_surrogate,
)


class CISPOConfig(AdvantageKnob, OpobKnobs):
    """CISPO (MiniMax-M1, arXiv 2506.13585; docs/methods/objectives.md#cispo):
    ``ℓ_t = −sg(clip(r_t, 1−ε_low, 1+ε_high)) Â_t log π_θ``, token-mean."""

    name: Literal["cispo"] = "cispo"
    eps_low: float = Field(
        1.0, ge=0.0, le=1.0, description="1.0 = no lower bound (MiniMax-M1 imposes none; SkyRL default)."
    )
    eps_high: float = Field(
        4.0,
        ge=0.0,
        allow_inf_nan=True,
        description="4.0 → weight range [0, 5] (ScaleRL/SkyRL setting, docs/methods/objectives.md#cispo); inf = no upper cap.",
    )
    aggregation: Aggregation = Field("token_mean", description="CISPO: token-mean.")

    def validate_group_size(self, group_size: int) -> None:
        super().validate_group_size(group_size)
        self._check_adv_group(group_size)


@OBJECTIVES.register(CISPOConfig)
class CISPO(KnobAdvantage, Objective):
    """Critic-free advantage of the ``advantage`` knob with the clipped-weight REINFORCE surrogate."""

    def surrogate(self, s: SurrogateInput) -> Surrogate:
        return cispo_surrogate(s.logp, s.ratio, s.adv, self.cfg.eps_low, self.cfg.eps_high)
