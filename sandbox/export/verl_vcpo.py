"""VCPO fork of verl, git c7f030f0 export table; the mapping and its upstream sources: docs/promotion.md#mapping-tables-by-framework-version."""

from __future__ import annotations

from typing import Any

from ..scenario import Scenario
from .base import Exporter, Given, Version, describe, register
from ..algorithms.objectives.base import OPOB_KNOBS
from .common import fixed_lag_gap, proximal_row, scale_rows, staleness_of
from .plan import Plan
from .verl import (ACTOR, CORR, STABILIZERS, ObjectiveTarget, map_batch, map_geo_token_weight, map_objective,
                   map_stabilizers, map_tis, nearest_group_estimator, objective_route, overrides_text, yaml_text)

VCPO_C7F030F0 = Version("c7f030f0", "c7f030f0", "mit-han-lab/vcpo git c7f030f0")

ASYNC = "async_training"
GB = f"{ACTOR}.grad_baselining"
ESS = f"{ACTOR}.ess_scaling"
OPTIM = f"{ACTOR}.optim"
MEGATRON_EXTRA = f"{OPTIM}.override_optimizer_config"
"""An open map of extra Megatron ``OptimizerConfig`` fields (empty in the fork's YAML, so its keys are ``+`` appends)."""
CONFIG_NAME = "fully_async_ppo_megatron_trainer"

def _once(plan: Plan, key: str, value: Any, note: str) -> None:
    """Pin ``key`` unless an earlier row already wrote it (the per-trajectory path serves OPOB and the LR rule)."""
    if key not in plan.settings:
        plan.pinned(key, value, note)


def _per_trajectory(plan: Plan) -> None:
    _once(plan, f"{ACTOR}.update_policy_per_traj", True,
          "VCPO's per-trajectory update (one backward per trajectory, exact gradient norms and ESS)")
    _once(plan, f"{ACTOR}.ppo_micro_batch_size_per_gpu", 1, "the per-trajectory path asserts micro-batches of one")
    _once(plan, f"{ACTOR}.use_dynamic_bsz", False, "the per-trajectory path asserts fixed micro-batches")
    _once(plan, "algorithm.adv_estimator", "grpo",
          "the per-trajectory path reads advantage_scalar, which only the fork's grpo estimator writes")


# ------------------------------------------------------------------------------------------------
# OPOB (grad_baselining) and the ESS learning rate (ess_scaling)
# ------------------------------------------------------------------------------------------------


def _opob_weight_gap(scn: Scenario) -> str | None:
    """Why the fork's OPOB weight differs from the sandbox's, or None when they agree."""
    obj, c = scn.algorithm.objective, scn.algorithm.correction
    if obj.baseline == "optimal":
        if c.name == "none":
            return None
        return ("the fork's weight is ‖g_i‖² with g_i taken from the corrected loss, so it carries the correction "
                "factor; the sandbox's optimal baseline uses ‖∇log π‖² only. Instead: correction 'none'")
    seq_tis = c.name == "tis" and c.level == "sequence" and c.C_low == 0
    if c.name == "none":
        return None if obj.opob_weight == "readme" else (
            "without an IS factor in the loss the fork computes the README weight W²‖∇log π‖². Instead: opob_weight = 'readme'")
    if not seq_tis:
        return ("the fork's weight ‖g_i‖²·W² takes g_i from the corrected loss, which only matches a sandbox weight "
                "for sequence TIS. Instead: correction = {name = 'tis', level = 'sequence'}")
    if obj.opob_weight == "readme":
        return (f"g_i already carries min(W, C) from the sequence-TIS loss, so the fork computes the 'code' weight "
                f"min(W, C)²·W²·‖∇log π‖² (staleness_utils.compute_opob_baseline). Instead: re-run the sandbox with "
                f"opob_weight = 'code' and opob_clip_c = {c.cap:g} (the code-vs-README ablation)")
    if obj.opob_clip_c != c.cap:
        return (f"the fork's min(W, C) uses the TIS cap C = {c.cap:g} (rollout_is_threshold), the sandbox "
                f"opob_clip_c = {obj.opob_clip_c:g}. Instead: opob_clip_c = {c.cap:g}")
    return None


