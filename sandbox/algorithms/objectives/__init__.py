"""Policy-gradient objectives, one module each (``docs/methods/objectives.md``): a config model next to
its :class:`~.base.Objective`, registered in :data:`OBJECTIVES`. Adding an objective is adding a module
here; the scenario union, name lists and ``__all__`` follow from the registry."""

from __future__ import annotations

from sandbox.algorithms.objectives.base import OBJECTIVES, Objective, Surrogate, SurrogateInput

OBJECTIVES.discover(__name__)

ObjectiveConfig = OBJECTIVES.union()
"""Discriminated union of every objective config (TOML ``name``)."""

__all__ = ["OBJECTIVES", "Objective", "ObjectiveConfig", "Surrogate", "SurrogateInput"]
__all__ += OBJECTIVES.export_configs(globals())
globals().update({e.impl.__name__: e.impl for e in OBJECTIVES.entries()})
__all__ += [e.impl.__name__ for e in OBJECTIVES.entries()]
