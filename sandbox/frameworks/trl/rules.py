"""TRL's export rules: for each part of the scenario, the rows of ``tables.toml`` its values select
(``export.py`` calls them in order; the rows' words and keys are data in ``tables.toml``)."""

from __future__ import annotations

from typing import Any

from sandbox.export.base import describe
from sandbox.export.common import fixed_lag_gap, no_minibatch_rows, proximal_row
from sandbox.export.plan import ExportPlan
from sandbox.export.table import Table

T = Table("trl")


def correction(plan: ExportPlan, *, c, asy, full, gap, on) -> None:
    if asy:
        if c.name == "none":
            T.row(plan, "correction.implicit.2", "none")
        else:
            T.row(plan, "correction.no_equivalent.2", full)
    elif gap is not None:
        T.row(plan, "correction.no_equivalent.2", full, note=gap)
        T.row(plan, "pinned.vllm_importance_sampling_correction.scenario_s_correction", False)
    elif c.name == "none":
        T.row(plan, "correction.converted", "none", False)
    elif c.name == "tis":
        on(plan, T.note("map_tis"), f"tis, {c.level}", f"{c.level}_truncate")
        if c.C is None:
            T.row(plan, "correction.C.converted", None, c.cap, level=c.level)
        else:
            T.row(plan, "correction.C.as_is.cap_c", c.C)
        T.row(plan, "correction.C_low.as_is.floor_leaves_every", c.C_low)
    elif c.name == "mis":
        on(plan, T.note("map_tis"), f"mis, {c.level}", f"{c.level}_mask")
        T.row(plan, "correction.C.as_is.upper_band_edge", c.C)
        T.row(plan, "correction.C_low.as_is.lower_band_edge", c.C_low)
        if c.level == "sequence":
            T.row(plan, "correction.seq_weight.implicit.kept_response_carries", "ratio")
            T.row(plan, "correction.veto_low", None)
        else:
            T.row(
                plan,
                "correction.seq_weight.implicit.sequence_level_knobs",
                describe({"seq_weight": c.seq_weight, "veto_low": c.veto_low, "veto_high": c.veto_high}),
            )
        T.row(plan, "correction.batch_normalize", False)
    elif c.name == "icepop":
        on(plan, "algorithm.correction.name", "icepop", "token_mask", ": IcePop's band [α, β]")
        T.row(plan, "correction.alpha", c.alpha)
        T.row(plan, "correction.beta", c.beta)
    elif c.name == "opsm":
        T.row(plan, "correction.name", "opsm", False)
        T.row(plan, "correction.delta", c.delta)
    elif c.name == "decoupled_ppo":
        on(plan, T.note("map_tis"), f"decoupled_ppo, {c.level}", "token_mask", T.note("map_decoupled_ppo"))
        T.row(plan, "correction.behave_imp_weight_cap", c.behave_imp_weight_cap)
        T.row(plan, "pinned.vllm_importance_sampling_clip_min", None)
        T.row(plan, "correction.require_prox", c.require_prox)


def optimizer(plan: ExportPlan, *, o) -> None:
    if o.name == "adam" and o.weight_decay > 0:
        T.row(plan, "optimizer.name.no_equivalent", f"adam, weight_decay = {o.weight_decay:g}")
    if o.name in ("adam", "adamw") and not (o.name == "adam" and o.weight_decay > 0):
        T.row(
            plan,
            "optimizer.name.converted.torch_adamw",
            o.name,
            "adamw_torch",
            note=T.note("optimizer.note.weight_decay_adam") if o.name == "adam" else "",
        )
        T.row(
            plan,
            "optimizer.weight_decay",
            o.weight_decay,
            note=T.note("optimizer.note.transformers_decays_every") if o.weight_decay > 0 else "",
        )
    if o.name not in ("adam", "adamw"):
        T.row(plan, "optimizer.name.converted.torch_sgd", "sgd", "sgd")
        T.row(
            plan,
            "optimizer.weight_decay",
            o.weight_decay,
            note=T.note("optimizer.note.transformers_decays_every.2") if o.weight_decay > 0 else "",
        )
    else:
        T.row(plan, "optimizer.betas.converted.note_from_code", list(o.betas), o.betas[0])
        T.row(plan, "optimizer.betas.converted.note_from_code.2", list(o.betas), o.betas[1])
        T.row(plan, "optimizer.eps", o.eps)
        T.row(plan, "optimizer.momentum.implicit.sgd_only", o.momentum)
    if o.name not in ("adam", "adamw"):
        T.row(plan, "optimizer.betas.implicit", describe({"betas": list(o.betas), "eps": o.eps}))
    if o.name not in ("adam", "adamw") and o.momentum > 0:
        T.row(plan, "optimizer.momentum.converted", o.momentum, f"momentum={o.momentum:g}")
    if o.name not in ("adam", "adamw") and not o.momentum > 0:
        T.row(plan, "optimizer.momentum.implicit.torch_sgd_s", 0.0)
    T.row(
        plan,
        "optimizer.schedule",
        o.schedule,
        "constant_with_warmup" if o.schedule == "constant" and o.warmup_steps > 0 else o.schedule,
    )
    T.row(
        plan,
        "optimizer.warmup_steps",
        o.warmup_steps,
        note=T.note("optimizer.note.transformers_warm_up") if o.warmup_steps > 0 else "",
    )