def _map_opob(plan: Plan, scn: Scenario, sources: dict[str, str | None]) -> None:
    """``grad_baselining.*`` for the OPOB (``baseline = 'opob'``) and optimal (``'optimal'``) baselines."""
    obj = scn.algorithm.objective
    kind_src, norm_src = sources["kind"], sources["normalize"]
    kind = getattr(obj, "baseline", None) or obj.advantage
    knobs = [f"algorithm.objective.{k}" for k in OPOB_KNOBS if hasattr(obj, k)]
    if obj.name != "reinforce":
        rest = [s for s in (norm_src, sources["eps_std"], sources["std_unbiased"]) if s]
        plan.no_equivalent(" + ".join([kind_src, *rest, *knobs]), kind,
                           "the fork's gradient baselining runs on the REINFORCE route (skip_recompute_old_log_prob), "
                           f"whose ratio is 1; the sandbox's {obj.name} clips π_θ/μ. Instead: algorithm.objective = "
                           "{name = 'reinforce', baseline = 'opob', normalize_std = true, aggregation = 'seq_mean_token_mean'} "
                           "(VCPO's base update)")
        nearest_group_estimator(plan, bool(getattr(obj, "normalize_std", obj.name != "dr_grpo")), f"{kind} baseline",
                                "grpo's baseline is the plain group mean, the fork's gradient baselining a mean weighted "
                                "by per-trajectory gradient norms")
        return

    _per_trajectory(plan)
    src = "algorithm.objective"
    plan.converted(kind_src, kind, f"{GB}.enable", True,
                   "b*_g = Σ W_i R_i / Σ W_i from per-trajectory gradient norms (staleness_utils.compute_opob_baseline), "
                   "applied as Σ_i (R_i − b*)·g_i")
    plan.pinned(f"{GB}.use_is_weights", kind == "opob",
                "OPOB: W_i includes the squared sequence ratio" if kind == "opob" else "optimal baseline: W_i = ‖g_i‖² only")
    plan.pinned(f"{GB}.agg_mode", "mean", "the weighted mean (the sandbox has no median or winsorized baseline)")
    plan.pinned(f"{GB}.use_clipped_is_ratios", False, "unclipped sequence ratios in W, as the sandbox")
    plan.pinned(f"{GB}.normalize_by_length", False, "no 1/L² in W, as the sandbox")

    gap = _opob_weight_gap(scn)
    if kind == "optimal":
        if gap:
            plan.no_equivalent(f"{src}.opob_weight", obj.opob_weight, gap)
        else:
            plan.implicit(f"{src}.opob_weight", obj.opob_weight, "unused by the optimal baseline (W = ‖∇log π‖²)")
        plan.implicit(f"{src}.opob_clip_c", obj.opob_clip_c, "unused by the optimal baseline")
    elif gap:
        plan.no_equivalent(f"{src}.opob_weight", obj.opob_weight, gap)
        plan.implicit(f"{src}.opob_clip_c", obj.opob_clip_c, "see opob_weight")
    else:
        plan.implicit(f"{src}.opob_weight", obj.opob_weight,
                      "the fork's W_i = ‖g_i‖²·W² with g_i from the loss" + (" (no IS factor: README weight)"
                      if scn.algorithm.correction.name == "none" else " that carries min(W, C): the 'code' weight"))
        plan.implicit(f"{src}.opob_clip_c", obj.opob_clip_c, "C = rollout_is_threshold, the sequence-TIS cap"
                      if scn.algorithm.correction.name != "none" else "unused by the README weight")
    if obj.opob_leave_one_out:
        plan.no_equivalent(f"{src}.opob_leave_one_out", True, "the fork's baseline includes each trajectory's own "
                           "term (plain weighted mean). Instead: opob_leave_one_out = false")
    else:
        plan.implicit(f"{src}.opob_leave_one_out", False, "plain weighted mean over the scope, as the fork")
    plan.implicit(f"{src}.opob_grad_norms", obj.opob_grad_norms,
                  "how the simulator computes ‖∇log π(y)‖²; the fork takes one backward per trajectory, the same "
                  "norms ('ghost' equals them up to float rounding)")

    scope = obj.opob_scope
    if scope == "group":
        plan.as_is(f"{src}.opob_scope", scope, f"{GB}.scope", "per prompt group (groups are kept on one data-parallel rank)")
    else:
        plan.converted(f"{src}.opob_scope", scope, f"{GB}.scope", "minibatch",
                       "whole mini-batch with GRPO advantages as values; the fork takes the mini-batch of each "
                       "data-parallel rank, so this is exact on one rank")
    if scope == "group":
        plan.as_is(norm_src, obj.normalize_std, f"{GB}.norm_by_std",
                   "(R − b*)/σ_g with the population std, as the sandbox's OPOB (the fork skips σ ≤ 1e-8 and adds no ε; "
                   "the sandbox adds 1e-6)")
        plan.pinned("algorithm.norm_adv_by_std_in_grpo", obj.normalize_std, "the grpo advantages are only logged here")
    elif obj.normalize_std and scope == "minibatch":
        plan.no_equivalent(norm_src, True, "with scope 'minibatch' the fork's values are the grpo estimator's advantages "
                           "(Bessel std), the sandbox's 'minibatch' normalises the REINFORCE OPOB values by the population "
                           "std. Instead: opob_scope = 'minibatch_bessel' (the fork's convention) or 'group'")
    elif obj.normalize_std:
        plan.converted(norm_src, True, "algorithm.norm_adv_by_std_in_grpo", True,
                       "values (R − mean_g R)/(σ_g + 1e-6) with the Bessel-corrected σ_g, as the grpo estimator "
                       "(core_algos.compute_grpo_outcome_advantage, torch.std), for the mini-batch baseline")
    else:
        plan.converted(norm_src, False, "algorithm.norm_adv_by_std_in_grpo", False,
                       "values R − mean_g R (grpo estimator without std) for the mini-batch baseline")


