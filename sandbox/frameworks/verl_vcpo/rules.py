"""the VCPO fork of verl's export rules: for each part of the scenario, the rows of ``tables.toml`` its values select
(``export.py`` calls them in order; the rows' words and keys are data in ``tables.toml``)."""

from __future__ import annotations

from typing import Any

from sandbox.export.base import describe
from sandbox.export.common import fixed_lag_gap
from sandbox.export.plan import ExportPlan
from sandbox.export.table import Table
from sandbox.frameworks.verl.export import map_tis

T = Table("verl_vcpo")


def correction(plan: ExportPlan, *, c, route, src, full, why, corr, mask, rs, off, geo) -> None:
    if c.name == "none":
        T.row(plan, "correction.name.converted.weights", "none", None)
        T.row(plan, "pinned.rollout_rs.rejection", None)
    elif route != "reinforce":
        T.row(plan, "correction.no_equivalent.ratio_route_fork", full)
        off(plan, T.note("map_correction_0_9"))
    elif c.name == "tis":
        map_tis(plan, c, f"{corr}.rollout_is", f"{corr}.rollout_is_threshold")
        T.row(plan, "pinned.rollout_rs.rejection", None)
    elif c.name == "mis":
        if c.level == "token":
            T.row(plan, "correction.name.converted.weights_w_t_truncation", "mis, token", "token")
            T.row(plan, "correction.C.as_is", float(c.C))
            rs(plan, f"{src}.C_low", c.C_low, "token", c.C_low, c.C, f"token band [C_low, C]; {mask}")
            T.row(plan, "correction.implicit.2", c.seq_weight, knob="seq_weight")
            T.row(plan, "correction.implicit.2", c.veto_low, knob="veto_low")
            T.row(plan, "correction.implicit.2", c.veto_high, knob="veto_high")
        if c.level != "token":
            if c.seq_weight == "ratio":
                T.row(plan, "correction.name.converted.kept_responses_weighted", "mis, sequence", "sequence")
                T.row(plan, "correction.C.as_is", float(c.C))
            else:
                T.row(plan, "correction.name.converted.weight_pure_rejection", "mis, sequence", None)
                T.row(plan, "correction.C.implicit", c.C)
            rs(
                plan,
                f"{src}.seq_weight + {src}.C_low",
                f"{c.seq_weight}, {c.C_low:g}",
                "sequence",
                c.C_low,
                c.C,
                T.note("map_correction_fork.reject_response_when"),
            )
            if c.veto_low is None:
                T.row(plan, "correction.veto_low.implicit", None)
            else:
                T.row(plan, "correction.veto_low.as_is", c.veto_low)
            if c.veto_high is None:
                T.row(plan, "correction.veto_high.implicit", None)
            else:
                T.row(plan, "correction.veto_high.no_equivalent", c.veto_high)
        if (not c.batch_normalize or (c.level == "sequence" and c.seq_weight == "one")) and c.batch_normalize in (
            True,
            False,
        ):
            T.row(
                plan,
                "correction.batch_normalize.as_is",
                c.batch_normalize,
                note="raw weights" if not c.batch_normalize else T.note("map_correction_fork.note"),
            )
        if (not c.batch_normalize or (c.level == "sequence" and c.seq_weight == "one")) and c.batch_normalize not in (
            True,
            False,
        ):
            T.row(
                plan,
                "correction.batch_normalize.converted",
                c.batch_normalize,
                True,
                note="raw weights" if not c.batch_normalize else T.note("map_correction_fork.note"),
            )
        if not (not c.batch_normalize or (c.level == "sequence" and c.seq_weight == "one")):
            T.row(plan, "correction.batch_normalize.no_equivalent", c.batch_normalize)
    elif c.name == "geo_mis":
        rs(
            plan,
            f"{src}.name + {src}.lo + {src}.hi",
            f"[{c.lo:g}, {c.hi:g}]",
            "geometric",
            c.lo,
            c.hi,
            T.note("map_correction_fork.reject_response_when.2"),
        )
        geo(plan, c, src)
    elif c.name == "icepop":
        T.row(plan, "correction.name.converted.weights_w_t", c.name, "token")
        T.row(plan, "correction.beta", float(c.beta))
        rs(plan, f"{src}.alpha", c.alpha, "token", c.alpha, c.beta, f"token band [α, β]; {mask}")
    elif c.name == "decoupled_ppo" and c.level == "token":
        T.row(plan, "correction.name.converted.behaviour_weights_w_t", f"{c.name}, token", "token")
        T.row(plan, "correction.behave_imp_weight_cap", float(c.behave_imp_weight_cap))
        T.row(plan, "pinned.rollout_rs.reject_tokens_w_t", "token")
        T.row(plan, "pinned.rollout_rs_threshold.cap", float(c.behave_imp_weight_cap))
        T.row(plan, "pinned.rollout_rs_threshold_lower.lower_edge", 0.0)
        T.row(plan, "correction.require_prox", c.require_prox)
    else:
        T.row(plan, "correction.no_equivalent.instead_sandbox_s", full, why=why)
        off(plan, T.note("map_correction_0_9"))


