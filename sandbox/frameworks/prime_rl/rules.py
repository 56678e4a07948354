"""prime-rl's export rules: for each part of the scenario, the rows of ``tables.toml`` its values select
(``export.py`` calls them in order; the rows' words and keys are data in ``tables.toml``)."""

from __future__ import annotations

from math import inf
from typing import Any

from sandbox.export.base import describe
from sandbox.export.common import fixed_lag_gap, no_minibatch_rows, proximal_row
from sandbox.export.plan import ExportPlan
from sandbox.export.table import Table

T = Table("prime_rl")


def correction(plan: ExportPlan, *, scn, c, off, settings) -> bool:
    if c.name == "none":
        T.row(plan, "correction.name.implicit", "none")
        off(plan, scn, T.note("correction_rows.dppo_mask_kl"))
        return True
    if c.name == "dppo_mask":
        T.row(
            plan,
            "correction.name.converted",
            f"dppo_mask, {c.variant}",
            "default" if c.variant == "dppo" else "ipo",
            loss_type="default" if c.variant == "dppo" else "ipo",
            variant=c.variant,
        )
        if c.variant == "dppo":
            T.row(plan, "correction.dppo_mask_low.as_is", c.dppo_mask_low)
            T.row(plan, "correction.dppo_mask_high", c.dppo_mask_high)
            T.row(plan, "correction.ipo_threshold.implicit", c.ipo_threshold)
        else:
            T.row(plan, "correction.ipo_threshold.as_is", c.ipo_threshold)
            T.row(plan, "correction.dppo_mask_low.implicit", f"{c.dppo_mask_low:g}, {c.dppo_mask_high:g}")
        if "trainer.loss.adv_tau" in settings:
            T.row(plan, "correction.adv_tau.converted", c.adv_tau, settings["trainer.loss.adv_tau"])
        else:
            T.row(plan, "correction.adv_tau.as_is", c.adv_tau)
        T.row(plan, "correction.kl_tau", c.kl_tau)
        return True
    return False


def optimizer(plan: ExportPlan, *, o, adam_eps) -> None:
    if o.name == "sgd":
        T.row(plan, "optimizer.name.as_is.torch_sgd_both", "sgd")
        T.row(plan, "optimizer.momentum.as_is", o.momentum)
        T.row(plan, "pinned.nesterov", False)
        T.row(plan, "optimizer.weight_decay.as_is.l2_torch_sgd", o.weight_decay)
        T.row(plan, "optimizer.betas.unused_by_sgd", f"{describe(o.betas)}, {o.eps:g}")
    else:
        if o.name == "adam":
            T.row(plan, "optimizer.name.converted", "adam", "adamw")
        else:
            T.row(plan, "optimizer.name.as_is.torch_adamw_both", "adamw")
        T.row(plan, "optimizer.betas.converted.betas_pair", describe(o.betas), o.betas[0])
        T.row(plan, "optimizer.betas.converted.betas_pair.2", describe(o.betas), o.betas[1])
        if o.eps == adam_eps:
            T.row(plan, "optimizer.eps.implicit", o.eps)
        else:
            T.row(plan, "optimizer.eps.no_equivalent", o.eps)
        if o.name == "adam" and o.weight_decay > 0:
            T.row(plan, "optimizer.weight_decay.no_equivalent", o.weight_decay)
            T.row(plan, "pinned.weight_decay", 0.0)
        else:
            T.row(
                plan,
                "optimizer.weight_decay.as_is.note_from_code",
                o.weight_decay,
                note=T.note("optimizer_rows.note.decoupled_adamw_decay")
                if o.name == "adamw"
                else T.note("optimizer_rows.note.adam_without_decay"),
            )
        T.row(plan, "optimizer.momentum.implicit", o.momentum)


