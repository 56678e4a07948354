"""Errors shared by every layer: a user's setting that cannot be used.

Kept apart from :mod:`sandbox.scenario` so that the lower layers (``system``, ``budget``) can raise
them without importing the scenario package that is built on top of them.
"""

from __future__ import annotations


class ScenarioError(ValueError):
    """A scenario that cannot be used; ``problems`` holds one line per bad field."""

    def __init__(self, problems: list[str], source: str = "scenario"):
        self.problems = problems
        self.source = source
        super().__init__(f"invalid {source}:\n" + "\n".join(f"  - {p}" for p in problems))


__all__ = ["ScenarioError"]
