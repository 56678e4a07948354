"""Staleness controls: which rollouts may be generated (admission) and which may be consumed.

One module per control, its config next to its :class:`Control` subclass (``docs/system.md``),
registered in :data:`CONTROLS`; :data:`StalenessConfig` (the union scenarios validate against),
:func:`make_control` and ``__all__`` are derived from the registry. Adding a control is adding a
module here. The protocol the cluster speaks is documented in :mod:`.base`.
"""

from sandbox.system.staleness.async_ratio import MAX_ASYNC_RATIO
from sandbox.system.staleness.base import CONTROLS, Admission, Control, ControlConfig, Take

CONTROLS.discover(__name__)

StalenessConfig = CONTROLS.union()
"""Any registered staleness control, selected by its ``kind``."""


def make_control(cfg, groups_per_step: int) -> Control:
    """The control object of a validated staleness config."""
    return CONTROLS.build(cfg, groups_per_step)


for _entry in CONTROLS.entries():
    globals()[_entry.impl.__name__] = _entry.impl
del _entry

__all__ = [
    "CONTROLS",
    "MAX_ASYNC_RATIO",
    "Admission",
    "Control",
    "ControlConfig",
    "StalenessConfig",
    "Take",
    "make_control",
    *CONTROLS.export_configs(globals()),
    *(e.impl.__name__ for e in CONTROLS.entries()),
]
