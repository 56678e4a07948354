"""verl 0.9.1 export table; the mapping and its upstream sources: docs/promotion.md#mapping-tables-by-framework-version."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..scenario import Scenario
from ..algorithms.objectives.base import OPOB_KNOBS
from .base import Exporter, Given, Version, describe, register
from .common import MINIBATCH_INSTEAD, fixed_lag_gap, proximal_row, scale_rows, staleness_of
from .engine import stabilizer_rows
from .plan import Plan

VERL_0_9 = Version("0.9", "0.9.1", "verl 0.9.1 wheel")

ACTOR = "actor_rollout_ref.actor"
CORR = "algorithm.rollout_correction"
V1 = "trainer.v1"

NO_DUAL_CLIP = 1e9
"""``clip_ratio_c`` that never fires: verl clamps the log-ratio to ±20 before the dual clip (r ≤ e^20 < 1e9)."""

NO_LOWER_EDGE = 1e-9
"""Lower edge of a ``"lo_hi"`` IS band meaning "none": verl floors every weight at e^-20 ≈ 2.1e-9 (its log-space
safety clamp), so no valid token falls below 1e-9, and the band parser requires a positive lower edge."""

AGGREGATION = {
    "token_mean": "token-mean",
    "seq_mean_token_mean": "seq-mean-token-mean",
    "seq_mean_token_sum": "seq-mean-token-sum",
    "seq_mean_token_sum_norm": "seq-mean-token-sum-norm",
}

LOSS_MODE = {"gspo": "gspo", "cispo": "cispo"}  # every other ratio objective uses "vanilla"

VERL_EPS_STD = 1e-6  # compute_grpo_outcome_advantage's epsilon, not configurable
VCPO_INSTEAD = (
    "export with --framework verl-vcpo (the mit-han-lab/vcpo fork of verl), or train with the sandbox's own torch "
    "components (sandbox.algorithms, as in examples/plain_torch_loop.py)"
)


# ------------------------------------------------------------------------------------------------
# values as Hydra overrides and as nested YAML
# ------------------------------------------------------------------------------------------------

_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_RESERVED = {"null", "true", "false", "inf", "nan"}


def hydra_value(value: Any) -> str:
    """A value in Hydra's override grammar: null, true/false, numbers, ``[a,b]``, ``{k:v}``; strings are
    single-quoted unless they are plain words (a number-like string such as ``"0.5_2.0"`` is quoted, or
    Hydra would read it as a number)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if text and set(text) <= _PLAIN and not text[0].isdigit() and text[0] != "-" and text.lower() not in _RESERVED:
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def nested(settings: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys → nested dicts (the shape of the framework's YAML)."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = list(value) if isinstance(value, tuple) else value
    return out


def ratio_band(lo: float, hi: float) -> str:
    """A ``"lo_hi"`` threshold string with full float precision (``inf`` allowed as an upper edge)."""
    return f"{float(lo)!r}_{float(hi)!r}"


# ------------------------------------------------------------------------------------------------
# objective: advantage, surrogate, clip, KL, aggregation (shared with the VCPO fork)
# ------------------------------------------------------------------------------------------------


def objective_route(scn: Scenario) -> str | None:
    """``"reinforce"`` (REINFORCE surrogate times correction weights), ``"ratio"`` (surrogate on π_θ/μ), or
    None (no surrogate verl can express: TBA)."""
    name = scn.algorithm.objective.name
    if name == "tba":
        return None
    return "reinforce" if name == "reinforce" else "ratio"


@dataclass(frozen=True)
class ObjectiveTarget:
    """What a verl-family trainer offers for ``algorithm.objective`` (upstream 0.9.1, or the VCPO fork).

    ``reinforce_why`` says how the target makes the vanilla ratio equal 1 on the REINFORCE route;
    ``aggregation_gaps`` maps sandbox aggregations the target cannot reproduce to the reason; ``opob``
    (forks only) writes the rows of an OPOB / optimal baseline given the objective's sources
    (``kind``, ``normalize``, ``eps_std``, ``std_unbiased``; None where the objective has no such knob)."""

    loss_modes: frozenset[str]
    reinforce_why: str
    aggregation_gaps: Mapping[str, str] = field(default_factory=dict)
    opob: Callable[[Plan, Scenario, dict[str, str | None]], None] | None = None
    aggregation_note: str = ("same formula, verl's spelling (core_algos.agg_loss; normalised over the whole mini-batch "
                             "= the batch)")


def nearest_group_estimator(plan: Plan, normalize: bool, what: str, difference: str) -> None:
    """Write the group estimator nearest to a baseline verl cannot express (the scenario field has a
    no-equivalent row). Left unwritten, ``algorithm.adv_estimator`` falls back to verl's default ``gae``,
    which trains a critic (verl 0.9.1 ``trainer/ppo/utils.py``: ``need_critic``) and so changes the
    algorithm rather than only the baseline."""
    plan.pinned("algorithm.adv_estimator", "grpo",
                f"nearest group estimator to the scenario's {what} (no equivalent above), written because verl's "
                f"default 'gae' would add a critic: {difference}")
    plan.pinned("algorithm.norm_adv_by_std_in_grpo", normalize,
                "divide by the group std, as the scenario's objective does" if normalize else
                "no division by the group std, as the scenario's objective")


def _advantage(plan: Plan, kind_source: str, kind: str, normalize: bool, normalize_source: str | None) -> None:
    """Map a group baseline to ``algorithm.adv_estimator`` (+ ``norm_adv_by_std_in_grpo``)."""
    if kind == "group_mean":
        plan.converted(kind_source, kind, "algorithm.adv_estimator", "grpo",
                       "group-mean baseline = verl's grpo estimator (core_algos.compute_grpo_outcome_advantage)")
        if normalize_source is not None:
            plan.as_is(normalize_source, normalize, "algorithm.norm_adv_by_std_in_grpo",
                       "divide by the group std (Bessel-corrected torch.std, + 1e-6) or not (Dr.GRPO centring)")
        else:
            plan.pinned("algorithm.norm_adv_by_std_in_grpo", normalize,
                        "Dr.GRPO centring: no division by the group std" if not normalize else "GRPO std normalisation")
    elif kind == "leave_one_out" and not normalize:
        plan.converted(kind_source, kind, "algorithm.adv_estimator", "rloo",
                       "verl's rloo estimator computes G/(G−1)·(R − mean_g R) = R − mean_{j≠i} R_j "
                       "(core_algos.compute_rloo_outcome_advantage)")
        if normalize_source is not None:
            plan.converted(normalize_source, normalize, "algorithm.norm_adv_by_std_in_grpo", False,
                           "no std normalisation (rloo does not read this key; written so that the config says so)")
        else:
            plan.pinned("algorithm.norm_adv_by_std_in_grpo", False,
                        "no std normalisation (rloo does not read this key; written so that the config says so)")
    elif kind == "leave_one_out":
        plan.no_equivalent(f"{kind_source} + {normalize_source}", f"{kind}, normalize_std = true",
                           "verl's rloo estimator does not divide by the group std. Instead: normalize_std = false (rloo) "
                           "or baseline = 'group_mean' (grpo)")
        nearest_group_estimator(plan, True, "leave-one-out baseline with std normalisation",
                                "grpo centres on the group mean including the sample, (R − mean)/(std + 1e-6): the "
                                "sandbox's leave-one-out advantages are these times G/(G − 1) before the std division")
    elif kind in ("opob",):
        plan.no_equivalent(kind_source, kind, "VCPO's off-policy optimal baseline needs per-trajectory gradient norms; "
                           f"upstream verl has none. Instead: {VCPO_INSTEAD}")
        nearest_group_estimator(plan, normalize, "OPOB baseline",
                                "grpo's baseline is the plain group mean, OPOB's the mean weighted by "
                                "w_i²‖∇log π(y_i)‖²; the same when the weights are equal within a group")
    elif kind == "optimal":
        plan.no_equivalent(kind_source, kind,
                           "the variance-optimal scalar baseline needs per-sequence gradient norms; verl's "
                           "optimal_token_baseline estimator uses a per-token logit-space proxy instead. Instead: "
                           "baseline = 'group_mean' or 'leave_one_out'")
        nearest_group_estimator(plan, normalize, "variance-optimal baseline",
                                "grpo's baseline is the plain group mean, the optimal one the mean weighted by "
                                "‖∇log π(y_i)‖²")
    else:  # none, constant, ema, reward
        what = {"none": "no baseline (raw rewards)", "reward": "raw rewards as advantages",
                "constant": "a constant baseline", "ema": "an EMA-of-rewards baseline"}[kind]
        plan.no_equivalent(kind_source, kind, f"{what}: every verl estimator centres or whitens the rewards "
                           "(core_algos.AdvantageEstimator). Instead: a group baseline (grpo or rloo)")
        nearest_group_estimator(plan, normalize, what,
                                "grpo centres each reward on its group's mean instead")
    if normalize_source is not None and kind not in ("group_mean", "leave_one_out"):
        plan.implicit(normalize_source, normalize, f"part of the {kind!r} advantage above")


def _eps_std(plan: Plan, source: str, eps: float, used: bool) -> None:
    if not used:
        plan.implicit(source, eps, "unused: the advantage is not std-normalised")
    elif math.isclose(eps, VERL_EPS_STD, rel_tol=1e-9):
        plan.implicit(source, eps, "verl adds 1e-6 to the group std (compute_grpo_outcome_advantage; not configurable)")
    else:
        plan.no_equivalent(source, eps, "verl's GRPO std epsilon is fixed at 1e-6 (not a config key). Instead: eps_std = 1e-6")


def _opob_knobs(plan: Plan, obj, used: bool) -> None:
    for knob in OPOB_KNOBS:
        if hasattr(obj, knob):
            src = f"algorithm.objective.{knob}"
            if used:
                plan.no_equivalent(src, getattr(obj, knob), "knob of the OPOB baseline (no equivalent above)")
            else:
                plan.implicit(src, getattr(obj, knob), "unused: the baseline is not OPOB")


def _clip_knobs(plan: Plan, obj, dual_clip: bool) -> None:
    plan.as_is("algorithm.objective.eps_low", obj.eps_low, f"{ACTOR}.clip_ratio_low", "ratio floor 1 − eps_low")
    plan.as_is("algorithm.objective.eps_high", obj.eps_high, f"{ACTOR}.clip_ratio_high", "ratio cap 1 + eps_high")
    if not hasattr(obj, "dual_clip_c"):
        return
    if not dual_clip:
        plan.implicit("algorithm.objective.dual_clip_c", obj.dual_clip_c,
                      "no dual clip in either: the sandbox refuses one for GSPO and verl's gspo loss has none")
    elif obj.dual_clip_c is None:
        plan.converted("algorithm.objective.dual_clip_c", None, f"{ACTOR}.clip_ratio_c", NO_DUAL_CLIP,
                       "verl's vanilla loss always applies the dual clip; 1e9 never fires because the log-ratio is "
                       "clamped to ±20 (r ≤ e^20 ≈ 4.9e8)")
    else:
        plan.as_is("algorithm.objective.dual_clip_c", obj.dual_clip_c, f"{ACTOR}.clip_ratio_c",
                   "dual clip c: loss of Â < 0 tokens capped at −c·Â")


def _aggregation(plan: Plan, obj, target: ObjectiveTarget) -> None:
    agg = obj.aggregation
    if agg in target.aggregation_gaps:
        plan.no_equivalent("algorithm.objective.aggregation", agg, target.aggregation_gaps[agg])
    else:
        note = target.aggregation_note
        if agg == "seq_mean_token_sum_norm":
            note += "; L_const is actor.loss_scale_factor, or the padded response width when null"
        plan.converted("algorithm.objective.aggregation", agg, f"{ACTOR}.loss_agg_mode", AGGREGATION[agg], note)
    if hasattr(obj, "max_len"):
        if agg != "seq_mean_token_sum_norm":
            plan.implicit("algorithm.objective.max_len", obj.max_len, "unused: only seq_mean_token_sum_norm reads L_const")
        elif obj.max_len is None:
            plan.implicit("algorithm.objective.max_len", None,
                          "L_const = padded response length in both (verl: loss_mask width when loss_scale_factor is null); "
                          "set loss_scale_factor to your max response length for a constant L_const")
        else:
            plan.as_is("algorithm.objective.max_len", obj.max_len, f"{ACTOR}.loss_scale_factor",
                       "Dr.GRPO's constant L_const")


def _kl(plan: Plan, obj) -> None:
    beta = getattr(obj, "beta_kl", None)
    if beta is None:
        plan.pinned(f"{ACTOR}.use_kl_loss", False, "the sandbox objective has no KL term")
        return
    if beta == 0:
        plan.converted("algorithm.objective.beta_kl", beta, f"{ACTOR}.use_kl_loss", False, "β = 0: no KL term")
        return
    plan.pinned(f"{ACTOR}.use_kl_loss", True, "β > 0: KL to the reference model as a loss term")
    plan.as_is("algorithm.objective.beta_kl", beta, f"{ACTOR}.kl_loss_coef", "β of the KL term")
    plan.pinned(f"{ACTOR}.kl_loss_type", "k3",
                "the sandbox's k3(π_ref/π_θ) = r − 1 − log r; verl clamps the log-ratio to ±20 and k3 to ≤ 10 "
                "(core_algos.kl_penalty_forward), aggregated with loss_agg_mode as in the sandbox")


def _baseline_rows(plan: Plan, scn: Scenario, target: ObjectiveTarget, kind: str, normalize: bool,
                   sources: dict[str, str | None]) -> None:
    """Advantage rows of one objective: the baseline kind and, where the objective has them, the std
    normalisation, its ε and its Bessel correction, and the OPOB knobs."""
    obj = scn.algorithm.objective
    if kind in ("opob", "optimal") and target.opob is not None:
        target.opob(plan, scn, sources)
        return
    _advantage(plan, sources["kind"], kind, normalize, sources["normalize"])
    std_used = normalize and kind == "group_mean"
    if sources["eps_std"]:
        _eps_std(plan, sources["eps_std"], obj.eps_std, std_used)
    if sources["std_unbiased"]:
        unbiased = obj.std_unbiased
        if not std_used:
            plan.implicit(sources["std_unbiased"], unbiased, "unused: the advantage is not normalised by the group std")
        elif unbiased is None or unbiased:
            plan.implicit(sources["std_unbiased"], unbiased, "Bessel-corrected std (torch.std), as verl computes it")
        else:
            plan.no_equivalent(sources["std_unbiased"], unbiased,
                               "verl's grpo estimator uses the Bessel-corrected std (torch.std). Instead: std_unbiased = true")
    _opob_knobs(plan, obj, kind == "opob")


def map_objective(plan: Plan, scn: Scenario, route: str | None, target: ObjectiveTarget) -> None:
    """Rows for every knob of ``algorithm.objective`` on ``route`` (see :func:`objective_route`)."""
    obj = scn.algorithm.objective
    src = "algorithm.objective"
    plan.pinned("algorithm.use_kl_in_reward", False, "no KL penalty in the reward (the sandbox has none)")
    plan.pinned(f"{ACTOR}.entropy_coeff", 0, "no entropy bonus (the sandbox has none)")
    mode = "vanilla" if route == "reinforce" else LOSS_MODE.get(obj.name, "vanilla")
    if route is None or mode not in target.loss_modes:
        why = ("trajectory balance (TBA) is not a verl loss (core_algos registers no TB objective)" if route is None
               else f"this trainer registers no {mode!r} policy loss")
        plan.no_equivalent(src, describe(obj.model_dump()), f"{why}. Instead: train with the sandbox's torch components "
                           "(sandbox.algorithms, examples/plain_torch_loop.py)")
        plan.pinned("algorithm.adv_estimator", "grpo",
                    "the objective has no equivalent (above); a group estimator is written because verl's default "
                    "'gae' would add a critic: the written config trains verl's vanilla PPO loss on GRPO advantages")
        plan.pinned("algorithm.norm_adv_by_std_in_grpo", True, "verl's GRPO std normalisation (see the objective row)")
        plan.pinned(f"{ACTOR}.use_kl_loss", False, "no KL term is written (the objective has no equivalent)")
        return

    none = {"normalize": None, "eps_std": None, "std_unbiased": None}
    if obj.name == "reinforce":
        plan.converted(f"{src}.name", obj.name, f"{ACTOR}.policy_loss.loss_mode", "vanilla",
                       f"REINFORCE −sg(Â)·log π_θ as vanilla's ratio loss at ratio 1: {target.reinforce_why}; the "
                       "gradient is −Â·∇log π_θ and the clip never fires")
        _baseline_rows(plan, scn, target, obj.baseline, obj.normalize_std,
                       {**none, "kind": f"{src}.baseline", "normalize": f"{src}.normalize_std"})
        for knob, used_by in (("constant_baseline", "constant"), ("ema_decay", "ema"), ("ema_init", "ema")):
            if obj.baseline == used_by:
                plan.no_equivalent(f"{src}.{knob}", getattr(obj, knob), f"knob of the {used_by!r} baseline (no equivalent above)")
            else:
                plan.implicit(f"{src}.{knob}", getattr(obj, knob), f"unused: baseline is {obj.baseline!r}")
        _aggregation(plan, obj, target)
        _kl(plan, obj)
        return

    why = {
        "vanilla": "PPO clip surrogate on r = π_θ/μ (bypass mode: old_log_probs = rollout log-probs)",
        "gspo": "GSPO-token surrogate sg(s_i)·π_θ/sg(π_θ), s_i = exp(mean_t log π_θ/μ), clipped at 1 ± ε "
                "(core_algos.compute_policy_loss_gspo; log s clamped at ≤ 10)",
        "cispo": "−sg(clip(r, 1 − ε_low, 1 + ε_high))·Â·log π_θ on r = π_θ/μ (core_algos.compute_policy_loss_cispo)",
    }[mode]
    plan.converted(f"{src}.name", obj.name, f"{ACTOR}.policy_loss.loss_mode", mode, why)

    if obj.name == "grpo":
        normalize = obj.normalize_std
        _baseline_rows(plan, scn, target, obj.baseline, normalize,
                       {"kind": f"{src}.baseline", "normalize": f"{src}.normalize_std", "eps_std": f"{src}.eps_std",
                        "std_unbiased": f"{src}.std_unbiased"})
    elif obj.name == "dr_grpo":
        _baseline_rows(plan, scn, target, obj.baseline, False, {**none, "kind": f"{src}.baseline"})
    elif obj.name == "rloo":
        plan.converted(f"{src}.name", obj.name, "algorithm.adv_estimator", "rloo",
                       "leave-one-out advantages R − mean_{j≠i} R_j (core_algos.compute_rloo_outcome_advantage)")
        plan.pinned("algorithm.norm_adv_by_std_in_grpo", False,
                    "no std normalisation (rloo does not read this key; written so that the config says so)")
    else:  # ppo, dapo, gspo, cispo: the advantage knob
        kind = {"grpo": "group_mean", "dr_grpo": "group_mean", "rloo": "leave_one_out"}.get(obj.advantage, obj.advantage)
        _baseline_rows(plan, scn, target, kind, obj.advantage == "grpo",
                       {**none, "kind": f"{src}.advantage", "eps_std": f"{src}.eps_std"})

    _clip_knobs(plan, obj, dual_clip=mode == "vanilla")
    _aggregation(plan, obj, target)
    _kl(plan, obj)


UPSTREAM_OBJECTIVES = ObjectiveTarget(
    loss_modes=frozenset({"vanilla", "gspo", "cispo"}),
    reinforce_why="π_old is recomputed with the weights about to be updated (ppo_epochs = 1, one mini-batch), "
                  "so π_θ/π_old = 1 and ∇(π_θ/π_old) = ∇log π_θ",
)


# ------------------------------------------------------------------------------------------------
# corrections (verl 0.9.x: algorithm.rollout_correction on the REINFORCE route only)
# ------------------------------------------------------------------------------------------------


def _correction_off(plan: Plan, why: str) -> None:
    plan.pinned(f"{CORR}.rollout_is", None, why)
    plan.pinned(f"{CORR}.rollout_rs", None, "no rejection sampling")


def map_tis(plan: Plan, c, is_key: str, threshold_key: str) -> bool:
    """Truncated IS as ``rollout_is = token|sequence`` with an upper threshold; False (and a gap row) when a
    floor C_low > 0 is asked, which verl's TIS cannot express."""
    src = "algorithm.correction"
    if c.C_low > 0:
        plan.no_equivalent(f"{src}.C_low", c.C_low, "verl's TIS truncates from above only (rollout_is_threshold is a cap; "
                           "a 'lo_hi' string zeroes weights outside the band instead of flooring them). Instead: C_low = 0")
    else:
        plan.implicit(f"{src}.C_low", c.C_low, "no floor, as verl's TIS")
    plan.converted(f"{src}.name + {src}.level", f"tis, {c.level}", is_key, c.level,
                   f"truncated IS weight min(w, C) on w = π_θ/μ, {'per token' if c.level == 'token' else 'Π_t w_t per sequence'} "
                   "(rollout_corr_helper.compute_rollout_correction_weights)")
    if c.C is None:
        plan.converted(f"{src}.C", None, threshold_key, float(c.cap), f"sandbox default cap at {c.level} level")
    else:
        plan.as_is(f"{src}.C", float(c.C), threshold_key, "cap C")
    return c.C_low == 0


def map_geo_token_weight(plan: Plan, c, src: str) -> None:
    """Geo-RS's surviving tokens: token TIS ``min(w_t, C)`` through ``rollout_is = token``, or weight 1."""
    if c.token_weight == "tis":
        plan.converted(f"{src}.token_weight", c.token_weight, f"{CORR}.rollout_is", "token", "surviving tokens weighted min(w_t, C)")
        plan.as_is(f"{src}.C", float(c.C), f"{CORR}.rollout_is_threshold", "token TIS cap")
    else:
        plan.converted(f"{src}.token_weight", c.token_weight, f"{CORR}.rollout_is", None, "mask only, weight 1")
        plan.implicit(f"{src}.C", c.C, "unused: token_weight = 'none'")


CORRECTIONS_MAPPED = frozenset({"none", "tis", "mis", "geo_mis", "icepop", "decoupled_ppo"})
CORRECTION_GAPS = {
    "decoupled_ppo": "sequence-level rejection (drop a response if any token has w_t > cap) has no verl rule "
                     "(the seq_max options only take k2/k3, which are symmetric in log w). Instead: level = 'token'",
    "opsm": "OPSM's mask depends on the advantage sign; verl's rejection options only see the log-ratio",
    "m2po_mask": "M2PO exists only in the official M2PO fork of verl (+actor_rollout_ref.actor.use_m2po_loss); "
                 "upstream verl 0.9.1 has no M2 budget",
    "m2po_clipband": "M2PO exists only in the official M2PO fork of verl; upstream verl 0.9.1 has no M2 budget",
    "bapo": "BAPO's adaptive bounds live in the BAPO recipe (WooooDyy/BAPO), not in verl 0.9.1",
    "topr": "TOPR's sign-split weights are not a verl correction",
    "dppo_mask": "verl 0.9.1's dppo_tv loss has the same Δp mask but no kl_tau·(log ρ)² term and clips the "
                 "ratio at clip_ratio_c, and it replaces the objective's PPO clip",
}


def _map_correction_0_9(plan: Plan, scn: Scenario, route: str | None) -> None:
    c = scn.algorithm.correction
    src = "algorithm.correction"
    if c.name == "none":
        plan.converted(f"{src}.name", "none", f"{CORR}.rollout_is", None,
                       "no IS weights; written explicitly because RolloutCorrectionConfig defaults to 'sequence'")
        plan.pinned(f"{CORR}.rollout_rs", None, "no rejection sampling")
        return
    if route != "reinforce":
        name = scn.algorithm.objective.name
        plan.no_equivalent(src, describe(c.model_dump()),
                           f"verl 0.9.1's V1 trainer applies algorithm.rollout_correction only in decoupled mode "
                           f"(trainer_base.py skips it when bypass_mode = true), where the PPO clip is anchored at the "
                           f"recomputed π_old (= the weights being updated) and never fires, while the sandbox's {name} "
                           f"clips π_θ/μ. Instead: re-run the sandbox with the REINFORCE objective (e.g. algorithm.objective = "
                           f"{{name = 'reinforce', baseline = 'group_mean', normalize_std = true}}), which verl reproduces with "
                           f"this correction, or export without the correction")
        _correction_off(plan, "the correction is not exported (see the gap above)")
        return

    if c.name == "tis":
        map_tis(plan, c, f"{CORR}.rollout_is", f"{CORR}.rollout_is_threshold")
        plan.pinned(f"{CORR}.rollout_rs", None, "no rejection sampling")
    elif c.name == "mis":
        _map_mis(plan, c)
    elif c.name == "geo_mis":
        plan.converted(f"{src}.name", c.name, f"{CORR}.rollout_rs", "seq_mean_k1",
                       "mask the response when the geometric mean of w = π_θ/μ leaves the band; verl removes masked "
                       "tokens from the token-mean denominator (padding.py: loss_mask = response_mask after rejection), "
                       "the sandbox keeps them: identical for seq-mean aggregations")
        plan.converted(f"{src}.lo + {src}.hi", f"[{c.lo:g}, {c.hi:g}]", f"{CORR}.rollout_rs_threshold",
                       ratio_band(1.0 / c.hi, 1.0 / c.lo),
                       "k1 bands are on μ/π = 1/w: a band [lo, hi] on π/μ is '1/hi_1/lo'")
        map_geo_token_weight(plan, c, src)
    elif c.name == "icepop":
        plan.converted(f"{src}.name", c.name, f"{CORR}.rollout_is", "token", "IcePop: w_t·1[α ≤ w_t ≤ β] per token")
        plan.converted(f"{src}.alpha + {src}.beta", f"[{c.alpha:g}, {c.beta:g}]", f"{CORR}.rollout_is_threshold",
                       ratio_band(c.alpha if c.alpha > 0 else NO_LOWER_EDGE, c.beta),
                       "the 'lo_hi' IS threshold (0.9.x) zeroes weights outside [lo, hi] on w = π_θ/μ"
                       + (" (α = 0 written as 1e-9, below verl's e^-20 weight floor)" if c.alpha == 0 else ""))
        plan.pinned(f"{CORR}.rollout_rs", None, "no rejection sampling")
    elif c.name == "decoupled_ppo" and c.level == "token":
        plan.converted(f"{src}.name + {src}.level", f"{c.name}, token", f"{CORR}.rollout_is", "token",
                       "behaviour weight w_t = π_θ/μ with tokens w_t > cap rejected: w_t·1[w_t ≤ cap]")
        plan.converted(f"{src}.behave_imp_weight_cap", c.behave_imp_weight_cap, f"{CORR}.rollout_is_threshold",
                       ratio_band(NO_LOWER_EDGE, c.behave_imp_weight_cap),
                       "IcePop band [1e-9, cap]: zero weight above the cap (rejected tokens stay in the denominator, as in the sandbox)")
        plan.implicit(f"{src}.require_prox", c.require_prox,
                      "π_old is recomputed with the weights being updated, so w = π_old/μ equals the sandbox's sg(π_θ)/μ")
        plan.pinned(f"{CORR}.rollout_rs", None, "no rejection sampling")
    else:
        why = CORRECTION_GAPS[c.name]
        plan.no_equivalent(src, describe(c.model_dump()), f"{why}. Instead: run the sandbox's own loss in verl: add "
                           "actor_rollout_ref.model.external_lib=sandbox.integrations.verl (importing it registers every "
                           f"correction) and set actor_rollout_ref.actor.policy_loss.loss_mode=sandbox_{c.name}, with "
                           "group-constant advantages such as grpo or rloo (docs/promotion.md#verl-sandbox-losses-by-name), "
                           "or pick a correction verl has (tis, mis, geo_mis, icepop)")
        _correction_off(plan, "the correction is not exported (see the gap above)")


def _map_mis(plan: Plan, c) -> None:
    src = "algorithm.correction"
    lo = c.C_low if c.C_low > 0 else None
    if c.level == "token":
        plan.converted(f"{src}.name + {src}.level", "mis, token", f"{CORR}.rollout_is", "token",
                       "masked IS w_t·1[C_low ≤ w_t ≤ C] per token")
        plan.converted(f"{src}.C + {src}.C_low", f"[{c.C_low:g}, {c.C:g}]", f"{CORR}.rollout_is_threshold",
                       ratio_band(lo or NO_LOWER_EDGE, c.C),
                       "the 'lo_hi' IS threshold zeroes weights outside the band on w = π_θ/μ"
                       + ("" if lo else " (C_low = 0 written as 1e-9, below verl's e^-20 weight floor)"))
        plan.pinned(f"{CORR}.rollout_rs", None, "no rejection sampling")
        for knob in ("seq_weight", "veto_low", "veto_high"):
            plan.implicit(f"{src}.{knob}", getattr(c, knob), "unused at token level (the sandbox reads it for sequences only)")
    else:
        if c.seq_weight == "ratio":
            plan.converted(f"{src}.name + {src}.level + {src}.seq_weight", "mis, sequence, ratio", f"{CORR}.rollout_is",
                           "sequence", "sequence weight W = Π_t w_t kept when C_low ≤ W ≤ C, zeroed otherwise")
            plan.converted(f"{src}.C + {src}.C_low", f"[{c.C_low:g}, {c.C:g}]", f"{CORR}.rollout_is_threshold",
                           ratio_band(lo or NO_LOWER_EDGE, c.C), "the 'lo_hi' IS threshold on W = Π_t π_θ/μ"
                           + ("" if lo else " (C_low = 0 written as 1e-9, below verl's e^-20 weight floor)"))
            plan.pinned(f"{CORR}.rollout_rs", None, "no rejection sampling")
        else:
            plan.converted(f"{src}.name + {src}.level + {src}.seq_weight", "mis, sequence, one", f"{CORR}.rollout_rs",
                           "seq_sum_k1", "reject the response when W = Π_t w_t leaves the band, weight 1 otherwise; "
                           "verl removes rejected tokens from the token-mean denominator, the sandbox keeps them "
                           "(identical for seq-mean aggregations)")
            plan.converted(f"{src}.C + {src}.C_low", f"[{c.C_low:g}, {c.C:g}]", f"{CORR}.rollout_rs_threshold",
                           ratio_band(1.0 / c.C, 1.0 / lo if lo else math.inf),
                           "k1 bands are on μ/π = 1/W: [C_low, C] on W is '1/C_1/C_low' ('inf' for C_low = 0)")
            plan.pinned(f"{CORR}.rollout_is", None, "no IS weight (pure rejection)")
        for knob in ("veto_low", "veto_high"):
            value = getattr(c, knob)
            if value is None:
                plan.implicit(f"{src}.{knob}", None, "no veto")
            else:
                plan.no_equivalent(f"{src}.{knob}", value, "verl 0.9.1 has no per-token veto (rollout_is_veto_threshold "
                                   "was removed after 0.6.0). Instead: leave the veto off")
    if not c.batch_normalize:
        plan.as_is(f"{src}.batch_normalize", False, f"{CORR}.rollout_is_batch_normalize", "raw weights")
    elif c.level == "sequence" and c.seq_weight == "one":
        plan.implicit(f"{src}.batch_normalize", c.batch_normalize,
                      "kept weights are all 1 (no IS weight is written), so normalising changes nothing")
    elif c.batch_normalize == "verl_band":
        plan.converted(f"{src}.batch_normalize", c.batch_normalize, f"{CORR}.rollout_is_batch_normalize", True,
                       "the band-zeroed weights divided by their mean over all valid tokens (token) or valid sequences, "
                       "one each (sequence), over the whole batch (rollout_corr_helper.compute_rollout_correction_weights)")
    else:
        plan.no_equivalent(f"{src}.batch_normalize", c.batch_normalize,
                           "with the 'lo_hi' band written above verl normalises the band-zeroed weights over all valid "
                           "tokens (token) or sequences (sequence); "
                           + ("the sandbox over the kept tokens only, token-weighted" if c.batch_normalize in (True, "kept_tokens")
                              else "'verl_is_rs' normalises the truncated weights min(w, C) instead (verl's TIS + rollout_rs "
                                   "route, which would also drop rejected tokens from the token-mean denominator)")
                           + ". Instead: batch_normalize = 'verl_band' or false")


# ------------------------------------------------------------------------------------------------
# batch geometry, stabilizers, optimizer
# ------------------------------------------------------------------------------------------------


def map_batch(plan: Plan, scn: Scenario, prompts_key: str = "data.train_batch_size") -> None:
    """One trainer step = one batch = one version, as in the sandbox (``prompts_key``: the key that sets the
    prompts per trainer step). Upstream, ``ppo_mini_batch_size = groups_per_step / minibatches`` prompts and
    ``ppo_epochs = epochs`` (verl 0.9.1 ``train_mini_batch``: consecutive mini-batches, the same order every
    epoch with ``actor.shuffle = false``); the fork's trainer step is one mini-batch (``prompts_key`` is
    ``ppo_mini_batch_size``), where several mini-batches are not mapped."""
    a = scn.algorithm
    m, E, B = a.minibatches, a.epochs, a.groups_per_step
    mini = f"{ACTOR}.ppo_mini_batch_size"
    plan.setup("algorithm.group_size", a.group_size, "responses per prompt (the GRPO group)",
               "actor_rollout_ref.rollout.n", a.group_size)
    plan.setup("algorithm.groups_per_step", a.groups_per_step, "prompts per trainer step", prompts_key, a.groups_per_step)
    if prompts_key != mini:
        plan.converted("algorithm.minibatches", m, mini, B // m,
                       "mini-batch = the whole batch (in prompts): one optimizer step per trainer step" if m == 1 else
                       f"groups_per_step / minibatches = {B // m} prompts (× rollout.n responses, verl multiplies): {m} "
                       "optimizer steps per trainer step, consecutive slices of the batch as in the sandbox")
    elif m == 1:
        plan.implicit("algorithm.minibatches", m, "one mini-batch per trainer step (ppo_mini_batch_size = groups_per_step)")
    else:
        plan.no_equivalent("algorithm.minibatches", m,
                           "the fork's fully-async trainer step is one mini-batch and its admission window counts "
                           "trigger_parameter_sync_step·require_batches·ppo_mini_batch_size; several mini-batches per "
                           f"weight push are not mapped onto it. Instead: {MINIBATCH_INSTEAD}")
    plan.converted("algorithm.epochs", E, f"{ACTOR}.ppo_epochs", E,
                   "one pass over the batch: one optimizer step per trainer step, one version per step" if m * E == 1 else
                   "one pass over the batch" if E == 1 else
                   f"{E} passes over the batch, one version per trainer step")


def map_minibatch_route(plan: Plan, scn: Scenario, route: str | None, mode: str) -> None:
    """What several optimizer steps per batch do to the written loss route, and the ratio anchor (upstream
    verl 0.9.1): bypass mode keeps ``old_log_probs`` = the rollout log-probs in every mini-batch; the
    REINFORCE route recomputes π_old once per batch (``_compute_old_log_prob``; in ``separate_async`` once
    per ``parameter_sync_step`` cycle, ``save_model_to_cpu``)."""
    a = scn.algorithm
    S = a.updates_per_batch
    if route == "reinforce" and S > 1:
        plan.no_equivalent("algorithm.minibatches + algorithm.epochs", f"{a.minibatches} x {a.epochs}",
                           "the REINFORCE route relies on π_old = the weights being trained (ratio 1); from a batch's "
                           "second optimizer step on, verl's vanilla ratio π_θ/π_old moves and its clip binds, while the "
                           f"sandbox's REINFORCE loss has no ratio. Instead: {MINIBATCH_INSTEAD}")
    if mode != "sync" and a.minibatches > 1 and a.epochs > 1:
        plan.implicit("algorithm.epochs", a.epochs,
                      "separate_async trains each mini-batch for its ppo_epochs passes before sampling the next one "
                      "(one mini-batch per local update): the batch's optimizer steps see the same lags 0 … m·E − 1 "
                      "as in the sandbox, on the data in another order (the sandbox runs the epochs outermost)")
    proximal_row(plan, scn, "batch_start" if route == "reinforce" else "behaviour",
                 f"{CORR}.bypass_mode = " + ("false" if route == "reinforce" else "true"))


STABILIZERS = {
    "vcpo_lr": ("VCPO's ESS-scaled learning rate exists only in the mit-han-lab/vcpo fork (actor.ess_scaling.*). "
                f"Instead: {VCPO_INSTEAD}"),
    "gac": ("GAC has no public implementation and no framework key. Instead: place the sandbox's torch component "
            "(sandbox.algorithms, GAC projection) between backward and the optimizer step of verl's actor (a custom "
            "engine/actor hook)"),
    "staleness_lr": ("verl has no per-sample staleness-dependent learning rate. Instead: a custom actor hook scaling "
                     "the step by the batch's trajectory staleness, using the sandbox's rule"),
}
STEP_HOOK = "between backward and the optimizer step of verl's actor (a custom engine/actor hook)"


def map_stabilizers(plan: Plan, scn: Scenario, table: dict = STABILIZERS) -> None:
    stabilizer_rows(plan, scn, table, "verl", STEP_HOOK)


_OPTIMIZER_CLASS = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD"}


def _map_optimizer_fsdp(plan: Plan, scn: Scenario, given: Given) -> None:
    """``actor_rollout_ref.actor.optim`` (FSDPOptimizerConfig; workers/config/optimizer.py build_optimizer imports
    ``torch.optim.<optimizer>`` and passes lr, weight_decay, betas for Adam-family names, then
    override_optimizer_config)."""
    o = scn.algorithm.optimizer
    src = "algorithm.optimizer"
    optim = f"{ACTOR}.optim"
    plan.converted(f"{src}.name", o.name, f"{optim}.optimizer", _OPTIMIZER_CLASS[o.name],
                   "torch.optim class (optimizer_impl = torch.optim, the default)")
    adam = o.name != "sgd"
    if adam:
        plan.as_is(f"{src}.betas", list(o.betas), f"{optim}.betas", "Adam moment decays")
    else:
        plan.implicit(f"{src}.betas", list(o.betas), "unused by SGD (verl passes betas to Adam-family optimizers only)")
    override: dict[str, float] = {}
    if adam and o.eps != 1e-8:
        override["eps"] = o.eps
    if not adam and o.momentum != 0:
        override["momentum"] = o.momentum
    if override:
        plan.converted(f"{src}.eps" if adam else f"{src}.momentum", o.eps if adam else o.momentum,
                       f"{optim}.override_optimizer_config", override, "extra optimizer arguments (build_optimizer)")
    if adam and "eps" not in override:
        plan.implicit(f"{src}.eps", o.eps, "torch's default eps 1e-8 (verl passes none)")
    if not adam and "momentum" not in override:
        plan.implicit(f"{src}.momentum", o.momentum, "torch SGD default momentum 0")
    if adam:
        plan.implicit(f"{src}.momentum", o.momentum, "unused by Adam")
    else:
        plan.implicit(f"{src}.eps", o.eps, "unused by SGD")
    plan.as_is(f"{src}.weight_decay", o.weight_decay, f"{optim}.weight_decay",
               "decoupled for AdamW, L2 for Adam and SGD (torch semantics); verl's default is 0.01")
    if o.schedule == "linear":
        plan.no_equivalent(f"{src}.schedule", o.schedule, "verl's FSDP optimizer offers lr_scheduler_type constant or cosine "
                           "only (FSDPOptimizerConfig). Instead: schedule = 'constant' or 'cosine'")
    else:
        plan.as_is(f"{src}.schedule", o.schedule, f"{optim}.lr_scheduler_type",
                   "constant learning rate after the warm-up" if o.schedule == "constant" else
                   "half-cosine to 0 over trainer.total_training_steps (set it to your run length)")
        if o.schedule == "cosine":
            plan.pinned(f"{optim}.min_lr_ratio", 0.0, "the sandbox's cosine decays to 0")
            plan.pinned(f"{optim}.num_cycles", 0.5, "one half-cosine, as the sandbox")
    # verl 0.9.1 steps its LR scheduler once per train_mini_batch call (update_lr_scheduler on the last
    # iteration): per batch in sync mode, per local update (one mini-batch, all its epochs) in separate_async.
    a = scn.algorithm
    per = a.updates_per_batch if plan.settings.get(f"{V1}.trainer_mode", "sync") == "sync" else a.epochs
    warmup = math.ceil(o.warmup_steps / per)
    plan.converted(f"{src}.warmup_steps", o.warmup_steps, f"{optim}.lr_warmup_steps", warmup,
                   "no warm-up" if o.warmup_steps == 0 else
                   "linear warm-up; verl ramps step/W from step 0 (first step at lr 0), the sandbox (step+1)/W: one step later"
                   + ("" if per == 1 else f"; verl's scheduler steps once per {per} optimizer steps (per "
                      "train_mini_batch call), so W = ceil(warmup_steps / " + str(per) + ") and the learning rate is "
                      "constant within each call"))
    scale_rows(plan, scn, given, f"{optim}.lr", f"{optim}.clip_grad", framework_lr_default=1e-6, framework_clip_default=1.0)


# ------------------------------------------------------------------------------------------------
# staleness (V1 trainer)
# ------------------------------------------------------------------------------------------------


def _map_staleness_v1(plan: Plan, scn: Scenario) -> str:
    """Rows for ``system.staleness`` and ``system.partial_rollouts``; returns the trainer mode written."""
    st = staleness_of(scn)
    cfg = scn.system.staleness
    B = scn.algorithm.groups_per_step
    plan.pinned("trainer.use_v1", True, "the V1 trainer (written explicitly: the legacy trainer has other staleness keys)")
    mode = "separate_async" if st.kind == "max_lag" else "sync"
    if st.kind == "sync":
        plan.converted("system.staleness", "sync", f"{V1}.trainer_mode", "sync",
                       "on-policy: every step generates with the newest weights (trainer_sync.py)")
    elif st.kind == "fixed_lag":
        fixed_lag_gap(plan, scn, "For k = 1, verl's one-step-off-policy recipe (verl/experimental/one_step_off_policy) "
                      "trains at lag exactly 1" if cfg.k == 1 else "")
        plan.pinned(f"{V1}.trainer_mode", "sync", "the staleness control is not exported: the written config trains on-policy")
    elif st.kind == "async_ratio":
        plan.no_equivalent("system.staleness", describe(cfg.model_dump()),
                           "verl has no asynchronous ratio (fractional-batch admission from the oldest version). Instead: "
                           f"export with system.staleness = {{kind = \"max_lag\", k_max = {st.bound}, enforcement = \"drop\"}} "
                           "(the bound ceil(α) it enforces) after checking that in the sandbox")
        plan.pinned(f"{V1}.trainer_mode", "sync", "the staleness control is not exported: the written config trains on-policy")
    else:
        plan.converted("system.staleness.kind", "max_lag", f"{V1}.trainer_mode", "separate_async",
                       "streaming: rollout on its own GPUs, trainer samples finished groups from the replay buffer")
        m = scn.algorithm.minibatches
        if m == 1:
            plan.pinned(f"{V1}.separate_async.parameter_sync_step", 1,
                        "weights pushed after every optimizer step (train_batch_size = parameter_sync_step·ppo_mini_batch_size)")
        else:
            plan.converted("algorithm.minibatches", m, f"{V1}.separate_async.parameter_sync_step", m,
                           f"weights pushed after {m} local updates of one mini-batch each (train_batch_size = "
                           "parameter_sync_step·ppo_mini_batch_size), as the sandbox publishes once per batch; "
                           "global_steps (and the off-policy threshold) count these cycles, i.e. batches. Each local "
                           "update samples its own mini-batch from the replay buffer (the sandbox splits one batch)")
        plan.converted("system.staleness.k_max", cfg.k_max, f"{V1}.sampler.max_off_policy_threshold", cfg.k_max + 1,
                       "T counts the versions a trajectory spans, both ends: lag ≤ T − 1 = k_max, counted from the "
                       "step its prompt was queued (its oldest token is no older)")
        if cfg.enforcement == "throttle":
            window = cfg.k_max
            plan.converted("system.staleness.k_max", cfg.k_max, f"{V1}.separate_async.num_warmup_batches", window,
                           "admission window: (k_max + 1)·B groups outstanding, as the throttle's (k_max + v + 1)·B rule")
            plan.implicit("system.staleness.queue_capacity", cfg.queue_capacity, "unused by the throttle")
        else:
            capacity = cfg.queue_capacity or (cfg.k_max + 1) * B
            window = max(capacity // B - 1, 0)
            note = f"prefetch window: (num_warmup_batches + 1)·B outstanding = the drop queue's {capacity} groups"
            if capacity % B:
                note += f" rounded down to whole batches of {B}"
            plan.converted("system.staleness.queue_capacity", cfg.queue_capacity, f"{V1}.separate_async.num_warmup_batches",
                           window, note)
        plan.converted("system.staleness.enforcement", cfg.enforcement, f"{V1}.sampler.max_off_policy_strategy", "drop",
                       "over-bound groups are dropped when sampled and replaced by fresh prompts, as the sandbox drops "
                       "them at dequeue (in both of its modes); verl's 'wait' would stall the trainer instead")
        plan.pinned("actor_rollout_ref.rollout.checkpoint_engine.backend", "nccl",
                    "separate_async needs a non-naive weight-sync backend (trainer_separate_async.py)")

    pr = scn.system.partial_rollouts
    if mode == "sync":
        if pr:
            plan.no_equivalent("system.partial_rollouts", pr, "the staleness control above is not exported, and verl's sync "
                               "trainer has no partial rollouts. Instead: export with a max_lag control")
        else:
            plan.implicit("system.partial_rollouts", pr, "the sync trainer generates whole responses under one version")
    elif pr:
        plan.implicit("system.partial_rollouts", pr, "always on in the async V1 trainers: aborted requests resume under "
                      "the new weights (workers/rollout/llm_server.py)")
    else:
        plan.no_equivalent("system.partial_rollouts", pr,
                           "the async V1 trainers always resume interrupted responses under new weights "
                           "(workers/rollout/llm_server.py retries aborted requests), so responses can span versions. Instead: check "
                           "in the sandbox with system.partial_rollouts = true (needs a cost_model generation_time); the lag "
                           "bound still holds since it is counted from the dispatch step")
    return mode


# ------------------------------------------------------------------------------------------------
# the exporter
# ------------------------------------------------------------------------------------------------


def _metrics(route: str | None, mode: str) -> dict[str, str]:
    decoupled = route == "reinforce"
    corr = ("`rollout_corr/{}`" if decoupled else "not logged in bypass mode (`{}` needs bypass_mode = false)")
    return {
        "is/ess_ratio": ("no direct counterpart; ≈ 1/(1 + `rollout_corr/chi2_seq`) (verl's chi2_seq is mean(W²) − 1, not "
                         "normalised by mean(W)²); `rollout_corr/rollout_is_eff_sample_size` is a per-token ESS of the "
                         "truncated weights" if decoupled else
                         "not logged in bypass mode; `actor/ppo_kl` (mean of log μ − log π_θ) tracks the drift"),
        "is/chi2": corr.format("chi2_token"),
        "is/kl_k3": corr.format("k3_kl") if decoupled else "not logged in bypass mode; `actor/ppo_kl` is the k1 estimate",
        "clip/frac": "`actor/pg_clipfrac`" + (" (0 by construction: ratio ≡ 1 on the REINFORCE route)" if decoupled else ""),
        "grad/norm": "`actor/grad_norm` (before clipping)",
        "staleness/mean": ("`training/off_policy/trajectory_staleness_worst/mean` (current version − oldest version "
                           "of the trajectory)" if mode != "sync" else "0 (sync trainer)"),
        "staleness/max": "`training/off_policy/trajectory_staleness_worst/max`" if mode != "sync" else "0 (sync trainer)",
    }


@register
class VerlExporter(Exporter):
    """verl 0.9.x, V1 trainer of ``verl.trainer.main_ppo`` (see the module docstring for every convention)."""

    name = "verl"
    title = "verl (upstream, V1 trainer of verl.trainer.main_ppo)"
    versions = (VERL_0_9,)
    components = property(lambda self: {"correction": CORRECTIONS_MAPPED | frozenset(CORRECTION_GAPS)})
    expresses = {
        "max lag": f"{V1}.sampler.max_off_policy_threshold = k_max + 1 (separate_async, parameter_sync_step = 1, "
                   "num_warmup_batches = admission window)",
        "fixed lag": "no equivalent: verl only bounds the lag (one-step-off recipe for k = 1)",
        "async ratio": "no equivalent: nearest is max lag with k_max = ceil(alpha)",
        "partial rollouts": "partly: always on in the async V1 trainers (cannot be switched off); none in sync",
        "batch geometry": "data.train_batch_size = groups_per_step, actor.ppo_mini_batch_size = groups_per_step / "
                          "minibatches, ppo_epochs = epochs (separate_async: parameter_sync_step = minibatches), "
                          "rollout.n = group_size",
        "learning rate": f"{ACTOR}.optim.lr",
        "clip range": f"{ACTOR}.clip_ratio_low / clip_ratio_high",
        "dual clip": f"{ACTOR}.clip_ratio_c (always on in vanilla; 1e9 = off)",
        "KL penalty": f"{ACTOR}.use_kl_loss + kl_loss_coef, kl_loss_type = k3",
        "loss aggregation": f"{ACTOR}.loss_agg_mode",
        "advantage": "algorithm.adv_estimator (grpo, rloo) + algorithm.norm_adv_by_std_in_grpo",
        "token TIS": f"partly: {CORR}.rollout_is = token + rollout_is_threshold (REINFORCE objective only)",
        "sequence TIS": f"partly: {CORR}.rollout_is = sequence + rollout_is_threshold (REINFORCE objective only)",
        "masked IS / IcePop": f"partly: {CORR}.rollout_is_threshold = 'lo_hi', rollout_rs = seq_sum_k1 | seq_mean_k1 "
                              "(REINFORCE objective only)",
        "M2PO": "no key (official M2PO fork of verl only); loss_mode=sandbox_m2po_mask via sandbox.integrations.verl",
        "decoupled PPO": "partly: token level with the REINFORCE objective only (rollout_is = token, '1e-9_cap'); with a PPO "
                         "objective no equivalent",
        "VCPO": "no equivalent: use --framework verl-vcpo",
        "GAC": "no equivalent: custom hook between backward and the optimizer step",
    }

    def plan(self, scn: Scenario, version: Version, given: Given) -> Plan:
        plan = self.new_plan(version, "python -m verl.trainer.main_ppo (config ppo_trainer)")
        mode = _map_staleness_v1(plan, scn)
        plan.target = f"python -m verl.trainer.main_ppo (config ppo_trainer, V1 trainer, trainer_mode = {mode})"
        route = objective_route(scn)
        plan.pinned(f"{CORR}.bypass_mode", route != "reinforce",
                    "REINFORCE route: decoupled mode recomputes π_old with the weights being updated (ratio ≡ 1) and "
                    "applies the correction weights" if route == "reinforce" else
                    "bypass mode: the surrogate's ratio is π_θ/μ against the rollout log-probs, as in the sandbox")
        plan.pinned("actor_rollout_ref.rollout.calculate_log_probs", True, "the sampler's log-probs μ are needed by both routes")
        map_objective(plan, scn, route, UPSTREAM_OBJECTIVES)
        _map_correction_0_9(plan, scn, route)
        map_batch(plan, scn)
        map_minibatch_route(plan, scn, route, mode)
        map_stabilizers(plan, scn)
        _map_optimizer_fsdp(plan, scn, given)
        plan.metrics = _metrics(route, mode)
        plan.notes += [
            ("Each verl trainer step is one optimizer step on data.train_batch_size prompts × rollout.n responses and "
             "one weight version, as one sandbox step."),
            ("overrides.txt and verl_config.yaml hold the same keys; launch.sh passes overrides.txt to "
             "verl.trainer.main_ppo with your model, data and GPU layout."),
        ]
        return plan

    def files(self, plan: Plan) -> dict[str, str]:
        mode = plan.settings.get(f"{V1}.trainer_mode", "sync")
        return {
            "overrides.txt": overrides_text(plan.settings),
            "verl_config.yaml": yaml_text(plan, "merge onto verl/trainer/config/_generated_ppo_trainer.yaml"),
            "launch.sh": _launch_script(plan, mode),
        }

    def launch(self, plan: Plan, files: dict[str, str]) -> str:
        return "MODEL_PATH=/path/to/model TRAIN_FILES=/path/to/train.parquet VAL_FILES=/path/to/val.parquet bash launch.sh"


def overrides_text(settings: dict[str, Any], append: frozenset[str] = frozenset()) -> str:
    """One Hydra override per line; keys in ``append`` get the ``+`` prefix (fork-only keys)."""
    return "".join(f"{'+' if k in append else ''}{k}={hydra_value(v)}\n" for k, v in settings.items())


def yaml_text(plan: Plan, where: str) -> str:
    header = f"# sandbox export: {plan.framework} {plan.release}, {plan.target}\n# {where}; see PROMOTION.md\n"
    return header + yaml.safe_dump(nested(plan.settings), sort_keys=False, allow_unicode=True)


def _launch_script(plan: Plan, mode: str) -> str:
    separate = mode == "separate_async"
    lines = [
        "#!/usr/bin/env bash",
        f"# sandbox export: verl {plan.release}, V1 trainer ({mode}). Every algorithm setting is in overrides.txt",
        "# (see PROMOTION.md); fill in the variables marked FILL IN, adjust the layout defaults to your cluster.",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        "",
        '# FILL IN: your model and data',
        'MODEL_PATH="${MODEL_PATH:?FILL IN: path or Hugging Face id of the policy model}"',
        'TRAIN_FILES="${TRAIN_FILES:?FILL IN: training parquet file(s)}"',
        'VAL_FILES="${VAL_FILES:?FILL IN: validation parquet file(s)}"',
        'MAX_PROMPT_LENGTH="${MAX_PROMPT_LENGTH:-1024}"',
        'MAX_RESPONSE_LENGTH="${MAX_RESPONSE_LENGTH:-2048}"',
        "",
        "# FILL IN: GPU layout" + (" (trainer GPUs; separate_async adds a standalone rollout pool)" if separate else ""),
        'NNODES="${NNODES:-1}"',
        'GPUS_PER_NODE="${GPUS_PER_NODE:-8}"',
    ]
    if separate:
        lines += ['ROLLOUT_NNODES="${ROLLOUT_NNODES:-1}"', 'ROLLOUT_GPUS_PER_NODE="${ROLLOUT_GPUS_PER_NODE:-8}"']
    lines += [
        'ROLLOUT_ENGINE="${ROLLOUT_ENGINE:-vllm}"',
        'MICRO_BATCH_PER_GPU="${MICRO_BATCH_PER_GPU:-1}"',
        "",
        "mapfile -t OVERRIDES < overrides.txt",
        "",
        "python -m verl.trainer.main_ppo \\",
        '    "${OVERRIDES[@]}" \\',
        '    actor_rollout_ref.model.path="$MODEL_PATH" \\',
        '    data.train_files="$TRAIN_FILES" \\',
        '    data.val_files="$VAL_FILES" \\',
        '    data.max_prompt_length="$MAX_PROMPT_LENGTH" \\',
        '    data.max_response_length="$MAX_RESPONSE_LENGTH" \\',
        '    actor_rollout_ref.rollout.name="$ROLLOUT_ENGINE" \\',
        '    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO_BATCH_PER_GPU" \\',
        '    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_PER_GPU" \\',
        '    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_PER_GPU" \\',
        '    trainer.nnodes="$NNODES" \\',
        '    trainer.n_gpus_per_node="$GPUS_PER_NODE" \\',
    ]
    if separate:
        lines += ['    actor_rollout_ref.rollout.nnodes="$ROLLOUT_NNODES" \\',
                  '    actor_rollout_ref.rollout.n_gpus_per_node="$ROLLOUT_GPUS_PER_NODE" \\']
    lines += ['    "$@"', ""]
    return "\n".join(lines)
