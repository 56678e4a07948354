"""AReaL's export rules: for each part of the scenario, the rows of ``tables.toml`` its values select
(``export.py`` calls them in order; the rows' words and keys are data in ``tables.toml``)."""

from __future__ import annotations

from math import ceil, inf
from typing import Any

from sandbox.export.common import fixed_lag_gap, proximal_row
from sandbox.export.plan import ExportPlan
from sandbox.export.table import Table

T = Table("areal")


def correction(plan: ExportPlan, *, c, lower) -> None:
    if c.name == "tis":
        T.row(plan, "correction.name.converted.token_tis_truncates", {"name": c.name, "level": c.level}, "token")
        T.row(plan, "pinned.action.truncate_tokens_keep", "clamp")
        T.row(plan, "pinned.metric.w_prox", "ratio")
        T.row(plan, "correction.C.converted", c.C, c.cap, note=" (unset: 2.0 at token level)" if c.C is None else "")
        lower("algorithm.correction.C_low", c.C_low, "floor")
    elif c.name == "mis":
        T.row(plan, "correction.name.converted.token_mis", {"name": c.name, "level": c.level}, "token")
        T.row(plan, "pinned.action.tokens_outside_band", "mask")
        T.row(plan, "pinned.metric.w_prox", "ratio")
        T.row(plan, "correction.C.as_is", c.C)
        lower("algorithm.correction.C_low", c.C_low, "lower band edge")
        T.row(
            plan,
            "correction.seq_weight",
            {
                "seq_weight": c.seq_weight,
                "veto_low": c.veto_low,
                "veto_high": c.veto_high,
                "batch_normalize": c.batch_normalize,
            },
        )
    elif c.name == "icepop":
        T.row(plan, "pinned.level.icepop_masks_tokens", "token")
        T.row(plan, "correction.name.converted.coefficient_w_inside", c.name, "mask")
        T.row(plan, "pinned.metric.w_prox", "ratio")
        T.row(plan, "correction.beta", c.beta)
        lower("algorithm.correction.alpha", c.alpha, "α")
    elif c.name == "geo_mis":
        T.row(plan, "correction.name.converted.mask_response_whose", c.name, "sequence")
        T.row(plan, "pinned.action.reject_whole_response", "mask")
        T.row(plan, "pinned.metric.ratio_metric_aggregated", "ratio")
        T.row(plan, "pinned.agg", "mean")
        T.row(plan, "correction.hi", c.hi)
        T.row(plan, "correction.lo", c.lo)
        T.row(plan, "correction.token_weight", {"token_weight": c.token_weight, "C": c.C})
    elif c.name == "decoupled_ppo":
        T.row(plan, "correction.name.converted.areal_s_decoupled", {"name": c.name, "level": c.level}, "token")
        T.row(plan, "pinned.action.reject_tokens_w", "mask")
        T.row(plan, "pinned.metric.w_prox.3", "ratio")
        T.row(plan, "correction.behave_imp_weight_cap", c.behave_imp_weight_cap)
        T.row(plan, "correction.require_prox", c.require_prox)


def correction_gap(*, c, obj, instead, components, gaps, slot, cap) -> Any:
    """why the correction cannot be written (value None: it can)."""
    if obj.name == "gspo":
        return T.note("correction_gap.correction_needs_areal") + instead
    if c.name in ("tis", "decoupled_ppo") and c.level == "sequence":
        return (
            T.note("correction_gap.sandbox_truncates_product")
            if c.name == "tis"
            else T.note("correction_gap.areal_can_reject")
        ) + components
    if c.name == "mis" and c.level == "sequence":
        return T.note("correction_gap.sequence_mis_keeps") + instead
    if c.name == "mis" and c.batch_normalize:
        return T.note("correction_gap.areal_cannot_renormalise") + instead
    if c.name == "geo_mis" and c.token_weight == "tis":
        return T.note("correction_gap.areal_cannot_combine") + instead
    if c.name == "m2po_mask":
        return None
    if cap is not None:
        return slot or (None if cap > 1 else T.note("correction_gap.areal_needs_upper") + instead)
    return gaps[c.name]