def correction_gap(*, c, mapped, gaps) -> Any:
    """why GRPOTrainer cannot apply the correction (value None: it can)."""
    if c.name not in mapped and c.name not in gaps:
        return T.note("correction_gap.trl_has_equivalent", name=c.name)
    if c.name in gaps:
        return gaps[c.name]
    if c.name == "mis" and c.batch_normalize:
        return T.note("correction_gap.trl_does_renormalise")
    if c.name == "mis" and c.level == "sequence" and c.seq_weight != "ratio":
        return T.note("correction_gap.trl_s_sequence_mask")
    if c.name == "mis" and c.level == "sequence" and (c.veto_low is not None or c.veto_high is not None):
        return T.note("correction_gap.trl_has_per")
    if c.name == "decoupled_ppo" and c.level != "token":
        return T.note("correction_gap.sequence_level_rejection")
    return None


def surrogate(plan: ExportPlan, *, o, asy, source) -> None:
    if asy:
        if o.name == "rloo":
            T.row(plan, "surrogate.no_equivalent.rloo_s_leave", o.name, source=source)
        else:
            T.row(plan, "surrogate.implicit.asyncgrpotrainer_compute_loss_min", o.name, source=source)
    elif o.name == "gspo":
        T.row(plan, "surrogate.converted.gspo_s_sequence", o.name, "sequence", source=source)
    else:
        T.row(plan, "pinned.importance_sampling_level", "token")
        if o.name == "cispo":
            T.row(plan, "surrogate.converted.sg_min_r", o.name, "cispo", source=source)
        if o.name == "rloo":
            T.row(plan, "surrogate.no_equivalent.rloo_s_leave.2", o.name, source=source)
            T.row(plan, "pinned.scale_rewards.closest_rloo_advantages", "none")
        if o.name == "reinforce":
            T.row(plan, "surrogate.implicit.trl_has_unclipped", o.name, source=source)
        if o.name not in ("cispo", "rloo", "reinforce"):
            T.row(plan, "surrogate.implicit.grpotrainer_s_surrogate", o.name, source=source)


def clip(plan: ExportPlan, *, o, asy, source, inert) -> None:
    if o.name == "reinforce":
        pass
    elif o.name == "cispo":
        if o.eps_low >= 1.0:
            T.row(plan, "clip.implicit.lower_bound_cispo", o.eps_low, source="algorithm.objective.eps_low")
        else:
            T.row(
                plan,
                "clip.no_equivalent.trl_s_cispo",
                o.eps_low,
                source="algorithm.objective.eps_low",
                floor=1 - o.eps_low,
            )
        T.row(
            plan,
            "clip.converted.loss_type_cispo_epsilon_high",
            o.eps_high,
            1.0 + o.eps_high,
            source="algorithm.objective.eps_high",
        )
    else:
        T.row(plan, "clip.as_is.note_from_code", o.eps_low, source="algorithm.objective.eps_low", note=inert)
        T.row(plan, "clip.as_is.note_from_code.2", o.eps_high, source="algorithm.objective.eps_high", note=inert)
        if o.dual_clip_c is None:
            T.row(plan, "clip.implicit.dual_clip_trl", None, source=source)
        if o.dual_clip_c is not None and asy:
            T.row(plan, "clip.no_equivalent.asyncgrpoconfig_has_dual", o.dual_clip_c, source=source)
        if o.dual_clip_c is not None and not asy and o.dual_clip_c >= 1.0 + o.eps_high:
            T.row(plan, "clip.converted.trl_s_two", o.dual_clip_c, o.dual_clip_c, source=source)
        if o.dual_clip_c is not None and not asy and o.dual_clip_c < 1.0 + o.eps_high:
            T.row(plan, "clip.no_equivalent.trl_s_delta", o.dual_clip_c, source=source, cap=1 + o.eps_high)


