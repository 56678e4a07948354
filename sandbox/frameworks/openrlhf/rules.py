"""OpenRLHF's export rules: for each part of the scenario, the rows of ``tables.toml`` its values select
(``export.py`` calls them in order; the rows' words and keys are data in ``tables.toml``)."""

from __future__ import annotations

from typing import Any

from sandbox.export.base import describe
from sandbox.export.common import fixed_lag_gap, sources, values
from sandbox.export.plan import ExportPlan
from sandbox.export.table import Table

T = Table("openrlhf")


def correction(plan: ExportPlan, *, c, obj, p, full, clip, gate, gap) -> None:
    if obj.name == "gspo":
        T.row(plan, "pinned.is_correction_level.gspo_only_takes", "token")
        if c.name == "none":
            T.row(plan, "correction.implicit.weight_gspo_loss", "none")
        else:
            T.row(plan, "correction.no_equivalent.openrlhf_applies_is_correction", full)
    elif obj.name == "cispo":
        if c.name == "none":
            T.row(plan, "correction.implicit.correction_top_cispo", "none")
        else:
            T.row(plan, "correction.no_equivalent.openrlhf_has_one", full)
    elif c.name == "none":
        T.row(
            plan,
            "pinned.is_correction_level.correction",
            "off",
            note=T.note("correction.note") if obj.name in clip else "",
        )
        T.row(plan, "correction.implicit.correction", "none")
    elif c.name == "tis" and c.level == "token":
        gate(
            plan,
            f"{p}.name + {p}.level + {p}.C + {p}.C_low",
            full,
            "token",
            "clip",
            [c.C_low, c.cap],
            T.note("correction.token_tis_loss") + (T.note("correction.c_unset_sandbox") if c.C is None else ""),
        )
    elif c.name == "mis" and c.level == "token":
        gate(
            plan,
            f"{p}.name + {p}.level + {p}.C + {p}.C_low",
            full,
            "token",
            "mask",
            [c.C_low, c.C],
            T.note("correction.token_mis_w_t"),
        )
        T.row(plan, "correction.seq_weight", describe(values("seq_weight", "veto_low", "veto_high", obj=c)))
        if c.batch_normalize:
            T.row(plan, "correction.batch_normalize.no_equivalent", True)
        else:
            T.row(plan, "correction.batch_normalize.implicit", False)
    elif c.name == "icepop":
        gate(
            plan,
            f"{p}.name + {p}.alpha + {p}.beta",
            full,
            "token",
            "mask",
            [c.alpha, c.beta],
            T.note("correction.icepop_w_t_kept"),
        )
    elif c.name == "decoupled_ppo" and c.level == "token":
        gate(
            plan,
            T.note("correction.algorithm_correction_name"),
            full,
            "token",
            "mask",
            [0.0, c.behave_imp_weight_cap],
            T.note("correction.tokens_w_t_cap"),
        )
        T.row(plan, "correction.require_prox", c.require_prox)
    elif c.name == "geo_mis":
        gate(
            plan,
            f"{p}.name + {p}.lo + {p}.hi",
            describe(values("lo", "hi", obj=c)),
            "seq",
            "mask",
            [c.lo, c.hi],
            T.note("correction.geo_rs_response"),
        )
        if c.token_weight == "none" and obj.name in clip:
            T.row(
                plan,
                "correction.implicit",
                describe(values("token_weight", "C", obj=c)),
                source=f"{p}.token_weight + {p}.C",
            )
        else:
            T.row(
                plan,
                "correction.no_equivalent",
                describe(values("token_weight", "C", obj=c)),
                source=f"{p}.token_weight + {p}.C",
                kept="min(w_t, C)" if c.token_weight == "tis" else "1",
            )
    else:
        T.row(plan, "pinned.is_correction_level.correction_exported_see", "off")
        T.row(plan, "correction.no_equivalent.2", full, note=gap(c))


def optimizer(plan: ExportPlan, *, o, p) -> None:
    if o.name == "sgd":
        T.row(
            plan,
            "optimizer.no_equivalent.openrlhf_s_optimizers",
            describe(values("name", "momentum", "weight_decay", obj=o)),
            source=sources(p, "name", "momentum", "weight_decay"),
        )
        T.row(plan, "optimizer.implicit", describe(values("betas", "eps", obj=o)), source=sources(p, "betas", "eps"))
    else:
        if o.name == "adam" and o.weight_decay > 0:
            T.row(
                plan,
                "optimizer.no_equivalent.torch_adam_adds",
                describe(values("name", "weight_decay", obj=o)),
                source=sources(p, "name", "weight_decay"),
            )
        else:
            if o.name == "adam":
                T.row(plan, "optimizer.name.as_is", "adam")
            else:
                T.row(plan, "optimizer.name.converted", "adamw", "adam")
            T.row(
                plan, "optimizer.weight_decay", o.weight_decay, note=T.note("optimizer.note") if o.weight_decay else ""
            )
        T.row(plan, "optimizer.betas", list(o.betas))
        T.row(plan, "optimizer.eps", o.eps)
        T.row(plan, "optimizer.momentum", o.momentum)