def staleness(plan: ExportPlan, *, scn, st, B, full) -> None:
    if st.kind == "sync":
        T.row(plan, "staleness.converted", "sync", 0)
    elif st.kind == "fixed_lag":
        fixed_lag_gap(plan, scn, T.note("staleness"))
    elif st.kind == "async_ratio":
        T.row(plan, "staleness.no_equivalent", full, bound=T.note("bound", ceil=ceil(st.alpha)))
    else:
        T.row(plan, "staleness.kind", {"kind": st.kind, "k_max": st.k_max}, st.k_max)
        if st.enforcement == "throttle":
            T.row(
                plan,
                "staleness.enforcement.implicit",
                {"enforcement": st.enforcement, "queue_capacity": st.queue_capacity},
            )
        else:
            T.row(
                plan,
                "staleness.enforcement.no_equivalent",
                {"enforcement": st.enforcement, "queue_capacity": st.queue_capacity},
                capacity=st.queue_capacity or (st.k_max + 1) * B,
            )


def partial_rollouts(plan: ExportPlan, *, on, streaming) -> None:
    if not streaming:
        T.row(plan, "partial_rollouts.implicit.rollout_flight_when", on)
    if streaming and on:
        T.row(plan, "partial_rollouts.implicit.areal_s_rollouts", on)
    if streaming and not on:
        T.row(plan, "partial_rollouts.no_equivalent", on)


def optimizer(plan: ExportPlan, *, o, steps, proportion) -> None:
    if o.name == "sgd":
        T.row(plan, "optimizer.name.as_is", "sgd")
        T.row(plan, "optimizer.betas.unused_by_sgd", {"betas": list(o.betas), "eps": o.eps})
        if o.momentum == 0:
            T.row(plan, "optimizer.momentum.implicit", 0.0)
        else:
            T.row(plan, "optimizer.momentum.no_equivalent", o.momentum)
        T.row(plan, "optimizer.weight_decay.as_is.l2_added_gradient", o.weight_decay)
    if o.name != "sgd":
        T.row(
            plan,
            "optimizer.name.converted",
            o.name,
            "adam",
            note=T.note("optimizer.note.identical_torch_adam") if o.name == "adam" else "",
        )
        T.row(plan, "optimizer.betas.converted.betas", list(o.betas), o.betas[0])
        T.row(plan, "optimizer.betas.converted.betas.2", list(o.betas), o.betas[1])
        T.row(plan, "optimizer.eps", o.eps)
        T.row(plan, "optimizer.momentum.unused_by_adam", o.momentum)
        if o.name == "adamw" or o.weight_decay == 0:
            T.row(plan, "optimizer.weight_decay.as_is.written_explicitly_areal", o.weight_decay)
        else:
            T.row(plan, "optimizer.weight_decay.no_equivalent", o.weight_decay)
    T.row(plan, "optimizer.schedule", o.schedule)
    T.row(
        plan,
        "optimizer.warmup_steps",
        o.warmup_steps,
        proportion,
        warmup_steps=o.warmup_steps,
        steps=steps,
        note=T.note("optimizer.note.areal_s_default") if o.warmup_steps == 0 else T.note("optimizer.note.hf_s_warm"),
    )


def pin_mode(plan: ExportPlan, *, decoupled) -> None:
    if decoupled:
        T.row(plan, "pinned.use_decoupled_loss.decoupled_mode_prox", True)
        T.row(plan, "pinned.prox_logp_method", "recompute")
    else:
        T.row(plan, "pinned.use_decoupled_loss.bypass_mode_ppo", False)
        T.row(plan, "pinned.recompute_logprob", False)
    T.row(plan, "pinned.kl_ctl", 0.0)
    T.row(plan, "pinned.adv_norm", None)
    T.row(plan, "pinned.disable_dropout", True)