def optimizer(plan: ExportPlan, *, o, OPTIM, MEGATRON_EXTRA) -> None:
    """Megatron's Adam applies decoupled weight decay (AdamW); its SGD defaults to momentum 0.9."""
    if o.name == "sgd":
        T.row(plan, "optimizer.name.converted.megatron_sgd", o.name, "sgd", OPTIM=OPTIM)
        T.row(plan, "optimizer.momentum", o.momentum, o.momentum, MEGATRON_EXTRA=MEGATRON_EXTRA)
        T.row(plan, "optimizer.betas.unused_by_sgd", f"{list(o.betas)}, {o.eps:g}")
    else:
        if o.name == "adam" and o.weight_decay > 0:
            T.row(plan, "optimizer.name.no_equivalent", o.name)
        else:
            T.row(plan, "optimizer.name.converted.megatron_s_adam", o.name, "adam", OPTIM=OPTIM)
        if list(o.betas) == [0.9, 0.999]:
            T.row(plan, "optimizer.betas.implicit", list(o.betas))
        else:
            T.row(plan, "optimizer.betas.converted", list(o.betas), o.betas[0], MEGATRON_EXTRA=MEGATRON_EXTRA)
            T.row(plan, "pinned.adam_beta2", o.betas[1], MEGATRON_EXTRA=MEGATRON_EXTRA)
        if o.eps == 1e-8:
            T.row(plan, "optimizer.eps.implicit", o.eps)
        else:
            T.row(plan, "optimizer.eps.converted", o.eps, o.eps, MEGATRON_EXTRA=MEGATRON_EXTRA)
        T.row(plan, "optimizer.momentum.unused_by_adam", o.momentum)
    T.row(plan, "optimizer.weight_decay", o.weight_decay, OPTIM=OPTIM)
    T.row(plan, "optimizer.schedule", o.schedule, OPTIM=OPTIM)
    T.row(
        plan,
        "optimizer.warmup_steps",
        o.warmup_steps,
        o.warmup_steps,
        OPTIM=OPTIM,
        note="no warm-up" if o.warmup_steps == 0 else T.note("map_optimizer_megatron.note"),
    )


def opob_weight_gap(*, o, c) -> Any:
    """why the fork's OPOB weight differs from the sandbox's (value None: they agree)."""
    if o.baseline == "optimal":
        return None if c.name == "none" else T.note("opob_weight_gap.fork_s_weight")
    if c.name == "none":
        return None if o.opob_weight == "readme" else T.note("opob_weight_gap.without_factor_loss")
    if not (c.name == "tis" and c.level == "sequence" and c.C_low == 0):
        return T.note("opob_weight_gap.fork_s_weight.2")
    if o.opob_weight == "readme":
        return T.note("opob_weight_gap.g_i_already_carries", cap=c.cap)
    if o.opob_clip_c != c.cap:
        return T.note("opob_weight_gap.fork_s_min", cap=c.cap, opob_clip_c=o.opob_clip_c)
    return None


