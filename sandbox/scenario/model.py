"""The scenario: one experiment fully described by data (``task``, ``system``, ``algorithm``,
``run``), validated into typed models. Every field has a description and a default with a reason;
``variants`` optionally lists named dotted-key overrides run side by side under common random
numbers (same seeds, same schedule randomness) for a comparison table."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sandbox.algorithms import (
    CORRECTIONS,
    OBJECTIVES,
    STABILIZERS,
    CorrectionConfig,
    GRPOConfig,
    NoCorrectionConfig,
    ObjectiveConfig,
    StabilizerConfig,
)
from sandbox.algorithms.policy_loss import pairing_problem
from sandbox.base.errors import ScenarioError
from sandbox.base.outputs import check_names
from sandbox.engines import ENGINES, EngineConfig, ExactEngineConfig, check_engine_task
from sandbox.learner.optim import OptimizerConfig
from sandbox.scenario.target_config import TargetConfig
from sandbox.system.config import SystemConfig
from sandbox.tasks import TASKS, BitStringConfig, OracleTask, PolicyTask, TaskConfig

MAX_SEED = 2**63 - 1
"""Seeds are non-negative int64: numpy and torch generators take them, and tables and parquet hold them."""
MAX_THREADS = 256
"""Cap on torch intra-op threads: beyond any machine's core count, more threads only add contention
(and a huge value would try to start that many OpenMP threads)."""


class AlgorithmConfig(BaseModel):
    """What the learner optimises and how it corrects for off-policy data."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)
    objective: ObjectiveConfig = Field(
        default_factory=GRPOConfig,
        description=f"Policy-gradient objective (name = {OBJECTIVES.describe()}; docs/methods/objectives.md).",
    )
    correction: CorrectionConfig = Field(
        default_factory=NoCorrectionConfig,
        description=f"Off-policy correction against the behaviour log-probs (name = {CORRECTIONS.describe()}; "
        "docs/methods/corrections.md).",
    )
    stabilizers: list[StabilizerConfig] = Field(
        default_factory=list,
        description=f"Optimizer-level stabilizers applied in order (name = {STABILIZERS.describe()}; "
        "docs/methods/stabilizers.md).",
    )
    group_size: int = Field(8, ge=1, description="Responses per prompt G (GRPO groups; VCPO scripts use 16).")
    groups_per_step: int = Field(
        4, ge=1, description="Groups (prompts) per optimizer step; batch B = groups_per_step x group_size."
    )
    minibatches: int = Field(
        1,
        ge=1,
        description="Optimizer steps per epoch over each consumed batch: its groups_per_step groups are split, "
        "in the order the staleness control consumed them and whole, into this many equal mini-batches (must divide "
        "groups_per_step). Every optimizer step advances the learner's version by one; the weights are published "
        "after the batch's last step (docs/system.md#mini-batches; verl ppo_mini_batch_size = batch/minibatches, "
        "TRL steps_per_generation = minibatches x gradient_accumulation_steps, AReaL actor.ppo_n_minibatches).",
    )
    epochs: int = Field(
        1,
        ge=1,
        description="Passes over each consumed batch, every pass in the same mini-batch order (verl 0.9.1 "
        "actor.shuffle = false, its default); the batch takes minibatches x epochs optimizer steps "
        "(verl ppo_epochs, TRL num_iterations).",
    )
    proximal: Literal["behaviour", "batch_start"] = Field(
        "behaviour",
        description="π_prox, the policy the surrogate's ratio r = π_θ/π_prox is anchored at: 'behaviour' = "
        "the rollout policy μ in every mini-batch (bypass mode, verl 0.9.1 rollout_correction.bypass_mode = true); "
        "'batch_start' = the learner's weights at the start of the batch, log-probs recomputed once before its optimizer "
        "steps (decoupled mode: verl's recomputed old_log_prob, AReaL recompute_logprob, TRL old_per_token_logps), the "
        "correction then weighing π_prox/μ (docs/system.md#mini-batches).",
    )
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="Optimizer and LR schedule.")

    @property
    def updates_per_batch(self) -> int:
        """Optimizer steps per consumed batch: ``minibatches × epochs``."""
        return self.minibatches * self.epochs

    @field_validator("stabilizers")
    @classmethod
    def _one_stabilizer_per_kind(cls, stabilizers):
        seen: dict[str, int] = {}
        for i, stab in enumerate(stabilizers):
            if stab.name in seen:
                raise ValueError(
                    f"entry [{i}] is a second '{stab.name}' stabilizer (the first is [{seen[stab.name]}]); each "
                    "kind may appear once, with all its knobs in one entry"
                )
            seen[stab.name] = i
        return stabilizers