def objective_name(plan: ExportPlan, *, o) -> None:
    if o.name == "gspo":
        T.row(plan, "objective.name.converted", o.name, "sequence")
    if o.name == "reinforce":
        T.row(plan, "objective.name.implicit.reinforce_sg_log", o.name)
    if o.name == "cispo":
        T.row(plan, "objective.name.implicit.cispo_sg_clip", o.name)
    if o.name not in ("gspo", "reinforce", "cispo"):
        T.row(plan, "objective.name.implicit.areal_s_actor", o.name, note=o.name)


def clip(plan: ExportPlan, *, o, decoupled, dual) -> None:
    if decoupled:
        T.row(
            plan,
            "clip_rows.no_equivalent",
            {"eps_low": o.eps_low, "eps_high": o.eps_high}
            if dual is None
            else {"eps_low": o.eps_low, "eps_high": o.eps_high, "dual_clip_c": dual},
            source=T.note("src.algorithm_objective_eps_low") + ("" if dual is None else T.note("clip_rows")),
            note=T.note("clip_rows.note.set_algorithm_objective") if dual is not None else "",
        )
        if dual is None:
            T.row(plan, "objective.dual_clip_c.implicit", None)
    else:
        T.row(plan, "objective.eps_low.as_is", o.eps_low, what="the sequence ratio" if o.name == "gspo" else "π_θ/μ")
        T.row(plan, "objective.eps_high.as_is", o.eps_high, what="the sequence ratio" if o.name == "gspo" else "π_θ/μ")
        T.row(
            plan,
            "objective.dual_clip_c.as_is",
            dual,
            note=T.note("clip_rows.note.dual_clip_loss") if dual is not None else "no dual clip",
        )


def aggregation(plan: ExportPlan, *, o, value, src) -> None:
    if o.aggregation == "token_mean":
        T.row(plan, "aggregation.implicit", value, source=src)
    else:
        T.row(
            plan,
            "aggregation.no_equivalent",
            value,
            source=src,
            aggregation=o.aggregation,
            effect=T.note("effect.seq_mean_token_mean")
            if o.aggregation == "seq_mean_token_mean"
            else T.note("effect.seq_mean_token_sum")
            if o.aggregation == "seq_mean_token_sum"
            else T.note("effect.seq_mean_token_sum_norm"),
        )


def grpo(plan: ExportPlan, *, G, o, unused_opob, opob_gap) -> None:
    unused_opob(o.baseline)
    if o.beta_kl == 0:
        T.row(plan, "objective.beta_kl.implicit", 0.0)
    else:
        T.row(plan, "objective.beta_kl.no_equivalent", o.beta_kl)
    if o.baseline == "opob":
        opob_gap(T.note("grpo"), std=o.normalize_std, eps=o.eps_std, unbiased=o.std_unbiased is not False)
    if o.baseline != "opob":
        T.row(plan, "objective.baseline.converted.group_mean_baseline", o.baseline, "group")
        T.row(
            plan,
            "objective.normalize_std.converted",
            o.normalize_std,
            "group" if o.normalize_std else None,
            note=T.note("grpo.note.divide_group_s") if o.normalize_std else T.note("grpo.note.dr_grpo_style"),
        )
        if o.normalize_std:
            T.row(plan, "objective.eps_std.as_is", o.eps_std)
            T.row(
                plan,
                "objective.std_unbiased",
                o.std_unbiased,
                o.std_unbiased is not False,
                note="Bessel-corrected std" if o.std_unbiased is not False else "population std",
            )
        else:
            T.row(
                plan,
                "objective.eps_std.implicit.unused_without_std",
                {"eps_std": o.eps_std, "std_unbiased": o.std_unbiased},
            )
        T.row(plan, "pinned.mean_leave1out.group_mean_includes", False)
        T.row(plan, "pinned.group_size", G)