def advantage(plan: ExportPlan, *, o, row, unused, rloo, centred, std, opob) -> None:
    """the advantage rows of _ObjectiveRows (row, unused, centred, rloo, std, opob: its helpers)."""
    if o.name == "reinforce":
        if o.baseline == "group_mean":
            centred(("baseline",), "group-mean baseline")
        if o.baseline == "leave_one_out":
            rloo(("baseline",))
        if o.baseline in ("optimal", "opob"):
            opob(("baseline",))
        if o.baseline == "none":
            row("no_equivalent", ("baseline",), T.note("reinforce_baseline.r_baseline_every"))
        if o.baseline == "constant":
            row("no_equivalent", ("baseline", "constant_baseline"), T.note("reinforce_baseline.prime_rl_has"))
        if o.baseline not in ("group_mean", "leave_one_out", "optimal", "opob", "none", "constant"):
            row("no_equivalent", ("baseline", "ema_decay", "ema_init"), T.note("reinforce_baseline.sandbox_s_ema"))
        unused(("constant_baseline",), T.note("reinforce_baseline.used_only_baseline"))
        unused(("ema_decay", "ema_init"), 'used only by baseline = "ema"')
        if o.normalize_std:
            std(("normalize_std",))
        if not o.normalize_std:
            row("implicit", ("normalize_std",), T.note("reinforce_baseline.std_normaliser_prime"))
    elif o.name in ("grpo", "dr_grpo"):
        if o.baseline == "opob":
            opob(("baseline",))
        if o.baseline != "opob":
            centred(("baseline",), "group-mean baseline")
        if o.name == "grpo" and o.normalize_std:
            std(("normalize_std", "eps_std", "std_unbiased"))
        if o.name == "grpo" and not o.normalize_std:
            row("implicit", ("normalize_std",), T.note("reinforce_baseline.std_normaliser_prime"))
            unused(("eps_std", "std_unbiased"), T.note("advantage.used_only_std.2"))
        if o.name == "grpo" and o.beta_kl == 0:
            row("implicit", ("beta_kl",), T.note("advantage.reference_model_kl"))
        if o.name == "grpo" and o.beta_kl != 0:
            row("no_equivalent", ("beta_kl",), T.note("advantage.prime_rl_s"))
    elif o.name == "rloo":
        rloo(("name",))
    else:  # ppo, dapo: the advantage knob
        if o.advantage == "grpo":
            std(("advantage", "eps_std"))
        if o.advantage == "dr_grpo":
            centred(("advantage",), "group-centred advantage")
        if o.advantage == "rloo":
            rloo(("advantage",))
        if o.advantage == "opob":
            opob(("advantage", "eps_std"))
        if o.advantage not in ("grpo", "dr_grpo", "rloo", "opob"):
            row("no_equivalent", ("advantage",), T.note("advantage.r_baseline_every"))
        unused(("eps_std",), T.note("advantage.used_only_std"))


def surrogate(plan: ExportPlan, *, o, row, on_policy, exact, custom) -> None:
    if o.name == "reinforce" and on_policy:
        row(
            "implicit",
            ("name",),
            T.note("surrogate.bound_every_trained")
            + " "
            + (T.note("surrogate.no_mismatch") if exact else T.note("surrogate.engine_models_mismatch")),
        )
    elif o.name == "reinforce":
        row("no_equivalent", ("name",), T.note("surrogate.sandbox_s_reinforce", CUSTOM_LOSS=custom))
    elif o.name != "rloo":
        row("implicit", ("name",), T.note("surrogate.ratio_surrogate_r"))


def clip(plan: ExportPlan, *, o, row, custom) -> None:
    if o.eps_low >= 1.0:
        row("implicit", ("eps_low",), T.note("clip.ratio_floor_eps_low"))
    if o.eps_low < 1.0:
        row("no_equivalent", ("eps_low",), f"lower clip at {1 - o.eps_low:g}: " + T.note("instead", CUSTOM_LOSS=custom))
    if o.eps_high == inf:
        row("implicit", ("eps_high",), "no upper clip, as in prime-rl")
    if o.eps_high != inf:
        row(
            "no_equivalent",
            ("eps_high",),
            f"upper clip at {1 + o.eps_high:g}: " + T.note("instead", CUSTOM_LOSS=custom),
        )
    if o.dual_clip_c is None:
        row("implicit", ("dual_clip_c",), "no dual clip, as in prime-rl")
    if o.dual_clip_c is not None:
        row("no_equivalent", ("dual_clip_c",), T.note("clip.prime_rl_has", CUSTOM_LOSS=custom))


