"""A synthetic objective for the component checker: GRPO under another name (it declares nothing)."""

from __future__ import annotations

from typing import Literal

from sandbox.algorithms.objectives.base import OBJECTIVES
from sandbox.algorithms.objectives.grpo import GRPO, GRPOConfig


class SyntheticObjectiveConfig(GRPOConfig):
    """Synthetic objective: GRPO's loss under a new name (component checker)."""

    name: Literal["synthetic_objective"] = "synthetic_objective"


@OBJECTIVES.register(SyntheticObjectiveConfig)
class SyntheticObjective(GRPO):
    pass