def advantage_knob(plan: ExportPlan, *, rest, o, unused_opob, opob_gap) -> None:
    """ppo, dapo, gspo, cispo: advantage in grpo, dr_grpo, rloo, reward, opob."""
    if o.advantage == "opob":  # the sandbox's opob advantage divides by the population group std
        unused_opob(o.advantage)
        opob_gap(T.note("advantage_knob"), std=True, eps=o.eps_std, unbiased=False)
    else:
        unused_opob(o.advantage)
        if o.advantage == "reward":
            T.row(plan, "objective.advantage.converted.raw_rewards_advantages", o.advantage, None)
        else:
            T.row(
                plan,
                "objective.advantage.converted.note_from_code",
                o.advantage,
                "group",
                note="group mean and std"
                if o.advantage == "grpo"
                else "group mean, no std"
                if o.advantage == "dr_grpo"
                else "leave-one-out group mean",
            )
            rest(
                std="group" if o.advantage == "grpo" else None,
                leave1out=o.advantage == "rloo",
                eps_source="algorithm.objective.eps_std" if o.advantage == "grpo" else None,
            )
        if o.advantage != "grpo":
            T.row(plan, "objective.eps_std.implicit.unused_advantage", o.eps_std, kind=o.advantage)


def reward_norm_rest(plan: ExportPlan, *, o, G, std, leave1out, eps_source) -> None:
    T.row(
        plan,
        "pinned.mean_leave1out.note_from_code",
        leave1out,
        note="leave-one-out group mean" if leave1out else T.note("reward_norm_rest.note"),
    )
    T.row(plan, "pinned.std_level", std, note="divide by the group std" if std else "no std normalisation")
    if std and eps_source:
        T.row(plan, "reward_norm_rest.as_is", o.eps_std, source=eps_source)
    if std:
        T.row(plan, "pinned.std_unbiased.bessel_corrected_group", True)
    T.row(plan, "pinned.group_size", G)


def advantage(plan: ExportPlan, *, G, reinforce, rest, o, unused_opob, opob_gap, grpo, knob) -> None:
    if o.name == "reinforce":
        reinforce()
    elif o.name == "grpo":
        grpo()
    elif o.name == "dr_grpo":
        unused_opob(o.baseline)
        if o.baseline == "opob":
            opob_gap("algorithm.objective.baseline", std=False)
        if o.baseline != "opob":
            T.row(
                plan,
                "objective.baseline.converted.note_from_code",
                o.baseline,
                "group",
                note=T.note("advantage.dr_grpo_centres"),
            )
            rest(std=None, leave1out=False)
    elif o.name == "rloo":
        T.row(plan, "pinned.mean_level", "group", note=T.note("advantage.rloo_i_r_i"))
        T.row(plan, "pinned.mean_leave1out.note_from_code", True, note="leave-one-out group mean")
        T.row(plan, "pinned.std_level", None, note="no std normalisation")
        T.row(plan, "pinned.group_size", G)
    else:
        knob()


