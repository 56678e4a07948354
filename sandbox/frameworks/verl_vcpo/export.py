"""VCPO fork of verl, git c7f030f0 export table; the mapping and its upstream sources: docs/promotion.md#mapping-tables-by-framework-version."""

from __future__ import annotations

from typing import Any

from sandbox.algorithms.objectives.base import OPOB_KNOBS
from sandbox.export.base import Exporter, Given, Version, describe, register
from sandbox.export.common import proximal_row, scale_rows, staleness_of
from sandbox.export.engine import stabilizer_rows
from sandbox.export.plan import ExportPlan
from sandbox.export.table import Table
from sandbox.frameworks.verl.export import (
    ACTOR,
    CORR,
    STABILIZERS,
    STEP_HOOK,
    ObjectiveTarget,
    map_batch,
    map_geo_token_weight,
    map_objective,
    nearest_group_estimator,
    objective_route,
    overrides_text,
    yaml_text,
)
from sandbox.frameworks.verl_vcpo import rules
from sandbox.frameworks.verl_vcpo.config_names import CONFIG_NAME, ESS, GB, MEGATRON_EXTRA, OPTIM
from sandbox.scenario.api import Scenario

T = Table("verl_vcpo")

VCPO_C7F030F0 = Version("c7f030f0", "c7f030f0", "mit-han-lab/vcpo git c7f030f0")


def _per_trajectory(plan: ExportPlan) -> None:
    """Pin the per-trajectory path's keys, each unless an earlier row already wrote it (the path serves OPOB and the LR rule)."""
    for key, value, note in (
        (f"{ACTOR}.update_policy_per_traj", True, T.note("per_trajectory.vcpo_s_per")),
        (f"{ACTOR}.ppo_micro_batch_size_per_gpu", 1, T.note("per_trajectory.per_trajectory_path")),
        (f"{ACTOR}.use_dynamic_bsz", False, T.note("per_trajectory.per_trajectory_path.2")),
        ("algorithm.adv_estimator", "grpo", T.note("per_trajectory.per_trajectory_path.3")),
    ):
        if key not in plan.settings:
            T.row(plan, "pinned.once", value, target=key, note=note)


# ------------------------------------------------------------------------------------------------
# OPOB (grad_baselining) and the ESS learning rate (ess_scaling)
# ------------------------------------------------------------------------------------------------


def _map_opob(plan: ExportPlan, scn: Scenario, sources: dict[str, str | None]) -> None:
    """``grad_baselining.*`` for the OPOB (``baseline = 'opob'``) and optimal (``'optimal'``) baselines."""
    obj = scn.algorithm.objective
    kind_src, norm_src = sources["kind"], sources["normalize"]
    kind = getattr(obj, "baseline", None) or obj.advantage
    knobs = [f"algorithm.objective.{k}" for k in OPOB_KNOBS if hasattr(obj, k)]
    if obj.name != "reinforce":
        rest = [s for s in (norm_src, sources["eps_std"], sources["std_unbiased"]) if s]
        T.row(
            plan,
            "map_opob.no_equivalent.fork_s_gradient",
            kind,
            source=" + ".join([kind_src, *rest, *knobs]),
            name=obj.name,
        )
        nearest_group_estimator(
            plan, bool(getattr(obj, "normalize_std", obj.name != "dr_grpo")), f"{kind} baseline", T.note("map_opob")
        )
        return

    _per_trajectory(plan)
    rules.opob(
        plan,
        o=obj,
        c=scn.algorithm.correction,
        kind=kind,
        kind_src=kind_src,
        norm_src=norm_src,
        GB=GB,
        gap=rules.opob_weight_gap(o=obj, c=scn.algorithm.correction),
    )  # why the fork's OPOB weight differs, or None


def _vcpo_lr(plan: ExportPlan, src: str, s: Any) -> None:
    _per_trajectory(plan)
    T.row(plan, "name", s.name, True, src=src, ESS=ESS)
    T.row(plan, "rho_ref", s.rho_ref, src=src, ESS=ESS)
    T.row(plan, "mode", s.mode, src=src, ESS=ESS)
    T.row(plan, "pinned.use_clipped", False, ESS=ESS)


# ------------------------------------------------------------------------------------------------
# corrections (the fork's 0.7.0.dev rollout_correction: rollout_rs token|sequence|geometric on π/μ)
# ------------------------------------------------------------------------------------------------

MASK_NOTE = T.note("mask_note")


def _rs(plan: ExportPlan, source: str, value: Any, level: str, lo: float, hi: float, note: str) -> None:
    T.row(plan, "rs.converted", value, level, source=source, note=note)
    T.row(plan, "pinned.rollout_rs_threshold.upper_band_edge", float(hi))
    T.row(plan, "pinned.rollout_rs_threshold_lower.lower_band_edge", float(lo))


CORRECTION_GAPS = T.section("correction_gaps")


def _off(plan: ExportPlan, why: str) -> None:
    T.row(plan, "pinned.rollout_is", None, note=why)
    T.row(plan, "pinned.rollout_rs.rejection", None)


# ------------------------------------------------------------------------------------------------
# the exporter
# ------------------------------------------------------------------------------------------------