def aggregation(plan: ExportPlan, *, o, asy, source, src, loss_types) -> None:
    if asy and o.aggregation == "token_mean":
        T.row(plan, "aggregation.implicit.asyncgrpotrainer_divides_summed", o.aggregation, source=source)
        if o.name == "dr_grpo":
            T.row(plan, "aggregation.implicit.unused_token_mean", o.max_len, source=src("max_len"))
    elif asy:
        T.row(
            plan,
            "aggregation.no_equivalent.asyncgrpotrainer_only_averages",
            o.aggregation,
            source=source + (" + " + src("max_len") if o.name == "dr_grpo" else ""),
        )
    elif o.name == "cispo":
        if o.aggregation == "token_mean":
            T.row(plan, "aggregation.implicit.loss_type_cispo_normalises", o.aggregation, source=source)
        else:
            T.row(plan, "aggregation.no_equivalent.loss_type_cispo_always", o.aggregation, source=source)
    else:
        T.row(
            plan,
            "aggregation.converted",
            o.aggregation,
            loss_types[o.aggregation][0],
            source=source,
            how=loss_types[o.aggregation][1],
        )
        if o.name == "dr_grpo" and o.aggregation != "seq_mean_token_sum_norm":
            T.row(plan, "aggregation.implicit.unused", o.max_len, source=src("max_len"), agg=o.aggregation)
        if o.name == "dr_grpo" and o.aggregation == "seq_mean_token_sum_norm" and o.max_len is not None:
            T.row(plan, "aggregation.as_is", o.max_len, source=src("max_len"))
        if o.name == "dr_grpo" and o.aggregation == "seq_mean_token_sum_norm" and o.max_len is None:
            T.row(plan, "aggregation.setup", None, source=src("max_len"))


def kl(plan: ExportPlan, *, o, asy, source) -> None:
    if asy:
        if o.beta_kl == 0:
            T.row(plan, "kl.implicit", o.beta_kl, source=source)
        else:
            T.row(plan, "kl.no_equivalent", o.beta_kl, source=source)
    else:
        T.row(plan, "kl.as_is", o.beta_kl, source=source)
        if o.beta_kl > 0:
            T.row(plan, "pinned.use_bias_correction_kl", False)


def advantage(
    plan: ExportPlan, *, knob, scn, cls, o, src, reinforce, baseline, norm, convention, opob_gap, opob_unused, guard
) -> None:
    if o.name == "reinforce":
        reinforce(plan, scn, cls)
    elif o.name == "grpo":
        baseline(plan, o.baseline)
        norm(plan, scn, cls, src("normalize_std"), o.normalize_std, o.normalize_std)
        convention(
            plan,
            scn,
            cls,
            o.std_unbiased,
            o.std_unbiased if o.std_unbiased is not None else o.baseline != "opob",
            o.normalize_std,
        )
        guard(plan, cls, o.eps_std, o.normalize_std)
    elif o.name == "dr_grpo" and o.baseline == "opob":
        opob_gap(plan, "baseline")
    elif o.name == "dr_grpo":
        opob_unused(plan, "baseline = group_mean")
        norm(plan, scn, cls, src("baseline"), "group_mean", False)
    elif o.name != "rloo":  # rloo: the leave-one-out advantage is the objective's name row
        knob(plan)


