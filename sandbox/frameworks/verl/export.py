"""verl 0.9.1 export table; the mapping and its upstream sources: docs/promotion.md#mapping-tables-by-framework-version."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from sandbox.algorithms.objectives.base import OPOB_KNOBS
from sandbox.export.base import Exporter, Given, Version, describe, nested, register
from sandbox.export.common import scale_rows, staleness_of
from sandbox.export.engine import stabilizer_rows
from sandbox.export.plan import ExportPlan
from sandbox.export.table import Table
from sandbox.frameworks.verl import rules
from sandbox.frameworks.verl.config_names import ACTOR, AGGREGATION, CORR, NO_DUAL_CLIP, V1
from sandbox.scenario.api import Scenario

T = Table("verl")

VERL_0_9 = Version("0.9", "0.9.1", "verl 0.9.1 wheel")

"""``clip_ratio_c`` that never fires: verl clamps the log-ratio to ±20 before the dual clip (r ≤ e^20 < 1e9)."""

NO_LOWER_EDGE = 1e-9
"""Lower edge of a ``"lo_hi"`` IS band meaning "none": verl floors every weight at e^-20 ≈ 2.1e-9 (its log-space
safety clamp), so no valid token falls below 1e-9, and the band parser requires a positive lower edge."""

LOSS_MODE = {"gspo": "gspo", "cispo": "cispo"}  # every other ratio objective uses "vanilla"

VERL_EPS_STD = 1e-6  # compute_grpo_outcome_advantage's epsilon, not configurable


# ------------------------------------------------------------------------------------------------
# values as Hydra overrides and as nested YAML
# ------------------------------------------------------------------------------------------------

_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_RESERVED = {"null", "true", "false", "inf", "nan"}


def hydra_value(value: Any) -> str:
    """A value in Hydra's override grammar: null, true/false, numbers, ``[a,b]``, ``{k:v}``; strings are
    single-quoted unless they are plain words (a number-like string such as ``"0.5_2.0"`` is quoted, or
    Hydra would read it as a number)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if text and set(text) <= _PLAIN and not text[0].isdigit() and text[0] != "-" and text.lower() not in _RESERVED:
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def ratio_band(lo: float, hi: float) -> str:
    """A ``"lo_hi"`` threshold string with full float precision (``inf`` allowed as an upper edge)."""
    return f"{float(lo)!r}_{float(hi)!r}"


# ------------------------------------------------------------------------------------------------
# objective: advantage, surrogate, clip, KL, aggregation (shared with the VCPO fork)
# ------------------------------------------------------------------------------------------------


def objective_route(scn: Scenario) -> str | None:
    """``"reinforce"`` (REINFORCE surrogate times correction weights), ``"ratio"`` (surrogate on π_θ/μ), or
    None (no surrogate verl can express: TBA)."""
    name = scn.algorithm.objective.name
    return None if name == "tba" else "reinforce" if name == "reinforce" else "ratio"


@dataclass(frozen=True)
class ObjectiveTarget:
    """What a verl-family trainer offers for ``algorithm.objective`` (upstream 0.9.1, or the VCPO fork).

    ``reinforce_why`` says how the target makes the vanilla ratio equal 1 on the REINFORCE route;
    ``aggregation_gaps`` maps sandbox aggregations the target cannot reproduce to the reason; ``opob``
    (forks only) writes the rows of an OPOB / optimal baseline given the objective's sources
    (``kind``, ``normalize``, ``eps_std``, ``std_unbiased``; None where the objective has no such knob)."""

    loss_modes: frozenset[str]
    reinforce_why: str
    aggregation_gaps: Mapping[str, str] = field(default_factory=dict)
    opob: Callable[[ExportPlan, Scenario, dict[str, str | None]], None] | None = None
    aggregation_note: str = T.note("aggregation_note")


def nearest_group_estimator(plan: ExportPlan, normalize: bool, what: str, difference: str) -> None:
    """Write the group estimator nearest to a baseline verl cannot express (the scenario field has a
    no-equivalent row). Left unwritten, ``algorithm.adv_estimator`` falls back to verl's default ``gae``,
    which trains a critic (verl 0.9.1 ``trainer/ppo/utils.py``: ``need_critic``) and so changes the
    algorithm rather than only the baseline."""
    T.row(plan, "pinned.adv_estimator.nearest_group_estimator", "grpo", what=what, difference=difference)
    T.row(
        plan,
        "pinned.norm_adv_by_std_in_grpo.note_from_code",
        normalize,
        note=T.note("nearest_group_estimator.note.divide_group_std")
        if normalize
        else T.note("nearest_group_estimator.note.division_group_std"),
    )