class WandbConfig(BaseModel):
    """Where an asked-for W&B run goes (``run.writers`` includes ``wandb``); each unset field falls back to
    W&B's own environment variable (``WANDB_MODE``, ``WANDB_PROJECT``, ``WANDB_ENTITY``, ``WANDB_TAGS``,
    ``WANDB_RUN_GROUP``), then to the default named (docs/index.md#trackers)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    mode: Literal["offline", "online", "disabled"] | None = Field(
        None,
        description="W&B mode; None = WANDB_MODE, else offline (never touches the network; `wandb sync` uploads later).",
    )
    project: str | None = Field(
        None, min_length=1, description="W&B project; None = WANDB_PROJECT, else async-rl-sandbox."
    )
    entity: str | None = Field(
        None, min_length=1, description="W&B entity (user or team); None = WANDB_ENTITY, else W&B's default."
    )
    tags: list[str] | None = Field(None, description="W&B tags; None = WANDB_TAGS (comma-separated), else none.")
    group: str | None = Field(
        None,
        min_length=1,
        description="W&B group; None = WANDB_RUN_GROUP, else the scenario's (sandbox run) or the sweep's name.",
    )


class RunConfig(BaseModel):
    """How long, with which seeds, and what to write."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)
    steps: int = Field(
        200,
        ge=1,
        description="Learner optimizer steps; with algorithm.minibatches x epochs = S > 1 the run consumes ceil(steps / S) batches and stops after its steps-th optimizer step (a last batch may be cut short).",
    )
    seed: int = Field(
        0,
        ge=0,
        le=MAX_SEED,
        description="Master seed in [0, 2^63 − 1]; the three streams below derive from it unless set.",
    )
    system_seed: int | None = Field(None, ge=0, le=MAX_SEED, description="Seed of the timing stream (delays).")
    sampling_seed: int | None = Field(
        None, ge=0, le=MAX_SEED, description="Seed of the policy-sampling stream (tokens, rewards, noise)."
    )
    init_seed: int | None = Field(None, ge=0, le=MAX_SEED, description="Seed of the weight initialisation.")
    eval_every: int = Field(10, ge=1, description="Steps between exact/held-out evaluations.")
    max_loss: float = Field(1e8, gt=0, description="|loss| above this marks a replica diverged.")
    max_param_norm: float = Field(1e6, gt=0, description="Weight norm above this marks a replica diverged.")
    max_loss_growth: float = Field(
        10.0,
        gt=1,
        description="When the headline metric is a loss (eval/loss): a replica whose final loss (mean of its last 10 % of "
        "evaluations) exceeds this multiple of the lowest smoothed loss it reached before them is marked diverged "
        "(docs/time_to_target.md#divergence).",
    )
    metrics: Literal["lean", "standard", "full"] = Field(
        "standard",
        description="Which per-step metrics the learner computes: 'standard' = all it has always logged; 'lean' = only "
        "what the run reads (divergence detection, the headline and evaluation metrics, what the stabilizers read, "
        "and what the figures read when run.figures is on), the same bits for those, the weights and the rewards; "
        "'full' = standard plus update/cos_grad and update/relative (docs/system.md#metric-levels).",
    )
    figures: bool = Field(True, description="Write the default figures into the run directory.")
    figure_formats: list[Literal["png", "svg"]] = Field(
        default_factory=lambda: ["png"],
        min_length=1,
        description="Formats each figure of the run (and of a sweep of it) is written in, side by side: png to view; "
        "add svg for papers (its text stays editable; drawing it takes extra time). docs/runs.md.",
    )
    record_events: bool = Field(True, description="Keep the event log (dispatch, finish, publish, ...).")
    writers: list[Literal["files", "tensorboard", "wandb"]] = Field(
        default_factory=lambda: ["files"],
        description="Where metrics go: the run directory (files, always written) plus TensorBoard event files "
        "and/or an offline Weights & Biases run (each needs its optional extra; sandbox.report.writers).",
    )
    wandb: WandbConfig | None = Field(
        None,
        description="With 'wandb' in writers: mode, project, entity, tags and group of the W&B run (each unset one "
        "from its WANDB_* environment variable; default offline, project async-rl-sandbox).",
    )
    target: TargetConfig = Field(
        default_factory=TargetConfig,
        description="Time-to-target: the level a run must reach (reward = an absolute level, or fraction_of_sync of "
        "the synchronous baseline's final value, 0.9 by default) and the smoothing window; only derived results "
        "depend on it (docs/time_to_target.md).",
    )
    schedules: Literal["shared", "independent"] = Field(
        "shared",
        description="How the task's replicas are timed: 'shared' = one simulated cluster for all of them (one clock, "
        "the same versions in every batch); 'independent' = replica r is the run with master seed run.seed + r (its own "
        "timing, sampling and initial weights), trained in the same batched tensor; needs a fixed-length task (bandit, "
        "bitstring) and no partial rollouts (docs/system.md#independent-schedules).",
    )
    processes: int = Field(
        1,
        ge=1,
        le=MAX_THREADS,
        description="Processes that simulate the replicas' schedules under schedules = 'independent' (each schedule "
        "depends on its seed alone: the numbers do not depend on this); 1 = all in the run's own process.",
    )
    threads: int | None = Field(
        None,
        ge=1,
        le=MAX_THREADS,
        description="torch intra-op threads during the run (at most 256). Default: 1 for the toy tasks (their tensors "
        "are tiny and extra threads only add overhead), torch's default for model-sized tasks.",
    )

    @field_validator("figure_formats")
    @classmethod
    def _unique_formats(cls, formats: list[str]) -> list[str]:
        if len(set(formats)) != len(formats):
            raise ValueError("each format at most once")
        return formats

    def seeds(self) -> dict[str, int]:
        """Independent streams: timing, sampling and initialisation (common random numbers)."""
        derived = [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(self.seed).spawn(3)]
        return {
            "system": self.system_seed if self.system_seed is not None else derived[0],
            "sampling": self.sampling_seed if self.sampling_seed is not None else derived[1],
            "init": self.init_seed if self.init_seed is not None else derived[2],
        }