def schedule(plan: ExportPlan, *, o, steps) -> None:
    if o.schedule == "constant" and o.warmup_steps == 0:
        T.row(plan, "optimizer.schedule.as_is.constant_learning_rate", "constant")
        T.row(plan, "optimizer.warmup_steps.implicit", 0)
    elif o.schedule == "constant":
        T.row(plan, "optimizer.schedule.converted.prime_rl_s", "constant", "linear")
        T.row(plan, "optimizer.warmup_steps.as_is", o.warmup_steps)
        T.row(plan, "pinned.decay_steps", 0)
    else:
        if o.schedule == "linear":
            T.row(plan, "optimizer.schedule.as_is.warm_up_then", "linear")
            T.row(
                plan,
                "optimizer.schedule.converted.sandbox_decays_over",
                "linear",
                max(steps - o.warmup_steps, 0),
                steps=steps,
            )
        else:
            T.row(plan, "optimizer.schedule.as_is.warm_up_then.2", "cosine")
        T.row(plan, "optimizer.warmup_steps.as_is", o.warmup_steps)
        T.row(plan, "pinned.min_lr", 0.0)


def staleness(plan: ExportPlan, *, scn, st, cfg, full, partial) -> None:
    """system.staleness and system.partial_rollouts (orchestrator.max_off_policy_steps = the bound)."""
    if st.kind == "max_lag":
        T.row(plan, "staleness.kind", f"max_lag, k_max = {cfg.k_max}", cfg.k_max)
        if cfg.enforcement == "drop":
            T.row(plan, "staleness.enforcement.implicit", "drop")
            T.row(plan, "staleness.queue_capacity.setup", cfg.queue_capacity)
        else:
            T.row(plan, "staleness.enforcement.no_equivalent", "throttle")
            T.row(plan, "staleness.queue_capacity.implicit", cfg.queue_capacity)
        partial(plan, scn.system.partial_rollouts, st.bound)
    elif st.kind == "sync":
        T.row(plan, "staleness.no_equivalent.prime_rl_has", "sync")
        T.row(plan, "pinned.max_off_policy_steps.closest_synchronous_control", 0)
        partial(plan, scn.system.partial_rollouts, 0)
    elif st.kind == "fixed_lag":
        fixed_lag_gap(plan, scn, T.note("staleness_rows"))
        T.row(plan, "pinned.max_off_policy_steps.closest_bound_fixed", cfg.k, k=cfg.k)
        partial(plan, scn.system.partial_rollouts, cfg.k)
    else:
        T.row(plan, "staleness.no_equivalent.roll_s_asynchronous", full, bound=st.bound)
        T.row(plan, "pinned.max_off_policy_steps.closest_bound_ceil", st.bound, alpha=cfg.alpha)
        partial(plan, scn.system.partial_rollouts, st.bound)


def partial_rollouts(plan: ExportPlan, *, on, bound) -> None:
    if on:
        T.row(plan, "partial_rollouts.implicit.prime_rl_always", True)
    elif bound == 0:
        T.row(plan, "partial_rollouts.implicit.prime_rl_continues", False)
    else:
        T.row(plan, "partial_rollouts.no_equivalent", False)


def batch(plan: ExportPlan, *, scn, a, where, instead) -> None:
    T.row(plan, "group_size", a.group_size)
    T.row(
        plan,
        "groups_per_step",
        a.groups_per_step,
        a.groups_per_step * a.group_size,
        groups_per_step=a.groups_per_step,
        group_size=a.group_size,
    )
    no_minibatch_rows(plan, scn, T.note("batch_rows.prime_rl_takes", where=where), instead)
    proximal_row(plan, scn, "behaviour", T.note("batch_rows.default_loss_fn_s_against"))


def correction_gap(*, c, impossible, gaps, at, custom) -> Any:
    """the note of a correction prime-rl's default loss cannot apply."""
    if c.name in impossible and c.name in ("m2po_mask", "m2po_clipband"):
        return impossible[c.name] + T.note("correction_rows.instead_areal_actor")
    if c.name in impossible and c.name == "decoupled_ppo":
        return impossible[c.name] + T.note("correction_rows.instead_areal_use_decoupled_loss")
    if c.name in impossible:
        return impossible[c.name] + T.note("correction_rows.instead_sandbox_s")
    return (
        (gaps[c.name] if c.name in gaps else f"no equivalent of the {c.name!r} correction")
        + f" at {at}; only through {custom}"
        + (T.note("correction_rows.but_batch_normalize_rescales") if c.name == "mis" and c.batch_normalize else "")
        + (T.note("correction_rows.but_split_on_reward") if c.name == "topr" and c.split_on == "reward" else "")
    )
