"""OpenRLHF 0.11.2 export table; the mapping and its upstream sources: docs/promotion.md#mapping-tables-by-framework-version."""

from __future__ import annotations

import shlex
from typing import Any

from sandbox.algorithms import OBJECTIVES
from sandbox.algorithms.objectives.base import OPOB_KNOBS
from sandbox.export.base import Exporter, Given, Version, describe, register
from sandbox.export.common import (
    OBJ,
    STD_GUARD_TOLERANCE,
    baseline_knobs,
    proximal_row,
    scale_rows,
    sources,
    staleness_of,
    values,
)
from sandbox.export.engine import stabilizer_rows
from sandbox.export.plan import ExportPlan
from sandbox.export.table import Table
from sandbox.frameworks.openrlhf import rules
from sandbox.scenario.api import Scenario

T = Table("openrlhf")

SCRIPT = T.note("script")

ASYNC = "--train.async_enable"
QUEUE = "--train.async_queue_size"

CLIP_OBJECTIVES = tuple(n for n in OBJECTIVES if OBJECTIVES[n].impl.ratio_clip)  # the PPO-clip surrogates
GROUP_NORM_EPS = 1e-9  # hard-coded in experience_maker.py (group_norm)
AGGREGATIONS = {"token_mean": "token-mean", "seq_mean_token_mean": "seq-mean-token-mean"}

ANCHOR = T.note("anchor")
SANDBOX_COMPONENTS = T.note("sandbox_components")
NOT_IN_OPENRLHF = T.section("correction_gaps")
STABILIZERS = T.section("stabilizers")
STEP_HOOK = T.note("step_hook")


@register
class OpenRLHFExporter(Exporter):
    name = "openrlhf"
    title = T.note("title")
    versions = (Version("0.11", "0.11.2", "openrlhf 0.11.2 wheel (cp311)"),)
    components = property(lambda self: T.components(correction=[*NOT_IN_OPENRLHF]))
    expresses = T.section("expresses")

    # ------------------------------------------------------------------------------------------
    def plan(self, scn: Scenario, version: Version, given: Given) -> ExportPlan:
        plan = self.new_plan(version, f"`{SCRIPT}` (Ray + vLLM + DeepSpeed)")
        a, c, o, st = scn.algorithm, scn.algorithm.correction, scn.algorithm.optimizer, scn.system.staleness
        rules.staleness(
            plan,
            scn=scn,
            st=st,
            value=describe(st.model_dump()),
            async_=ASYNC,
            queue=QUEUE,
            bound=staleness_of(scn).bound if st.kind == "async_ratio" else None,
        )
        is_async = (
            st.kind not in ("sync", "fixed_lag", "async_ratio") and st.k_max != 0
        )  # the asynchronous trainer is written
        rules.partial_rollouts(plan, on=scn.system.partial_rollouts, is_async=is_async)
        rules.batch(plan, a=a, samples=a.groups_per_step * a.group_size)
        _objective(plan, scn, staleness_of(scn).bound > 0, a.proximal)
        # OpenRLHF recomputes π_old once per rollout batch (the sandbox's proximal = "batch_start"); the REINFORCE
        # and CISPO mappings rely on ratio 1 (one step per batch)
        proximal_row(plan, scn, "batch_start", ANCHOR)
        if a.updates_per_batch > 1 and a.objective.name in ("reinforce", "cispo"):
            T.row(plan, "minibatches.no_equivalent", f"{a.minibatches} x {a.epochs}", name=a.objective.name)
        rules.correction(
            plan,
            c=c,
            obj=a.objective,
            p="algorithm.correction",
            full=describe(c.model_dump()),
            clip=CLIP_OBJECTIVES,
            gate=_gate,
            gap=lambda c: rules.correction_gap(c=c, gaps=NOT_IN_OPENRLHF),
        )
        stabilizer_rows(plan, scn, STABILIZERS, "OpenRLHF", STEP_HOOK)
        rules.optimizer(plan, o=o, p="algorithm.optimizer")
        rules.schedule(plan, o=o, steps=scn.run.steps)
        scale_rows(
            plan,
            scn,
            given,
            "--actor.adam.lr",
            "--actor.max_norm",
            framework_lr_default=1e-6,
            framework_clip_default=1.0,
        )
        plan.metrics = T.section("metrics")
        plan.notes += [
            T.note("plan.anchor_openrlhf_s"),
            T.note("plan.without_partial_rollouts"),
            T.note("plan.flags_txt_holds"),
        ]
        return plan

    def files(self, plan: ExportPlan) -> dict[str, str]:
        lines = [line for key, value in plan.settings.items() if (line := flag_line(key, value))]
        # launch.sh from the table's template: the user's setup variables and flags, then the exported flags
        return {
            "flags.txt": "\n".join(lines) + "\n",
            "launch.sh": T.text("launch_sh").format(
                release=plan.release, exported="".join(f"  {ln}\n" for ln in lines)
            ),
        }

    def launch(self, plan: ExportPlan, files: dict[str, str]) -> str:
        return (
            "MODEL_PATH=<hf model or path> PROMPT_DATASET=<hf dataset or path> "
            "REWARD=<reward server URL or reward_func .py> bash launch.sh"
        )


