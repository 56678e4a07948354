"""GSPO sequence-level ratio (Zheng et al. arXiv 2507.18071; ``docs/methods/objectives.md#gspo``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from sandbox.algorithms._tensor import Aggregation
from sandbox.algorithms.objectives.base import (
    OBJECTIVES,
    AdvantageKnob,
    ClipKnobs,
    KnobAdvantage,
    Objective,
    OpobKnobs,
    Surrogate,
    SurrogateInput,
    gspo_surrogate,
)


class GSPOConfig(ClipKnobs, AdvantageKnob, OpobKnobs):
    """GSPO sequence-level ratio ``s_i = exp(mean_t log r_{i,t})`` (arXiv 2507.18071;
    docs/methods/objectives.md#gspo), implemented in the GSPO-token form so token-level corrections compose."""

    name: Literal["gspo"] = "gspo"
    eps_low: float = Field(3e-4, ge=0.0, le=1.0, description="GSPO paper ε_l = 3e-4.")
    eps_high: float = Field(4e-4, ge=0.0, allow_inf_nan=True, description="GSPO paper ε_h = 4e-4; inf = no upper clip.")
    aggregation: Aggregation = Field("seq_mean_token_mean", description="GSPO: mean over sequences.")

    @model_validator(mode="after")
    def _no_dual_clip(self):
        if self.dual_clip_c is not None:
            raise ValueError(
                f"dual_clip_c={self.dual_clip_c}: GSPO clips its sequence ratio and defines no dual clip (arXiv "
                "2507.18071; verl's gspo loss has none), so the value would be ignored; leave it unset (null)"
            )
        return self

    def validate_group_size(self, group_size: int) -> None:
        super().validate_group_size(group_size)
        self._check_adv_group(group_size)


@OBJECTIVES.register(GSPOConfig)
class GSPO(KnobAdvantage, Objective):
    """Critic-free advantage of the ``advantage`` knob with the clipped sequence ratio (GSPO-token form)."""

    def surrogate(self, s: SurrogateInput) -> Surrogate:
        return gspo_surrogate(s.logp, s.anchor_logp, s.adv, s.fmask, self.cfg.eps_low, self.cfg.eps_high)
