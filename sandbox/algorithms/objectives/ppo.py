"""PPO clip with dual clip (Schulman et al. arXiv 1707.06347; Ye et al. arXiv 1912.09729;
``docs/methods/objectives.md#ppo``)."""

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


class PPOConfig(ClipKnobs, AdvantageKnob, OpobKnobs):
    """PPO clip with dual clip (arXiv 1707.06347, 1912.09729; docs/methods/objectives.md#ppo)."""

    name: Literal["ppo"] = "ppo"
    dual_clip_c: float | None = Field(3.0, description="Dual clip c; verl clip_ratio_c = 3.0. None disables.")
    aggregation: Aggregation = Field("token_mean", description="verl default token-mean.")

    def validate_group_size(self, group_size: int) -> None:
        super().validate_group_size(group_size)
        self._check_adv_group(group_size)


@OBJECTIVES.register(PPOConfig)
class PPO(ClipSurrogate, KnobAdvantage, Objective):
    """Critic-free advantage of the ``advantage`` knob with the dual-clip PPO surrogate."""
