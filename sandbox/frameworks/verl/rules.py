"""verl's export rules: for each part of the scenario, the rows of ``tables.toml`` its values select
(``export.py`` calls them in order; the rows' words and keys are data in ``tables.toml``)."""

from __future__ import annotations

from math import inf

from sandbox.export.common import fixed_lag_gap, proximal_row
from sandbox.export.plan import ExportPlan
from sandbox.export.table import Table

T = Table("verl")


def correction(
    plan: ExportPlan, *, c, route, objective, full, why, corr, band, no_lower, off, map_tis, geo, map_mis
) -> None:
    if c.name == "none":
        T.row(plan, "correction.name.converted.weights_written_explicitly", "none", None)
        T.row(plan, "pinned.rollout_rs", None)
    elif route != "reinforce":
        T.row(plan, "correction.no_equivalent.verl_s_v1", full, name=objective)
        off(plan, T.note("map_correction_0_9"))
    elif c.name == "tis":
        map_tis(plan, c, f"{corr}.rollout_is", f"{corr}.rollout_is_threshold")
        T.row(plan, "pinned.rollout_rs", None)
    elif c.name == "mis":
        map_mis(plan, c)
    elif c.name == "geo_mis":
        T.row(plan, "correction.name.converted.mask_response_when", c.name, "seq_mean_k1")
        T.row(plan, "correction.lo", f"[{c.lo:g}, {c.hi:g}]", band(1.0 / c.hi, 1.0 / c.lo))
        geo(plan, c, "algorithm.correction")
    elif c.name == "icepop":
        T.row(plan, "correction.name.converted.icepop_w_t_w_t", c.name, "token")
        T.row(
            plan,
            "correction.alpha",
            f"[{c.alpha:g}, {c.beta:g}]",
            band(c.alpha if c.alpha > 0 else no_lower, c.beta),
            note=T.note("map_correction_0_9.note") if c.alpha == 0 else "",
        )
        T.row(plan, "pinned.rollout_rs", None)
    elif c.name == "decoupled_ppo" and c.level == "token":
        T.row(plan, "correction.name.converted.behaviour_weight_w_t", f"{c.name}, token", "token")
        T.row(
            plan, "correction.behave_imp_weight_cap", c.behave_imp_weight_cap, band(no_lower, c.behave_imp_weight_cap)
        )
        T.row(plan, "correction.require_prox", c.require_prox)
        T.row(plan, "pinned.rollout_rs", None)
    else:
        T.row(plan, "correction.no_equivalent.instead_run_sandbox", full, why=why, name=c.name)
        off(plan, T.note("map_correction_0_9"))


def optimizer(plan: ExportPlan, *, o, optim, classes, per, warmup) -> None:
    T.row(plan, "optimizer.name", o.name, classes[o.name], optim=optim)
    if o.name != "sgd":
        T.row(plan, "optimizer.betas.as_is", list(o.betas), optim=optim)
    else:
        T.row(plan, "optimizer.betas.implicit", list(o.betas))
    if o.name != "sgd" and o.eps != 1e-8:
        T.row(
            plan, "map_optimizer_fsdp.converted", o.eps, {"eps": o.eps}, optim=optim, source="algorithm.optimizer.eps"
        )
    if o.name == "sgd" and o.momentum != 0:
        T.row(
            plan,
            "map_optimizer_fsdp.converted",
            o.momentum,
            {"momentum": o.momentum},
            optim=optim,
            source="algorithm.optimizer.momentum",
        )
    if o.name != "sgd" and o.eps == 1e-8:
        T.row(plan, "optimizer.eps.implicit.torch_s_default", o.eps)
    if o.name == "sgd" and o.momentum == 0:
        T.row(plan, "optimizer.momentum", o.momentum)
    if o.name != "sgd":
        T.row(plan, "optimizer.momentum.unused_by_adam", o.momentum)
    else:
        T.row(plan, "optimizer.eps.implicit.unused_sgd", o.eps)
    T.row(plan, "optimizer.weight_decay", o.weight_decay, optim=optim)
    if o.schedule == "linear":
        T.row(plan, "optimizer.schedule.no_equivalent", o.schedule)
    else:
        T.row(
            plan,
            "optimizer.schedule.as_is",
            o.schedule,
            optim=optim,
            note=T.note("map_optimizer_fsdp.note.constant_learning_rate")
            if o.schedule == "constant"
            else T.note("map_optimizer_fsdp.note.half_cosine_over"),
        )
    if o.schedule == "cosine":
        T.row(plan, "pinned.min_lr_ratio", 0.0, optim=optim)
        T.row(plan, "pinned.num_cycles", 0.5, optim=optim)
    T.row(
        plan,
        "optimizer.warmup_steps",
        o.warmup_steps,
        warmup,
        optim=optim,
        note="no warm-up"
        if o.warmup_steps == 0
        else T.note("map_optimizer_fsdp.note.linear_warm_up")
        + (
            ""
            if per == 1
            else T.note("map_optimizer_fsdp.note.verl_s_scheduler", per=per)
            + str(per)
            + T.note("map_optimizer_fsdp.note.learning_rate_constant")
        ),
    )


