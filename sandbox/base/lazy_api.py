"""A command folder's public names, read from its ``api.py`` on first use (PEP 562 module ``__getattr__``).

A folder whose ``__init__`` would import heavy modules (torch, matplotlib) keeps its public names in ``api.py``;
``from sandbox.sweep import load_sweep`` still works, and importing the folder's command module loads nothing heavy.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import Any


def api_getattr(package: str) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: a name from ``package.api``. A submodule's name and a dunder are left to
    the import system (``from package import <submodule>`` loads only that module)."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__") or importlib.util.find_spec(f"{package}.{name}") is not None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            return getattr(importlib.import_module(f"{package}.api"), name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    return __getattr__