class Scenario(BaseModel):
    """One experiment. Load with :func:`sandbox.scenario.api.load_scenario`."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)
    title: str = Field("", description="Short name shown in tables and figures.")
    description: str = Field("", description="What this scenario demonstrates.")
    task: TaskConfig = Field(
        default_factory=BitStringConfig, description=f"What is learned (name = {TASKS.describe()})."
    )
    system: SystemConfig = Field(default_factory=SystemConfig, description="The simulated cluster.")
    engine: EngineConfig = Field(
        default_factory=ExactEngineConfig,
        description=f"The rollout engine: how the sampler's distribution and reported log-probs differ from the "
        f"learner's at the same weights (name = {ENGINES.describe()}; docs/engines.md). Default 'exact': none.",
    )
    algorithm: AlgorithmConfig = Field(
        default_factory=AlgorithmConfig, description="Objective, correction, stabilizers, optimizer."
    )
    run: RunConfig = Field(default_factory=RunConfig, description="Steps, seeds, outputs.")
    variants: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Named dotted-key overrides, e.g. {async = {'system.staleness.kind' = 'max_lag'}}; each runs as its own run "
        "in the subdirectory named after it (sandbox.base.outputs.safe_name: letters, digits and - _ . + kept, others become '-').",
    )

    @field_validator("variants")
    @classmethod
    def _variant_names(cls, variants: dict) -> dict:
        """Variant names become directory names: refuse those that would be empty or collide."""
        check_names(variants, "variant")
        return variants

    @model_validator(mode="after")
    def _cross_section(self):
        st = self.system.staleness
        B = self.algorithm.groups_per_step
        m = self.algorithm.minibatches
        if B % m:
            raise ValueError(
                f"algorithm.minibatches: {m} does not divide algorithm.groups_per_step = {B}; mini-batches hold whole "
                f"groups in equal numbers, so use a divisor of {B} (or change groups_per_step)"
            )
        problem = st.batch_problem(B)  # the control's own cross-field check (ControlConfig.batch_problem)
        if problem:
            raise ValueError(problem)
        if self.run.schedules == "independent":
            try:
                check_independent(self)
            except ScenarioError as exc:
                raise ValueError("; ".join(exc.problems)) from None
        task = self.task.name
        impl = TASKS[task].impl
        if not ENGINES.entry_for(self.engine).impl.exact:
            features = impl.engine_features(self.task) if issubclass(impl, PolicyTask) else frozenset()
            problem = check_engine_task(self.engine, self.task, features)
            if problem:
                raise ValueError(problem)
        gen = self.system.generation_time
        if getattr(gen, "mixed_versions", False):
            if not getattr(impl, "resumes_each", False):
                able = sorted(n for n in TASKS.names() if getattr(TASKS[n].impl, "resumes_each", False))
                raise ValueError(
                    f"system.generation_time.mixed_versions: task '{task}' cannot continue sequences cut at "
                    f"their own positions; use one of {able} or set mixed_versions = false"
                )
            if getattr(self.task, "replicas", 1) != 1:
                raise ValueError(
                    f"system.generation_time.mixed_versions: needs task.replicas = 1 (the engine times one "
                    f"group's sequences; got {self.task.replicas})"
                )
        if issubclass(impl, OracleTask):  # no groups, no tokens: objectives and corrections do not apply
            if self.system.partial_rollouts:
                raise ValueError(f"system.partial_rollouts needs a policy task; the {task} oracle has no tokens")
            if not CORRECTIONS.entry_for(self.algorithm.correction).impl.is_identity:
                raise ValueError(
                    f"algorithm.correction must be 'none' for the {task} oracle (it applies raw gradients)"
                )
            if self.algorithm.proximal != "behaviour":
                raise ValueError(
                    f"algorithm.proximal must be 'behaviour' for the {task} oracle (it has no policy ratio)"
                )
            return self
        problem = pairing_problem(self.algorithm.objective, self.algorithm.correction)
        if problem:
            raise ValueError(f"algorithm.correction: {problem}")
        for method in (self.algorithm.objective, self.algorithm.correction):
            try:
                method.validate_group_size(self.algorithm.group_size)
            except ValueError as exc:
                raise ValueError(f"algorithm.group_size: {exc}") from None
        return self


def check_independent(scn) -> None:
    """Why a scenario cannot run with ``run.schedules = "independent"`` (a :class:`ScenarioError`
    naming the field), at run time as at load time."""
    if scn.run.schedules != "independent":
        return
    impl = TASKS[scn.task.name].impl
    problems = []
    if not (issubclass(impl, PolicyTask) and impl.fixed_length):
        fixed = sorted(n for n in TASKS.names() if issubclass(TASKS[n].impl, PolicyTask) and TASKS[n].impl.fixed_length)
        problems.append(
            f"run.schedules: 'independent' needs a task whose responses have a fixed length (the timing then cannot "
            f"depend on the policy): one of {fixed}; task '{scn.task.name}' has not"
        )
    if scn.system.partial_rollouts:
        problems.append(
            "run.schedules: 'independent' cannot replay system.partial_rollouts (a group's segments "
            "depend on when versions arrive mid-generation); set partial_rollouts = false or schedules = 'shared'"
        )
    gen = scn.system.generation_time
    if getattr(gen, "engine_model", False) and gen.sync != "drain":
        problems.append(
            f"run.schedules: 'independent' cannot replay system.generation_time.sync = '{gen.sync}' (an "
            "aborted or resumed group depends on when versions arrive mid-generation); use sync = 'drain' "
            "or schedules = 'shared'"
        )
    for name in ("system_seed", "sampling_seed", "init_seed"):
        if getattr(scn.run, name) is not None:
            problems.append(
                f"run.{name}: must be unset with run.schedules = 'independent' (replica r uses the streams "
                f"of master seed run.seed + r)"
            )
    replicas = scn.task.replicas
    if scn.run.seed + replicas - 1 > MAX_SEED:
        problems.append(
            f"run.seed: replica r uses master seed run.seed + r, so run.seed must be at most "
            f"{MAX_SEED - replicas + 1} with {replicas} replicas"
        )
    if problems:
        raise ScenarioError(problems)