# ----------------------------------------------------------------------------------------------
# flags
# ----------------------------------------------------------------------------------------------


def _token(value: Any) -> str:
    if isinstance(value, bool):
        raise TypeError("exporter bug: booleans are bare flags, not values")
    if isinstance(value, float):
        return repr(value)
    return shlex.quote(str(value))


def flag_line(key: str, value: Any) -> str | None:
    """One line of flags.txt: a bare flag for ``True`` (store_true), nothing for ``False``."""
    if value is True:
        return key
    if value is False or value is None:
        return None
    if isinstance(value, (list, tuple)):
        return " ".join([key, *(_token(v) for v in value)])
    return f"{key} {_token(value)}"


# ----------------------------------------------------------------------------------------------
# objective
# ----------------------------------------------------------------------------------------------


def _reinforce_twin(obj: Any) -> str:
    """The sandbox objective OpenRLHF trains at one optimizer step per batch: REINFORCE with the same
    advantages and aggregation, as a ``--set`` value."""
    kind = getattr(obj, "advantage", None)
    if obj.name in ("grpo", "dr_grpo"):
        kind = "opob" if obj.baseline == "opob" else ("grpo" if getattr(obj, "normalize_std", False) else "dr_grpo")
    elif obj.name == "rloo":
        kind = "rloo"
    baseline, norm = {
        "grpo": ("group_mean", "true"),
        "dr_grpo": ("group_mean", "false"),
        "rloo": ("leave_one_out", "false"),
        "reward": ("none", "false"),
        "opob": ("opob", "true"),
    }[kind]
    return (
        f'algorithm.objective={{name="reinforce",baseline="{baseline}",normalize_std={norm},'
        f'aggregation="{obj.aggregation}"}}'
    )


def _objective(plan: ExportPlan, scn: Scenario, stale: bool, proximal: str = "behaviour") -> None:
    obj = scn.algorithm.objective
    if obj.name == "tba":
        T.row(plan, "objective.no_equivalent.trajectory_balance_squared", describe(obj.model_dump()))
        T.row(plan, "pinned.policy_loss_type", "ppo")
        _stand_in(plan, True)
        T.row(plan, "pinned.init_coef", 0.0)
        return
    rules.loss_type(plan, o=obj, p=OBJ)
    _advantage(plan, obj, scn.algorithm.group_size)
    _clip(plan, obj, stale, proximal)
    rules.kl(plan, o=obj, beta=getattr(obj, "beta_kl", None))
    rules.aggregation(
        plan,
        o=obj,
        p=OBJ,
        target=None
        if obj.name == "gspo" and obj.aggregation != "seq_mean_token_mean"
        else AGGREGATIONS.get(obj.aggregation),
    )
    if obj.name != "rloo" and "opob" not in (getattr(obj, "baseline", None), getattr(obj, "advantage", None)):
        T.row(plan, "objective.implicit", describe(values(*OPOB_KNOBS, obj=obj)), source=sources(OBJ, *OPOB_KNOBS))


def _advantage(plan: ExportPlan, obj: Any, g: int) -> None:
    rules.advantage(
        plan,
        o=obj,
        g=g,
        p=OBJ,
        reinforce=_reinforce_advantage,
        estimator=_estimator,
        opob_gap=_opob_gap,
        group_norm_knobs=_group_norm_knobs,
        stand_in=_stand_in,
    )