_BASELINE_WHAT = {
    "none": "no baseline (raw rewards)",
    "reward": "raw rewards as advantages",
    "constant": "a constant baseline",
    "ema": "an EMA-of-rewards baseline",
}


def _baseline_rows(
    plan: ExportPlan, scn: Scenario, target: ObjectiveTarget, kind: str, normalize: bool, sources: dict[str, str | None]
) -> None:
    """Advantage rows of one objective: the baseline kind (``algorithm.adv_estimator`` + ``norm_adv_by_std_in_grpo``)
    and, where the objective has them, the std normalisation, its ε and its Bessel correction, and the OPOB knobs."""
    obj = scn.algorithm.objective
    if kind in ("opob", "optimal") and target.opob is not None:
        target.opob(plan, scn, sources)
        return
    rules.advantage(
        plan,
        kind=kind,
        kind_source=sources["kind"],
        normalize=normalize,
        normalize_source=sources["normalize"],
        nearest=nearest_group_estimator,
        whats=_BASELINE_WHAT,
    )
    if sources["normalize"] is not None and kind not in ("group_mean", "leave_one_out"):
        T.row(plan, "advantage.implicit", normalize, source=sources["normalize"], kind=kind)
    std_used = normalize and kind == "group_mean"
    if sources["eps_std"]:
        rules.eps_std(
            plan,
            source=sources["eps_std"],
            eps=obj.eps_std,
            used=std_used,
            close=math.isclose(obj.eps_std, VERL_EPS_STD, rel_tol=1e-9),
        )
    if sources["std_unbiased"]:
        rules.std_unbiased(plan, unbiased=obj.std_unbiased, used=std_used, source=sources["std_unbiased"])
    for knob in (k for k in OPOB_KNOBS if hasattr(obj, k)):  # written by no verl trainer: a gap when OPOB is asked
        if kind == "opob":
            T.row(plan, "opob_knobs.no_equivalent", getattr(obj, knob), source=f"algorithm.objective.{knob}")
        else:
            T.row(plan, "opob_knobs.implicit", getattr(obj, knob), source=f"algorithm.objective.{knob}")


def map_objective(plan: ExportPlan, scn: Scenario, route: str | None, target: ObjectiveTarget) -> None:
    """Rows for every knob of ``algorithm.objective`` on ``route`` (see :func:`objective_route`)."""
    obj = scn.algorithm.objective
    T.row(plan, "pinned.use_kl_in_reward", False)
    T.row(plan, "pinned.entropy_coeff", 0)
    rules.objective(
        plan,
        scn=scn,
        o=obj,
        route=route,
        target=target,
        full=describe(obj.model_dump()),
        mode="vanilla" if route == "reinforce" else LOSS_MODE.get(obj.name, "vanilla"),
        src="algorithm.objective",
        baseline_rows=_baseline_rows,
        kl=lambda plan, obj: rules.kl(plan, beta=getattr(obj, "beta_kl", None)),
        clip=lambda plan, obj, dual_clip: rules.clip(
            plan, o=obj, dual_clip=dual_clip, no_dual=NO_DUAL_CLIP, has_dual=hasattr(obj, "dual_clip_c")
        ),
        aggregation=lambda plan, obj, target: rules.aggregation(
            plan,
            o=obj,
            agg=obj.aggregation,
            modes=AGGREGATION,
            gaps=target.aggregation_gaps,
            agg_note=target.aggregation_note,
            has_max_len=hasattr(obj, "max_len"),
        ),
        advantage_kind=lambda a: {"grpo": "group_mean", "dr_grpo": "group_mean", "rloo": "leave_one_out"}.get(a, a),
    )


UPSTREAM_OBJECTIVES = ObjectiveTarget(
    loss_modes=frozenset({"vanilla", "gspo", "cispo"}),
    reinforce_why=T.note("upstream_objectives.reinforce_why"),
)


# ------------------------------------------------------------------------------------------------
# corrections (verl 0.9.x: algorithm.rollout_correction on the REINFORCE route only)
# ------------------------------------------------------------------------------------------------