def correction_gap(*, c, gaps) -> Any:
    if c.name == "tis":
        return T.note("correction_gap.sequence_tis_truncates", token_tis=T.note("token_tis"))
    if c.name == "mis":
        return T.note("correction_gap.sequence_mis_keeps", token_tis=T.note("token_tis"))
    if c.name == "decoupled_ppo":
        return T.note("correction_gap.sequence_level_rejection")
    return T.note("correction_gap.openrlhf_corrections_token", why=gaps[c.name])


def loss_type(plan: ExportPlan, *, o, p) -> None:
    if o.name == "cispo":
        T.row(plan, "objective.name.converted.cispo_reinforce_stop", o.name, "ppo")
        T.row(
            plan,
            "loss_type.converted.gate_reads_each",
            [o.eps_low, o.eps_high],
            "token",
            source=sources(p, "eps_low", "eps_high"),
        )
        T.row(
            plan,
            "loss_type.converted.clamp_w_t_into",
            [o.eps_low, o.eps_high],
            "clip",
            source=sources(p, "eps_low", "eps_high"),
        )
        T.row(plan, "pinned.is_correction_gating.gate_reads_ratio.2", "ratio")
        T.row(
            plan,
            "loss_type.converted.low_high",
            [o.eps_low, o.eps_high],
            [1.0 - o.eps_low, 1.0 + o.eps_high],
            source=sources(p, "eps_low", "eps_high"),
        )
    else:
        if o.name == "reinforce":
            T.row(plan, "objective.name.converted.openrlhf_s_ppo", o.name, "ppo")
        if o.name == "gspo":
            T.row(plan, "objective.name.converted.sequence_ratio_s_i", o.name, "gspo")
        if o.name not in ("reinforce", "gspo"):
            T.row(plan, "objective.name.converted.ppo_clip_surrogate", o.name, "ppo")


def advantage(plan: ExportPlan, *, o, g, p, reinforce, estimator, opob_gap, group_norm_knobs, stand_in) -> None:
    if o.name == "reinforce":
        reinforce(plan, o, g)
    elif o.name == "rloo":
        estimator(plan, g, "algorithm.objective.name", "rloo", "rloo", T.note("advantage.r_i_mean__r_j"))
    elif o.name in ("grpo", "dr_grpo") and o.baseline == "opob":
        opob_gap(
            plan,
            o,
            ["baseline", "normalize_std", "eps_std", "std_unbiased"] if o.name == "grpo" else ["baseline"],
            o.name == "grpo" and o.normalize_std,
        )
    elif o.name == "grpo" and o.normalize_std:
        estimator(
            plan,
            g,
            sources(p, "baseline", "normalize_std"),
            describe(values("baseline", "normalize_std", obj=o)),
            "group_norm",
            T.note("advantage.r_mean_g_std_g"),
        )
        group_norm_knobs(plan, o.eps_std, o.std_unbiased, "eps_std", "std_unbiased")
    elif o.name == "grpo":
        estimator(
            plan,
            g,
            sources(p, "baseline", "normalize_std"),
            describe(values("baseline", "normalize_std", obj=o)),
            "dr_grpo",
            T.note("advantage.r_mean_g_std"),
        )
        T.row(
            plan,
            "std_convention.implicit",
            describe(values("eps_std", "std_unbiased", obj=o)),
            source=sources(p, "eps_std", "std_unbiased"),
        )
    elif o.name == "dr_grpo":
        estimator(
            plan,
            g,
            sources(p, "baseline"),
            describe(values("baseline", obj=o)),
            "dr_grpo",
            T.note("advantage.r_mean_g_std"),
        )
    elif o.advantage == "opob":  # ppo, dapo, gspo, cispo: the advantage knob
        opob_gap(plan, o, ["advantage", "eps_std"], True)
    elif o.advantage == "reward":
        T.row(
            plan,
            "advantage.no_equivalent",
            describe(values("advantage", "eps_std", obj=o)),
            source=sources(p, "advantage", "eps_std"),
        )
        stand_in(plan, False)
    elif o.advantage == "grpo":
        estimator(plan, g, f"{p}.advantage", o.advantage, "group_norm", T.note("advantage.group_norm"))
        group_norm_knobs(plan, o.eps_std, None, "eps_std", None)
    else:
        estimator(
            plan,
            g,
            f"{p}.advantage",
            o.advantage,
            "dr_grpo" if o.advantage == "dr_grpo" else "rloo",
            T.note("advantage.dr_grpo") if o.advantage == "dr_grpo" else T.note("advantage.rloo"),
        )
        T.row(plan, "objective.eps_std", o.eps_std, kind=o.advantage)