def _map_stabilizers_fork(plan: Plan, scn: Scenario, route: str | None) -> None:
    ess = route == "reinforce" and plan.settings.get("algorithm.adv_estimator") == "grpo"
    map_stabilizers(plan, scn, {**STABILIZERS, "vcpo_lr": _vcpo_lr if ess else (
        "the fork's ESS learning rate runs in the per-trajectory update, which needs the REINFORCE route "
        "(skip_recompute_old_log_prob, ESS from the current π_θ/μ) and the grpo estimator's advantages. Instead: the "
        "REINFORCE objective with a group-mean or OPOB baseline")})


def _vcpo_lr(plan: Plan, src: str, s: Any) -> None:
    _per_trajectory(plan)
    plan.converted(f"{src}.name", s.name, f"{ESS}.enable", True,
                   "η_t = η·rule(min(1, ESS/B / base_ess_ratio)) for the step only, ESS of the unclipped sequence "
                   "weights over the optimizer mini-batch gathered across ranks (_optimizer_step_with_buffer)")
    plan.as_is(f"{src}.rho_ref", s.rho_ref, f"{ESS}.base_ess_ratio", "ρ_ref")
    plan.as_is(f"{src}.mode", s.mode, f"{ESS}.scaling_rule", "sqrt or linear")
    plan.pinned(f"{ESS}.use_clipped", False, "ESS of the unclipped weights, as the sandbox")


# ------------------------------------------------------------------------------------------------
# corrections (the fork's 0.7.0.dev rollout_correction: rollout_rs token|sequence|geometric on π/μ)
# ------------------------------------------------------------------------------------------------

MASK_NOTE = ("rejected tokens leave the loss mask (megatron_actor.py), the sandbox keeps them in the denominators: "
             "identical for seq_mean_token_sum, and for sequence-level rejection in the per-trajectory update")


def _rs(plan: Plan, source: str, value: Any, level: str, lo: float, hi: float, note: str) -> None:
    plan.converted(source, value, f"{CORR}.rollout_rs", level, note)
    plan.pinned(f"{CORR}.rollout_rs_threshold", float(hi), "upper band edge on π/μ (the fork's bands are not inverted)")
    plan.pinned(f"{CORR}.rollout_rs_threshold_lower", float(lo), "lower band edge on π/μ")


CORRECTIONS_MAPPED = frozenset({"none", "tis", "mis", "geo_mis", "icepop", "decoupled_ppo"})
CORRECTION_GAPS = {
    "decoupled_ppo": "sequence-level rejection of any token above the cap has no rule in the fork. Instead: level = 'token'",
    "opsm": "OPSM's mask depends on the advantage sign, which the fork's rejection does not see",
    "m2po_mask": "M2PO is not in the VCPO fork (official M2PO fork of verl only)",
    "m2po_clipband": "M2PO is not in the VCPO fork (official M2PO fork of verl only)",
    "bapo": "BAPO's adaptive bounds are not in the VCPO fork",
    "topr": "TOPR's sign-split weights are not a correction of the fork",
    "dppo_mask": "the fork has no DPPO mask loss",
}