def _correction_off(plan: ExportPlan, why: str) -> None:
    T.row(plan, "pinned.rollout_is", None, note=why)
    T.row(plan, "pinned.rollout_rs", None)


def map_tis(plan: ExportPlan, c, is_key: str, threshold_key: str) -> bool:
    """Truncated IS as ``rollout_is = token|sequence`` with an upper threshold; False (and a gap row) when a
    floor C_low > 0 is asked, which verl's TIS cannot express."""
    if c.C_low > 0:
        T.row(plan, "correction.C_low.no_equivalent", c.C_low)
    else:
        T.row(plan, "correction.C_low.implicit", c.C_low)
    T.row(
        plan,
        "correction.name.converted.truncated_weight_min",
        f"tis, {c.level}",
        c.level,
        target=is_key,
        weight="per token" if c.level == "token" else "Π_t w_t per sequence",
    )
    if c.C is None:
        T.row(
            plan, "correction.C.converted.sandbox_default_cap", None, float(c.cap), target=threshold_key, level=c.level
        )
    else:
        T.row(plan, "correction.C.as_is", float(c.C), target=threshold_key)
    return c.C_low == 0


def map_geo_token_weight(plan: ExportPlan, c, src: str) -> None:
    """Geo-RS's surviving tokens: token TIS ``min(w_t, C)`` through ``rollout_is = token``, or weight 1."""
    if c.token_weight == "tis":
        T.row(plan, "token_weight.converted.surviving_tokens_weighted", c.token_weight, "token", src=src)
        T.row(plan, "C.as_is", float(c.C), src=src)
    else:
        T.row(plan, "token_weight.converted.mask_only_weight", c.token_weight, None, src=src)
        T.row(plan, "C.implicit", c.C, src=src)


CORRECTION_GAPS = T.section("correction_gaps")


# ------------------------------------------------------------------------------------------------
# batch geometry, stabilizers, optimizer
# ------------------------------------------------------------------------------------------------


def map_batch(plan: ExportPlan, scn: Scenario, prompts_key: str = "data.train_batch_size") -> None:
    """One trainer step = one batch = one version, as in the sandbox (``prompts_key``: the key that sets the
    prompts per trainer step). Upstream, ``ppo_mini_batch_size = groups_per_step / minibatches`` prompts and
    ``ppo_epochs = epochs`` (verl 0.9.1 ``train_mini_batch``: consecutive mini-batches, the same order every
    epoch with ``actor.shuffle = false``); the fork's trainer step is one mini-batch (``prompts_key`` is
    ``ppo_mini_batch_size``), where several mini-batches are not mapped."""
    a = scn.algorithm
    rules.batch(
        plan,
        a=a,
        m=a.minibatches,
        E=a.epochs,
        B=a.groups_per_step,
        mini=f"{ACTOR}.ppo_mini_batch_size",
        prompts_key=prompts_key,
    )


STABILIZERS = T.section("stabilizers")
STEP_HOOK = T.note("step_hook")


_OPTIMIZER_CLASS = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD"}


# ------------------------------------------------------------------------------------------------
# the exporter
# ------------------------------------------------------------------------------------------------