def mis(plan: ExportPlan, *, c, band, no_lower, batch) -> None:
    if c.level == "token":
        T.row(plan, "correction.name.converted.masked_w_t_c_low", "mis, token", "token")
        T.row(
            plan,
            "correction.C.converted.lo_hi_threshold_zeroes",
            f"[{c.C_low:g}, {c.C:g}]",
            band(c.C_low if c.C_low > 0 else no_lower, c.C),
            note="" if c.C_low > 0 else T.note("map_mis.note.c_low_written_e"),
        )
        T.row(plan, "pinned.rollout_rs", None)
        T.row(plan, "correction.implicit.2", c.seq_weight, knob="seq_weight")
        T.row(plan, "correction.implicit.2", c.veto_low, knob="veto_low")
        T.row(plan, "correction.implicit.2", c.veto_high, knob="veto_high")
        batch(plan, c)
    else:
        if c.seq_weight == "ratio":
            T.row(plan, "correction.name.converted.sequence_weight_w", "mis, sequence, ratio", "sequence")
            T.row(
                plan,
                "correction.C.converted.lo_hi_threshold_w",
                f"[{c.C_low:g}, {c.C:g}]",
                band(c.C_low if c.C_low > 0 else no_lower, c.C),
                note="" if c.C_low > 0 else T.note("map_mis.note.c_low_written_e"),
            )
            T.row(plan, "pinned.rollout_rs", None)
        else:
            T.row(plan, "correction.name.converted.reject_response_when", "mis, sequence, one", "seq_sum_k1")
            T.row(
                plan,
                "correction.C.converted.k1_bands_are",
                f"[{c.C_low:g}, {c.C:g}]",
                band(1.0 / c.C, 1.0 / c.C_low if c.C_low > 0 else inf),
            )
            T.row(plan, "pinned.rollout_is.pure_rejection", None)
        if c.veto_low is None:
            T.row(plan, "correction.implicit.2", None, knob="veto_low")
        else:
            T.row(plan, "correction.no_equivalent.verl_has_per", c.veto_low, knob="veto_low")
        if c.veto_high is None:
            T.row(plan, "correction.implicit.2", None, knob="veto_high")
        else:
            T.row(plan, "correction.no_equivalent.verl_has_per", c.veto_high, knob="veto_high")
        batch(plan, c)


def mis_batch_normalize(plan: ExportPlan, *, c) -> None:
    if not c.batch_normalize:
        T.row(plan, "correction.batch_normalize.as_is", False)
    elif c.level == "sequence" and c.seq_weight == "one":
        T.row(plan, "correction.batch_normalize.implicit", c.batch_normalize)
    elif c.batch_normalize == "verl_band":
        T.row(plan, "correction.batch_normalize.converted", c.batch_normalize, True)
    else:
        T.row(
            plan,
            "correction.batch_normalize.no_equivalent",
            c.batch_normalize,
            note=T.note("map_mis.note.sandbox_over_kept")
            if c.batch_normalize in (True, "kept_tokens")
            else T.note("map_mis.note.verl_is_rs_normalises_truncated"),
        )