def reinforce_baseline(plan: ExportPlan, *, o, kind, norm, G, opob_gap, src, nearest) -> None:
    if kind == "opob":
        opob_gap(src, std=norm)
    elif kind in ("ema", "optimal") or (norm and kind in ("none", "constant", "leave_one_out")):
        T.row(
            plan,
            "reinforce_baseline.no_equivalent",
            {"baseline": kind, "normalize_std": norm},
            source=src,
            why=T.note("why.ema")
            if kind == "ema"
            else T.note("why.optimal")
            if kind == "optimal"
            else T.note("why", kind=kind),
            instead=T.note("instead.baseline_group_mean_leave_one_out")
            if kind in ("ema", "optimal")
            else T.note("instead.baseline_group_mean_grpo"),
        )
        if kind in ("ema", "optimal"):
            nearest(
                f"{kind} baseline",
                mean=True,
                std=norm,
                difference="the group mean replaces the "
                + (
                    T.note("reinforce_baseline.difference.moving_average_past")
                    if kind == "ema"
                    else T.note("reinforce_baseline.difference.gradient_norm_weighted")
                ),
            )
        if kind == "leave_one_out":
            nearest(
                T.note("advantage"),
                mean=True,
                std=True,
                leave1out=True,
                difference=T.note("reinforce_baseline.difference.areal_divides_std"),
            )
        if kind == "constant":
            T.row(plan, "pinned.reward_bias", -o.constant_baseline)
        if kind in ("none", "constant"):
            nearest(
                T.note("reinforce_baseline", kind=kind),
                mean=False,
                std=True,
                difference=T.note("reinforce_baseline.difference.areal_divides_rms"),
            )
    elif kind in ("none", "constant"):
        T.row(
            plan,
            "objective.baseline.converted.group_normalisation",
            kind,
            None,
            note=T.note("reinforce_baseline.note") if kind == "constant" else "",
        )
        if kind == "constant":
            T.row(plan, "objective.constant_baseline", o.constant_baseline, -o.constant_baseline)
        T.row(plan, "objective.normalize_std.implicit", norm)
    else:
        T.row(
            plan,
            "objective.baseline.converted.note_from_code",
            kind,
            "group",
            note="group mean" if kind == "group_mean" else "leave-one-out group mean",
        )
        T.row(
            plan,
            "objective.normalize_std.converted",
            norm,
            "group" if norm else None,
            note="divide by the group std" if norm else "no std normalisation",
        )
        T.row(
            plan,
            "pinned.mean_leave1out.note_from_code",
            kind == "leave_one_out",
            note="leave-one-out group mean" if kind == "leave_one_out" else T.note("reward_norm_rest.note"),
        )
        if norm:
            T.row(plan, "pinned.eps.sandbox_s_reinforce", 1e-6)
            T.row(plan, "pinned.std_unbiased.bessel_corrected_group", True)
        T.row(plan, "pinned.group_size", G)


def minibatches(plan: ExportPlan, *, scn, a, decoupled) -> None:
    """after the loss rows: what several mini-batches do to the loss route, the epochs (no key) and the ratio anchor."""
    if a.minibatches > 1 and decoupled:
        T.row(plan, "minibatches.no_equivalent", a.minibatches)
    if a.epochs == 1:
        T.row(plan, "epochs.implicit", 1)
    else:
        T.row(plan, "epochs.no_equivalent", a.epochs)
    proximal_row(
        plan,
        scn,
        "batch_start" if decoupled else "behaviour",
        T.note("minibatches.actor_use_decoupled_loss_true")
        if decoupled
        else T.note("minibatches.actor_use_decoupled_loss_false"),
    )


def batch(plan: ExportPlan, *, a) -> None:
    T.row(plan, "group_size", a.group_size)
    T.row(plan, "groups_per_step", a.groups_per_step)
    T.row(plan, "pinned.batch_size", a.groups_per_step)
    if a.minibatches == 1:
        T.row(plan, "minibatches.converted.one_optimizer_step", 1, 1)
    else:
        T.row(plan, "minibatches.converted.optimizer_steps_per", a.minibatches, a.minibatches, m=a.minibatches)


def cispo(plan: ExportPlan, *, o) -> None:
    """CISPO's clipped weight through actor.rejection_sampling (the slot is then the objective's)."""
    if o.eps_high <= 0:
        T.row(plan, "objective.eps_low.no_equivalent", {"eps_low": o.eps_low, "eps_high": o.eps_high})
    else:
        T.row(plan, "pinned.level.cispo_clips_each", "token")
        T.row(plan, "pinned.action.truncate_w_into", "clamp")
        T.row(plan, "pinned.metric.band_w_prox", "ratio")
        T.row(
            plan,
            "objective.eps_low.converted",
            o.eps_low,
            1.0 - o.eps_low if 1.0 - o.eps_low > 0 else None,
            note=T.note("cispo.note") if 1.0 - o.eps_low <= 0 else "",
        )
        T.row(plan, "objective.eps_high.converted", o.eps_high, 1.0 + o.eps_high)


