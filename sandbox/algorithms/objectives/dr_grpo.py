"""Dr.GRPO (Liu et al. arXiv 2503.20783; ``docs/methods/objectives.md#dr_grpo``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from sandbox.algorithms import advantages as A
from sandbox.algorithms._tensor import Aggregation
from sandbox.algorithms.api import PolicyLossInput
from sandbox.algorithms.base import need_groups
from sandbox.algorithms.objectives.base import (
    OBJECTIVES,
    ClipKnobs,
    ClipSurrogate,
    Objective,
    OpobKnobs,
    opob_advantage,
)

if TYPE_CHECKING:
    from torch import Tensor


class DrGRPOConfig(ClipKnobs, OpobKnobs):
    """Dr.GRPO (arXiv 2503.20783; docs/methods/objectives.md#dr_grpo): ``Â = R − mean_g R`` and
    ``L = −(1/(B·L_const)) Σ_{i,t} min(rÂ, clip(r)Â)``."""

    name: Literal["dr_grpo"] = "dr_grpo"
    baseline: Literal["group_mean", "opob"] = Field("group_mean", description="group_mean (Dr.GRPO) or opob.")
    max_len: int | None = Field(
        None, gt=0, description="L_const (max completion length); None uses the padded length T of the batch."
    )
    aggregation: Aggregation = Field("seq_mean_token_sum_norm", description="Dr.GRPO: seq-mean-token-sum-norm.")

    def validate_group_size(self, group_size: int) -> None:
        super().validate_group_size(group_size)
        need_groups(self.name, "a group-mean baseline", group_size)


@OBJECTIVES.register(DrGRPOConfig)
class DrGRPO(ClipSurrogate, Objective):
    """Centred advantages (no std division) and a constant length normaliser ``L_const``."""

    @property
    def needs_sequence_grad_norms(self) -> bool:
        return self.cfg.baseline == "opob"

    @property
    def max_len(self) -> int | None:
        return self.cfg.max_len

    def advantages(self, inp: PolicyLossInput, log_seq_rho: Tensor) -> tuple[Tensor, dict]:
        r, g = inp.rewards.detach(), inp.group_size
        if self.cfg.baseline == "opob":
            adv, b = opob_advantage(self.cfg, inp, log_seq_rho, False, False, 1e-6)
            return adv, {"adv/baseline_mean": b.mean(-1)}
        return r - A.group_mean_baseline(r, g), {}