def advantage(plan: ExportPlan, *, kind, kind_source, normalize, normalize_source, nearest, whats) -> None:
    if kind == "group_mean":
        T.row(plan, "advantage.converted.group_mean_baseline", kind, "grpo", source=kind_source)
        if normalize_source is not None:
            T.row(plan, "advantage.as_is", normalize, source=normalize_source)
        else:
            T.row(
                plan,
                "pinned.norm_adv_by_std_in_grpo.note_from_code",
                normalize,
                note=T.note("advantage.note") if not normalize else "GRPO std normalisation",
            )
    elif kind == "leave_one_out" and not normalize:
        T.row(plan, "advantage.converted.verl_s_rloo", kind, "rloo", source=kind_source)
        if normalize_source is not None:
            T.row(plan, "advantage.converted.std_normalisation_rloo", normalize, False, source=normalize_source)
        else:
            T.row(plan, "pinned.norm_adv_by_std_in_grpo.std_normalisation_rloo", False)
    elif kind == "leave_one_out":
        T.row(
            plan,
            "advantage.no_equivalent.verl_s_rloo",
            f"{kind}, normalize_std = true",
            kind_source=kind_source,
            normalize_source=normalize_source,
        )
        nearest(plan, True, T.note("advantage"), T.note("advantage.grpo_centres_group"))
    elif kind == "opob":
        T.row(plan, "advantage.no_equivalent.vcpo_s_off", kind, source=kind_source)
        nearest(plan, normalize, "OPOB baseline", T.note("advantage.grpo_s_baseline"))
    elif kind == "optimal":
        T.row(plan, "advantage.no_equivalent.variance_optimal_scalar", kind, source=kind_source)
        nearest(plan, normalize, "variance-optimal baseline", T.note("advantage.grpo_s_baseline.2"))
    else:
        T.row(plan, "advantage.no_equivalent.every_verl_estimator", kind, source=kind_source, what=whats[kind])
        nearest(plan, normalize, whats[kind], T.note("advantage.grpo_centres_each"))


def kl(plan: ExportPlan, *, beta) -> None:
    if beta is None:
        T.row(plan, "pinned.use_kl_loss.sandbox_objective_has", False)
    elif beta == 0:
        T.row(plan, "objective.beta_kl.converted", beta, False)
    else:
        T.row(plan, "pinned.use_kl_loss.kl_reference_model", True)
        T.row(plan, "objective.beta_kl.as_is", beta)
        T.row(plan, "pinned.kl_loss_type", "k3")


def clip(plan: ExportPlan, *, o, dual_clip, no_dual, has_dual) -> None:
    T.row(plan, "objective.eps_low", o.eps_low)
    T.row(plan, "objective.eps_high", o.eps_high)
    if has_dual and not dual_clip:
        T.row(plan, "objective.dual_clip_c.implicit", o.dual_clip_c)
    if has_dual and dual_clip and o.dual_clip_c is None:
        T.row(plan, "objective.dual_clip_c.converted", None, no_dual)
    if has_dual and dual_clip and o.dual_clip_c is not None:
        T.row(plan, "objective.dual_clip_c.as_is", o.dual_clip_c)


def eps_std(plan: ExportPlan, *, source, eps, used, close) -> None:
    if not used:
        T.row(plan, "eps_std.implicit.unused_advantage_std", eps, source=source)
    elif close:
        T.row(plan, "eps_std.implicit.verl_adds_e", eps, source=source)
    else:
        T.row(plan, "eps_std.no_equivalent", eps, source=source)


def aggregation(plan: ExportPlan, *, o, agg, modes, gaps, agg_note, has_max_len) -> None:
    if agg in gaps:
        T.row(plan, "objective.aggregation.no_equivalent", agg, note=gaps[agg])
    else:
        T.row(
            plan,
            "objective.aggregation.converted",
            agg,
            modes[agg],
            note=agg_note + (T.note("aggregation") if agg == "seq_mean_token_sum_norm" else ""),
        )
    if has_max_len and agg != "seq_mean_token_sum_norm":
        T.row(plan, "objective.max_len.implicit.unused_only_seq_mean_token_sum_norm", o.max_len)
    if has_max_len and agg == "seq_mean_token_sum_norm" and o.max_len is None:
        T.row(plan, "objective.max_len.implicit.l_const_padded_response", None)
    if has_max_len and agg == "seq_mean_token_sum_norm" and o.max_len is not None:
        T.row(plan, "objective.max_len.as_is", o.max_len)