def _map_correction_fork(plan: Plan, scn: Scenario, route: str | None) -> None:
    c = scn.algorithm.correction
    src = "algorithm.correction"

    def off(why: str) -> None:
        plan.pinned(f"{CORR}.rollout_is", None, why)
        plan.pinned(f"{CORR}.rollout_rs", None, "no rejection")

    if c.name == "none":
        plan.converted(f"{src}.name", "none", f"{CORR}.rollout_is", None, "no IS weights")
        plan.pinned(f"{CORR}.rollout_rs", None, "no rejection")
        return
    if route != "reinforce":
        plan.no_equivalent(src, describe(c.model_dump()),
                           "on the ratio route the fork sets old_log_probs = rollout log-probs and computes the correction "
                           "from them, so every IS weight is 1 (recipe/fully_async_policy/ray_trainer.py). Instead: the "
                           "REINFORCE objective, which the fork reproduces with this correction")
        off("the correction is not exported (see the gap above)")
        return
    if c.name == "tis":
        map_tis(plan, c, f"{CORR}.rollout_is", f"{CORR}.rollout_is_threshold")
        plan.pinned(f"{CORR}.rollout_rs", None, "no rejection")
    elif c.name == "mis":
        lo = c.C_low
        if c.level == "token":
            plan.converted(f"{src}.name + {src}.level", "mis, token", f"{CORR}.rollout_is", "token",
                           "weights w_t (truncation at C never binds on kept tokens)")
            plan.as_is(f"{src}.C", float(c.C), f"{CORR}.rollout_is_threshold", "C")
            _rs(plan, f"{src}.C_low", lo, "token", lo, c.C, f"token band [C_low, C]; {MASK_NOTE}")
            for knob in ("seq_weight", "veto_low", "veto_high"):
                plan.implicit(f"{src}.{knob}", getattr(c, knob), "unused at token level (the sandbox reads it for sequences only)")
        else:
            if c.seq_weight == "ratio":
                plan.converted(f"{src}.name + {src}.level", "mis, sequence", f"{CORR}.rollout_is", "sequence",
                               "kept responses weighted W = Π_t w_t")
                plan.as_is(f"{src}.C", float(c.C), f"{CORR}.rollout_is_threshold", "C")
            else:
                plan.converted(f"{src}.name + {src}.level", "mis, sequence", f"{CORR}.rollout_is", None, "weight 1 (pure rejection)")
                plan.implicit(f"{src}.C", c.C, "the band's upper edge below")
            _rs(plan, f"{src}.seq_weight + {src}.C_low", f"{c.seq_weight}, {lo:g}", "sequence", lo, c.C,
                f"reject the response when W leaves [C_low, C]; {MASK_NOTE}")
            if c.veto_low is None:
                plan.implicit(f"{src}.veto_low", None, "no veto")
            else:
                plan.as_is(f"{src}.veto_low", c.veto_low, f"{CORR}.rollout_token_veto_threshold",
                           "reject a response containing a token with w_t < veto")
            if c.veto_high is None:
                plan.implicit(f"{src}.veto_high", None, "no veto")
            else:
                plan.no_equivalent(f"{src}.veto_high", c.veto_high, "the fork's veto only has a lower threshold. Instead: veto_high = null")
        if not c.batch_normalize or (c.level == "sequence" and c.seq_weight == "one"):
            note = "raw weights" if not c.batch_normalize else "kept weights are all 1 (no effect)"
            if isinstance(c.batch_normalize, bool):
                plan.as_is(f"{src}.batch_normalize", c.batch_normalize, f"{CORR}.rollout_is_batch_normalize", note)
            else:  # a named convention: same no-op
                plan.converted(f"{src}.batch_normalize", c.batch_normalize, f"{CORR}.rollout_is_batch_normalize", True, note)
        else:
            plan.no_equivalent(f"{src}.batch_normalize", c.batch_normalize, "the fork normalises per micro-batch over all valid tokens "
                               "or sequences, the sandbox over the kept ones of the batch. Instead: batch_normalize = false")
    elif c.name == "geo_mis":
        _rs(plan, f"{src}.name + {src}.lo + {src}.hi", f"[{c.lo:g}, {c.hi:g}]", "geometric", c.lo, c.hi,
            f"reject the response when exp(mean_t log w_t) leaves [lo, hi]; {MASK_NOTE}")
        map_geo_token_weight(plan, c, src)
    elif c.name == "icepop":
        plan.converted(f"{src}.name", c.name, f"{CORR}.rollout_is", "token", "weights w_t")
        plan.as_is(f"{src}.beta", float(c.beta), f"{CORR}.rollout_is_threshold", "β (truncation never binds on kept tokens)")
        _rs(plan, f"{src}.alpha", c.alpha, "token", c.alpha, c.beta, f"token band [α, β]; {MASK_NOTE}")
    elif c.name == "decoupled_ppo" and c.level == "token":
        plan.converted(f"{src}.name + {src}.level", f"{c.name}, token", f"{CORR}.rollout_is", "token", "behaviour weights w_t")
        plan.as_is(f"{src}.behave_imp_weight_cap", float(c.behave_imp_weight_cap), f"{CORR}.rollout_is_threshold", "cap")
        plan.pinned(f"{CORR}.rollout_rs", "token", f"reject tokens with w_t > cap; {MASK_NOTE}")
        plan.pinned(f"{CORR}.rollout_rs_threshold", float(c.behave_imp_weight_cap), "the cap")
        plan.pinned(f"{CORR}.rollout_rs_threshold_lower", 0.0, "no lower edge")
        plan.implicit(f"{src}.require_prox", c.require_prox, "w is computed on the current weights, as the sandbox's sg(π_θ)/μ")
    else:
        why = CORRECTION_GAPS[c.name]
        plan.no_equivalent(src, describe(c.model_dump()), f"{why}. Instead: the sandbox's torch components (sandbox.algorithms)")
        off("the correction is not exported (see the gap above)")


