"""The scenario: one experiment fully described by data (``task``, ``system``, ``algorithm``,
``run``), validated into typed models. Every field has a description and a default with a reason;
``variants`` optionally lists named dotted-key overrides run side by side under common random
numbers (same seeds, same schedule randomness) for a comparison table."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..algorithms import CorrectionConfig, ObjectiveConfig, StabilizerConfig
from ..algorithms import configs as algo_configs
from ..learner.optim import OptimizerConfig
from ..system.config import SystemConfig
from ..tasks.bitstring import BitStringConfig
from ..tasks.registry import TaskConfig


class AlgorithmConfig(BaseModel):
    """What the learner optimises and how it corrects for off-policy data."""

    model_config = ConfigDict(extra="forbid")
    objective: ObjectiveConfig = Field(
        default_factory=lambda: algo_configs.GRPOConfig(),
        description="Policy-gradient objective (name = reinforce | grpo | dr_grpo | rloo | ppo | dapo | gspo | cispo | tba).",
    )
    correction: CorrectionConfig = Field(
        default_factory=lambda: algo_configs.NoCorrectionConfig(),
        description="Off-policy correction against the behaviour log-probs (name = none | tis | ...).",
    )
    stabilizers: list[StabilizerConfig] = Field(
        default_factory=list, description="Optimizer-level stabilizers applied in order (gac, vcpo_lr, staleness_lr)."
    )
    group_size: int = Field(8, ge=1, description="Responses per prompt G (GRPO groups; VCPO scripts use 16).")
    groups_per_step: int = Field(4, ge=1, description="Groups (prompts) per optimizer step; batch B = groups_per_step x group_size.")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="Optimizer and LR schedule.")


class RunConfig(BaseModel):
    """How long, with which seeds, and what to write."""

    model_config = ConfigDict(extra="forbid")
    steps: int = Field(200, ge=1, description="Learner (optimizer) steps.")
    seed: int = Field(0, ge=0, description="Master seed; the three streams below derive from it unless set.")
    system_seed: int | None = Field(None, ge=0, description="Seed of the timing stream (delays).")
    sampling_seed: int | None = Field(None, ge=0, description="Seed of the policy-sampling stream (tokens, rewards, noise).")
    init_seed: int | None = Field(None, ge=0, description="Seed of the weight initialisation.")
    eval_every: int = Field(10, ge=1, description="Steps between exact/held-out evaluations.")
    max_loss: float = Field(1e8, gt=0, description="|loss| above this marks a replica diverged.")
    max_param_norm: float = Field(1e6, gt=0, description="Weight norm above this marks a replica diverged.")
    figures: bool = Field(True, description="Write the default figures into the run directory.")
    record_events: bool = Field(True, description="Keep the event log (dispatch, finish, publish, ...).")
    writers: list[Literal["files", "tensorboard", "wandb"]] = Field(
        default_factory=lambda: ["files"],
        description="Where metrics go: the run directory (files, always written) plus TensorBoard event files "
        "and/or an offline Weights & Biases run (each needs its optional extra; sandbox.report.writers).",
    )
    threads: int | None = Field(
        None,
        ge=1,
        description="torch intra-op threads during the run. Default: 1 for the toy tasks (their tensors are "
        "tiny and extra threads only add overhead), torch's default for model-sized tasks.",
    )

    def seeds(self) -> dict[str, int]:
        """Independent streams: timing, sampling and initialisation (common random numbers)."""
        derived = [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(self.seed).spawn(3)]
        return {
            "system": self.system_seed if self.system_seed is not None else derived[0],
            "sampling": self.sampling_seed if self.sampling_seed is not None else derived[1],
            "init": self.init_seed if self.init_seed is not None else derived[2],
        }


class Scenario(BaseModel):
    """One experiment. Load with :func:`sandbox.scenario.load_scenario`."""

    model_config = ConfigDict(extra="forbid")
    title: str = Field("", description="Short name shown in tables and figures.")
    description: str = Field("", description="What this scenario demonstrates.")
    task: TaskConfig = Field(default_factory=BitStringConfig, description="What is learned (name = bandit | bitstring | quadratic).")
    system: SystemConfig = Field(default_factory=SystemConfig, description="The simulated cluster.")
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig, description="Objective, correction, stabilizers, optimizer.")
    run: RunConfig = Field(default_factory=RunConfig, description="Steps, seeds, outputs.")
    variants: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Named dotted-key overrides, e.g. {async = {'system.staleness.kind' = 'max_lag'}}; each runs as its own run.",
    )

    @model_validator(mode="after")
    def _cross_section(self):
        if self.task.name != "quadratic":  # the oracle has no groups: objectives do not apply
            for method in (self.algorithm.objective, self.algorithm.correction):
                try:
                    method.validate_group_size(self.algorithm.group_size)
                except ValueError as exc:
                    raise ValueError(f"algorithm.group_size: {exc}") from None
        if self.task.name == "quadratic":
            if self.system.partial_rollouts:
                raise ValueError("system.partial_rollouts needs a policy task; the quadratic oracle has no tokens")
            if self.algorithm.correction.name != "none":
                raise ValueError("algorithm.correction must be 'none' for the quadratic oracle (it applies raw gradients)")
        return self
