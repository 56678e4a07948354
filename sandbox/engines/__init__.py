"""Rollout engines: how the sampler's distribution and the log-probs it reports differ from the
learner's at the same weights (training–inference mismatch, ``docs/engines.md``).

One module per kind, each a validated config next to its implementation, registered in
:data:`ENGINES`; :data:`EngineConfig` (the union the scenario's ``[engine]`` validates against) and
``__all__`` are derived from the registry. Adding a kind is adding a module here.
"""

from sandbox.engines.base import ENGINES, Draw, Engine, EngineBase, check_engine_task

ENGINES.discover(__name__)
from sandbox.engines.exact import ExactEngineConfig  # noqa: E402  (registered by the discovery above)

EngineConfig = ENGINES.union()
"""Any registered rollout engine, selected by its ``name``."""


def make_engine(cfg: EngineBase | None) -> Engine:
    """The engine a validated ``[engine]`` config describes (None: the exact engine)."""
    return ENGINES.build(ExactEngineConfig() if cfg is None else cfg)


__all__ = [
    "ENGINES",
    "Draw",
    "Engine",
    "EngineBase",
    "EngineConfig",
    "check_engine_task",
    "make_engine",
    *ENGINES.export_configs(globals()),
]
