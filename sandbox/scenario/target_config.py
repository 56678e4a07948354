"""The scenario's ``target`` table (:class:`TargetConfig`): the level a run must reach for its
time-to-target. A config model of the scenario layer, kept out of the ``scenario`` package so that
:mod:`sandbox.analysis.time_to_target` (which reads it) loads without the scenario model and torch;
``sandbox.analysis.time_to_target.TargetConfig`` and ``sandbox.analysis.TargetConfig`` re-export it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_FRACTION = 0.9
DEFAULT_WINDOW = 10


class TargetConfig(BaseModel):
    """The level a run must reach for its time-to-target (``docs/time_to_target.md``): an absolute
    ``reward``, or a ``fraction_of_sync`` of the synchronous baseline's final value (the default,
    0.9, when neither is set)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    reward: float | None = Field(
        None,
        description="Absolute target level of the headline metric (eval/expected_reward, else reward/mean, "
        "else eval/loss); for a loss the run must come down to it. Excludes fraction_of_sync.",
    )
    fraction_of_sync: float | None = Field(
        None,
        gt=0,
        description="Target = this fraction of the synchronous baseline's final value (for a loss: final / "
        "fraction); without a synchronous run, of the best final value among those compared (a lone run: its "
        "own). > 0; above 1 asks for more than the baseline ends with. 0.9 when neither this nor reward is set. "
        "Excludes reward.",
    )
    window: int = Field(
        DEFAULT_WINDOW,
        ge=1,
        description="Width in learner steps of the centred running mean applied to each replica's curve before "
        "the crossing is looked for (points within ± window/2 steps are averaged).",
    )

    @model_validator(mode="after")
    def _one_rule(self):
        if self.reward is not None and self.fraction_of_sync is not None:
            raise ValueError("set either reward (an absolute level) or fraction_of_sync, not both")
        return self

    @property
    def fraction(self) -> float:
        """The fraction in use when no absolute ``reward`` is set."""
        return DEFAULT_FRACTION if self.fraction_of_sync is None else self.fraction_of_sync
