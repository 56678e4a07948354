"""TRL 1.16.0 export table; the mapping and its upstream sources: docs/promotion.md#mapping-tables-by-framework-version."""

from __future__ import annotations

import json
import math
from typing import ClassVar

from sandbox.algorithms.objectives.base import OPOB_KNOBS
from sandbox.export.base import Exporter, Given, Version, describe, register
from sandbox.export.common import (
    MINIBATCH_INSTEAD,
    OBJ,
    STD_GUARD_TOLERANCE,
    baseline_knobs,
    scale_rows,
    sources,
    staleness_of,
    values,
)
from sandbox.export.engine import stabilizer_rows
from sandbox.export.plan import ExportPlan
from sandbox.export.table import Table
from sandbox.frameworks.trl import rules
from sandbox.frameworks.trl.config_names import CONFIG_FILE, SCRIPT_FILE
from sandbox.scenario.api import Scenario

T = Table("trl")

SYNC_CLASS = "GRPOConfig"
ASYNC_CLASS = "AsyncGRPOConfig"
TARGETS = {
    SYNC_CLASS: T.note("targets.grpoconfig_trl_grpotrainer"),
    ASYNC_CLASS: T.note("targets.asyncgrpoconfig_trl_experimental"),
}

# The guard TRL adds to the reward std: GRPOTrainer ``(std + 1e-4)``, AsyncGRPO's worker ``(std + 1e-8)``.
STD_GUARD = {SYNC_CLASS: 1e-4, ASYNC_CLASS: 1e-8}
# Whether TRL's group std is Bessel-corrected: GRPOTrainer uses ``nanstd`` (trl/trainer/utils.py, n − 1),
# AsyncGRPO's worker ``numpy.std`` (population).
STD_UNBIASED = {SYNC_CLASS: True, ASYNC_CLASS: False}

# Sandbox aggregation -> GRPOTrainer loss_type (grpo_trainer.py _compute_loss).
LOSS_TYPE_OF_AGGREGATION = {
    "seq_mean_token_mean": ("grpo", T.note("loss_type_of_aggregation.seq_mean_token_mean")),
    "token_mean": ("dapo", T.note("loss_type_of_aggregation.token_mean")),
    "seq_mean_token_sum": ("luspo", T.note("loss_type_of_aggregation.seq_mean_token_sum")),
    "seq_mean_token_sum_norm": ("dr_grpo", T.note("loss_type_of_aggregation.seq_mean_token_sum_norm")),
}

INTEGRATION = T.note("integration")
VCPO_INSTEAD = "train with " + INTEGRATION + T.note("vcpo_instead")
OPOB_NOTE = T.note("opob_note") + VCPO_INSTEAD


@register
class TRLExporter(Exporter):
    name = "trl"
    title = T.note("title")
    versions = (Version("1.16", "1.16.0", "trl 1.16.0 wheel"),)
    components = property(lambda self: T.components(correction=[*_CORRECTION_MAPPED, *_CORRECTION_GAP]))
    expresses: ClassVar[dict[str, str]] = T.section("expresses")

    # ------------------------------------------------------------------------------------------
    def plan(self, scn: Scenario, version: Version, given: Given) -> ExportPlan:
        cls = ASYNC_CLASS if scn.system.staleness.kind == "max_lag" else SYNC_CLASS
        plan, a = self.new_plan(version, TARGETS[cls]), scn.algorithm
        # one optimizer step = groups_per_step × group_size completions (GRPO needs two completions per prompt)
        rules.geometry(plan, G=a.group_size, B=a.groups_per_step, m=a.minibatches, sync=cls == SYNC_CLASS)
        _staleness(plan, scn, cls)
        _objective(plan, scn, cls)
        rules.correction(
            plan,
            c=a.correction,
            asy=cls == ASYNC_CLASS,
            full=describe(a.correction.model_dump()),
            gap=None
            if cls == ASYNC_CLASS
            else rules.correction_gap(c=a.correction, mapped=_CORRECTION_MAPPED, gaps=_CORRECTION_GAP),
            on=_correction_on,
        )
        stabilizer_rows(plan, scn, T.section("stabilizers"), "TRL", T.note("plan"))
        rules.optimizer(plan, o=scn.algorithm.optimizer)
        scale_rows(
            plan, scn, given, "learning_rate", "max_grad_norm", framework_lr_default=1e-6, framework_clip_default=1.0
        )
        plan.metrics.update(
            T.section("metrics_async") if cls == ASYNC_CLASS else rules.metrics(o=scn.algorithm.objective)
        )
        plan.notes.extend(_notes(scn, cls, a.group_size >= 2))
        return plan

    def files(self, plan: ExportPlan) -> dict[str, str]:
        cls = config_class(plan)
        parts = {
            k: v for k, v in _SCRIPT_PARTS[cls].items() if k != "launch"
        }  # the class-dependent lines of the script
        launch_comment = "\n".join(f"    {line}" for line in self.launch(plan, {}).rstrip().splitlines())
        return {
            CONFIG_FILE: json.dumps(plan.settings, indent=2) + "\n",
            SCRIPT_FILE: T.text("train_script").format(
                release=plan.release,
                cls=cls,
                config=CONFIG_FILE,
                script=SCRIPT_FILE,
                launch_comment=launch_comment,
                **parts,
            ),
        }

    def launch(self, plan: ExportPlan, files: dict[str, str]) -> str:
        return _SCRIPT_PARTS[config_class(plan)]["launch"]