# ------------------------------------------------------------------------------------------------
# staleness and optimizer
# ------------------------------------------------------------------------------------------------


def _map_staleness_fork(plan: Plan, scn: Scenario) -> None:
    st = staleness_of(scn)
    cfg = scn.system.staleness
    plan.pinned(f"{ASYNC}.trigger_parameter_sync_step", 1, "weights pushed after every optimizer step: one version per step")
    plan.pinned(f"{ASYNC}.require_batches", 1, "one mini-batch (B prompts) per trainer step")
    if st.kind == "sync":
        plan.converted("system.staleness", "sync", f"{ASYNC}.staleness_threshold", 0.0,
                       "no extra samples per sync window: every step trains on the newest version, as the fork's "
                       "synchronous.sh (verl-project/verl #6780: check the logged staleness, the async code path is not main_ppo)")
    elif st.kind == "max_lag":
        plan.converted("system.staleness.kind + system.staleness.k_max", f"max_lag, {cfg.k_max}",
                       f"{ASYNC}.staleness_threshold", float(cfg.k_max),
                       "(1 + s)·B prompts per sync window, one window per version: (k_max + 1)·B outstanding, the "
                       "sandbox throttle's (k_max + v + 1)·B rule")
        if cfg.enforcement == "throttle":
            plan.implicit("system.staleness.enforcement", "throttle",
                          "admission by sample budget; the fork checks no per-sample lag, so the sandbox's rare drop of "
                          "an over-bound job has no counterpart")
            plan.implicit("system.staleness.queue_capacity", cfg.queue_capacity, "unused by the throttle")
        else:
            plan.no_equivalent("system.staleness.enforcement + system.staleness.queue_capacity",
                               f"drop, {describe(cfg.queue_capacity)}",
                               "the fork never drops over-stale samples at dequeue (its queue only drops the oldest sample "
                               "when full). Instead: enforcement = 'throttle', which the sample budget reproduces")
    elif st.kind == "fixed_lag":
        fixed_lag_gap(plan, scn, "The VCPO fork bounds the lag with staleness_threshold, it does not fix it")
        plan.pinned(f"{ASYNC}.staleness_threshold", 0.0, "the staleness control is not exported: the written config trains on-policy")
    else:
        plan.no_equivalent("system.staleness", describe(cfg.model_dump()),
                           f"the fork has no asynchronous ratio. Instead: export with system.staleness = {{kind = \"max_lag\", "
                           f"k_max = {st.bound}}} after checking that in the sandbox")
        plan.pinned(f"{ASYNC}.staleness_threshold", 0.0, "the staleness control is not exported: the written config trains on-policy")
    plan.as_is("system.partial_rollouts", scn.system.partial_rollouts, f"{ASYNC}.partial_rollout",
               "interrupted responses resume under the new weights (true) or are regenerated (false)")