def opob(plan: ExportPlan, *, o, c, kind, kind_src, norm_src, GB, gap) -> None:
    """grad_baselining.* for the OPOB and optimal baselines on the REINFORCE route."""
    T.row(plan, "map_opob.converted.b_g_w_i", kind, True, GB=GB, source=kind_src)
    T.row(
        plan,
        "pinned.use_is_weights",
        kind == "opob",
        GB=GB,
        note=T.note("map_opob.note.opob_w_i_includes")
        if kind == "opob"
        else T.note("map_opob.note.optimal_baseline_w_i"),
    )
    T.row(plan, "pinned.agg_mode", "mean", GB=GB)
    T.row(plan, "pinned.use_clipped_is_ratios", False, GB=GB)
    T.row(plan, "pinned.normalize_by_length", False, GB=GB)
    if kind == "optimal" and gap:
        T.row(plan, "objective.opob_weight.no_equivalent", o.opob_weight, note=gap)
    if kind == "optimal" and not gap:
        T.row(plan, "objective.opob_weight.implicit.unused_optimal_baseline", o.opob_weight)
    if kind == "optimal":
        T.row(plan, "objective.opob_clip_c.implicit.unused_optimal_baseline", o.opob_clip_c)
    if kind != "optimal" and gap:
        T.row(plan, "objective.opob_weight.no_equivalent", o.opob_weight, note=gap)
        T.row(plan, "objective.opob_clip_c.implicit.see_opob_weight", o.opob_clip_c)
    if kind != "optimal" and not gap:
        T.row(
            plan,
            "objective.opob_weight.implicit.fork_s_w_i",
            o.opob_weight,
            note=T.note("map_opob.note.factor_readme_weight")
            if c.name == "none"
            else T.note("map_opob.note.carries_min_w"),
        )
        T.row(
            plan,
            "objective.opob_clip_c.implicit.note_from_code",
            o.opob_clip_c,
            note=T.note("map_opob.note.c_rollout_is_threshold_sequence")
            if c.name != "none"
            else "unused by the README weight",
        )
    if o.opob_leave_one_out:
        T.row(plan, "objective.opob_leave_one_out.no_equivalent", True)
    else:
        T.row(plan, "objective.opob_leave_one_out.implicit", False)
    T.row(plan, "objective.opob_grad_norms", o.opob_grad_norms)
    if o.opob_scope == "group":
        T.row(plan, "objective.opob_scope.as_is", o.opob_scope, GB=GB)
        T.row(plan, "map_opob.as_is", o.normalize_std, GB=GB, source=norm_src)
        T.row(plan, "pinned.norm_adv_by_std_in_grpo", o.normalize_std)
    else:
        T.row(plan, "objective.opob_scope.converted", o.opob_scope, "minibatch", GB=GB)
    if o.opob_scope != "group" and o.normalize_std and o.opob_scope == "minibatch":
        T.row(plan, "map_opob.no_equivalent.scope_minibatch_fork", True, source=norm_src)
    if o.opob_scope != "group" and o.normalize_std and o.opob_scope != "minibatch":
        T.row(plan, "map_opob.converted.values_r_mean_g", True, True, source=norm_src)
    if o.opob_scope != "group" and not o.normalize_std:
        T.row(plan, "map_opob.converted.values_r_mean_g.2", False, False, source=norm_src)


def staleness(plan: ExportPlan, *, scn, st, cfg, full) -> None:
    T.row(plan, "pinned.trigger_parameter_sync_step", 1)
    T.row(plan, "pinned.require_batches", 1)
    if st.kind == "sync":
        T.row(plan, "staleness.converted", "sync", 0.0)
    if st.kind == "max_lag":
        T.row(plan, "staleness.kind", f"max_lag, {cfg.k_max}", float(cfg.k_max))
        if cfg.enforcement == "throttle":
            T.row(plan, "staleness.enforcement.implicit", "throttle")
            T.row(plan, "staleness.queue_capacity", cfg.queue_capacity)
        else:
            T.row(plan, "staleness.enforcement.no_equivalent", f"drop, {describe(cfg.queue_capacity)}")
    if st.kind == "fixed_lag":
        fixed_lag_gap(plan, scn, T.note("map_staleness_fork"))
        T.row(plan, "pinned.staleness_threshold", 0.0)
    if st.kind not in ("sync", "max_lag", "fixed_lag"):
        T.row(plan, "staleness.no_equivalent", full, bound=st.bound)
        T.row(plan, "pinned.staleness_threshold", 0.0)
    T.row(plan, "partial_rollouts", scn.system.partial_rollouts)


def metrics(*, per_traj) -> dict[str, str]:
    """The [metrics] texts of tables.toml and the metrics whose text depends on the scenario, in PROMOTION.md's order."""
    text = T.section("metrics")
    out = {
        "is/ess_ratio": T.note("metrics.is_ess_ratio.staleness_ess_records")
        if per_traj
        else T.note("metrics.is_ess_ratio.logged_only_update_policy_per_traj"),
        "is/chi2": text["is/chi2"],
        "is/kl_k3": text["is/kl_k3"],
        "clip/frac": text["clip/frac"],
        "grad/norm": text["grad/norm"],
        "staleness/mean": T.note("metrics.staleness_mean.actor_local_traj_records_trainer_param_version")
        if per_traj
        else T.note("metrics.staleness_mean.fully_async_partial_max_partial_span"),
    }
    return out
