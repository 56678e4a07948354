"""The exporter modules; importing one registers its exporter (``sandbox.export.base.register``)."""

from __future__ import annotations

import importlib

EXPORTER_MODULES: tuple[str, ...] = ("verl", "verl_vcpo", "trl", "openrlhf", "areal", "prime_rl")

for _name in EXPORTER_MODULES:
    importlib.import_module(f"{__package__}.{_name}")