def _map_optimizer_megatron(plan: Plan, scn: Scenario, given: Given) -> None:
    """Megatron's optimizer (``verl/utils/megatron/optimizer.py`` passes optimizer, lr, min_lr, clip_grad and
    weight_decay, then ``override_optimizer_config``; ``optim.betas`` is not read). Megatron's Adam applies
    decoupled weight decay (AdamW); its SGD defaults to momentum 0.9. Extra fields are ``+`` appends under
    ``override_optimizer_config`` (an empty map in the fork's YAML), the only appends of this export."""
    o = scn.algorithm.optimizer
    src = "algorithm.optimizer"
    if o.name == "sgd":
        plan.converted(f"{src}.name", o.name, f"{OPTIM}.optimizer", "sgd", "Megatron SGD")
        plan.converted(f"{src}.momentum", o.momentum, f"{MEGATRON_EXTRA}.sgd_momentum", o.momentum,
                       "written even for 0: Megatron's default SGD momentum is 0.9")
        plan.implicit(f"{src}.betas + {src}.eps", f"{list(o.betas)}, {o.eps:g}", "unused by SGD")
    else:
        if o.name == "adam" and o.weight_decay > 0:
            plan.no_equivalent(f"{src}.name", o.name, "Megatron's adam applies decoupled weight decay (AdamW); the sandbox's "
                               "Adam adds it to the gradient (L2). Instead: name = 'adamw', or weight_decay = 0")
        else:
            plan.converted(f"{src}.name", o.name, f"{OPTIM}.optimizer", "adam",
                           "Megatron's adam (decoupled weight decay: AdamW; identical to Adam at weight_decay = 0)")
        if tuple(o.betas) == (0.9, 0.999):
            plan.implicit(f"{src}.betas", list(o.betas), "Megatron's defaults adam_beta1 = 0.9, adam_beta2 = 0.999")
        else:
            plan.converted(f"{src}.betas", list(o.betas), f"{MEGATRON_EXTRA}.adam_beta1", o.betas[0],
                           "Megatron OptimizerConfig field (the fork does not read optim.betas)")
            plan.pinned(f"{MEGATRON_EXTRA}.adam_beta2", o.betas[1], "the second beta of algorithm.optimizer.betas")
        if o.eps == 1e-8:
            plan.implicit(f"{src}.eps", o.eps, "Megatron's default adam_eps = 1e-8")
        else:
            plan.converted(f"{src}.eps", o.eps, f"{MEGATRON_EXTRA}.adam_eps", o.eps, "Megatron OptimizerConfig field")
        plan.implicit(f"{src}.momentum", o.momentum, "unused by Adam")
    plan.as_is(f"{src}.weight_decay", o.weight_decay, f"{OPTIM}.weight_decay", "the fork's default is 0.01")
    plan.as_is(f"{src}.schedule", o.schedule, f"{OPTIM}.lr_decay_style",
               "Megatron's OptimizerParamScheduler, decaying to min_lr = 0 over lr_decay_steps (null: total training steps)")
    plan.converted(f"{src}.warmup_steps", o.warmup_steps, f"{OPTIM}.lr_warmup_steps", o.warmup_steps,
                   "no warm-up" if o.warmup_steps == 0 else "linear warm-up from lr_warmup_init = 0 (Megatron's ramp may "
                   "lag the sandbox's (step+1)/W by one step)")
    scale_rows(plan, scn, given, f"{OPTIM}.lr", f"{OPTIM}.clip_grad", framework_lr_default=1e-6, framework_clip_default=1.0)


# ------------------------------------------------------------------------------------------------
# the exporter
# ------------------------------------------------------------------------------------------------

FORK_OBJECTIVES = ObjectiveTarget(
    loss_modes=frozenset({"vanilla", "gspo"}),
    reinforce_why="async_training.skip_recompute_old_log_prob = true makes the actor use its own detached log-probs "
                  "as π_old (megatron_actor.py), so π_θ/π_old = 1 and ∇(π_θ/π_old) = ∇log π_θ",
    aggregation_gaps={"token_mean": "the fork's Megatron actor averages per-micro-batch token means (no global token "
                                    "count), and the per-trajectory VCPO update makes them per-response means. "
                                    "Instead: aggregation = 'seq_mean_token_mean' (the VCPO scripts' choice)"},
    opob=_map_opob,
    aggregation_note="same formula, verl's spelling (core_algos.agg_loss per micro-batch of equal size, averaged by "
                     "Megatron; with update_policy_per_traj each response is scaled by 1/B)",
)


def _metrics(per_traj: bool) -> dict[str, str]:
    return {
        "is/ess_ratio": "`staleness/ess` records, field `minibatch_ess_ratio` (unclipped, per optimizer mini-batch)"
                        if per_traj else "logged only with update_policy_per_traj (`staleness/ess`)",
        "is/chi2": "`rollout_corr/chi2_token`",
        "is/kl_k3": "`rollout_corr/k3_kl`",
        "clip/frac": "`actor/pg_clipfrac`",
        "grad/norm": "`actor/grad_norm`",
        "staleness/mean": "`actor/local_traj_records`: trainer_param_version − param_version_start per trajectory"
                          if per_traj else "`fully_async/partial/max_partial_span` (version span of partial rollouts)",
    }


