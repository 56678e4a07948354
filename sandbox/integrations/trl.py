"""The sandbox's stabilizers, corrections and baselines inside TRL's ``GRPOTrainer`` (trl 1.16):
:class:`SandboxGRPOTrainer`, configured by :class:`SandboxGRPOConfig`, a ``trl.GRPOConfig`` whose
``sandbox_*`` fields hold the same config models as a scenario's ``[algorithm]`` table, saved with the
training arguments (``docs/promotion.md#trl``).

What it adds to ``GRPOTrainer`` (each off unless configured, except the monitors):

* **Stabilizers** (GAC with every knob, VCPO's ESS learning-rate rule, the staleness LR rule,
  gradient-norm skipping): attached to the trainer's own optimizer by
  :class:`~sandbox.integrations.step_hooks.StabilizerHooks`, after the trainer's gradient clipping
  (before it for GAC ``project_then_clip``). The batch ESS they read is VCPO's: ``(Σw)²/(BΣw²)`` over the
  unclipped sequence weights ``w_i = exp(Σ_t log π_θ − log μ)`` of every completion of the optimizer step
  (all gradient-accumulation micro-batches, gathered across processes).
* **A sandbox objective and correction** (M2PO, MIS, IcePop, TOPR, geo-MIS, BAPO, ...): the micro-batch
  loss is the sandbox's :class:`~sandbox.algorithms.policy_loss.PolicyLoss` instead of TRL's, divided
  by the gradient-accumulation steps as TRL does. Advantages are the objective's (VCPO's OPOB
  included), computed over whole groups when the completions are generated, because TRL shuffles the
  generation batch into micro-batches afterwards.
* **Monitors**, logged through the trainer's own logger under the sandbox's names: ``is/ess_ratio``
  (per optimizer step), ``is/chi2``, ``is/kl_k3``, ``staleness/mean`` and ``staleness/max`` (optimizer
  steps between a completion's generation and its use), ``grad/norm``, ``grad/cos_prev``, ``lr/scale``,
  ``step/skipped`` and each stabilizer's and correction's own metrics.

Behaviour policy μ: the sampler's log-probs (``sampling_per_token_logps``, vLLM) when present, else the
trainer's log-probs at generation time (``old_per_token_logps``, present whenever a generation batch
serves several optimizer steps), else the current log-probs (on-policy). With vLLM the trainer's
recompute is π_prox (decoupled mode, ``docs/methods/objectives.md#composition``) and TRL's own vLLM
importance-sampling factor is not applied on top of a sandbox correction.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import warnings
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sandbox.algorithms import CorrectionConfig, ObjectiveConfig, StabilizerConfig, StepContext, build_policy_loss
from sandbox.algorithms.api import SEQ_GRAD_KEY, PolicyLossInput
from sandbox.algorithms.diagnostics import ess_ratio_from_log_weights, is_metrics
from sandbox.algorithms.ghost_norms import GhostNormRecorder
from sandbox.algorithms.objectives import GRPOConfig, Objective
from sandbox.algorithms.opob import logit_space_grad_sq_norm
from sandbox.integrations.step_hooks import StabilizerHooks, check_full_gradients

try:
    import trl
    from trl import GRPOConfig as TRLGRPOConfig
    from trl import GRPOTrainer
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        'sandbox.integrations.trl needs TRL 1.16: pip install -c constraints-cpu.txt -e ".[trl]"'
    ) from err

__all__ = [
    "LOSS_FIELDS_REFUSED",
    "SUPPORTED_TRL",
    "SandboxGRPOConfig",
    "SandboxGRPOTrainer",
    "SandboxTRLConfig",
    "check_trl_version",
]

logger = logging.getLogger(__name__)

SUPPORTED_TRL = "1.16"
"""The TRL minor release this integration overrides private methods of (``_compute_loss``,
``_generate_and_score_completions``, ``_calculate_rewards``) and was tested against (1.16.0)."""

LOSS_TYPE_AGGREGATION = {"grpo": "seq_mean_token_mean", "bnpo": "token_mean", "dapo": "token_mean"}
"""TRL ``loss_type`` → the sandbox aggregation that reproduces it, for the objective derived from
``GRPOConfig`` when only a correction is configured."""


def check_trl_version(version: str | None = None) -> None:
    """Refuse a TRL release other than :data:`SUPPORTED_TRL` (its private trainer methods may differ)."""
    version = version or trl.__version__
    if version.split(".")[:2] != SUPPORTED_TRL.split("."):
        raise RuntimeError(
            f"sandbox.integrations.trl supports trl {SUPPORTED_TRL}.x (tested with 1.16.0) but trl {version} is "
            f'installed: pip install -c constraints-cpu.txt "trl=={SUPPORTED_TRL}.0"'
        )


class SandboxTRLConfig(BaseModel):
    """What the sandbox adds to TRL's GRPO trainer; the same config models as a scenario's ``[algorithm]``
    (``docs/methods/``). Empty (the default): TRL's own training, bitwise, plus the monitors. The trainer
    reads it from :attr:`SandboxGRPOConfig.sandbox` (its ``sandbox_*`` fields, validated)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)
    stabilizers: list[StabilizerConfig] = Field(
        default_factory=list,
        description="Optimizer-level stabilizers in order (gac, vcpo_lr, staleness_lr, grad_norm_skip).",
    )
    objective: ObjectiveConfig | None = Field(
        None,
        description="A sandbox objective replacing TRL's loss and advantages (e.g. {name='grpo', baseline='opob'} for "
        "VCPO's baseline); None = TRL's, or one derived from GRPOConfig when a correction is set.",
    )
    correction: CorrectionConfig | None = Field(
        None, description="A sandbox off-policy correction (m2po_mask, mis, icepop, tis, ...); None = none."
    )
    grad_norms: Literal["exact", "ghost", "logit_proxy"] | None = Field(
        None,
        description="Per-completion ‖∇ log π(y)‖² for OPOB: 'exact' (one backward per completion, as VCPO does), "
        "'ghost' (the same norms from one batched forward and one backward, without per-completion gradients: "
        "docs/methods/objectives.md#opob-grad-norms) or 'logit_proxy' (Σ_t 1 − 2π(y_t) + Σ_b π(b)², one "
        "forward; verl's optimal_token_baseline quantity). None = the objective's opob_grad_norms ('exact' "
        "unless it says 'ghost').",
    )
    grad_cosine: bool = Field(
        True,
        description="Log grad/cos_prev, the cosine of consecutive raw gradients (keeps one gradient-sized buffer).",
    )

    @model_validator(mode="after")
    def _one_grad_norm_rule(self):
        said = getattr(self.objective, "opob_grad_norms", None)
        if (
            self.grad_norms is not None
            and self.objective is not None
            and "opob_grad_norms" in self.objective.model_fields_set
            and said != self.grad_norms
        ):
            raise ValueError(
                f"grad_norms = {self.grad_norms!r} contradicts objective.opob_grad_norms = {said!r}: set one of them "
                "(grad_norms = None follows the objective)"
            )
        return self

    @property
    def sequence_grad_norms(self) -> str:
        """How the per-completion gradient norms are computed (``grad_norms``, else the objective's)."""
        return self.grad_norms or getattr(self.objective, "opob_grad_norms", None) or "exact"

    @field_validator("stabilizers")
    @classmethod
    def _one_per_kind(cls, stabilizers):
        names = [s.name for s in stabilizers]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ValueError(f"entry [{i}] is a second '{name}' stabilizer; each kind may appear once")
        return stabilizers

    @classmethod
    def from_scenario(
        cls,
        path: str | Path,
        overrides: list[str] | None = None,
        variant: str | None = None,
        *,
        trl_loss: bool = False,
        **extra,
    ) -> SandboxTRLConfig:
        """The objective, correction and stabilizers of a scenario file (after ``--set``-style overrides), of
        its variant ``variant`` when it has variants (required then: the base alone is none of them, and a
        variant's method, GAC in ``lm_mission``'s ``gac``, would be lost). ``trl_loss``: keep TRL's own loss
        (no sandbox objective; a correction then runs on the objective derived from ``GRPOConfig``); otherwise
        the scenario's objective replaces TRL's loss, which is said in a warning naming it."""
        from sandbox.scenario.api import ScenarioError, load_scenario, variant_scenarios

        try:
            scenario, raw = load_scenario(path, overrides)
            variants = variant_scenarios(scenario, raw)
        except ScenarioError as exc:
            raise ValueError(str(exc)) from None
        names = [n for n in variants if n]
        if variant is None and names:
            raise ValueError(
                f"{path} has variants ({', '.join(names)}) and the base alone is none of them: pass one, e.g. "
                f"SandboxGRPOConfig.from_scenario({str(path)!r}, variant={names[-1]!r}, output_dir=...)"
            )
        if variant is not None and variant not in variants:
            import difflib

            close = difflib.get_close_matches(variant, names, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(
                f"variant={variant!r}: not a variant of {path}; {hint}its variants: {', '.join(names) or 'none'}"
            )
        alg = variants[variant or ""].algorithm
        objective = None if trl_loss else alg.objective
        if objective is not None:
            where = f" (variant {variant!r})" if variant else ""
            logger.warning(
                "from_scenario(%s%s): the scenario's objective %r (%s) replaces TRL's GRPO loss; pass "
                "trl_loss=True to keep TRL's loss and take only the stabilizers and the correction",
                path,
                where,
                objective.name,
                ", ".join(f"{k}={v}" for k, v in objective.model_dump(exclude_unset=True).items() if k != "name")
                or "its defaults",
            )
        return cls(stabilizers=alg.stabilizers, objective=objective, correction=alg.correction, **extra)


# --------------------------------------------------------------------------------------------------
# GRPOConfig fields that a sandbox objective replaces
# --------------------------------------------------------------------------------------------------

LOSS_FIELDS_REFUSED: tuple[str, ...] = (
    "beta",
    "use_bias_correction_kl",
    "delta",
    "importance_sampling_level",
    "off_policy_mask_threshold",
    "top_entropy_quantile",
    "entropy_coef",
    "use_adaptive_entropy",
    "entropy_coef_min",
    "entropy_coef_max",
    "entropy_coef_delta",
    "entropy_target",
    "multi_objective_aggregation",
    "sapo_temperature_neg",
    "sapo_temperature_pos",
    "vespo_k_pos",
    "vespo_lambda_pos",
    "vespo_k_neg",
    "vespo_lambda_neg",
    "vllm_importance_sampling_mode",
    "vllm_importance_sampling_cap",
    "vllm_importance_sampling_clip_max",
    "vllm_importance_sampling_clip_min",
)
"""``trl.GRPOConfig`` fields applied inside TRL's loss (or its rewards' aggregation) with no counterpart in a
sandbox objective: with a sandbox objective or correction, a value other than TRL's default is refused by
name (the sandbox's counterparts are objectives and corrections, ``docs/promotion.md#trl``). Mapped instead:
``loss_type``, ``epsilon``, ``epsilon_high``, ``scale_rewards`` (:func:`map_grpo_fields`). Honoured as in
TRL (they act outside the loss): ``reward_weights``, ``mask_truncated_completions`` (zeroes the completion
mask the sandbox loss reads), ``num_iterations``, ``temperature``, ``num_generations`` and the generation
settings."""

LOSS_TYPE_FOR_OBJECTIVE = {"grpo": "seq_mean_token_mean", "bnpo": "token_mean"}
"""``loss_type`` → ``aggregation`` of an explicit sandbox objective: the loss types whose TRL 1.16 normaliser
is the sandbox aggregation's on each micro-batch (``grpo``: mean over tokens then sequences; ``bnpo``: tokens
of the micro-batch). TRL's default ``dapo`` (normalised by the generation batch's tokens) and ``dr_grpo``
(by ``max_completion_length``) have no such equivalent."""

SCALE_REWARDS_FOR_OBJECTIVE = {
    "normalize_std": {"group": True, "none": False},
    "advantage": {"group": "grpo", "none": "dr_grpo"},
}
"""``scale_rewards`` → the objective's own switch: ``normalize_std`` (grpo, reinforce) or the ``advantage``
kind (dapo, cispo, gspo, ppo: ``grpo`` = group mean and std, ``dr_grpo`` = group mean only). ``batch`` (the
std of the whole batch) has none."""


def _trl_default(name: str):
    f = {f.name: f for f in dataclasses.fields(TRLGRPOConfig)}[name]
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def _set(args, name: str) -> bool:
    """Whether ``args.<name>`` differs from ``trl.GRPOConfig``'s default (the only way to tell a set field)."""
    return getattr(args, name) != _trl_default(name)


def map_grpo_fields(args, objective):
    """The explicit sandbox ``objective`` with the ``GRPOConfig`` fields it replaces mapped onto it, or a
    ``ValueError`` naming the field. A field at TRL's default leaves the objective's own setting; a set field
    (``loss_type`` → ``aggregation``, ``epsilon``/``epsilon_high`` → ``eps_low``/``eps_high``, with TRL's
    ``epsilon_high = epsilon`` when unset, ``scale_rewards`` → ``normalize_std`` or ``advantage``) is written
    into the objective unless the objective sets that field to another value, or has no such field."""
    targets: dict[str, tuple[str, Any]] = {}  # objective field -> (the GRPOConfig field, value)
    if _set(args, "loss_type"):
        if args.loss_type not in LOSS_TYPE_FOR_OBJECTIVE:
            raise ValueError(
                f"GRPOConfig.loss_type = {args.loss_type!r} has no equivalent for sandbox_objective {objective.name!r}: "
                f"leave it at {_trl_default('loss_type')!r} and set sandbox_objective.aggregation (loss types mapped: "
                f"{sorted(LOSS_TYPE_FOR_OBJECTIVE)})"
            )
        targets["aggregation"] = ("loss_type", LOSS_TYPE_FOR_OBJECTIVE[args.loss_type])
    if _set(args, "epsilon") or _set(args, "epsilon_high"):
        targets["eps_low"] = ("epsilon", args.epsilon)
        high = args.epsilon if args.epsilon_high is None else args.epsilon_high
        targets["eps_high"] = ("epsilon_high" if args.epsilon_high is not None else "epsilon", high)
    if _set(args, "scale_rewards"):
        for knob, table in SCALE_REWARDS_FOR_OBJECTIVE.items():
            if knob in type(objective).model_fields:
                if args.scale_rewards not in table:
                    raise ValueError(
                        f"GRPOConfig.scale_rewards = {args.scale_rewards!r} has no equivalent for "
                        f"sandbox_objective {objective.name!r} (mapped: {sorted(table)} → {knob})"
                    )
                targets[knob] = ("scale_rewards", table[args.scale_rewards])
                break
        else:
            targets["normalize_std"] = ("scale_rewards", None)  # refused below: no such field
    update = {}
    for knob, (source, value) in targets.items():
        if knob not in type(objective).model_fields:
            raise ValueError(
                f"GRPOConfig.{source} = {getattr(args, source)!r} has no counterpart in sandbox_objective "
                f"{objective.name!r} (no field {knob!r}): leave it at {_trl_default(source)!r}"
            )
        own = getattr(objective, knob)
        if knob in objective.model_fields_set and own != value:
            raise ValueError(
                f"GRPOConfig.{source} = {getattr(args, source)!r} contradicts sandbox_objective.{knob} = "
                f"{own!r}: set one of them"
            )
        update[knob] = value
    if not update:
        return objective
    return type(objective).model_validate(
        {**objective.model_dump(exclude_unset=True), "name": objective.name, **update}
    )


def check_replaced_loss_fields(args) -> None:
    """Refuse each :data:`LOSS_FIELDS_REFUSED` field set to a value other than TRL's default."""
    for key in LOSS_FIELDS_REFUSED:
        if _set(args, key):
            raise ValueError(
                f"GRPOConfig.{key} = {getattr(args, key)!r} is applied inside TRL's loss, which a sandbox objective "
                f"replaces; set it to {_trl_default(key)!r} (the sandbox counterparts are objectives and corrections, "
                "docs/promotion.md#trl)"
            )


def derived_objective(args) -> GRPOConfig:
    """The sandbox objective equal to TRL's loss for a correction without an objective (``loss_type`` in
    :data:`LOSS_TYPE_AGGREGATION`, ``scale_rewards`` ``group`` or ``none``; TRL's std ε = 1e-4)."""
    if args.loss_type not in LOSS_TYPE_AGGREGATION or args.scale_rewards == "batch":
        raise ValueError(
            f"sandbox_correction needs an objective: GRPOConfig.loss_type={args.loss_type!r} with "
            f"scale_rewards={args.scale_rewards!r} has no sandbox equivalent; set sandbox_objective "
            f"(loss types mapped: {sorted(LOSS_TYPE_AGGREGATION)} with scale_rewards 'group' or 'none')"
        )
    return GRPOConfig(
        eps_low=args.epsilon,
        eps_high=args.epsilon if args.epsilon_high is None else args.epsilon_high,
        eps_std=1e-4,
        normalize_std=args.scale_rewards != "none",
        aggregation=LOSS_TYPE_AGGREGATION[args.loss_type],
    )


def _plain(model: BaseModel) -> dict:
    """A config model as a JSON-able dict of what was set, its ``name`` always included."""
    return {"name": model.name, **model.model_dump(mode="json", exclude_unset=True)}


SANDBOX_FIELDS = (
    "sandbox_stabilizers",
    "sandbox_objective",
    "sandbox_correction",
    "sandbox_grad_norms",
    "sandbox_grad_cosine",
)


@dataclasses.dataclass
class SandboxGRPOConfig(TRLGRPOConfig):
    """``trl.GRPOConfig`` plus the sandbox's settings, as fields that serialise with the rest (``to_dict()``,
    ``to_json_string()``, ``training_args.bin`` in every checkpoint) and parse from the command line
    (``HfArgumentParser``; the list and dict fields as JSON strings). The values are the config models of a
    scenario's ``[algorithm]`` (``docs/methods/``), kept as plain dicts and validated here; :attr:`sandbox`
    is the validated :class:`SandboxTRLConfig`.

    With a sandbox objective or correction, no ``GRPOConfig`` setting is silently ignored: the fields the
    objective replaces are mapped onto it (:func:`map_grpo_fields`; the stored ``sandbox_objective`` then
    holds the mapped values) or, with no counterpart, refused by name when set
    (:data:`LOSS_FIELDS_REFUSED`). ``docs/promotion.md#trl``."""

    sandbox_stabilizers: list[dict] | str | None = dataclasses.field(
        default=None,
        metadata={
            "help": (
                "Optimizer-level stabilizers in order, a list of stabilizer configs (JSON on the command line), e.g. "
                '\'[{"name": "gac", "c_thr": 0.3}, {"name": "vcpo_lr"}]\' (gac, vcpo_lr, staleness_lr, grad_norm_skip).'
            )
        },
    )
    sandbox_objective: dict | str | None = dataclasses.field(
        default=None,
        metadata={
            "help": (
                'A sandbox objective replacing TRL\'s loss and advantages (JSON), e.g. \'{"name": "grpo", "baseline": '
                "\"opob\"}'; None = TRL's, or one derived from this config when a correction is set."
            )
        },
    )
    sandbox_correction: dict | str | None = dataclasses.field(
        default=None,
        metadata={"help": ('A sandbox off-policy correction (JSON), e.g. \'{"name": "m2po_mask"}\'; None = none.')},
    )
    sandbox_grad_norms: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": "Per-completion gradient norms for OPOB: exact, ghost or logit_proxy; None = the objective's.",
            "choices": ["exact", "ghost", "logit_proxy"],
        },
    )
    sandbox_grad_cosine: bool = dataclasses.field(
        default=True,
        metadata={"help": "Log grad/cos_prev, the cosine of consecutive raw gradients (one gradient-sized buffer)."},
    )

    def __post_init__(self):
        super().__post_init__()
        self._validate_sandbox()

    def _validate_sandbox(self) -> None:
        raw = {}
        for name in ("sandbox_stabilizers", "sandbox_objective", "sandbox_correction"):
            value = getattr(self, name)
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except json.JSONDecodeError as err:
                    raise ValueError(f"SandboxGRPOConfig.{name} is not valid JSON: {err}") from None
            raw[name] = value
        try:
            cfg = SandboxTRLConfig(
                stabilizers=raw["sandbox_stabilizers"] or [],
                objective=raw["sandbox_objective"],
                correction=raw["sandbox_correction"],
                grad_norms=self.sandbox_grad_norms,
                grad_cosine=self.sandbox_grad_cosine,
            )
        except ValidationError as err:  # pydantic's locations are SandboxTRLConfig's: named here as our fields
            lines = []
            for e in err.errors():
                loc = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in e["loc"])
                lines.append(f"SandboxGRPOConfig.sandbox_{loc[1:] if loc else '*'}: {e['msg']}")
            raise ValueError("\n".join(lines)) from None
        if cfg.objective is not None:
            cfg = cfg.model_copy(update={"objective": map_grpo_fields(self, cfg.objective)})
        if cfg.objective is not None or cfg.correction is not None:
            check_replaced_loss_fields(self)
            if cfg.objective is None:
                derived_objective(self)
        self.sandbox_stabilizers = [_plain(s) for s in cfg.stabilizers] or None
        self.sandbox_objective = None if cfg.objective is None else _plain(cfg.objective)
        self.sandbox_correction = None if cfg.correction is None else _plain(cfg.correction)

    @property
    def sandbox(self) -> SandboxTRLConfig:
        """The sandbox settings as the validated :class:`SandboxTRLConfig` (objective mapped)."""
        return SandboxTRLConfig(
            stabilizers=self.sandbox_stabilizers or [],
            objective=self.sandbox_objective,
            correction=self.sandbox_correction,
            grad_norms=self.sandbox_grad_norms,
            grad_cosine=self.sandbox_grad_cosine,
        )

    @classmethod
    def from_scenario(
        cls,
        path: str | Path,
        overrides: list[str] | None = None,
        variant: str | None = None,
        *,
        trl_loss: bool = False,
        **kwargs,
    ) -> SandboxGRPOConfig:
        """The objective, correction and stabilizers of a scenario file (after ``--set``-style overrides) or of
        one of its variants (:meth:`SandboxTRLConfig.from_scenario`: ``variant`` is required when the scenario
        has variants; ``trl_loss`` keeps TRL's loss), with ``kwargs`` the other ``GRPOConfig`` fields::

            args = SandboxGRPOConfig.from_scenario("lm_mission", variant="gac", output_dir="out")"""
        cfg = SandboxTRLConfig.from_scenario(path, overrides, variant, trl_loss=trl_loss)
        return cls(**kwargs, **_sandbox_fields(cfg))

    @classmethod
    def from_grpo_config(cls, args: TRLGRPOConfig, sandbox: SandboxTRLConfig) -> SandboxGRPOConfig:
        """``args`` (already post-processed by ``GRPOConfig``, so not re-initialised) with ``sandbox``'s settings."""
        new = cls.__new__(cls)
        new.__dict__.update(vars(args))
        for name, value in _sandbox_fields(sandbox).items():
            setattr(new, name, value)
        new._validate_sandbox()
        return new


