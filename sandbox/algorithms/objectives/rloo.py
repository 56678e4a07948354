"""RLOO (Kool et al. 2019; Ahmadian et al. arXiv 2402.14740; ``docs/methods/objectives.md#rloo``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from sandbox.algorithms import advantages as A
from sandbox.algorithms._tensor import Aggregation
from sandbox.algorithms.api import PolicyLossInput
from sandbox.algorithms.base import need_groups
from sandbox.algorithms.objectives.base import OBJECTIVES, ClipKnobs, ClipSurrogate, Objective

if TYPE_CHECKING:
    from torch import Tensor


class RLOOConfig(ClipKnobs):
    """RLOO advantages ``Â_i = R_i − mean_{j≠i} R_j`` (Kool et al. 2019; Ahmadian et al. arXiv 2402.14740)
    with the PPO clip surrogate (verl ``compute_rloo_outcome_advantage`` + vanilla policy loss)."""

    name: Literal["rloo"] = "rloo"
    aggregation: Aggregation = Field("token_mean", description="verl default loss_agg_mode token-mean.")

    def validate_group_size(self, group_size: int) -> None:
        super().validate_group_size(group_size)
        need_groups(self.name, "the leave-one-out baseline", group_size)


@OBJECTIVES.register(RLOOConfig)
class RLOO(ClipSurrogate, Objective):
    """Leave-one-out advantages with the PPO clip surrogate."""

    def advantages(self, inp: PolicyLossInput, log_seq_rho: Tensor) -> tuple[Tensor, dict]:
        r = inp.rewards.detach()
        return r - A.leave_one_out_baseline(r, inp.group_size), {}