def staleness(plan: ExportPlan, *, scn, st, value, async_, queue, bound) -> None:
    if st.kind == "sync":
        T.row(plan, "staleness.implicit.without_train_async_enable", value)
    elif st.kind == "fixed_lag":
        if st.k == 0:
            T.row(plan, "staleness.implicit.fixed_lag_synchronous", value)
        else:
            fixed_lag_gap(plan, scn, f"In OpenRLHF that bound is {async_} {queue} {st.k}")
    elif st.kind == "async_ratio":
        if st.alpha == 0:
            T.row(plan, "staleness.implicit.synchronous_without_train", value)
        else:
            T.row(
                plan,
                "staleness.no_equivalent",
                value,
                bound=f"k_max = {bound}" if bound is not None else "a finite k_max",
            )
    elif st.k_max == 0:
        T.row(plan, "staleness.implicit.k_max_synchronous_without", value)
    else:
        T.row(plan, "staleness.kind", "max_lag", True)
        T.row(plan, "staleness.k_max", st.k_max, st.k_max)
        if st.enforcement == "throttle":
            T.row(
                plan,
                "staleness.enforcement.implicit",
                describe({"enforcement": st.enforcement, "queue_capacity": st.queue_capacity}),
            )
        else:
            T.row(
                plan,
                "staleness.enforcement.no_equivalent",
                describe({"enforcement": st.enforcement, "queue_capacity": st.queue_capacity}),
                k_max=st.k_max,
            )


def partial_rollouts(plan: ExportPlan, *, on, is_async) -> None:
    if not on:
        T.row(plan, "partial_rollouts.implicit", False)
    if on and is_async:
        T.row(plan, "partial_rollouts.as_is", True)
    if on and not is_async:
        T.row(plan, "partial_rollouts.no_equivalent", True)


def schedule(plan: ExportPlan, *, o, steps) -> None:
    """the sandbox's schedule names are transformers' get_scheduler names."""
    T.row(
        plan,
        "optimizer.schedule",
        o.schedule,
        ("constant_with_warmup" if o.warmup_steps else "constant") if o.schedule == "constant" else o.schedule,
    )
    T.row(
        plan,
        "optimizer.warmup_steps",
        o.warmup_steps,
        o.warmup_steps / steps,
        note="no warm-up" if not o.warmup_steps else T.note("schedule.note", warmup_steps=o.warmup_steps, steps=steps),
    )


def batch(plan: ExportPlan, *, a, samples) -> None:
    T.row(plan, "group_size", a.group_size)
    T.row(plan, "groups_per_step", a.groups_per_step)
    if a.minibatches == 1:
        T.row(plan, "minibatches.converted.groups_per_step_group_size_samples", 1, samples, samples=samples)
    else:
        T.row(
            plan,
            "minibatches.converted.groups_per_step_group_size_minibatches",
            a.minibatches,
            samples // a.minibatches,
            samples_m=samples // a.minibatches,
            m=a.minibatches,
        )
    if a.epochs == 1:
        T.row(plan, "epochs.converted.one_pass_over", 1, 1, note=T.note("batch.note") if a.minibatches == 1 else "")
    else:
        T.row(plan, "epochs.converted.passes_over_each", a.epochs, a.epochs, E=a.epochs)
    T.row(plan, "pinned.vllm_generate_batch_size", a.groups_per_step)


