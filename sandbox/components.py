"""The component families a scenario is assembled from, each a registry (:mod:`sandbox.base.registry`),
with the scenario field that selects a member and the docs page that documents it. ``sandbox list``
prints them; ``tests/test_registry.py`` requires a docs entry and a hand-value test for every member."""

from __future__ import annotations

from dataclasses import dataclass

from sandbox.algorithms import CORRECTIONS, OBJECTIVES, STABILIZERS
from sandbox.base.registry import Registry
from sandbox.engines import ENGINES
from sandbox.system.delays import DELAYS
from sandbox.system.staleness import CONTROLS
from sandbox.tasks import TASKS


@dataclass(frozen=True)
class Family:
    registry: Registry
    field: str
    """Where a scenario selects a member (dotted path and the discriminator key)."""
    docs: str
    """The page documenting every member under a ``## <name>`` heading."""


FAMILIES: dict[str, Family] = {
    "objective": Family(OBJECTIVES, "algorithm.objective.name", "docs/methods/objectives.md"),
    "correction": Family(CORRECTIONS, "algorithm.correction.name", "docs/methods/corrections.md"),
    "stabilizer": Family(STABILIZERS, "algorithm.stabilizers[].name", "docs/methods/stabilizers.md"),
    "delay": Family(DELAYS, "system.{generation_time,train_time,sync_delay}.kind", "docs/system.md"),
    "staleness": Family(CONTROLS, "system.staleness.kind", "docs/system.md"),
    "task": Family(TASKS, "task.name", "docs/tasks.md"),
    "engine": Family(ENGINES, "engine.name", "docs/engines.md"),
}