def advantage_knob(plan: ExportPlan, *, scn, cls, o, sync, src, norm, opob_gap, opob_unused, guard) -> None:
    """ppo, dapo, gspo, cispo: advantage = grpo | dr_grpo | rloo | reward | opob."""
    if o.advantage == "opob":
        opob_gap(plan, "advantage")
        T.row(plan, "advantage_knob.implicit.part_opob_advantage", o.eps_std, source=src("eps_std"))
    elif o.advantage in ("grpo", "dr_grpo"):
        opob_unused(plan, f"advantage = {o.advantage}")
        norm(plan, scn, cls, src("advantage"), o.advantage, o.advantage == "grpo")
        if o.advantage == "grpo":
            guard(plan, cls, o.eps_std, True)
        if o.advantage == "dr_grpo":
            T.row(plan, "advantage_knob.implicit.unused_std_normalisation", o.eps_std, source=src("eps_std"))
    else:
        opob_unused(plan, f"advantage = {o.advantage}")
        T.row(plan, "advantage_knob.implicit.unused_advantage", o.eps_std, source=src("eps_std"), adv=o.advantage)
        if o.advantage == "rloo":
            T.row(
                plan,
                "advantage_knob.no_equivalent.rloo_s_leave",
                o.advantage,
                source=src("advantage"),
                closest=T.note("closest.scale_rewards_none_written")
                if cls == sync
                else T.note("closest.asyncgrpo_always_divides"),
            )
            if cls == sync:
                T.row(plan, "pinned.scale_rewards.closest_rloo_advantages.2", "none")
        if o.advantage != "rloo":
            T.row(plan, "advantage_knob.no_equivalent.raw_rewards_advantages", o.advantage, source=src("advantage"))


def normalisation(plan: ExportPlan, *, value, normalize, source, extra, sync, grpo) -> bool:
    """division of the centred rewards by the group std: GRPOConfig scale_rewards = 'group' | 'none'; AsyncGRPO always divides."""
    if sync:
        T.row(
            plan,
            "normalisation.converted",
            value,
            "group" if normalize else "none",
            source=source,
            note=T.note("normalisation.note") if normalize else "R − group mean, not scaled",
            note2=extra,
        )
        return True
    if not normalize:
        T.row(plan, "normalisation.no_equivalent", value, source=source)
        return True
    if grpo:  # its std_unbiased and eps_std rows carry the convention
        T.row(plan, "normalisation.implicit", value, source=source)
        return True
    return False


def std_guard(plan: ExportPlan, *, source, guard, eps, used, tolerance, sci) -> None:
    if not used:
        T.row(plan, "std_convention.implicit", eps, source=source)
    elif abs(eps - guard) <= tolerance:
        T.row(plan, "std_guard.implicit", eps, source=source, sci=sci(guard), sci2=sci(eps), sci3=sci(abs(eps - guard)))
    else:
        T.row(plan, "std_guard.no_equivalent", eps, source=source, sci=sci(guard), sci2=sci(eps))