def clip(plan: ExportPlan, *, o, stale, proximal, eps, knobs, twin) -> None:
    """the PPO clip (REINFORCE and CISPO have none); a lagged behaviour anchor has no equivalent."""
    if o.name in ("reinforce", "cispo"):
        pass
    elif o.name == "gspo":
        T.row(plan, "clip.as_is.clip_sequence_ratio", [o.eps_low, o.eps_high], source=eps)
        T.row(plan, "objective.dual_clip_c.implicit.gspo_has_dual", o.dual_clip_c)
    elif not stale or proximal == "batch_start":
        T.row(
            plan,
            "clip.as_is.note_from_code",
            [o.eps_low, o.eps_high],
            source=eps,
            note=T.note("clip.note.lag_both_anchors")
            if proximal == "behaviour"
            else T.note("clip.note.both_clips_act"),
        )
        if o.dual_clip_c is None:
            T.row(plan, "objective.dual_clip_c.implicit.dual_clip_actor", None)
        else:
            T.row(plan, "objective.dual_clip_c.as_is", o.dual_clip_c)
    else:
        T.row(plan, "clip.no_equivalent", knobs(o)[0], source=knobs(o)[1], reinforce_twin=twin(o))
        if o.dual_clip_c is None:
            T.row(plan, "objective.dual_clip_c.implicit.dual_clip", None)


def kl(plan: ExportPlan, *, o, beta) -> None:
    if beta is None:
        T.row(plan, "pinned.init_coef", 0.0)
    elif beta == 0:
        T.row(plan, "objective.beta_kl.as_is.kl_openrlhf_creates", 0.0)
    elif o.aggregation != "token_mean":
        T.row(plan, "objective.beta_kl.no_equivalent", beta, aggregation=o.aggregation)
        T.row(plan, "pinned.init_coef", 0.0)
    else:
        T.row(plan, "objective.beta_kl.as_is.kl_loss", beta)
        T.row(plan, "pinned.use_loss", True)
        T.row(plan, "pinned.estimator.k3_ref_ref", "k3")


def aggregation(plan: ExportPlan, *, o, p, target) -> None:
    if target is None:
        T.row(
            plan,
            "aggregation.no_equivalent",
            o.aggregation,
            source=p + ".aggregation + " + p + ".max_len" if o.name == "dr_grpo" else p + ".aggregation",
            nearest="seq_mean_token_mean" if o.name == "gspo" else "token_mean",
        )
    else:
        T.row(
            plan,
            "objective.aggregation",
            o.aggregation,
            target,
            note=T.note("aggregation.token_mean")
            if target == "token-mean"
            else T.note("aggregation.seq_mean_token_mean"),
        )
        if o.name == "dr_grpo":
            T.row(plan, "objective.max_len", o.max_len)


def group_norm_knobs(plan: ExportPlan, *, eps, unbiased, eps_name, unbiased_name, group_norm_eps, tolerance) -> None:
    """group_norm's hard-coded ε (GROUP_NORM_EPS) and Bessel-corrected std against the objective's."""
    if abs(eps - group_norm_eps) <= tolerance:
        T.row(
            plan, "objective.implicit.group_norm_adds_e", eps, eps_name=eps_name, eps=eps, abs=abs(eps - group_norm_eps)
        )
    else:
        T.row(plan, "objective.no_equivalent.group_norm_hard_codes", eps, eps_name=eps_name, eps=eps)
    if unbiased_name is not None and unbiased is False:
        T.row(plan, "objective.no_equivalent.group_norm_uses_torch", False, unbiased_name=unbiased_name)
    if unbiased_name is not None and unbiased is not False:
        T.row(plan, "objective.implicit.group_norm_uses_bessel", unbiased, unbiased_name=unbiased_name)


def reinforce_advantage(plan: ExportPlan, *, o, g, src, value, opob_gap, estimator, stand_in) -> None:
    """REINFORCE's baseline as an advantage estimator (value, src: the used knobs)."""
    if o.baseline in ("opob", "optimal"):
        opob_gap(plan, o, ["baseline", "normalize_std"], o.normalize_std)
    elif o.baseline == "group_mean" and o.normalize_std:
        estimator(plan, g, src, value, "group_norm", T.note("reinforce_advantage"))
    elif o.baseline == "group_mean":
        estimator(plan, g, src, value, "dr_grpo", T.note("advantage.r_mean_g_std"))
    elif o.baseline == "leave_one_out" and not o.normalize_std:
        estimator(plan, g, src, value, "rloo", T.note("advantage.r_i_mean__r_j"))
    else:
        T.row(
            plan,
            "reinforce_advantage.no_equivalent",
            value,
            source=src,
            what=T.note("what.leave_one_out")
            if o.baseline == "leave_one_out"
            else f"baseline {o.baseline}" + (" with group-std normalisation" if o.normalize_std else ""),
        )
        stand_in(plan, o.normalize_std)