def _sandbox_fields(cfg: SandboxTRLConfig) -> dict:
    return {
        "sandbox_stabilizers": [_plain(s) for s in cfg.stabilizers] or None,
        "sandbox_objective": None if cfg.objective is None else _plain(cfg.objective),
        "sandbox_correction": None if cfg.correction is None else _plain(cfg.correction),
        "sandbox_grad_norms": cfg.grad_norms,
        "sandbox_grad_cosine": cfg.grad_cosine,
    }


class SandboxGRPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` with the sandbox's methods (module docstring), configured by ``args``, a
    :class:`SandboxGRPOConfig` (a plain ``trl.GRPOConfig``: TRL's training plus the monitors). Takes every
    argument of ``GRPOTrainer``; ``sandbox=`` (a :class:`SandboxTRLConfig` or its dict) is deprecated: it is
    merged into a :class:`SandboxGRPOConfig` copy of ``args``.

    Limits: text-only models; one process or DDP (no sharded gradients); with a sandbox objective, TRL's
    KL term (``beta``), entropy bonus, entropy masking, ``delta``, off-policy masking and the other loss
    settings of :data:`LOSS_FIELDS_REFUSED` are refused (the sandbox has its own: objectives' ``beta_kl`` is
    not wired here, ``opsm`` is a correction). Checkpoints (``save_steps``, ``resume_from_checkpoint``) carry
    the stabilizers' state inside ``optimizer.pt`` (``sandbox.integrations.step_hooks``) and the sandbox
    settings inside ``training_args.bin``."""

    def __init__(self, *args, sandbox: SandboxTRLConfig | dict | None = None, **kwargs):
        check_trl_version()
        self._stabilizer_hooks: StabilizerHooks | None = None
        self._window_log_w: list[torch.Tensor] = []
        self._window_lag: list[torch.Tensor] = []
        self._rewards_per_func: torch.Tensor | None = None
        self._capture_logps = False
        self._captured_logps: torch.Tensor | None = None
        positional = len(args) > 2
        grpo_args = args[2] if positional else kwargs.get("args")
        if sandbox is not None:
            warnings.warn(
                "SandboxGRPOTrainer(sandbox=...) is deprecated: pass args=SandboxGRPOConfig(..., "
                "sandbox_stabilizers=..., sandbox_objective=..., ...) so the settings are saved with the "
                "training arguments",
                FutureWarning,
                stacklevel=2,
            )
            sandbox = sandbox if isinstance(sandbox, SandboxTRLConfig) else SandboxTRLConfig.model_validate(sandbox)
            if isinstance(grpo_args, SandboxGRPOConfig) and grpo_args.sandbox != SandboxTRLConfig():
                raise ValueError(
                    "both args (a SandboxGRPOConfig with sandbox_* settings) and sandbox= are given: "
                    "set the sandbox_* fields of args only"
                )
            if grpo_args is not None:
                grpo_args = SandboxGRPOConfig.from_grpo_config(grpo_args, sandbox)
                if positional:
                    args = (*args[:2], grpo_args, *args[3:])
                else:
                    kwargs["args"] = grpo_args
        if isinstance(grpo_args, SandboxGRPOConfig):
            self.sandbox = grpo_args.sandbox
        elif sandbox is not None:  # no args: TRL builds its default GRPOConfig below
            self.sandbox = sandbox
        else:
            self.sandbox = SandboxTRLConfig()
        # Built before TRL loads any model, so a bad combination is refused first; TRL's default args otherwise.
        early = self._build_policy_loss(grpo_args) if grpo_args is not None else None
        super().__init__(*args, **kwargs)
        self._policy_loss = early if grpo_args is not None else self._build_policy_loss(self.args)
        # TRL's dapo (its default loss type) divides each micro-batch's token sum by the generation batch's
        # mean tokens per micro-batch, not by the micro-batch's own count: a derived dapo objective does too.
        self._dapo_normalizer = self.sandbox.objective is None and self.args.loss_type == "dapo"
        if self._policy_loss is not None and self.args.use_vllm and self.args.vllm_importance_sampling_correction:
            logger.warning(
                "sandbox objective active: TRL's vLLM importance-sampling factor is not applied; the "
                "sampler's log-probs are the behaviour policy of the sandbox correction"
            )

    # ------------------------------------------------------------------------------ configuration
    def _build_policy_loss(self, args):
        cfg = self.sandbox
        objective = cfg.objective
        if objective is None and cfg.correction is None:
            return None
        # A SandboxGRPOConfig has mapped and checked this at construction; a plain GRPOConfig (sandbox= given
        # without args) is checked here.
        objective = derived_objective(args) if objective is None else map_grpo_fields(args, objective)
        check_replaced_loss_fields(args)
        loss = build_policy_loss(objective, cfg.correction)
        if type(loss.objective_impl).full_loss is not Objective.full_loss or loss.needs_reference_logp:
            raise ValueError(
                f"sandbox_objective {objective.name!r} needs whole groups or a reference model inside the loss; "
                "the TRL integration supports per-token surrogate objectives without a KL term"
            )
        return loss

    def create_optimizer(self, model=None):
        optimizer = super().create_optimizer(model) if model is not None else super().create_optimizer()
        if self.sandbox.stabilizers or self.sandbox.grad_cosine:
            check_full_gradients(self.accelerator.distributed_type)
            params = [p for p in self.model.parameters() if p.requires_grad]
            self._stabilizer_hooks = StabilizerHooks(
                self.optimizer,
                params,
                self.sandbox.stabilizers,
                context=self._step_context,
                on_metrics=self._record_step_metrics,
                grad_cosine=self.sandbox.grad_cosine,
            )
        return optimizer

    # ------------------------------------------------------------------------------ the optimizer step
    def _clip_grad_norm(self, model):
        if self._stabilizer_hooks is not None:
            self._stabilizer_hooks.before_clip()
        return super()._clip_grad_norm(model)

    def _step_context(self) -> StepContext:
        """VCPO's batch ESS over the whole optimizer step and every completion's lag; clears the window."""
        ess = lag = None
        if self._window_log_w:
            log_w = self.accelerator.gather(torch.cat(self._window_log_w))
            lag = self.accelerator.gather(torch.cat(self._window_lag)).double()
            ess = ess_ratio_from_log_weights(log_w.double())
            self._metrics["train"]["is/ess_ratio"].append(float(ess))
            self._metrics["train"]["is/ess"].append(float(ess) * log_w.numel())
        self._window_log_w, self._window_lag = [], []
        return StepContext(ess_ratio=ess, staleness=lag)

    def _record_step_metrics(self, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self._metrics["train"][key].append(value)

    # ------------------------------------------------------------------------------ generation
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        n_local = output["completion_ids"].shape[0]
        device = output["completion_ids"].device
        output["sandbox_version"] = torch.full((n_local,), self.state.global_step, dtype=torch.long, device=device)
        if self._policy_loss is not None:
            output["advantages"], output["sandbox_rewards"] = self._objective_advantages(output)
        return output

    def _objective_advantages(self, output) -> tuple[torch.Tensor, torch.Tensor]:
        """The sandbox objective's advantages over the whole generation batch (every process's
        completions, contiguous groups of ``num_generations``), sliced to this process."""
        mode = "train" if self.model.training else "eval"
        group = self.num_generations if mode == "train" else self.num_generations_eval
        rpf = self._rewards_per_func
        rewards = (rpf * self.reward_weights.to(rpf.device).unsqueeze(0)).nansum(dim=1)
        unscorable = torch.isnan(rpf).all(dim=1)
        if unscorable.any():  # TRL leaves them out of the baseline and zeroes their advantage: same here
            grouped = torch.where(unscorable, torch.nan, rewards).view(-1, group)
            fill = torch.nanmean(grouped, dim=1, keepdim=True).nan_to_num(0.0).expand_as(grouped).reshape(-1)
            rewards = torch.where(unscorable, fill, rewards)
        mask = output["completion_mask"].float()
        sampling, old = output.get("sampling_per_token_logps"), output.get("old_per_token_logps")
        log_w = (
            ((old - sampling) * mask).sum(-1)
            if sampling is not None and old is not None
            else torch.zeros(mask.shape[0], device=mask.device)
        )
        log_w = self.accelerator.gather(log_w)
        extras = {}
        if self._policy_loss.needs_sequence_grad_norms:
            extras[SEQ_GRAD_KEY] = self.accelerator.gather(self._sequence_grad_sq_norms(output))
        n = rewards.shape[0]
        placeholder = torch.zeros(n, 1, device=rewards.device)
        inp = PolicyLossInput(
            logp=placeholder,
            behaviour_logp=placeholder,
            mask=torch.ones_like(placeholder),
            rewards=rewards.float(),
            group_size=group,
            extras=extras,
        )
        adv, _ = self._policy_loss.advantages(inp, log_w.to(rewards.device).float())
        adv = torch.where(unscorable, torch.zeros_like(adv), adv)
        n_local = output["completion_ids"].shape[0]
        local = slice(self.accelerator.process_index * n_local, (self.accelerator.process_index + 1) * n_local)
        return adv[local].detach(), rewards[local].float()

    def _sequence_grad_sq_norms(self, output) -> torch.Tensor:
        """``‖∇_θ Σ_t log π_θ(y_t|s_t)‖²`` per local completion (``grad_norms`` decides how)."""
        model = self.accelerator.unwrap_model(self.model)
        prompt_ids, completion_ids = output["prompt_ids"], output["completion_ids"]
        ids = torch.cat([prompt_ids, completion_ids], 1)
        attn = torch.cat([output["prompt_mask"], output["completion_mask"]], 1)
        cmask = output["completion_mask"].float()
        width = completion_ids.shape[1]
        mode = self.sandbox.sequence_grad_norms
        if mode == "logit_proxy":
            with torch.no_grad():
                logits = model(input_ids=ids, attention_mask=attn).logits[:, -width - 1 : -1].float() / self.temperature
            return logit_space_grad_sq_norm(logits, completion_ids, cmask)
        if mode == "ghost":
            named = {name: p for name, p in model.named_parameters() if p.requires_grad}
            # The model class's own forward: TRL replaces the instance's forward with a fused LM head, whose
            # custom op hides the head's weight from the ghost rules (and rounds the logits differently).
            forward = type(model).forward
            with torch.enable_grad():
                with GhostNormRecorder(named, (ids, attn)) as recorder:  # one forward of the whole batch
                    logits = (
                        forward(model, input_ids=ids, attention_mask=attn).logits[:, -width - 1 : -1].float()
                        / self.temperature
                    )
                    logps = torch.log_softmax(logits, -1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
                try:
                    return recorder.sq_norms((logps * cmask).sum(-1))
                except (
                    ValueError
                ) as err:  # a parameter no ghost rule covers (an op other than linear, embedding, norms)
                    raise ValueError(
                        f"sandbox_grad_norms = 'ghost' cannot serve {type(model).__name__}: {err}. "
                        "Use sandbox_grad_norms = 'exact' (one backward per completion) for this model"
                    ) from None
        params = [p for p in model.parameters() if p.requires_grad]
        norms = []
        with torch.enable_grad():
            for i in range(ids.shape[0]):
                logps, _, _ = self._get_per_token_logps_and_entropies(model, ids[i : i + 1], attn[i : i + 1], width)
                grads = torch.autograd.grad((logps * cmask[i : i + 1]).sum(), params, allow_unused=True)
                norms.append(sum(g.float().pow(2).sum() for g in grads if g is not None))
        return torch.stack(norms).detach()

    # ------------------------------------------------------------------------------ the loss
    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        result = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._capture_logps:
            self._captured_logps = result[0].detach()
        return result

    def _compute_loss(self, model, inputs):
        if self._policy_loss is None:
            self._capture_logps = True
            try:
                loss = super()._compute_loss(model, inputs)
            finally:
                self._capture_logps = False
            logps = self._captured_logps
        else:
            loss, logps = self._sandbox_loss(model, inputs)
        if self.model.training:
            self._record_batch(logps, inputs)
        return loss

    @staticmethod
    def _behaviour(inputs, logps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(μ, π_prox or None)`` for a micro-batch (module docstring)."""
        sampling, old = inputs.get("sampling_per_token_logps"), inputs.get("old_per_token_logps")
        if sampling is not None:
            return sampling, old
        return (old if old is not None else logps.detach()), None

    def _loss_mask(self, inputs) -> torch.Tensor:
        mask = inputs["completion_mask"]
        return mask * inputs["tool_mask"] if "tool_mask" in inputs else mask

    def _sandbox_loss(self, model, inputs) -> tuple[torch.Tensor, torch.Tensor]:
        if "pixel_values" in inputs:
            raise ValueError("SandboxGRPOTrainer with a sandbox objective supports text-only models")
        completion_ids = inputs["completion_ids"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], 1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
        logps, _, _ = self._get_per_token_logps_and_entropies(model, input_ids, attention_mask, completion_ids.shape[1])
        mask = self._loss_mask(inputs).to(logps.dtype)
        behaviour, prox = self._behaviour(inputs, logps)
        out = self._policy_loss(
            PolicyLossInput(
                logp=logps,
                behaviour_logp=behaviour,
                mask=mask,
                rewards=inputs["sandbox_rewards"],
                group_size=1,
                prox_logp=prox,
                advantages=inputs["advantages"],
            )
        )
        mode = "train" if self.model.training else "eval"
        if self._dapo_normalizer:  # token mean → token sum / TRL's normaliser (grpo_trainer.py, trl 1.16)
            normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if mode == "train":
                normalizer = normalizer * self.current_gradient_accumulation_steps / self.args.steps_per_generation
            loss = out.loss * mask.sum() / normalizer
        else:
            loss = out.loss / self.current_gradient_accumulation_steps if mode == "train" else out.loss
        # _record_batch logs the mismatch once; the reward is TRL's own column
        self._log_across_processes(mode, {k: v for k, v in out.metrics.items() if not k.startswith(("is/", "reward/"))})
        return loss, logps.detach()

    def _record_batch(self, logps: torch.Tensor, inputs) -> None:
        """Add this micro-batch to the optimizer step's ESS window and log its mismatch and lags."""
        mask = self._loss_mask(inputs).to(logps.dtype)
        behaviour, _ = self._behaviour(inputs, logps)
        log_rho = (logps - behaviour) * mask
        self._window_log_w.append(log_rho.sum(-1).detach())
        lag = self.state.global_step - inputs["sandbox_version"]
        self._window_lag.append(lag)
        metrics = {k: v for k, v in is_metrics(log_rho, mask).items() if not k.startswith("is/ess")}
        metrics["staleness/mean"] = lag.float().mean()
        metrics["staleness/max"] = lag.float().max()
        self._log_across_processes("train", metrics)

    def _log_across_processes(self, mode: str, metrics: dict[str, torch.Tensor]) -> None:
        """Append each scalar metric, reduced over processes (max for ``*/max``, else mean), in one gather."""
        if not metrics:
            return
        gathered = self.accelerator.gather(
            torch.stack([v.detach().float().reshape(()) for v in metrics.values()])[None]
        )
        for key, column in zip(metrics, gathered.reshape(-1, len(metrics)).T):
            self._metrics[mode][key].append((column.max() if key.endswith("/max") else column.mean()).item())