def geometry(plan: ExportPlan, *, G, B, m, sync) -> None:
    """one optimizer step = groups_per_step × group_size completions (GRPO needs G ≥ 2)."""
    if G < 2:
        T.row(plan, "group_size.no_equivalent", G)
        T.row(plan, "groups_per_step.setup.prompts_per_optimizer", B)
    else:
        T.row(plan, "group_size.setup", G)
        if sync and m == 1:
            T.row(plan, "groups_per_step.setup.prompts_per_optimizer.2", B, G=G, B=B, B_G=B * G)
        if sync and m != 1:
            T.row(plan, "groups_per_step.setup.prompts_per_generation", B, B // m, B=B, B_m=B // m, G_B_m=B // m * G)
        if sync:
            T.row(plan, "pinned.per_device_train_batch_size", G)
        else:
            T.row(
                plan,
                "groups_per_step.setup.note_from_code",
                B,
                B * G // m,
                note=T.note("geometry.note.prompts_per_optimizer", B_G=B * G)
                if m == 1
                else T.note("geometry.note.prompts_per_published", m=m, G_B_m=B // m * G),
            )
            T.row(plan, "pinned.gradient_accumulation_steps", 1)
            T.row(plan, "pinned.token_budget", 0)


def staleness(
    plan: ExportPlan, *, scn, st, asy, k, partial, G, B, spg, full, admission, minibatches_async, minibatches_sync
) -> None:
    """system.staleness, the mini-batch route and system.partial_rollouts."""
    if asy:
        minibatches_async(plan, scn)
        T.row(plan, "staleness.kind", f"max_lag, k_max = {st.bound}", k)
        admission(plan, scn, k)
        if partial:
            T.row(plan, "partial_rollouts.implicit.asyncgrpotrainer_pauses_vllm", True)
        else:
            T.row(plan, "partial_rollouts.no_equivalent.asyncgrpotrainer_always_continues", False)
    else:
        if st.kind == "sync" and G >= 2:
            T.row(plan, "staleness.converted", "sync", B, note=spg)
        if st.kind == "sync" and G < 2:
            T.row(plan, "staleness.implicit", "sync")
        if st.kind == "fixed_lag":
            fixed_lag_gap(plan, scn, T.note("staleness"))
        if st.kind not in ("sync", "fixed_lag"):
            T.row(plan, "staleness.no_equivalent", full, describe=describe(st.alpha), bound=st.bound)
        if st.kind != "sync" and G >= 2:
            T.row(plan, "pinned.steps_per_generation", B, note=spg)
        minibatches_sync(plan, scn)
        if partial:
            T.row(plan, "partial_rollouts.no_equivalent.grpotrainer_generates_every", True)
        else:
            T.row(plan, "partial_rollouts.implicit.grpotrainer_generates_each", False)


def minibatches_sync(plan: ExportPlan, *, scn, a, instead) -> None:
    """GRPOConfig: a generation batch of groups_per_step groups serves steps_per_generation / gradient_accumulation_steps = minibatches optimizer steps per iteration, num_iterations = epochs (GRPOTrainer._prepare_inputs); π_old is recomputed at generation when a batch serves several steps (old_per_token_logps), else the ratio is 1."""
    if a.group_size < 2:
        no_minibatch_rows(plan, scn, T.note("minibatches_sync.grpoconfig_written_group"), instead)
        T.row(plan, "proximal", a.proximal)
    else:
        if a.minibatches == 1:
            T.row(plan, "minibatches.implicit", 1)
        else:
            T.row(
                plan,
                "minibatches.converted.steps_per_generation_minibatches_gradient_accumulation_steps",
                a.minibatches,
                a.groups_per_step,
                m=a.minibatches,
                B_m=a.groups_per_step // a.minibatches,
            )
        T.row(
            plan,
            "epochs.converted",
            a.epochs,
            a.epochs,
            note=T.note("minibatches_sync.note.reuse_generation_batch")
            if a.epochs == 1
            else T.note("minibatches_sync.note.passes_over_each", E=a.epochs, extra_steps=a.minibatches * a.epochs - 1),
        )
        proximal_row(plan, scn, "batch_start", T.note("minibatches_sync.grpotrainer_s_old_per_token_logps"))


def minibatches_async(plan: ExportPlan, *, scn, a) -> None:
    """AsyncGRPOConfig: weight_sync_steps = minibatches optimizer steps per model version; no epochs."""
    if a.minibatches == 1:
        T.row(plan, "minibatches.converted.one_weight_sync", 1, 1)
    else:
        T.row(plan, "minibatches.converted.one_weight_sync.2", a.minibatches, a.minibatches, m=a.minibatches)
    if a.epochs == 1:
        T.row(plan, "epochs.implicit", 1)
    else:
        T.row(plan, "epochs.no_equivalent", a.epochs)
    proximal_row(plan, scn, "behaviour", T.note("minibatches_async"))


def metrics(*, o) -> dict[str, str]:
    """The [metrics] texts of tables.toml and the metrics whose text depends on the scenario, in PROMOTION.md's order."""
    text = T.section("metrics")
    out = {
        "reward/mean": text["reward/mean"],
        "adv/zero_var_groups": text["adv/zero_var_groups"],
        "is/ess_ratio": text["is/ess_ratio"],
        "is/kl_k3": text["is/kl_k3"],
        "clip/frac": T.note(
            "out.clip_frac", clip="`cispo_clip_ratio`" if o.name == "cispo" else "`clip_ratio/region_mean`"
        ),
        "grad/norm": text["grad/norm"],
        "staleness/mean": text["staleness/mean"],
    }
    if o.name == "grpo" and o.beta_kl > 0:
        out["kl/ref_k3"] = "`kl`"
    return out
