"""Tasks: what is learned (toy policies, gradient oracles, small LMs, gymnasium environments).

Each task is one module (config + implementation) registered in :data:`TASKS`; importing this
package imports every module of it (``lm`` included), so the union a scenario's ``[task]`` validates
against and :func:`make_task` always cover every registered task (``docs/tasks.md``).
"""

from sandbox.tasks.base import TASKS, GradientSample, OracleTask, Params, PolicyTask, Task
from sandbox.tasks.rollouts import Rollouts

TASKS.discover(__name__)
TaskConfig = TASKS.union()
_IMPLEMENTATIONS = {entry.impl.__name__: entry.impl for entry in TASKS.entries()}
globals().update(_IMPLEMENTATIONS)


def make_task(cfg) -> Task:
    """Instantiate the task a validated config describes."""
    return TASKS.build(cfg)


__all__ = [
    "GradientSample",
    "OracleTask",
    "Params",
    "PolicyTask",
    "Task",
    "TASKS",
    "TaskConfig",
    "make_task",
    "Rollouts",
    *TASKS.export_configs(globals()),
    *_IMPLEMENTATIONS,
]