@register
class VerlExporter(Exporter):
    """verl 0.9.x, V1 trainer of ``verl.trainer.main_ppo`` (see the module docstring for every convention)."""

    name = "verl"
    title = T.note("title")
    versions = (VERL_0_9,)
    components = property(lambda self: T.components(correction=[*CORRECTION_GAPS]))
    expresses = T.section("expresses")

    def plan(self, scn: Scenario, version: Version, given: Given) -> ExportPlan:
        a, c, o, cfg = scn.algorithm, scn.algorithm.correction, scn.algorithm.optimizer, scn.system.staleness
        plan, st = self.new_plan(version, T.note("plan.python_m_verl.2")), staleness_of(scn)
        mode, route, optim = (
            "separate_async" if st.kind == "max_lag" else "sync",
            objective_route(scn),
            f"{ACTOR}.optim",
        )
        T.row(plan, "pinned.use_v1", True)
        rules.staleness(
            plan, scn=scn, st=st, cfg=cfg, B=a.groups_per_step, m=a.minibatches, full=describe(cfg.model_dump())
        )
        rules.partial_rollouts(plan, pr=scn.system.partial_rollouts, sync=mode == "sync")
        plan.target = T.note("plan.python_m_verl", mode=mode)
        # a surrogate anchored at the batch start over several optimizer steps is verl's decoupled PPO: bypass off,
        # π_old recomputed once per batch, the clip on π_θ/π_old and the correction weighing π_old/μ
        decoupled = route == "ratio" and a.proximal == "batch_start" and a.updates_per_batch > 1
        weights_route = "reinforce" if decoupled else route
        T.row(
            plan,
            "pinned.bypass_mode",
            weights_route != "reinforce",
            note=T.note("plan.note.reinforce_route_decoupled")
            if route == "reinforce"
            else T.note("plan.note.decoupled_ppo")
            if decoupled
            else T.note("plan.note.bypass_mode_surrogate"),
        )
        T.row(plan, "pinned.calculate_log_probs", True)
        map_objective(plan, scn, route, UPSTREAM_OBJECTIVES)
        rules.correction(
            plan,
            c=c,
            route=weights_route,
            objective=a.objective.name,
            full=describe(c.model_dump()),
            why=CORRECTION_GAPS.get(c.name),
            corr=CORR,
            band=ratio_band,
            no_lower=NO_LOWER_EDGE,
            off=_correction_off,
            map_tis=map_tis,
            geo=map_geo_token_weight,
            map_mis=lambda plan, c: rules.mis(
                plan,
                c=c,
                band=ratio_band,
                no_lower=NO_LOWER_EDGE,
                batch=lambda plan, c: rules.mis_batch_normalize(plan, c=c),
            ),
        )
        map_batch(plan, scn)
        # several optimizer steps per batch: bypass mode keeps old_log_probs = the rollout log-probs in every mini-batch,
        # the REINFORCE route recomputes π_old once per batch (once per parameter_sync_step cycle in separate_async)
        rules.minibatch_route(plan, scn=scn, a=a, route=route, mode=mode, corr=CORR, decoupled=decoupled)
        stabilizer_rows(plan, scn, STABILIZERS, "verl", STEP_HOOK)
        # actor.optim (FSDPOptimizerConfig: torch.optim.<optimizer> with lr, weight_decay, betas); the LR scheduler steps
        # once per train_mini_batch call: per batch in sync mode, per local update (one mini-batch, all epochs) else
        per = a.updates_per_batch if mode == "sync" else a.epochs
        rules.optimizer(
            plan, o=o, optim=optim, classes=_OPTIMIZER_CLASS, per=per, warmup=math.ceil(o.warmup_steps / per)
        )
        scale_rows(
            plan, scn, given, f"{optim}.lr", f"{optim}.clip_grad", framework_lr_default=1e-6, framework_clip_default=1.0
        )
        plan.metrics = rules.metrics(decoupled=weights_route == "reinforce", sync=mode == "sync")
        plan.notes += [
            T.note("plan.each_verl_trainer"),
            T.note("plan.overrides_txt_verl_config"),
        ]
        return plan

    def files(self, plan: ExportPlan) -> dict[str, str]:
        mode = plan.settings.get(f"{V1}.trainer_mode", "sync")
        return {
            "overrides.txt": overrides_text(plan.settings),
            "verl_config.yaml": yaml_text(plan, "merge onto verl/trainer/config/_generated_ppo_trainer.yaml"),
            # launch.sh from the table's template; separate_async adds the standalone rollout pool's layout
            "launch.sh": T.text("launch_sh").format(
                release=plan.release,
                mode=mode,
                **{
                    k: T.text(k) if mode == "separate_async" else ""
                    for k in ("layout_note", "rollout_vars", "rollout_args")
                },
            ),
        }

    def launch(self, plan: ExportPlan, files: dict[str, str]) -> str:
        return (
            "MODEL_PATH=/path/to/model TRAIN_FILES=/path/to/train.parquet VAL_FILES=/path/to/val.parquet bash launch.sh"
        )


def overrides_text(settings: dict[str, Any], append: frozenset[str] = frozenset()) -> str:
    """One Hydra override per line; keys in ``append`` get the ``+`` prefix (fork-only keys)."""
    return "".join(f"{'+' if k in append else ''}{k}={hydra_value(v)}\n" for k, v in settings.items())


def yaml_text(plan: ExportPlan, where: str) -> str:
    header = f"# sandbox export: {plan.framework} {plan.release}, {plan.target}\n# {where}; see PROMOTION.md\n"
    return header + yaml.safe_dump(
        nested(plan.settings, lambda v: list(v) if isinstance(v, tuple) else v), sort_keys=False, allow_unicode=True
    )
