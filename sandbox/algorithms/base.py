"""What every method config shares: strict validation and the group-size requirement.

A method (objective, correction or stabilizer) is one module holding a config model derived from
:class:`MethodConfig` next to its implementation, registered once in its family's registry
(:mod:`sandbox.base.registry`). Formulas, knobs and defaults with their sources: ``docs/methods/``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class MethodConfig(BaseModel):
    """Base of all method configs: unknown keys are errors, and floats are finite except the upper
    clips ``eps_high``, where ``inf`` switches the clip off."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    def validate_group_size(self, group_size: int) -> None:
        """Raise ``ValueError`` if this method cannot run with ``group_size`` responses per prompt."""
        if group_size < 1:
            raise ValueError(f"{self.name}: group_size must be >= 1, got {group_size}")  # type: ignore[attr-defined]


def need_groups(name: str, what: str, group_size: int, minimum: int = 2) -> None:
    """Raise the standard message when ``what`` needs ``minimum`` responses per prompt."""
    if group_size < minimum:
        raise ValueError(
            f"{name}: {what} needs at least {minimum} responses per prompt (group_size={group_size}); "
            f"raise group_size or choose a baseline that does not use the group"
        )