@register
class VerlVCPOExporter(Exporter):
    """mit-han-lab/vcpo at c7f030f0: the fully-async Megatron recipe with VCPO (module docstring)."""

    name = "verl-vcpo"
    title = "verl, VCPO fork (mit-han-lab/vcpo, fully-async Megatron recipe)"
    versions = (VCPO_C7F030F0,)
    components = property(lambda self: {"correction": CORRECTIONS_MAPPED | frozenset(CORRECTION_GAPS)})
    expresses = {
        "max lag": f"partly: {ASYNC}.staleness_threshold = k_max (trigger_parameter_sync_step = require_batches = 1; throttle only)",
        "fixed lag": "no equivalent: the fork bounds the lag",
        "async ratio": "no equivalent: nearest is max lag with k_max = ceil(alpha)",
        "partial rollouts": f"{ASYNC}.partial_rollout",
        "batch geometry": f"{ACTOR}.ppo_mini_batch_size = groups_per_step, rollout.n = group_size (data.train_batch_size = 0)",
        "learning rate": f"{OPTIM}.lr",
        "clip range": f"{ACTOR}.clip_ratio_low / clip_ratio_high",
        "dual clip": f"{ACTOR}.clip_ratio_c (always on in vanilla; 1e9 = off)",
        "KL penalty": f"{ACTOR}.use_kl_loss + kl_loss_coef, kl_loss_type = k3",
        "loss aggregation": f"partly: {ACTOR}.loss_agg_mode (seq-mean modes)",
        "advantage": "algorithm.adv_estimator (grpo, rloo) + norm_adv_by_std_in_grpo",
        "token TIS": f"partly: {CORR}.rollout_is = token + rollout_is_threshold (REINFORCE objective only)",
        "sequence TIS": f"partly: {CORR}.rollout_is = sequence + rollout_is_threshold (REINFORCE objective only)",
        "masked IS / IcePop": f"partly: {CORR}.rollout_rs = token | sequence | geometric + thresholds (REINFORCE objective only)",
        "M2PO": "no equivalent: not in the fork",
        "decoupled PPO": "partly: token level with the REINFORCE objective only",
        "VCPO": f"{GB}.* (OPOB) + {ESS}.* (ESS learning rate) + update_policy_per_traj",
        "GAC": "no equivalent: custom hook between backward and the optimizer step",
    }

    def plan(self, scn: Scenario, version: Version, given: Given) -> Plan:
        plan = self.new_plan(version, f"python -m recipe.fully_async_policy.fully_async_main --config-name={CONFIG_NAME}.yaml")
        _map_staleness_fork(plan, scn)
        route = objective_route(scn)
        plan.pinned(f"{ASYNC}.use_rollout_log_probs", True, "train against the sampler's log-probs μ (no recomputed π_prox)")
        plan.pinned(f"{ASYNC}.compute_prox_log_prob", False, "no proximal policy, as the sandbox")
        plan.pinned(f"{ASYNC}.skip_recompute_old_log_prob", route == "reinforce",
                    "REINFORCE route: ratio 1, correction on the current π_θ/μ" if route == "reinforce" else
                    "ratio route: old_log_probs = rollout log-probs, the surrogate's ratio is π_θ/μ")
        plan.pinned("actor_rollout_ref.rollout.calculate_log_probs", True, "the sampler's log-probs μ")
        plan.pinned("actor_rollout_ref.hybrid_engine", False, "the fully-async trainer asserts separate rollout GPUs")
        map_objective(plan, scn, route, FORK_OBJECTIVES)
        _map_correction_fork(plan, scn, route)
        map_batch(plan, scn, prompts_key=f"{ACTOR}.ppo_mini_batch_size")
        proximal_row(plan, scn, "behaviour", f"{ASYNC}.use_rollout_log_probs on the ratio route; on the REINFORCE route "
                     "π_old is the actor's own detached log-probs (ratio 1) and the correction acts on π_θ/μ")
        plan.pinned("data.train_batch_size", 0, "the fully-async rollouter asserts 0 (batches come from the message queue)")
        plan.pinned("data.gen_batch_size", 1, "the recipe generates one prompt group at a time")
        _map_stabilizers_fork(plan, scn, route)
        per_traj = plan.settings.get(f"{ACTOR}.update_policy_per_traj", False)
        if not per_traj:
            plan.pinned(f"{ACTOR}.update_policy_per_traj", False, "no OPOB or ESS learning rate requested: the standard update")
        _map_optimizer_megatron(plan, scn, given)
        plan.metrics = _metrics(per_traj)
        plan.notes += [
            ("Not on PyPI: install the fork from a checkout of mit-han-lab/vcpo at c7f030f0 (Megatron backend); "
             "launch.sh runs from that checkout (VCPO_DIR)."),
            ("One trainer step consumes ppo_mini_batch_size prompts × rollout.n responses with one optimizer step and "
             "one weight push (trigger_parameter_sync_step = require_batches = 1), as one sandbox step."),
        ]
        return plan

    def files(self, plan: Plan) -> dict[str, str]:
        return {
            "overrides.txt": overrides_text(plan.settings, frozenset(k for k in plan.settings if k.startswith(MEGATRON_EXTRA + "."))),
            "vcpo_config.yaml": yaml_text(plan, f"same keys as overrides.txt, nested; merge onto the fork's composed {CONFIG_NAME}"),
            "launch.sh": _launch_script(plan),
        }

    def launch(self, plan: Plan, files: dict[str, str]) -> str:
        return ("VCPO_DIR=/path/to/vcpo MODEL_PATH=/path/to/model TRAIN_FILES=/path/to/train.parquet "
                "VAL_FILES=/path/to/val.parquet TOTAL_ROLLOUT_STEPS=<prompts in total> bash launch.sh")


