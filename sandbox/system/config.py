"""The ``[system]`` section: workers, delays, weight sync and the staleness control."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .delays import ConstantDelay, CostModelDelay, DelayConfig, ExponentialDelay
from .staleness import StalenessConfig, SyncControlConfig

MIN_WORKER_SPEED = 1e-6


class SystemConfig(BaseModel):
    """A simulated asynchronous RL cluster: N rollout workers, one learner, a rollout buffer and
    a weight store. All durations are simulated seconds."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    num_workers: int = Field(4, ge=1, description="Rollout workers; each generates one group at a time.")
    worker_speeds: list[float] | None = Field(
        None,
        description="Speed multiplier per worker (durations are divided by it; default all 1.0). "
        "Expresses heterogeneity, e.g. [1, 1, 1, 0.5] for one worker at half speed. Each >= 1e-6.",
    )
    generation_time: DelayConfig = Field(
        default_factory=lambda: ExponentialDelay(mean=1.0),
        description="Duration of one rollout job (one group). Default exponential, mean 1 s: the "
        "memoryless worker for which order statistics are exact (theory.md T6).",
    )
    train_time: DelayConfig = Field(
        default_factory=lambda: ConstantDelay(value=0.25),
        description="Duration of one learner step; a cost_model charges per batch token.",
    )
    sync_delay: DelayConfig = Field(
        default_factory=lambda: ConstantDelay(value=0.0),
        description="Time between publishing version v+1 and workers being able to use it.",
    )
    staleness: StalenessConfig = Field(
        default_factory=SyncControlConfig, description="Staleness control (kind = sync | fixed_lag | max_lag | async_ratio)."
    )
    partial_rollouts: bool = Field(
        False,
        description="In-flight weight updates (PipelineRL-style): a generation interrupted by a new "
        "visible version continues under it; every token records its version. Needs a cost_model "
        "generation_time and a streaming control (max_lag or async_ratio).",
    )

    @model_validator(mode="after")
    def _check(self):
        if self.worker_speeds is not None:
            if len(self.worker_speeds) != self.num_workers:
                raise ValueError(
                    f"worker_speeds has {len(self.worker_speeds)} entries, expected num_workers={self.num_workers}"
                )
            if any(not (s > 0) for s in self.worker_speeds):
                raise ValueError("worker_speeds must all be > 0")
            if any(s < MIN_WORKER_SPEED for s in self.worker_speeds):
                raise ValueError(
                    f"worker_speeds must all be >= {MIN_WORKER_SPEED:g} (durations are divided by them), got "
                    f"{min(self.worker_speeds):g}"
                )
        if self.partial_rollouts:
            if not isinstance(self.generation_time, CostModelDelay):
                raise ValueError("partial_rollouts needs generation_time.kind = 'cost_model' (time per token)")
            if self.staleness.kind not in ("max_lag", "async_ratio"):
                raise ValueError(
                    f"partial_rollouts needs a streaming staleness control (max_lag or async_ratio), got '{self.staleness.kind}'"
                )
        return self

    def speeds(self) -> list[float]:
        return list(self.worker_speeds) if self.worker_speeds is not None else [1.0] * self.num_workers
