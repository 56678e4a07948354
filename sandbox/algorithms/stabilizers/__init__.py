"""Optimizer-level stabilizers, one module each (config next to implementation), registered in
:data:`STABILIZERS`; the protocol the optimizer wrapper relies on is in :mod:`.base`
(``docs/methods/stabilizers.md#protocol``). Adding a stabilizer is adding a module here."""

from __future__ import annotations

from sandbox.algorithms.stabilizers.base import STABILIZERS, STAGES, Stabilizer, StepContext

STABILIZERS.discover(__name__)

StabilizerConfig = STABILIZERS.union()
"""Discriminated union of every stabilizer config (TOML ``name``); the choices: ``STABILIZERS.describe()``."""

# formula helpers of individual stabilizers, public for tests and plain torch loops
from sandbox.algorithms.stabilizers.gac import to_target_coefficient  # noqa: E402
from sandbox.algorithms.stabilizers.staleness_lr import staleness_weight  # noqa: E402
from sandbox.algorithms.stabilizers.vcpo_lr import vcpo_lr_multiplier  # noqa: E402

__all__ = [
    "STABILIZERS",
    "STAGES",
    "Stabilizer",
    "StabilizerConfig",
    "StepContext",
    "staleness_weight",
    "to_target_coefficient",
    "vcpo_lr_multiplier",
    *STABILIZERS.export_configs(globals()),
]
for _entry in STABILIZERS.entries():
    globals()[_entry.impl.__name__] = _entry.impl
    __all__.append(_entry.impl.__name__)
del _entry
