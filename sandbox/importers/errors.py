"""The one error of the importers: a config that cannot be imported, named by file and line or key."""

from __future__ import annotations


class ConfigImportError(ValueError):
    """A config that cannot be imported: one line naming the file and the line or key."""


__all__ = ["ConfigImportError"]