def m2po(plan: ExportPlan, *, c, o, weight_needed) -> None:
    """M2PO's mask through m2_threshold; the behaviour weight on kept tokens through rejection_sampling."""
    T.row(
        plan,
        "correction.name.converted.areal_masks_tokens",
        {"name": c.name, "m2_threshold": c.m2_threshold},
        c.m2_threshold,
    )
    T.row(plan, "correction.anchor", c.anchor)
    if o.name == "cispo":
        T.row(plan, "correction.behaviour_weight.implicit.effect_cispo_clipped", c.behaviour_weight)
    if o.name != "cispo" and weight_needed:
        T.row(
            plan,
            "correction.behaviour_weight.implicit.note_from_code",
            c.behaviour_weight,
            note=T.note("note.kept_tokens_carry") if o.name == "reinforce" else T.note("note.effect_sandbox_s"),
        )
        T.row(plan, "pinned.level.weight_kept_tokens", "token")
        T.row(plan, "pinned.action.unbounded_clamp_w", "clamp")
        T.row(plan, "pinned.metric.w_prox.2", "ratio")
        T.row(plan, "pinned.upper", inf)
    if o.name != "cispo" and not weight_needed:
        T.row(plan, "correction.behaviour_weight.implicit.kept_tokens_carry", c.behaviour_weight)


def nearest_reward_norm(plan: ExportPlan, *, what, mean, std, difference, eps, unbiased, leave1out, G) -> None:
    """the group normalisation nearest to an advantage AReaL cannot express."""
    if not mean and not std:
        T.row(plan, "pinned.reward_norm", None, note=T.note("note.nearest_scenario_s", what=what), note2=difference)
    else:
        T.row(
            plan,
            "pinned.mean_level",
            "group" if mean else None,
            note=T.note("note.nearest_scenario_s", what=what)
            + ("" if mean else T.note("nearest_reward_norm.note.centring_scenario"))
            + difference,
        )
        T.row(
            plan,
            "pinned.mean_leave1out.note_from_code",
            leave1out,
            note="leave-one-out group mean" if leave1out else T.note("reward_norm_rest.note"),
        )
        T.row(
            plan,
            "pinned.std_level",
            "group" if std else None,
            note=T.note("nearest_reward_norm.note.divide_group_std")
            if std
            else T.note("nearest_reward_norm.note.std_normalisation_scenario"),
        )
        if std:
            T.row(plan, "pinned.eps.scenario_objective_s", eps)
            T.row(
                plan,
                "pinned.std_unbiased.note_from_code",
                unbiased,
                note="Bessel-corrected group std"
                if unbiased
                else T.note("nearest_reward_norm.note.population_std_scenario"),
            )
        T.row(plan, "pinned.group_size", G)


def metrics(*, corr, stabilizers, weighted) -> dict[str, str]:
    """The [metrics] texts of tables.toml and the metrics whose text depends on the scenario, in PROMOTION.md's order."""
    text = T.section("metrics")
    out = {
        "reward/mean": text["reward/mean"],
        "adv/mean": text["adv/mean"],
        "loss/pg": text["loss/pg"],
        "clip/frac": text["clip/frac"],
        "clip/frac_lower": text["clip/frac_lower"],
        "grad/norm": text["grad/norm"],
        "is/kl_k3": text["is/kl_k3"],
        "is/log_ratio_mean": text["is/log_ratio_mean"],
        "is/ess_ratio": text["is/ess_ratio"],
        "staleness/mean": text["staleness/mean"],
        "staleness/max": text["staleness/max"],
        "system/dropped": text["system/dropped"],
        "system/learner_wait": text["system/learner_wait"],
        "grad/cos_prev": text["grad/cos_prev"],
    }
    if weighted:
        out["is/coef_mean"] = T.note("metrics.ppo_actor_update_behave_imp_weight")
    if weighted and corr == "tis":
        out["is/trunc_frac"] = "`ppo_actor/update/rs_filtered_fraction`"
    if weighted and corr != "tis":
        out["mask/frac"] = "`ppo_actor/update/rs_filtered_fraction`"
    if corr == "m2po_mask":
        out["m2/value"] = "not logged"
    if stabilizers:
        out["lr/scale"] = T.note("metrics.logged_ppo_actor_update")
    return out