def config_class(plan: ExportPlan) -> str:
    """``GRPOConfig`` or ``AsyncGRPOConfig``: the class the plan's settings are keyword arguments of."""
    for cls, target in TARGETS.items():
        if plan.target == target:
            return cls
    raise AssertionError(f"exporter bug: unknown TRL target {plan.target!r}")


# ------------------------------------------------------------------------------------------------
# batch geometry and staleness
# ------------------------------------------------------------------------------------------------


def _staleness(plan: ExportPlan, scn: Scenario, cls: str) -> None:
    """Rows of the staleness control; the mini-batch rows (GRPOConfig: ``minibatches`` optimizer steps per generation
    batch, ``num_iterations = epochs``; AsyncGRPOConfig: ``weight_sync_steps = minibatches``, no epochs) with them."""
    st, a = staleness_of(scn), scn.algorithm
    B, S = a.groups_per_step, a.updates_per_batch
    spg = (
        T.note("spg_note.steps_per_generation_gradient_accumulation_steps_num_iterations", B=B)
        if S == 1
        else T.note(
            "spg_note.steps_per_generation_gradient_accumulation_steps_num_iterations.2",
            B=B,
            B_minibatches_algorithm_scn=B // a.minibatches,
            epochs=a.epochs,
            S=S,
            S_1=S - 1,
        )
    )
    rules.staleness(
        plan,
        scn=scn,
        st=st,
        asy=cls == ASYNC_CLASS,
        k=st.bound,
        partial=scn.system.partial_rollouts,
        G=a.group_size,
        B=B,
        spg=spg,
        full=describe(scn.system.staleness.model_dump()),
        admission=_admission,
        minibatches_async=lambda plan, scn: rules.minibatches_async(plan, scn=scn, a=scn.algorithm),
        minibatches_sync=lambda plan, scn: rules.minibatches_sync(
            plan, scn=scn, a=scn.algorithm, instead=MINIBATCH_INSTEAD
        ),
    )


def _admission(plan: ExportPlan, scn: Scenario, k_max: int) -> None:
    """Generation ahead of training. The sandbox caps queued + running groups (throttle: (k_max + 1)·B,
    relative to the consumed count; drop: queue_capacity); AsyncGRPO caps running completions
    (max_inflight_tasks) and scored completions waiting in the queue (queue_maxsize) separately."""
    s = scn.system.staleness
    G, B = scn.algorithm.group_size, scn.algorithm.groups_per_step
    capacity = (k_max + 1) * B if s.enforcement == "throttle" or s.queue_capacity is None else s.queue_capacity
    running = max(capacity - B, B)  # groups; floored at one step as TRL's own default is
    how = (
        T.note("how.throttle_generation_waits", capacity=capacity)
        if s.enforcement == "throttle"
        else T.note("how.drop_most_groups", capacity=capacity)
    )
    T.row(
        plan,
        "staleness.enforcement",
        f"{s.enforcement}, queue_capacity = {describe(s.queue_capacity)}",
        running * G,
        how=how,
        running_B=running + B,
        running=running,
        B=B,
        capacity=capacity,
    )
    T.row(plan, "pinned.queue_maxsize", B * G)