def _estimator(plan: ExportPlan, g: int, src: str, value: Any, estimator: str, note: str) -> None:
    """The advantage row, with what OpenRLHF's clamp of advantages to ``--reward.clip_range`` (±10 by
    default, models/utils.py compute_reward) does to it."""
    if estimator == "group_norm":
        bound = (g - 1) / g**0.5  # largest |z-score| with the Bessel std in a group of g
        clamp = (
            T.note("clamp.clamp_reward_clip_range", bound=bound)
            if bound <= 10
            else T.note("clamp.abs_can_reach", bound=bound)
        )
    else:
        clamp = T.note("clamp.openrlhf_clamps_these")
    T.row(plan, "estimator.converted", value, estimator, source=src, note=note, clamp=clamp)


def _group_norm_knobs(
    plan: ExportPlan, eps: float, unbiased: bool | None, eps_name: str, unbiased_name: str | None
) -> None:
    rules.group_norm_knobs(
        plan,
        eps=eps,
        unbiased=unbiased,
        eps_name=eps_name,
        unbiased_name=unbiased_name,
        group_norm_eps=GROUP_NORM_EPS,
        tolerance=STD_GUARD_TOLERANCE,
    )


def _reinforce_advantage(plan: ExportPlan, obj: Any, g: int) -> None:
    used, unused = baseline_knobs(obj.baseline)
    T.row(
        plan,
        "reinforce_advantage.implicit",
        describe(values(*unused, obj=obj)),
        source=sources(OBJ, *unused),
        b=obj.baseline,
    )
    rules.reinforce_advantage(
        plan,
        o=obj,
        g=g,
        src=sources(OBJ, "baseline", "normalize_std", *used),
        value=describe(values("baseline", "normalize_std", *used, obj=obj)),
        opob_gap=_opob_gap,
        estimator=_estimator,
        stand_in=_stand_in,
    )


def _opob_gap(plan: ExportPlan, obj: Any, knobs: list[str], normalize: bool) -> None:
    names = [*knobs, *OPOB_KNOBS]
    what = (
        "the variance-optimal baseline"
        if getattr(obj, "baseline", None) == "optimal"
        else T.note("what.vcpo_off_policy")
    )
    vcpo = T.note("vcpo") if "VCPO" in what else ""
    T.row(
        plan,
        "opob_gap.no_equivalent.openrlhf",
        describe(values(*names, obj=obj)),
        source=sources(OBJ, *names),
        what=what,
        vcpo=vcpo,
    )
    _stand_in(plan, normalize)


def _stand_in(plan: ExportPlan, normalize: bool) -> None:
    """A critic-free estimator for a partial export whose advantage has no equivalent (OpenRLHF's
    default ``gae`` would train a critic)."""
    estimator = "group_norm" if normalize else "dr_grpo"
    T.row(plan, "pinned.estimator.stand_so_written", estimator, estimator=estimator)


def _clip(plan: ExportPlan, obj: Any, stale: bool, proximal: str = "behaviour") -> None:
    names = lambda o: ["eps_low", "eps_high"] + (["dual_clip_c"] if o.dual_clip_c is not None else [])
    rules.clip(
        plan,
        o=obj,
        stale=stale,
        proximal=proximal,
        eps=sources(OBJ, "eps_low", "eps_high"),
        knobs=lambda o: (describe(values(*names(o), obj=o)), sources(OBJ, *names(o))),
        twin=_reinforce_twin,
    )


# ----------------------------------------------------------------------------------------------
# correction
# ----------------------------------------------------------------------------------------------


def _gate(plan: ExportPlan, src: str, value: Any, level: str, mode: str, band: list[float], note: str) -> None:
    T.row(plan, "gate.converted.note_from_code", value, level, source=src, note=note)
    T.row(
        plan,
        "gate.converted.note_from_code.2",
        value,
        mode,
        source=src,
        note=T.note("gate.note.clip_clamp_w_t") if mode == "clip" else T.note("gate.note.mask_out_band"),
    )
    T.row(plan, "pinned.is_correction_gating.gate_reads_ratio", "ratio")
    T.row(plan, "gate.converted.low_high_gated", value, band, source=src)
