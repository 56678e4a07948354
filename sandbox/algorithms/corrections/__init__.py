"""Off-policy corrections, one module each (``docs/methods/corrections.md``): stop-gradient weights,
masks and adaptive clip bounds applied to an objective's per-token surrogate (contract in :mod:`.base`).
A config model sits next to its :class:`~.base.Correction`, registered in :data:`CORRECTIONS`; the
scenario union, name lists and ``__all__`` follow from the registry."""

from __future__ import annotations

from sandbox.algorithms.corrections.base import CORRECTIONS, Correction, CorrectionContext, CorrectionResult

CORRECTIONS.discover(__name__)

from sandbox.algorithms.corrections.m2po_clipband import m2po_clipband_tau  # noqa: E402  (helpers the tests use directly)
from sandbox.algorithms.corrections.m2po_mask import m2po_keep_mask  # noqa: E402

CorrectionConfig = CORRECTIONS.union()
"""Discriminated union of every correction config (TOML ``name``)."""

__all__ = [
    "CORRECTIONS",
    "Correction",
    "CorrectionConfig",
    "CorrectionContext",
    "CorrectionResult",
    "m2po_clipband_tau",
    "m2po_keep_mask",
]
__all__ += CORRECTIONS.export_configs(globals())
globals().update({e.impl.__name__: e.impl for e in CORRECTIONS.entries()})
__all__ += [e.impl.__name__ for e in CORRECTIONS.entries()]
