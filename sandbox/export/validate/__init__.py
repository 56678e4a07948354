"""Validators that hold an exported configuration against each framework's own schema (CPU only).

Each ``validate_<framework>(files, wheel_dir)`` returns a list of problems (empty when the config is
accepted, reads back with the exported values and uses only allowed enum values); :func:`validate` picks
it by framework name. The shared driver and the per-framework facts: ``common.py``, ``facts.toml``.
Recipes: ``docs/promotion.md`` ("How exports are validated").
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

from sandbox.export.validate.wheels import unpacked_wheel

WHEELS = ("verl", "openrlhf", "areal")
"""The frameworks checked against their pinned, unpacked wheel (the others: the installed trl, pinned key lists)."""


def validate(framework: str, files: dict[str, str], wheel_dir: Path | None = None) -> list[str]:
    """Problems of ``files`` exported for ``framework`` (``wheel_dir``: the unpacked wheel, fetched when not given,
    for the frameworks of :data:`WHEELS`; a checkout for verl-vcpo and prime-rl's optional checks)."""
    if framework in WHEELS and wheel_dir is None:
        wheel_dir = unpacked_wheel(framework)
    return import_module(f"sandbox.frameworks.{framework.replace('-', '_')}.validation").validate(files, wheel_dir)