# ------------------------------------------------------------------------------------------------
# objective
# ------------------------------------------------------------------------------------------------


def _src(*knobs: str) -> str:
    return sources(OBJ, *knobs)


def _objective(plan: ExportPlan, scn: Scenario, cls: str) -> None:
    obj = scn.algorithm.objective
    if obj.name == "tba":
        T.row(plan, "objective", describe(obj.model_dump()))
        return
    if cls == ASYNC_CLASS and obj.name in ("reinforce", "gspo", "cispo"):
        T.row(
            plan,
            "objective.no_equivalent.note_from_code",
            describe(obj.model_dump()),
            note=_ASYNC_OBJECTIVE_GAP[obj.name],
        )
        return
    asy = cls == ASYNC_CLASS
    rules.surrogate(plan, o=obj, asy=asy, source=_src("name"))
    rules.clip(
        plan,
        o=obj,
        asy=asy,
        source=_src("dual_clip_c"),
        inert=T.note("inert_clip_note.clip_r_sandbox") if asy else T.note("inert_clip_note.ratio_old_value"),
    )
    rules.aggregation(plan, o=obj, asy=asy, source=_src("aggregation"), src=_src, loss_types=LOSS_TYPE_OF_AGGREGATION)
    _advantage(plan, scn, cls)
    if obj.name == "grpo":
        rules.kl(plan, o=obj, asy=asy, source=_src("beta_kl"))


_ASYNC_OBJECTIVE_GAP = T.section("async_objective_gap")


# ------------------------------------------------------------------------------------------------
# advantages
# ------------------------------------------------------------------------------------------------


def _advantage(plan: ExportPlan, scn: Scenario, cls: str) -> None:
    names = dict(
        scn=scn,
        cls=cls,
        o=scn.algorithm.objective,
        src=_src,
        norm=_normalisation,
        opob_gap=_opob_gap,
        opob_unused=_opob_unused,
        guard=lambda plan, cls, eps, used: rules.std_guard(
            plan,
            source=_src("eps_std"),
            guard=STD_GUARD[cls],
            eps=eps,
            used=used,
            tolerance=STD_GUARD_TOLERANCE,
            sci=_sci,
        ),
    )
    rules.advantage(
        plan,
        knob=lambda plan: rules.advantage_knob(plan, sync=SYNC_CLASS, **names),
        reinforce=_reinforce_baseline,
        baseline=_baseline,
        convention=_std_convention,
        **names,
    )


def _baseline(plan: ExportPlan, baseline: str) -> None:
    if baseline == "opob":
        _opob_gap(plan, "baseline")
    else:
        T.row(plan, "baseline.implicit", baseline, source=_src("baseline"))
        _opob_unused(plan, f"baseline = {baseline}")


def _reinforce_baseline(plan: ExportPlan, scn: Scenario, cls: str) -> None:
    obj, b = scn.algorithm.objective, scn.algorithm.objective.baseline
    used, unused = baseline_knobs(b)
    if b in ("group_mean", "opob"):
        _baseline(plan, b)
    else:  # what GRPOTrainer cannot subtract
        T.row(plan, "reinforce_baseline.no_equivalent", b, source=_src("baseline", *used), why=_REINFORCE_BASELINES[b])
        _opob_unused(plan, f"baseline = {b}")
    T.row(plan, "reinforce_baseline.implicit", describe(values(*unused, obj=obj)), source=_src(*unused), b=b)
    _normalisation(
        plan,
        scn,
        cls,
        _src("normalize_std"),
        obj.normalize_std,
        obj.normalize_std,
        T.note("guard", sci=_sci(STD_GUARD[cls])) if obj.normalize_std and b != "opob" else "",
    )


_REINFORCE_BASELINES = T.section("reinforce_baselines")


def _opob_gap(plan: ExportPlan, knob: str) -> None:
    T.row(plan, "opob_gap.no_equivalent", "opob", source=_src(knob, *OPOB_KNOBS), note=OPOB_NOTE)


