"""Tasks: what is learned (toy policies, gradient oracles; small LMs and gymnasium later)."""

from .base import GradientSample, OracleTask, Params, PolicyTask, Task
from .registry import TASKS, TaskConfig, make_task
from .rollouts import Rollouts

__all__ = ["GradientSample", "OracleTask", "Params", "PolicyTask", "Task", "TASKS", "TaskConfig", "make_task", "Rollouts"]