FORK_OBJECTIVES = ObjectiveTarget(
    loss_modes=frozenset({"vanilla", "gspo"}),
    reinforce_why=T.note("fork_objectives.reinforce_why"),
    aggregation_gaps={"token_mean": T.note("fork_objectives.token_mean")},
    opob=_map_opob,
    aggregation_note=T.note("fork_objectives.aggregation_note"),
)


@register
class VerlVCPOExporter(Exporter):
    """mit-han-lab/vcpo at c7f030f0: the fully-async Megatron recipe with VCPO (module docstring)."""

    name = "verl-vcpo"
    title = T.note("title")
    versions = (VCPO_C7F030F0,)
    components = property(lambda self: T.components(correction=[*CORRECTION_GAPS]))
    expresses = T.section("expresses")

    def plan(self, scn: Scenario, version: Version, given: Given) -> ExportPlan:
        plan = self.new_plan(version, T.note("plan.python_m_recipe"))
        rules.staleness(
            plan,
            scn=scn,
            st=staleness_of(scn),
            cfg=scn.system.staleness,
            full=describe(scn.system.staleness.model_dump()),
        )
        route = objective_route(scn)
        T.row(plan, "pinned.use_rollout_log_probs", True)
        T.row(plan, "pinned.compute_prox_log_prob", False)
        T.row(
            plan,
            "pinned.skip_recompute_old_log_prob",
            route == "reinforce",
            note=T.note("plan.note.reinforce_route_ratio")
            if route == "reinforce"
            else T.note("plan.note.ratio_route_old_log_probs"),
        )
        T.row(plan, "pinned.calculate_log_probs", True)
        T.row(plan, "pinned.hybrid_engine", False)
        map_objective(plan, scn, route, FORK_OBJECTIVES)
        c = scn.algorithm.correction
        rules.correction(
            plan,
            c=c,
            route=route,
            src="algorithm.correction",
            full=describe(c.model_dump()),
            why=CORRECTION_GAPS.get(c.name),
            corr=CORR,
            mask=MASK_NOTE,
            rs=_rs,
            off=_off,
            geo=map_geo_token_weight,
        )
        map_batch(plan, scn, prompts_key=f"{ACTOR}.ppo_mini_batch_size")
        proximal_row(plan, scn, "behaviour", T.note("plan.async_training_use_rollout_log_probs_ratio"))
        T.row(plan, "pinned.train_batch_size", 0)
        T.row(plan, "pinned.gen_batch_size", 1)
        ess = (
            route == "reinforce" and plan.settings.get("algorithm.adv_estimator") == "grpo"
        )  # the fork's ESS LR scaling
        stabilizer_rows(
            plan,
            scn,
            {**STABILIZERS, "vcpo_lr": _vcpo_lr if ess else T.note("map_stabilizers_fork.vcpo_lr")},
            "verl",
            STEP_HOOK,
        )
        per_traj = plan.settings.get(f"{ACTOR}.update_policy_per_traj", False)
        if not per_traj:
            T.row(plan, "pinned.update_policy_per_traj", False)
        # Megatron's optimizer (verl/utils/megatron/optimizer.py: optimizer, lr, min_lr, clip_grad, weight_decay, then
        # override_optimizer_config, whose extra fields are the export's only + appends; optim.betas is not read)
        rules.optimizer(plan, o=scn.algorithm.optimizer, OPTIM=OPTIM, MEGATRON_EXTRA=MEGATRON_EXTRA)
        scale_rows(
            plan, scn, given, f"{OPTIM}.lr", f"{OPTIM}.clip_grad", framework_lr_default=1e-6, framework_clip_default=1.0
        )
        plan.metrics = rules.metrics(per_traj=per_traj)
        plan.notes += [
            T.note("plan.pypi_install_fork"),
            T.note("plan.one_trainer_step"),
        ]
        return plan

    def files(self, plan: ExportPlan) -> dict[str, str]:
        return {
            "overrides.txt": overrides_text(
                plan.settings, frozenset(k for k in plan.settings if k.startswith(MEGATRON_EXTRA + "."))
            ),
            "vcpo_config.yaml": yaml_text(
                plan, f"same keys as overrides.txt, nested; merge onto the fork's composed {CONFIG_NAME}"
            ),
            # launch.sh from the table's template; per-trajectory updates take no micro-batch size
            "launch.sh": T.text("launch_sh").format(
                release=plan.release,
                B=plan.settings.get(f"{ACTOR}.ppo_mini_batch_size"),
                **{
                    k: "" if plan.settings.get(f"{ACTOR}.update_policy_per_traj", False) else T.text(k)
                    for k in ("micro_batch_var", "micro_batch_arg")
                },
            ),
        }

    def launch(self, plan: ExportPlan, files: dict[str, str]) -> str:
        return (
            "VCPO_DIR=/path/to/vcpo MODEL_PATH=/path/to/model TRAIN_FILES=/path/to/train.parquet "
            "VAL_FILES=/path/to/val.parquet TOTAL_ROLLOUT_STEPS=<prompts in total> bash launch.sh"
        )