def _launch_script(plan: Plan) -> str:
    per_traj = plan.settings.get(f"{ACTOR}.update_policy_per_traj", False)
    B = plan.settings.get(f"{ACTOR}.ppo_mini_batch_size")
    lines = [
        "#!/usr/bin/env bash",
        f"# sandbox export: mit-han-lab/vcpo {plan.release}, fully-async Megatron recipe. Every algorithm setting is in",
        "# overrides.txt (see PROMOTION.md); fill in the variables marked FILL IN, adjust the layout to your cluster.",
        "set -euo pipefail",
        'HERE="$(cd "$(dirname "$0")" && pwd)"',
        "",
        "# FILL IN: the fork, your model and data",
        'VCPO_DIR="${VCPO_DIR:?FILL IN: checkout of github.com/mit-han-lab/vcpo at c7f030f0}"',
        'MODEL_PATH="${MODEL_PATH:?FILL IN: path or Hugging Face id of the policy model}"',
        'TRAIN_FILES="${TRAIN_FILES:?FILL IN: training parquet file(s)}"',
        'VAL_FILES="${VAL_FILES:?FILL IN: validation parquet file(s)}"',
        f'TOTAL_ROLLOUT_STEPS="${{TOTAL_ROLLOUT_STEPS:?FILL IN: prompts to generate in total = trainer steps x {B}}}"',
        'MAX_PROMPT_LENGTH="${MAX_PROMPT_LENGTH:-1024}"',
        'MAX_RESPONSE_LENGTH="${MAX_RESPONSE_LENGTH:-2048}"',
        "",
        "# FILL IN: GPU layout (trainer and rollout GPUs are separate in the fully-async recipe)",
        'NNODES="${NNODES:-1}"',
        'TRAIN_GPUS_PER_NODE="${TRAIN_GPUS_PER_NODE:-4}"',
        'ROLLOUT_GPUS_PER_NODE="${ROLLOUT_GPUS_PER_NODE:-4}"',
        'TRAIN_TP="${TRAIN_TP:-4}"',
        'ROLLOUT_ENGINE="${ROLLOUT_ENGINE:-vllm}"',
    ]
    if not per_traj:
        lines.append('MICRO_BATCH_PER_GPU="${MICRO_BATCH_PER_GPU:-1}"')
    lines += [
        "",
        'mapfile -t OVERRIDES < "$HERE/overrides.txt"',
        'cd "$VCPO_DIR"',
        "",
        "python -m recipe.fully_async_policy.fully_async_main \\",
        f"    --config-name={CONFIG_NAME}.yaml \\",
        '    "${OVERRIDES[@]}" \\',
        '    actor_rollout_ref.model.path="$MODEL_PATH" \\',
        '    data.train_files="$TRAIN_FILES" \\',
        '    data.val_files="$VAL_FILES" \\',
        '    data.max_prompt_length="$MAX_PROMPT_LENGTH" \\',
        '    data.max_response_length="$MAX_RESPONSE_LENGTH" \\',
        '    actor_rollout_ref.rollout.name="$ROLLOUT_ENGINE" \\',
        '    actor_rollout_ref.actor.megatron.tensor_model_parallel_size="$TRAIN_TP" \\',
        '    actor_rollout_ref.ref.megatron.tensor_model_parallel_size="$TRAIN_TP" \\',
    ]
    if not per_traj:
        lines.append('    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO_BATCH_PER_GPU" \\')
    lines += [
        '    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1 \\',
        '    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1 \\',
        '    trainer.nnodes="$NNODES" \\',
        '    trainer.n_gpus_per_node="$TRAIN_GPUS_PER_NODE" \\',
        '    rollout.nnodes="$NNODES" \\',
        '    rollout.n_gpus_per_node="$ROLLOUT_GPUS_PER_NODE" \\',
        '    rollout.total_rollout_steps="$TOTAL_ROLLOUT_STEPS" \\',
        '    "$@"',
        "",
    ]
    return "\n".join(lines)
