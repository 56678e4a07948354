"""Delay models: how long a rollout job, a learner step or a weight sync takes, in simulated seconds.

One module per model, each a validated config with ``sample`` and ``expected`` (``docs/system.md``),
registered in :data:`DELAYS`; :data:`DelayConfig` (the union scenarios validate against) and
``__all__`` are derived from the registry. Adding a model is adding a module here.
"""

from sandbox.system.delays.base import DELAYS, MAX_MEAN_SECONDS, Delay

DELAYS.discover(__name__)

DelayConfig = DELAYS.union()
"""Any registered delay model, selected by its ``kind``."""

__all__ = ["DELAYS", "Delay", "DelayConfig", "MAX_MEAN_SECONDS", *DELAYS.export_configs(globals())]