def staleness(plan: ExportPlan, *, scn, st, cfg, B, m, full) -> None:
    if st.kind == "sync":
        T.row(plan, "staleness.converted", "sync", "sync")
    elif st.kind == "fixed_lag":
        fixed_lag_gap(plan, scn, T.note("map_staleness_v1.k_verl_s") if cfg.k == 1 else "")
        T.row(plan, "pinned.trainer_mode", "sync")
    elif st.kind == "async_ratio":
        T.row(plan, "staleness.no_equivalent", full, bound=st.bound)
        T.row(plan, "pinned.trainer_mode", "sync")
    else:
        T.row(plan, "staleness.kind", "max_lag", "separate_async")
        if m == 1:
            T.row(plan, "pinned.parameter_sync_step", 1)
        else:
            T.row(plan, "minibatches.converted.weights_pushed_after", m, m, m=m)
        T.row(plan, "staleness.k_max.converted.t_counts_versions", cfg.k_max, cfg.k_max + 1)
        if cfg.enforcement == "throttle":
            T.row(plan, "staleness.k_max.converted.admission_window_k_max", cfg.k_max, cfg.k_max)
            T.row(plan, "staleness.queue_capacity", cfg.queue_capacity)
        else:
            T.row(
                plan,
                "staleness.queue_capacity.prefetch_window",
                cfg.queue_capacity,
                max((cfg.queue_capacity or (cfg.k_max + 1) * B) // B - 1, 0),
                note=T.note("map_staleness_v1.note", capacity=cfg.queue_capacity or (cfg.k_max + 1) * B)
                + (
                    T.note("map_staleness_v1.rounded_down_whole", B=B)
                    if (cfg.queue_capacity or (cfg.k_max + 1) * B) % B
                    else ""
                ),
            )
        T.row(plan, "staleness.enforcement", cfg.enforcement, "drop")
        T.row(plan, "pinned.backend", "nccl")


def partial_rollouts(plan: ExportPlan, *, pr, sync) -> None:
    if sync:
        if pr:
            T.row(plan, "partial_rollouts.no_equivalent.staleness_control_above", pr)
        else:
            T.row(plan, "partial_rollouts.implicit.sync_trainer_generates", pr)
    else:
        if pr:
            T.row(plan, "partial_rollouts.implicit.always_async_v1", pr)
        else:
            T.row(plan, "partial_rollouts.no_equivalent.async_v1_trainers", pr)


def batch(plan: ExportPlan, *, a, m, E, B, mini, prompts_key) -> None:
    T.row(plan, "group_size", a.group_size, a.group_size)
    T.row(plan, "groups_per_step", a.groups_per_step, a.groups_per_step, target=prompts_key)
    if prompts_key != mini:
        T.row(
            plan,
            "minibatches.converted.note_from_code",
            m,
            B // m,
            target=mini,
            note=T.note("map_batch.note.mini_batch_whole")
            if m == 1
            else T.note("map_batch.note.groups_per_step_minibatches_prompts", B_m=B // m, m=m),
        )
    if prompts_key == mini and m == 1:
        T.row(plan, "minibatches.implicit", m)
    if prompts_key == mini and m != 1:
        T.row(plan, "minibatches.no_equivalent.fork_s_fully", m)
    T.row(
        plan,
        "epochs.converted",
        E,
        E,
        note=T.note("map_batch.note.one_pass_over")
        if m * E == 1
        else "one pass over the batch"
        if E == 1
        else T.note("map_batch.note.passes_over_batch", E=E),
    )


def std_unbiased(plan: ExportPlan, *, unbiased, used, source) -> None:
    if not used:
        T.row(plan, "baseline_rows.implicit.unused_advantage_normalised", unbiased, source=source)
    elif unbiased is None or unbiased:
        T.row(plan, "baseline_rows.implicit.bessel_corrected_std", unbiased, source=source)
    else:
        T.row(plan, "baseline_rows.no_equivalent", unbiased, source=source)


def minibatch_route(plan: ExportPlan, *, scn, a, route, mode, corr, decoupled) -> None:
    """several optimizer steps per batch on the written loss route, and the ratio anchor."""
    if route == "reinforce" and a.updates_per_batch > 1:
        T.row(plan, "minibatches.no_equivalent.reinforce_route_relies", f"{a.minibatches} x {a.epochs}")
    if mode != "sync" and a.minibatches > 1 and a.epochs > 1:
        T.row(plan, "epochs.implicit", a.epochs)
    proximal_row(
        plan,
        scn,
        "batch_start" if route == "reinforce" or decoupled else "behaviour",
        corr + ".bypass_mode = " + ("false" if route == "reinforce" or decoupled else "true"),
    )


def objective(
    plan: ExportPlan, *, scn, o, route, target, full, mode, src, baseline_rows, kl, clip, aggregation, advantage_kind
) -> None:
    """the objective on its route (verl_vcpo shares it); baseline_rows writes the advantage rows."""
    if route is None or mode not in target.loss_modes:
        T.row(
            plan,
            "objective.no_equivalent.instead_train_sandbox",
            full,
            why=T.note("why.trajectory_balance_tba")
            if route is None
            else T.note("why.trainer_registers_policy", mode=mode),
        )
        T.row(plan, "pinned.adv_estimator.objective_has_equivalent", "grpo")
        T.row(plan, "pinned.norm_adv_by_std_in_grpo.verl_s_grpo", True)
        T.row(plan, "pinned.use_kl_loss.kl_term_written", False)
    elif o.name == "reinforce":
        T.row(plan, "objective.name.converted.reinforce_sg_log", o.name, "vanilla", reinforce_why=target.reinforce_why)
        baseline_rows(
            plan,
            scn,
            target,
            o.baseline,
            o.normalize_std,
            {"kind": src + ".baseline", "normalize": src + ".normalize_std", "eps_std": None, "std_unbiased": None},
        )
        if o.baseline == "constant":
            T.row(
                plan,
                "objective.no_equivalent.knob_baseline_equivalent",
                o.constant_baseline,
                knob="constant_baseline",
                used_by="constant",
            )
        else:
            T.row(plan, "objective.implicit.2", o.constant_baseline, knob="constant_baseline", baseline=o.baseline)
        if o.baseline == "ema":
            T.row(
                plan, "objective.no_equivalent.knob_baseline_equivalent", o.ema_decay, knob="ema_decay", used_by="ema"
            )
            T.row(plan, "objective.no_equivalent.knob_baseline_equivalent", o.ema_init, knob="ema_init", used_by="ema")
        else:
            T.row(plan, "objective.implicit.2", o.ema_decay, knob="ema_decay", baseline=o.baseline)
            T.row(plan, "objective.implicit.2", o.ema_init, knob="ema_init", baseline=o.baseline)
        aggregation(plan, o, target)
        kl(plan, o)
    else:
        T.row(
            plan,
            "objective.name.converted.note_from_code",
            o.name,
            mode,
            note=T.note("why.vanilla")
            if mode == "vanilla"
            else T.note("why.gspo")
            if mode == "gspo"
            else T.note("why.cispo"),
        )
        if o.name == "grpo":
            baseline_rows(
                plan,
                scn,
                target,
                o.baseline,
                o.normalize_std,
                {
                    "kind": src + ".baseline",
                    "normalize": src + ".normalize_std",
                    "eps_std": src + ".eps_std",
                    "std_unbiased": src + ".std_unbiased",
                },
            )
        if o.name == "dr_grpo":
            baseline_rows(
                plan,
                scn,
                target,
                o.baseline,
                False,
                {"kind": src + ".baseline", "normalize": None, "eps_std": None, "std_unbiased": None},
            )
        if o.name == "rloo":
            T.row(plan, "objective.name.converted.leave_one_out", o.name, "rloo")
            T.row(plan, "pinned.norm_adv_by_std_in_grpo.std_normalisation_rloo", False)
        if o.name not in ("grpo", "dr_grpo", "rloo"):
            baseline_rows(
                plan,
                scn,
                target,
                advantage_kind(o.advantage),
                o.advantage == "grpo",
                {"kind": src + ".advantage", "normalize": None, "eps_std": src + ".eps_std", "std_unbiased": None},
            )
        clip(plan, o, mode == "vanilla")
        aggregation(plan, o, target)
        kl(plan, o)


def metrics(*, decoupled, sync) -> dict[str, str]:
    """The [metrics] texts of tables.toml and the metrics whose text depends on the scenario, in PROMOTION.md's order."""
    text = T.section("metrics")
    out = {
        "is/ess_ratio": T.note("metrics.is_ess_ratio.direct_counterpart_rollout_corr")
        if decoupled
        else T.note("metrics.is_ess_ratio.logged_bypass_mode"),
        "is/chi2": "`rollout_corr/chi2_token`" if decoupled else T.note("corr", name="chi2_token"),
        "is/kl_k3": "`rollout_corr/k3_kl`" if decoupled else T.note("metrics.is_kl_k3"),
        "clip/frac": "`actor/pg_clipfrac`" + (T.note("metrics.clip_frac") if decoupled else ""),
        "grad/norm": text["grad/norm"],
        "staleness/mean": T.note("metrics.staleness_mean") if not sync else "0 (sync trainer)",
        "staleness/max": "`training/off_policy/trajectory_staleness_worst/max`" if not sync else "0 (sync trainer)",
    }
    return out