def _opob_unused(plan: ExportPlan, why: str) -> None:
    T.row(plan, "opob_unused.implicit", "defaults", source=_src(*OPOB_KNOBS), why=why)


def _normalisation(
    plan: ExportPlan, scn: Scenario, cls: str, source: str, value, normalize: bool, extra: str = ""
) -> None:
    """Division of the centred rewards by the group std: GRPOConfig ``scale_rewards`` = 'group' | 'none';
    AsyncGRPO always divides (population std)."""
    if not rules.normalisation(
        plan,
        value=value,
        normalize=normalize,
        source=source,
        extra=extra,
        sync=cls == SYNC_CLASS,
        grpo=scn.algorithm.objective.name == "grpo",
    ):
        _std_mismatch(plan, scn, cls, source, value, True, before=T.note("normalisation"))


def _std_mismatch(
    plan: ExportPlan,
    scn: Scenario,
    cls: str,
    source: str,
    value,
    sandbox_unbiased: bool,
    before: str = "",
    after: str = "",
) -> None:
    """Bessel-corrected versus population group std: a constant factor √(G/(G−1)) on every advantage,
    which Adam's update ignores (an implicit row) and SGD's does not (a no-equivalent row)."""
    trl, G, adam = STD_UNBIASED[cls], scn.algorithm.group_size, scn.algorithm.optimizer.name in ("adam", "adamw")
    if sandbox_unbiased == trl:
        note, adam = f"{'Bessel-corrected' if trl else 'population'} group std in both", True
    else:
        factor = math.sqrt(G / (G - 1))
        note = T.note(
            "std_mismatch.note",
            trl_std="Bessel-corrected" if trl else "population",
            factor=factor,
            sandbox_std="Bessel-corrected" if sandbox_unbiased else "population",
            bigger="TRL's" if sandbox_unbiased else "the sandbox's",
        )
        note += (
            T.note("std_mismatch.adam_s_update")
            if adam
            else T.note("std_mismatch.scales_sgd_s", lr=1 / factor if sandbox_unbiased else factor)
        )
    (plan.implicit if adam else plan.no_equivalent)(source, value, before + note + after)


def _std_convention(plan: ExportPlan, scn: Scenario, cls: str, value, unbiased: bool, used: bool) -> None:
    if not used:
        T.row(plan, "std_convention.implicit", value, source=_src("std_unbiased"))
    else:
        where = "nanstd, trl/trainer/utils.py" if STD_UNBIASED[cls] else T.note("where")
        _std_mismatch(plan, scn, cls, _src("std_unbiased"), value, unbiased, after=f" ({where})")


def _sci(x: float) -> str:
    """1e-4 rather than 0.0001."""
    if x == 0 or 1e-3 <= abs(x) < 1e4:
        return f"{x:g}"
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


# ------------------------------------------------------------------------------------------------
# off-policy correction
# ------------------------------------------------------------------------------------------------


_CORRECTION_GAP = T.section("correction_gaps")
_CORRECTION_MAPPED = dict.fromkeys(T.section("mapped")["correction"])  # name -> None; read at call time


_MODE_NOTES = T.section("mode_notes")


def _correction_on(plan: ExportPlan, source: str, value, mode: str, extra: str = "") -> None:
    T.row(plan, "pinned.vllm_importance_sampling_correction.vllm_importance_weight", True)
    T.row(plan, "correction_on.converted", value, mode, source=source, note=_MODE_NOTES[mode], note2=extra)


# ------------------------------------------------------------------------------------------------
# metrics, notes and the training script
# ------------------------------------------------------------------------------------------------


def _notes(scn: Scenario, cls: str, geometry_ok: bool) -> list[str]:
    B, G, sync = scn.algorithm.groups_per_step, scn.algorithm.group_size, cls == SYNC_CLASS
    notes = [T.note("notes.surrogate_anchor_sandbox") if sync else T.note("notes.surrogate_anchor_asyncgrpotrainer")]
    if geometry_ok:
        notes.append(
            T.note("notes.batch_sizes_are", G=G, B=B, B_G=B * G)
            if sync
            else T.note("notes.batch_sizes_are.2", B_G=B * G)
        )
    return notes


_SCRIPT_PARTS = T.section("script")
