"""Task registry: the TOML ``[task] name = ...`` selects a config model and a task class."""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from .bandit import BanditConfig, BanditTask
from .base import Task
from .bitstring import BitStringConfig, BitStringTask
from .gym_tasks import GymConfig, GymTask
from .lm.task import LMTask, LMTaskConfig
from .quadratic import QuadraticConfig, QuadraticTask

TASKS = {
    "bandit": (BanditConfig, BanditTask),
    "bitstring": (BitStringConfig, BitStringTask),
    "quadratic": (QuadraticConfig, QuadraticTask),
    "lm": (LMTaskConfig, LMTask),
    "gym": (GymConfig, GymTask),
}

TaskConfig = Annotated[Union[BanditConfig, BitStringConfig, QuadraticConfig, LMTaskConfig, GymConfig], Field(discriminator="name")]


def make_task(cfg) -> Task:
    """Instantiate the task a validated config describes."""
    return TASKS[cfg.name][1](cfg)
