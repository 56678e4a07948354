"""A synthetic task for the component checker: the bandit under another name (it declares no budget
shape)."""

from __future__ import annotations

from typing import Literal

from sandbox.tasks.bandit import BanditConfig, BanditTask
from sandbox.tasks.base import TASKS


class SyntheticTaskConfig(BanditConfig):
    """Synthetic task: a K-armed bandit under a new name (component checker)."""

    name: Literal["synthetic_task"] = "synthetic_task"


@TASKS.register(SyntheticTaskConfig)
class SyntheticTask(BanditTask):
    pass
