"""The ``[system]`` section: workers, delays, weight sync and the staleness control."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sandbox.system.delays import DELAYS, ConstantDelay, DelayConfig, ExponentialDelay
from sandbox.system.staleness import CONTROLS, StalenessConfig, SyncControlConfig

MIN_WORKER_SPEED = 1e-6
DELAY_KINDS = f"kind = {DELAYS.describe()}"


class SystemConfig(BaseModel):
    """A simulated asynchronous RL cluster: N rollout workers, one learner, a rollout buffer and
    a weight store. All durations are simulated seconds."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)
    num_workers: int = Field(4, ge=1, le=1_000_000, description="Rollout workers; each generates one group at a time.")
    worker_speeds: list[float] | None = Field(
        None,
        description="Speed multiplier per worker (durations are divided by it; default all 1.0). "
        "Expresses heterogeneity, e.g. [1, 1, 1, 0.5] for one worker at half speed. Each >= 1e-6.",
    )
    generation_time: DelayConfig = Field(
        default_factory=lambda: ExponentialDelay(mean=1.0),
        description="Duration of one rollout job (one group). Default exponential, mean 1 s: the "
        f"memoryless worker for which order statistics are exact (docs/theory.md#t6). Delay model ({DELAY_KINDS}).",
    )
    train_time: DelayConfig = Field(
        default_factory=lambda: ConstantDelay(value=0.25),
        description=f"Duration of one learner step; a cost_model charges per batch token. Delay model ({DELAY_KINDS}).",
    )
    sync_delay: DelayConfig = Field(
        default_factory=lambda: ConstantDelay(value=0.0),
        description=f"Time between publishing version v+1 and workers being able to use it. Delay model ({DELAY_KINDS}).",
    )
    staleness: StalenessConfig = Field(
        default_factory=SyncControlConfig, description=f"Staleness control (kind = {CONTROLS.describe()})."
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
        for name in ("train_time", "sync_delay"):
            if getattr(getattr(self, name), "engine_model", False):
                raise ValueError(
                    f"{name}: kind '{getattr(self, name).kind}' times generation on inference engines; "
                    "it can only be system.generation_time"
                )
        if getattr(self.generation_time, "engine_model", False):
            if self.partial_rollouts:
                raise ValueError(
                    "partial_rollouts: the continuous_batching engine has its own weight-sync modes; "
                    "set system.generation_time.sync = 'partial' instead of system.partial_rollouts"
                )
            if self.worker_speeds is not None:
                raise ValueError(
                    "worker_speeds: continuous_batching engines time generation themselves "
                    "(set step_base / step_per_sequence instead)"
                )
        if self.partial_rollouts:
            if not self.generation_time.per_token_model:
                kinds = " or ".join(repr(e.name) for e in DELAYS.entries() if e.impl.per_token_model)
                raise ValueError(f"partial_rollouts needs generation_time.kind = {kinds} (time per token)")
            if not CONTROLS.entry_for(self.staleness).impl.streaming:
                kinds = " or ".join(e.name for e in CONTROLS.entries() if e.impl.streaming)
                raise ValueError(
                    f"partial_rollouts needs a streaming staleness control ({kinds}), got '{self.staleness.kind}'"
                )
        return self

    def speeds(self) -> list[float]:
        return list(self.worker_speeds) if self.worker_speeds is not None else [1.0] * self.num_workers
