"""TRL 1.16.0 export table; the mapping and its upstream sources: docs/promotion.md#mapping-tables-by-framework-version."""

from __future__ import annotations

import json
import math
from typing import ClassVar

from ..scenario import Scenario
from ..algorithms.objectives.base import OPOB_KNOBS
from .base import Exporter, Given, Version, describe, register
from .common import (MINIBATCH_INSTEAD, STD_GUARD_TOLERANCE, fixed_lag_gap, no_minibatch_rows, proximal_row,
                     scale_rows, staleness_of, versions_to_optimizer_steps)
from .engine import stabilizer_rows
from .plan import Plan

SYNC_CLASS = "GRPOConfig"
ASYNC_CLASS = "AsyncGRPOConfig"
TARGETS = {
    SYNC_CLASS: "GRPOConfig (trl.GRPOTrainer, synchronous)",
    ASYNC_CLASS: "AsyncGRPOConfig (trl.experimental.async_grpo.AsyncGRPOTrainer)",
}
CONFIG_FILE = "grpo_config.json"
SCRIPT_FILE = "train_grpo.py"

# The guard TRL adds to the reward std: GRPOTrainer ``(std + 1e-4)``, AsyncGRPO's worker ``(std + 1e-8)``.
STD_GUARD = {SYNC_CLASS: 1e-4, ASYNC_CLASS: 1e-8}
# Whether TRL's group std is Bessel-corrected: GRPOTrainer uses ``nanstd`` (trl/trainer/utils.py, n − 1),
# AsyncGRPO's worker ``numpy.std`` (population).
STD_UNBIASED = {SYNC_CLASS: True, ASYNC_CLASS: False}

# Sandbox aggregation -> GRPOTrainer loss_type (grpo_trainer.py _compute_loss).
LOSS_TYPE_OF_AGGREGATION = {
    "seq_mean_token_mean": ("grpo", "per sequence Σ_t m ℓ / Σ_t m, mean over sequences"),
    "token_mean": ("dapo", "Σ m ℓ over the accumulated batch / its active tokens (num_items_in_batch)"),
    "seq_mean_token_sum": ("luspo", ("per sequence Σ_t m ℓ, mean over sequences; TRL warns that luspo expects "
                                     "importance_sampling_level = 'sequence', which only concerns LUSPO's own ratio")),
    "seq_mean_token_sum_norm": ("dr_grpo", "Σ m ℓ / (sequences · max_completion_length)"),
}

INTEGRATION = (
    "sandbox.integrations.trl.SandboxGRPOTrainer, TRL 1.16's GRPOTrainer with the sandbox's implementation, "
    "configured by the same entry as this scenario: SandboxGRPOTrainer(..., "
    "args=SandboxGRPOConfig.from_scenario(<this scenario>, ...)) (docs/promotion.md#trl)"
)
VCPO_INSTEAD = "train with " + INTEGRATION + ", or export with --framework verl-vcpo (the mit-han-lab/vcpo verl fork)"
OPOB_NOTE = (
    "VCPO's off-policy optimal baseline needs per-trajectory gradient norms and the sequence IS weights; "
    "TRL always subtracts the plain group mean. Instead: " + VCPO_INSTEAD
)


@register
class TRLExporter(Exporter):
    name = "trl"
    title = "TRL (GRPOTrainer / AsyncGRPOTrainer)"
    versions = (Version("1.16", "1.16.0", "trl 1.16.0 wheel"),)
    components = property(lambda self: {"correction": frozenset(_CORRECTION_MAPPERS) | frozenset(_CORRECTION_GAP)})
    expresses: ClassVar[dict[str, str]] = {
        "max lag": "AsyncGRPOConfig max_staleness = k_max with weight_sync_steps = 1 (drop at dequeue)",
        "fixed lag": "no equivalent: GRPOConfig's data reuse (steps_per_generation, num_iterations) spreads lag "
                     "over 0..L, AsyncGRPO only bounds it",
        "async ratio": "no equivalent: no fractional admission window; export max_lag instead",
        "partial rollouts": "partly: AsyncGRPOConfig always continues in-flight generations under new weights "
                            "(vLLM pause mode 'keep'); whole rollouts cannot be requested",
        "batch geometry": "num_generations, per_device_train_batch_size, gradient_accumulation_steps, "
                          "steps_per_generation = minibatches × gradient_accumulation_steps, num_iterations = epochs "
                          "(AsyncGRPO: token_budget = 0, weight_sync_steps = minibatches, no epochs)",
        "learning rate": "learning_rate",
        "clip range": "epsilon, epsilon_high",
        "dual clip": "partly: delta (GRPOConfig; INTELLECT-2 two-sided clip, equal to dual clip c when c >= 1 + epsilon_high)",
        "KL penalty": "beta (GRPOConfig; k3 of π_ref/π_θ, use_bias_correction_kl = false)",
        "loss aggregation": "loss_type = grpo, dapo, luspo or dr_grpo (GRPOConfig); AsyncGRPO: token mean only",
        "advantage": "scale_rewards = group or none (group mean always subtracted; no leave-one-out)",
        "token TIS": "partly: vllm_importance_sampling_mode = token_truncate, _clip_max = C (GRPOConfig only)",
        "sequence TIS": "partly: vllm_importance_sampling_mode = sequence_truncate, _clip_max = C (GRPOConfig only)",
        "masked IS / IcePop": "partly: vllm_importance_sampling_mode = token_mask or sequence_mask, _clip_min/_clip_max "
                              "(GRPOConfig only)",
        "M2PO": "no key; sandbox.integrations.trl (SandboxGRPOTrainer) runs the sandbox's M2PO inside GRPOTrainer",
        "decoupled PPO": "partly: token level: vllm_importance_sampling_mode = token_mask, _clip_max = cap (GRPOConfig, "
                         "bypass form)",
        "VCPO": "no key: " + VCPO_INSTEAD,
        "GAC": "no key and no public code: " + INTEGRATION,
    }

    # ------------------------------------------------------------------------------------------
    def plan(self, scn: Scenario, version: Version, given: Given) -> Plan:
        cls = ASYNC_CLASS if scn.system.staleness.kind == "max_lag" else SYNC_CLASS
        plan = self.new_plan(version, TARGETS[cls])
        geometry_ok = _geometry(plan, scn, cls)
        _staleness(plan, scn, cls)
        _objective(plan, scn, cls)
        _correction(plan, scn, cls)
        stabilizer_rows(plan, scn, _STABILIZER_GAP, "TRL",
                        "between backward and the optimizer step of TRL's trainer (e.g. a GRPOTrainer subclass)")
        _optimizer(plan, scn)
        scale_rows(plan, scn, given, "learning_rate", "max_grad_norm", framework_lr_default=1e-6,
                   framework_clip_default=1.0)
        plan.metrics.update(_metrics(scn, cls))
        plan.notes.extend(_notes(scn, cls, geometry_ok))
        return plan

    def files(self, plan: Plan) -> dict[str, str]:
        cls = config_class(plan)
        return {
            CONFIG_FILE: json.dumps(plan.settings, indent=2) + "\n",
            SCRIPT_FILE: _train_script(cls, plan.release, self.launch(plan, {})),
        }

    def launch(self, plan: Plan, files: dict[str, str]) -> str:
        if config_class(plan) == ASYNC_CLASS:
            return (
                "# 1. generation server on its own GPU(s): AsyncGRPOTrainer needs vLLM's dev endpoints and NCCL weight\n"
                "#    transfer; serve in the trainer's dtype (AsyncGRPOConfig.dtype, float32 by default)\n"
                "CUDA_VISIBLE_DEVICES=0 VLLM_SERVER_DEV_MODE=1 vllm serve YOUR_MODEL --dtype float32 \\\n"
                "    --weight-transfer-config '{\"backend\":\"nccl\"}' &\n"
                "# 2. trainer (one process, as the batch sizes were written; see PROMOTION.md to scale out)\n"
                "CUDA_VISIBLE_DEVICES=1 accelerate launch --num_processes 1 train_grpo.py\n"
            )
        return ("# one training process, as the batch sizes were written (see PROMOTION.md to scale out)\n"
                "accelerate launch --num_processes 1 train_grpo.py\n")


def config_class(plan: Plan) -> str:
    """``GRPOConfig`` or ``AsyncGRPOConfig``: the class the plan's settings are keyword arguments of."""
    for cls, target in TARGETS.items():
        if plan.target == target:
            return cls
    raise AssertionError(f"exporter bug: unknown TRL target {plan.target!r}")


# ------------------------------------------------------------------------------------------------
# batch geometry and staleness
# ------------------------------------------------------------------------------------------------


def _geometry(plan: Plan, scn: Scenario, cls: str) -> bool:
    """One optimizer step = ``groups_per_step × group_size`` completions; False when TRL cannot run the
    scenario's group size (GRPO needs two completions per prompt)."""
    alg = scn.algorithm
    G, B = alg.group_size, alg.groups_per_step
    if G < 2:
        plan.no_equivalent("algorithm.group_size", G,
                           "TRL's GRPO trainers need at least 2 generations per prompt (num_generations >= 2, "
                           "grpo_config.py); raise group_size in the scenario and check the conclusion again")
        plan.setup("algorithm.groups_per_step", B, "prompts per optimizer step; not written because the group size "
                   "has no TRL equivalent")
        return False
    plan.setup("algorithm.group_size", G, "responses per prompt", target="num_generations")
    m = alg.minibatches
    if cls == SYNC_CLASS and m == 1:
        plan.setup("algorithm.groups_per_step", B,
                   f"prompts per optimizer step: one step consumes per_device_train_batch_size ({G}) × "
                   f"gradient_accumulation_steps ({B}) × num_processes (1) = {B * G} completions",
                   target="gradient_accumulation_steps")
    elif cls == SYNC_CLASS:
        plan.setup("algorithm.groups_per_step", B,
                   f"prompts per generation batch: steps_per_generation ({B}) micro-batches of one group; an optimizer "
                   f"step accumulates gradient_accumulation_steps = groups_per_step / minibatches = {B // m} of them "
                   f"({B // m * G} completions)", target="gradient_accumulation_steps", target_value=B // m)
    if cls == SYNC_CLASS:
        plan.pinned("per_device_train_batch_size", G,
                    "one prompt group per micro-batch, so that the loss of every micro-batch averages the same "
                    "number of sequences and the accumulated gradient is the whole step's")
    else:
        plan.setup("algorithm.groups_per_step", B,
                   f"prompts per optimizer step: one micro-batch of groups_per_step × group_size = {B * G} "
                   "completions per step (per_device_train_batch_size × num_processes (1) × "
                   "gradient_accumulation_steps (1))" if m == 1 else
                   f"prompts per published version: {m} optimizer steps (weight_sync_steps) of one micro-batch of "
                   f"groups_per_step / minibatches × group_size = {B // m * G} completions each",
                   target="per_device_train_batch_size", target_value=B * G // m)
        plan.pinned("gradient_accumulation_steps", 1,
                    "AsyncGRPOTrainer normalises each micro-batch by its own token count and divides by the "
                    "accumulation steps (compute_loss); a single micro-batch makes the loss the token mean of the "
                    "whole step")
        plan.pinned("token_budget", 0,
                    "fixed-count micro-batches (FixedCountBatcher): with a token budget the number of completions per "
                    "optimizer step would vary with their length")
    return True


def _minibatches_sync(plan: Plan, scn: Scenario) -> None:
    """GRPOConfig: a generation batch of groups_per_step groups serves ``steps_per_generation /
    gradient_accumulation_steps = minibatches`` optimizer steps per iteration, ``num_iterations = epochs``
    (``GRPOTrainer._prepare_inputs``, trl 1.16); π_old is recomputed at generation when a batch serves
    several steps (``old_per_token_logps``), else the ratio is 1."""
    a = scn.algorithm
    m, E, B = a.minibatches, a.epochs, a.groups_per_step
    if a.group_size < 2:
        no_minibatch_rows(plan, scn, "no GRPOConfig is written (group size below 2)", MINIBATCH_INSTEAD)
        plan.implicit("algorithm.proximal", a.proximal, "no GRPOConfig is written (group size below 2)")
        return
    if m == 1:
        plan.implicit("algorithm.minibatches", 1, "steps_per_generation = gradient_accumulation_steps: one optimizer "
                      "step per generation batch and iteration")
    else:
        plan.converted("algorithm.minibatches", m, "steps_per_generation", B,
                       f"steps_per_generation = minibatches × gradient_accumulation_steps = {m} × {B // m}: {m} optimizer "
                       "steps per generation batch, in the order TRL shuffled the batch's completions once "
                       "(shuffle_sequence_dict: mini-batches mix groups; the same lags per step, other data per step)")
    plan.converted("algorithm.epochs", E, "num_iterations", E,
                   "no reuse of a generation batch (each reuse would add one step of lag)" if E == 1 else
                   f"{E} passes over each generation batch, in the same order every pass (GRPOTrainer reuses its "
                   "buffered slices); TRL's largest lag num_iterations·steps_per_generation/gradient_accumulation_steps "
                   f"− 1 = {m * E - 1}, the sandbox's m·E − 1 within a batch")
    proximal_row(plan, scn, "batch_start", "GRPOTrainer's old_per_token_logps, computed with the weights at generation "
                 "(in a synchronous run also the rollout policy μ)")


def _minibatches_async(plan: Plan, scn: Scenario) -> None:
    """AsyncGRPOConfig: ``weight_sync_steps = minibatches`` optimizer steps per model version; no epochs."""
    a = scn.algorithm
    m = a.minibatches
    if m == 1:
        plan.converted("algorithm.minibatches", 1, "weight_sync_steps", 1,
                       "one weight sync (one model_version) per optimizer step: the sandbox's one version per step")
    else:
        plan.converted("algorithm.minibatches", m, "weight_sync_steps", m,
                       f"one weight sync (one model_version) per {m} optimizer steps, as the sandbox publishes once per "
                       "batch; max_staleness counts model versions, so it keeps the value of k_max. Each step dequeues "
                       "its own micro-batch (the sandbox splits one batch): the same lags per step")
    if a.epochs == 1:
        plan.implicit("algorithm.epochs", 1, "AsyncGRPOTrainer trains on each sample once")
    else:
        plan.no_equivalent("algorithm.epochs", a.epochs, "AsyncGRPOTrainer trains on each dequeued sample once (no "
                           f"num_iterations). Instead: {MINIBATCH_INSTEAD}")
    proximal_row(plan, scn, "behaviour", "AsyncGRPOTrainer's ratio against the vLLM log-probs")


def _staleness(plan: Plan, scn: Scenario, cls: str) -> None:
    st = staleness_of(scn)
    partial = scn.system.partial_rollouts
    B = scn.algorithm.groups_per_step
    if cls == ASYNC_CLASS:
        k = versions_to_optimizer_steps(st.bound)
        _minibatches_async(plan, scn)
        plan.converted("system.staleness.kind + system.staleness.k_max", f"max_lag, k_max = {st.bound}",
                       "max_staleness", k,
                       "lag in versions as is (versions_to_optimizer_steps with weight_sync_steps = 1): "
                       "RolloutQueueDataset drops a sample at dequeue when model_version_now − sample.model_version "
                       "> max_staleness; the version is the one current when its group was created, i.e. its oldest "
                       "token (async_rollout_worker.py)")
        _admission(plan, scn, k)
        if partial:
            plan.implicit("system.partial_rollouts", True,
                          "AsyncGRPOTrainer pauses vLLM with mode 'keep' during a weight sync (vllm_client.py), so "
                          "in-flight generations continue under the new weights; the sampled log-probs are per token "
                          "and the lag counts from the group's creation version, as in the sandbox")
        else:
            plan.no_equivalent("system.partial_rollouts", False,
                               "AsyncGRPOTrainer always continues in-flight generations under the new weights after "
                               "a sync (vLLM pause mode 'keep'; no key turns it off), so tokens generated after a "
                               "sync are fresher than in the scenario; the lag bound still holds on the oldest "
                               "token. Check in the sandbox that the conclusion holds with system.partial_rollouts = "
                               "true (it needs generation_time.kind = 'cost_model')")
        return
    G = scn.algorithm.group_size
    S = scn.algorithm.updates_per_batch
    spg_note = (f"steps_per_generation = gradient_accumulation_steps ({B}) and num_iterations = 1: one generation "
                "batch per optimizer step, so TRL's largest lag num_iterations·steps_per_generation/"
                "gradient_accumulation_steps − 1 is 0" if S == 1 else
                f"steps_per_generation = {B}, gradient_accumulation_steps = {B // scn.algorithm.minibatches} and "
                f"num_iterations = {scn.algorithm.epochs}: one generation batch serves {S} optimizer steps, so TRL's "
                f"largest lag num_iterations·steps_per_generation/gradient_accumulation_steps − 1 is {S - 1}, the "
                "sandbox's lag within a batch")
    if st.kind == "sync" and G >= 2:
        plan.converted("system.staleness", "sync", "steps_per_generation", B,
                       "GRPOTrainer generates with the current weights, then trains: " + spg_note)
    elif st.kind == "sync":
        plan.implicit("system.staleness", "sync", "GRPOTrainer generates with the current weights, then trains")
    elif st.kind == "fixed_lag":
        fixed_lag_gap(plan, scn,
                      "TRL has no fixed lag: GRPOConfig's data reuse (steps_per_generation > "
                      "gradient_accumulation_steps or num_iterations > 1) trains the steps of one generation batch "
                      "at lags 0 up to num_iterations·steps_per_generation/gradient_accumulation_steps − 1, not at "
                      "one fixed lag; AsyncGRPOConfig bounds the lag (max_staleness). The written GRPOConfig is "
                      "synchronous (lag 0)")
    else:
        plan.no_equivalent("system.staleness", describe(scn.system.staleness.model_dump()),
                           f"TRL has no asynchronous-ratio window (alpha = {describe(st.alpha)}). Instead: export "
                           f"the scenario with system.staleness = {{kind = \"max_lag\", k_max = {st.bound}}} "
                           f"(AsyncGRPOConfig max_staleness = {st.bound}; for an integer alpha the max_lag throttle "
                           "admits exactly the same work) after checking the conclusion in the sandbox. The written "
                           "GRPOConfig is synchronous (lag 0)")
    if st.kind != "sync" and G >= 2:
        plan.pinned("steps_per_generation", B, "the written GRPOConfig is synchronous: " + spg_note)
    _minibatches_sync(plan, scn)
    if partial:
        plan.no_equivalent("system.partial_rollouts", True,
                           "GRPOTrainer generates every batch whole with one weight version; in-flight updates exist "
                           "only with AsyncGRPOConfig, which needs a max_lag control: export a max_lag variant")
    else:
        plan.implicit("system.partial_rollouts", False,
                      "GRPOTrainer generates each batch whole with the current weights")


def _admission(plan: Plan, scn: Scenario, k_max: int) -> None:
    """Generation ahead of training. The sandbox caps queued + running groups (throttle: (k_max + 1)·B,
    relative to the consumed count; drop: queue_capacity); AsyncGRPO caps running completions
    (max_inflight_tasks) and scored completions waiting in the queue (queue_maxsize) separately."""
    s = scn.system.staleness
    G, B = scn.algorithm.group_size, scn.algorithm.groups_per_step
    capacity = (k_max + 1) * B if s.enforcement == "throttle" or s.queue_capacity is None else s.queue_capacity
    running = max(capacity - B, B)  # groups; floored at one step as TRL's own default is
    how = ("throttle: generation waits while dispatched-but-unconsumed groups reach (k_max + 1)·groups_per_step = "
           f"{capacity}, and over-stale groups are still dropped" if s.enforcement == "throttle" else
           f"drop: at most {capacity} groups queued or running, over-stale groups dropped at dequeue")
    plan.converted(
        "system.staleness.enforcement + system.staleness.queue_capacity",
        f"{s.enforcement}, queue_capacity = {describe(s.queue_capacity)}",
        "max_inflight_tasks", running * G,
        f"sandbox {how}. AsyncGRPO drops at dequeue and holds generation back with two caps, running completions "
        f"≤ max_inflight_tasks and scored completions waiting ≤ queue_maxsize: together {running + B} groups "
        f"({running} running + {B} waiting), the sandbox's {capacity}, plus a fixed buffer of up to 16 groups "
        "waiting to be scored (async_rollout_worker.py). Residual difference: the sandbox shares its "
        "capacity freely between waiting and running work and, when throttling, counts it against the published "
        "version, so TRL may generate a little further ahead (more drops, never more lag)",
    )
    plan.pinned("queue_maxsize", B * G,
                "one optimizer step of scored completions waiting (the rest of the capacity is max_inflight_tasks); "
                "TRL's default of 1024 would let generation run far ahead and be dropped as stale")


# ------------------------------------------------------------------------------------------------
# objective
# ------------------------------------------------------------------------------------------------


def _src(knob: str) -> str:
    return f"algorithm.objective.{knob}"


def _objective(plan: Plan, scn: Scenario, cls: str) -> None:
    obj = scn.algorithm.objective
    if obj.name == "tba":
        plan.no_equivalent("algorithm.objective", describe(obj.model_dump()),
                           "trajectory balance (TBA) is not a policy-gradient surrogate and no TRL trainer has it; "
                           "use the sandbox's torch loss (sandbox.algorithms, objective 'tba') in your own loop")
        return
    if cls == ASYNC_CLASS and obj.name in ("reinforce", "gspo", "cispo"):
        plan.no_equivalent("algorithm.objective", describe(obj.model_dump()), _ASYNC_OBJECTIVE_GAP[obj.name])
        return
    _surrogate(plan, obj, cls)
    _clip(plan, obj, cls)
    _aggregation(plan, obj, cls)
    _advantage(plan, scn, cls)
    if obj.name == "grpo":
        _kl(plan, obj, cls)


_ASYNC_OBJECTIVE_GAP = {
    "reinforce": "AsyncGRPOTrainer always uses the clipped ratio π_θ/μ (compute_loss): off-policy its gradient is "
                 "r·Â·∇log π inside the clip range and 0 outside, REINFORCE's is Â·∇log π (times the scenario's "
                 "correction). Instead: check the conclusion in the sandbox with the 'grpo' or 'dapo' objective, or "
                 "export to a framework with an unclipped loss",
    "gspo": "AsyncGRPOConfig has no sequence-level ratio (importance_sampling_level exists only in GRPOConfig); a "
            "token-level clip at GSPO's tiny epsilons would clip almost every token. Instead: use 'dapo' or 'grpo' "
            "in the sandbox, or a framework with GSPO (verl policy_loss.loss_mode = gspo)",
    "cispo": "AsyncGRPOConfig has no loss_type (only the PPO clip); CISPO exists in GRPOConfig (loss_type = 'cispo'), "
             "which is synchronous. Instead: a framework with CISPO and a lag bound (verl), or the 'dapo' objective",
}


def _surrogate(plan: Plan, obj, cls: str) -> None:
    name = obj.name
    if cls == ASYNC_CLASS:
        if name == "rloo":
            plan.no_equivalent(_src("name"), name,
                               "RLOO's leave-one-out advantage (G/(G−1)·(R − mean)) does not exist in AsyncGRPO, "
                               "whose advantages are always (R − mean)/std. Instead: use the 'grpo' or 'dapo' "
                               "objective in the sandbox")
        else:
            plan.implicit(_src("name"), name,
                          "AsyncGRPOTrainer.compute_loss: −min(r·Â, clip(r, 1 − epsilon, 1 + epsilon_high)·Â) with "
                          "r = π_θ/μ per token against the vLLM log-probs, the sandbox's bypass-mode surrogate")
        return
    if name == "gspo":
        plan.converted(_src("name"), name, "importance_sampling_level", "sequence",
                       "GSPO's sequence ratio exp(mean_t log r_t) clipped as one (grpo_trainer.py _compute_loss); "
                       "the sandbox's GSPO-token form has the same value and gradient with per-sequence advantages")
        return
    plan.pinned("importance_sampling_level", "token", "per-token ratio (the sequence level is GSPO's)")
    if name == "cispo":
        plan.converted(_src("name"), name, "loss_type", "cispo",
                       "−sg(min(r, epsilon_high))·Â·log π, token mean over the accumulated batch")
    elif name == "rloo":
        plan.no_equivalent(_src("name"), name,
                           "RLOO's leave-one-out advantage R − mean_{j≠i} R = G/(G−1)·(R − mean) has no GRPOTrainer "
                           "option (TRL's separate RLOOTrainer is another trainer). The written scale_rewards = "
                           "'none' centres by the group mean: RLOO's advantages are G/(G−1) times those, a constant "
                           "Adam nearly ignores. Instead: check the conclusion in the sandbox with 'dr_grpo'")
        plan.pinned("scale_rewards", "none", "closest to RLOO: advantages centred by the group mean, not scaled")
    elif name == "reinforce":
        plan.implicit(_src("name"), name,
                      "TRL has no unclipped loss, but with one optimizer step per generation batch its ratio "
                      "π_θ/π_old is 1 in value (π_old comes from the same weights), so the clipped surrogate's "
                      "gradient is Â·∇log π, REINFORCE's; the clip (epsilon = 0.2 by default) never acts")
    else:
        plan.implicit(_src("name"), name,
                      "GRPOTrainer's surrogate −min(r·Â, clip(r, 1 − epsilon, 1 + epsilon_high)·Â) "
                      "(grpo_trainer.py _compute_loss); the aggregation chooses loss_type")


def _clip(plan: Plan, obj, cls: str) -> None:
    if obj.name == "reinforce":
        return
    if obj.name == "cispo":  # only reached for GRPOConfig
        if obj.eps_low >= 1.0:
            plan.implicit(_src("eps_low"), obj.eps_low,
                          "no lower bound on the CISPO weight: TRL clamps it from above only (epsilon is unused)")
        else:
            plan.no_equivalent(_src("eps_low"), obj.eps_low,
                               f"TRL's CISPO weight has no lower bound (clamp(r, max=epsilon_high)); the scenario "
                               f"floors it at 1 − eps_low = {1 - obj.eps_low:g}. Instead: check the conclusion with "
                               "eps_low = 1.0 in the sandbox")
        plan.converted(_src("eps_high"), obj.eps_high, "epsilon_high", 1.0 + obj.eps_high,
                       "with loss_type = 'cispo' epsilon_high is the absolute cap of the weight: 1 + eps_high")
        return
    plan.as_is(_src("eps_low"), obj.eps_low, "epsilon", _inert_clip_note(cls))
    plan.as_is(_src("eps_high"), obj.eps_high, "epsilon_high", _inert_clip_note(cls))
    c = obj.dual_clip_c
    if c is None:
        plan.implicit(_src("dual_clip_c"), None, "no dual clip: TRL's two-sided clip (delta) stays unset")
    elif cls == ASYNC_CLASS:
        plan.no_equivalent(_src("dual_clip_c"), c,
                           "AsyncGRPOConfig has no dual clip or two-sided clip (delta exists only in GRPOConfig); "
                           "negative-advantage tokens with large ratios are not bounded. Instead: check the "
                           "conclusion without dual clip in the sandbox")
    elif c >= 1.0 + obj.eps_high:
        plan.converted(_src("dual_clip_c"), c, "delta", c,
                       "TRL's two-sided clip caps r at delta before the clipped min: for Â < 0 the loss is bounded "
                       "by −delta·Â (the dual clip), for Â ≥ 0 nothing changes since delta ≥ 1 + epsilon_high")
    else:
        plan.no_equivalent(_src("dual_clip_c"), c,
                           f"TRL's delta would also cap positive-advantage tokens below 1 + eps_high = "
                           f"{1 + obj.eps_high:g}; no key bounds only the negative side. Instead: use "
                           "dual_clip_c >= 1 + eps_high")


def _inert_clip_note(cls: str) -> str:
    if cls == ASYNC_CLASS:
        return "clip of r = π_θ/μ, as in the sandbox"
    return ("the ratio π_θ/π_old is 1 in value with one optimizer step per generation batch, so the clip never acts "
            "(as in the sandbox at lag 0)")


def _aggregation(plan: Plan, obj, cls: str) -> None:
    agg = obj.aggregation
    has_max_len = obj.name == "dr_grpo"
    if cls == ASYNC_CLASS:
        if agg == "token_mean":
            plan.implicit(_src("aggregation"), agg,
                          "AsyncGRPOTrainer divides the summed token losses by the step's token count (one micro-batch)")
            if has_max_len:
                plan.implicit(_src("max_len"), obj.max_len, "unused with token_mean")
        else:
            src = _src("aggregation") + (" + " + _src("max_len") if has_max_len else "")
            plan.no_equivalent(src, agg,
                               "AsyncGRPOTrainer only averages over tokens (token_mean). Instead: check the "
                               "conclusion with aggregation = 'token_mean' (the 'dapo' objective) in the sandbox, or "
                               "use GRPOConfig's loss_type with a synchronous scenario")
        return
    if obj.name == "cispo":
        if agg == "token_mean":
            plan.implicit(_src("aggregation"), agg, "loss_type 'cispo' normalises by the accumulated batch's active tokens")
        else:
            plan.no_equivalent(_src("aggregation"), agg,
                               "loss_type 'cispo' always takes the token mean. Instead: aggregation = 'token_mean'")
        return
    loss_type, how = LOSS_TYPE_OF_AGGREGATION[agg]
    plan.converted(_src("aggregation"), agg, "loss_type", loss_type, f"{how} (grpo_trainer.py _compute_loss)")
    if not has_max_len:
        return
    if agg != "seq_mean_token_sum_norm":
        plan.implicit(_src("max_len"), obj.max_len, f"unused with {agg}")
    elif obj.max_len is not None:
        plan.as_is(_src("max_len"), obj.max_len, "max_completion_length",
                   "Dr.GRPO's constant L: loss_type 'dr_grpo' divides by max_completion_length (which also caps "
                   "the generated length)")
    else:
        plan.setup(_src("max_len"), None,
                   "loss_type 'dr_grpo' divides by max_completion_length (TRL default 512): set it to your maximum "
                   "response length; the sandbox divided by each batch's padded length")


def _kl(plan: Plan, obj, cls: str) -> None:
    beta = obj.beta_kl
    if cls == ASYNC_CLASS:
        if beta == 0:
            plan.implicit(_src("beta_kl"), beta, "AsyncGRPOTrainer has no KL term")
        else:
            plan.no_equivalent(_src("beta_kl"), beta,
                               "AsyncGRPOTrainer has no reference model or KL term. Instead: beta_kl = 0 in the "
                               "sandbox, or GRPOConfig's beta with a synchronous scenario")
        return
    plan.as_is(_src("beta_kl"), beta, "beta",
               "the same estimator: k3 = π_ref/π_θ − 1 − log(π_ref/π_θ) per token, added to the token losses before "
               "the aggregation and not importance-weighted")
    if beta > 0:
        plan.pinned("use_bias_correction_kl", False,
                    "the sandbox's KL term is plain k3 (TRL 1.16 multiplies it by the ratio by default)")


# ------------------------------------------------------------------------------------------------
# advantages
# ------------------------------------------------------------------------------------------------



def _advantage(plan: Plan, scn: Scenario, cls: str) -> None:
    obj = scn.algorithm.objective
    if obj.name == "reinforce":
        _reinforce_baseline(plan, scn, cls)
    elif obj.name == "grpo":
        _baseline(plan, obj.baseline)
        _normalisation(plan, scn, cls, _src("normalize_std"), obj.normalize_std, obj.normalize_std)
        unbiased = obj.std_unbiased if obj.std_unbiased is not None else obj.baseline != "opob"
        _std_convention(plan, scn, cls, obj.std_unbiased, unbiased, obj.normalize_std)
        _std_guard(plan, cls, obj.eps_std, obj.normalize_std)
    elif obj.name == "dr_grpo":
        if obj.baseline == "opob":
            _opob_gap(plan, "baseline")
        else:
            _opob_unused(plan, "baseline = group_mean")
            _normalisation(plan, scn, cls, _src("baseline"), "group_mean", False)
    elif obj.name != "rloo":  # rloo: the leave-one-out advantage is the objective's name row
        _advantage_knob(plan, scn, cls)


def _baseline(plan: Plan, baseline: str) -> None:
    if baseline == "opob":
        _opob_gap(plan, "baseline")
    else:
        plan.implicit(_src("baseline"), baseline, "TRL subtracts the group mean (grpo_trainer.py, async_rollout_worker.py)")
        _opob_unused(plan, f"baseline = {baseline}")


def _advantage_knob(plan: Plan, scn: Scenario, cls: str) -> None:
    """ppo, dapo, gspo, cispo: ``advantage`` = grpo | dr_grpo | rloo | reward | opob."""
    obj = scn.algorithm.objective
    adv = obj.advantage
    if adv == "opob":
        _opob_gap(plan, "advantage")
        plan.implicit(_src("eps_std"), obj.eps_std, "part of the OPOB advantage, which has no equivalent")
        return
    _opob_unused(plan, f"advantage = {adv}")
    if adv in ("grpo", "dr_grpo"):
        _normalisation(plan, scn, cls, _src("advantage"), adv, adv == "grpo")
        if adv == "grpo":
            _std_guard(plan, cls, obj.eps_std, True)
        else:
            plan.implicit(_src("eps_std"), obj.eps_std, "unused: no std normalisation")
        return
    plan.implicit(_src("eps_std"), obj.eps_std, f"unused with advantage = {adv}")
    if adv == "rloo":
        closest = (": scale_rewards = 'none' (written) centres by the group mean, a constant factor G/(G−1) smaller"
                   if cls == SYNC_CLASS else "; AsyncGRPO always divides by the group std")
        plan.no_equivalent(_src("advantage"), adv, "RLOO's leave-one-out advantage G/(G−1)·(R − mean) has no TRL "
                           f"option{closest}. Instead: advantage = 'dr_grpo' in the sandbox")
        if cls == SYNC_CLASS:
            plan.pinned("scale_rewards", "none", "closest to RLOO: advantages centred by the group mean")
    else:
        plan.no_equivalent(_src("advantage"), adv, "raw rewards as advantages: TRL always subtracts the group mean. "
                           "Instead: advantage = 'dr_grpo' (centred) in the sandbox")


def _reinforce_baseline(plan: Plan, scn: Scenario, cls: str) -> None:
    obj = scn.algorithm.objective
    b = obj.baseline
    uses = {"constant": ("constant_baseline",), "ema": ("ema_decay", "ema_init")}.get(b, ())
    unused = [k for k in ("constant_baseline", "ema_decay", "ema_init") if k not in uses]
    if b in ("group_mean", "opob"):
        _baseline(plan, b)
    else:
        why = {
            "none": "no baseline",
            "constant": "a constant baseline",
            "ema": "an EMA of past batch rewards",
            "leave_one_out": "the leave-one-out mean (G/(G−1) times the centred advantage TRL computes)",
            "optimal": "the gradient-norm-weighted optimal baseline",
        }[b]
        plan.no_equivalent(" + ".join([_src("baseline")] + [_src(k) for k in uses]), b,
                           f"TRL always subtracts the group mean; the scenario uses {why}. Instead: check the "
                           "conclusion with baseline = 'group_mean' in the sandbox")
        _opob_unused(plan, f"baseline = {b}")
    if unused:
        plan.implicit(" + ".join(_src(k) for k in unused), describe({k: getattr(obj, k) for k in unused}),
                      f"unused with baseline = {b}")
    guard = (f"; the sandbox's REINFORCE divides by the Bessel-corrected std + 1e-6, TRL by the same std + "
             f"{_sci(STD_GUARD[cls])}: zero-division guards, the advantages differ by about 1e-3 relative at most "
             "for any group whose reward std is at least 0.1")
    _normalisation(plan, scn, cls, _src("normalize_std"), obj.normalize_std, obj.normalize_std,
                   guard if obj.normalize_std and b != "opob" else "")


def _opob_gap(plan: Plan, knob: str) -> None:
    plan.no_equivalent(" + ".join([_src(knob)] + [_src(k) for k in OPOB_KNOBS]), "opob", OPOB_NOTE)


def _opob_unused(plan: Plan, why: str) -> None:
    plan.implicit(" + ".join(_src(k) for k in OPOB_KNOBS), "defaults", f"OPOB knobs, unused with {why}")


def _normalisation(plan: Plan, scn: Scenario, cls: str, source: str, value, normalize: bool, extra: str = "") -> None:
    """Division of the centred rewards by the group std: GRPOConfig ``scale_rewards`` = 'group' | 'none';
    AsyncGRPO always divides (population std)."""
    if cls == SYNC_CLASS:
        plan.converted(source, value, "scale_rewards", "group" if normalize else "none",
                       ("(R − group mean)/(group std + 1e-4)" if normalize else "R − group mean, not scaled") + extra)
        return
    if not normalize:
        plan.no_equivalent(source, value, "AsyncGRPO always divides the centred rewards by the group std (no "
                           "scale_rewards key). Instead: check the conclusion with std normalisation in the sandbox")
        return
    if scn.algorithm.objective.name == "grpo":  # its std_unbiased and eps_std rows carry the convention
        plan.implicit(source, value, "AsyncGRPO's worker divides the centred rewards by the group std "
                                     "(async_rollout_worker.py)")
        return
    note, acceptable = _std_mismatch(scn, cls, sandbox_unbiased=True)
    (plan.implicit if acceptable else plan.no_equivalent)(
        source, value, "AsyncGRPO's worker divides the centred rewards by the group std + 1e-8 "
                       "(async_rollout_worker.py). " + note)


def _std_mismatch(scn: Scenario, cls: str, sandbox_unbiased: bool) -> tuple[str, bool]:
    """Bessel-corrected versus population group std: a constant factor √(G/(G−1)) on every advantage,
    which Adam's update ignores and SGD's does not. Returns the explanation and whether it is harmless."""
    trl = STD_UNBIASED[cls]
    if sandbox_unbiased == trl:
        return (f"{'Bessel-corrected' if trl else 'population'} group std in both", True)
    G = scn.algorithm.group_size
    factor = math.sqrt(G / (G - 1))
    bigger = "TRL's" if sandbox_unbiased else "the sandbox's"
    note = (f"TRL uses the {'Bessel-corrected' if trl else 'population'} group std, the scenario the "
            f"{'Bessel-corrected' if sandbox_unbiased else 'population'} one: {bigger} advantages are √(G/(G−1)) = "
            f"{factor:.4f} times larger, a constant factor")
    if scn.algorithm.optimizer.name in ("adam", "adamw"):
        return note + " that Adam's update ignores (up to eps, and steps where the gradient clip acts)", True
    lr = 1 / factor if sandbox_unbiased else factor
    return note + f" that scales SGD's step. Instead: multiply the learning rate by {lr:.4f} or use Adam", False


def _std_convention(plan: Plan, scn: Scenario, cls: str, value, unbiased: bool, used: bool) -> None:
    source = _src("std_unbiased")
    if not used:
        plan.implicit(source, value, "unused without std normalisation")
        return
    note, acceptable = _std_mismatch(scn, cls, unbiased)
    where = "nanstd, trl/trainer/utils.py" if STD_UNBIASED[cls] else "numpy std, async_rollout_worker.py"
    (plan.implicit if acceptable else plan.no_equivalent)(source, value, f"{note} ({where})")


def _sci(x: float) -> str:
    """1e-4 rather than 0.0001."""
    if x == 0 or 1e-3 <= abs(x) < 1e4:
        return f"{x:g}"
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def _std_guard(plan: Plan, cls: str, eps: float, used: bool) -> None:
    source, guard = _src("eps_std"), STD_GUARD[cls]
    if not used:
        plan.implicit(source, eps, "unused without std normalisation")
    elif abs(eps - guard) <= STD_GUARD_TOLERANCE:
        plan.implicit(source, eps,
                      f"TRL adds {_sci(guard)} to the std, a zero-division guard like the scenario's {_sci(eps)}: "
                      f"the advantages differ by at most {_sci(abs(eps - guard))}/(std + {_sci(guard)}) relative, "
                      "below 1e-2 for any group whose reward std is at least 0.1")
    else:
        plan.no_equivalent(source, eps,
                           f"TRL hard-codes std + {_sci(guard)}; the scenario's {_sci(eps)} damps the advantages of "
                           "low-variance groups. Instead: check the conclusion with eps_std = 1e-6 in the sandbox")


# ------------------------------------------------------------------------------------------------
# off-policy correction
# ------------------------------------------------------------------------------------------------


def _correction(plan: Plan, scn: Scenario, cls: str) -> None:
    corr = scn.algorithm.correction
    if cls == ASYNC_CLASS:
        if corr.name == "none":
            plan.implicit("algorithm.correction", "none",
                          "no correction beyond the objective's own ratio π_θ/μ, which is what AsyncGRPOTrainer "
                          "computes against the vLLM log-probs")
        else:
            plan.no_equivalent("algorithm.correction", describe(corr.model_dump()),
                               "AsyncGRPOConfig 1.16.0 has no importance-sampling correction keys (open PR "
                               "huggingface/trl#7120 would add GRPOConfig's vllm_importance_sampling_* names). "
                               "Instead: export to a framework with the correction and a lag bound (verl, "
                               "prime-rl, AReaL), or check the conclusion with correction = 'none' in the sandbox")
        return
    gap = _correction_gap(corr)
    if gap is not None:
        plan.no_equivalent("algorithm.correction", describe(corr.model_dump()), gap)
        plan.pinned("vllm_importance_sampling_correction", False,
                    "the scenario's correction has no TRL equivalent; TRL's own default (sequence_mask at 3.0) is "
                    "switched off so that the written config does not use another correction")
        return
    _CORRECTION_MAPPERS[corr.name](plan, corr)


_CORRECTION_GAP = {
    "geo_mis": "GRPOTrainer's sequence modes use the product of the token ratios, not their geometric mean. Instead: "
               "verl (rollout_rs = seq_mean_k1) or the sandbox's 'mis' at sequence level",
    "m2po_mask": "no second-moment token mask in TRL. Instead: " + INTEGRATION + ", or AReaL (actor.m2_threshold)",
    "m2po_clipband": "no adaptive M2PO clip band in TRL. Instead: " + INTEGRATION,
    "bapo": "no adaptive clip bounds in TRL. Instead: " + INTEGRATION + ", or the BAPO code (WooooDyy/BAPO)",
    "topr": "no reward-sign tapering in TRL. Instead: " + INTEGRATION + ", or ROLL (topr)",
    "dppo_mask": "no probability-difference mask or (log ρ)² penalty in TRL. Instead: prime-rl's default loss",
}


def _correction_gap(corr) -> str | None:
    """Why GRPOTrainer cannot apply ``corr`` (None when it can)."""
    if corr.name not in _CORRECTION_MAPPERS and corr.name not in _CORRECTION_GAP:  # a component unknown here (issue 26)
        return f"TRL has no equivalent of the {corr.name!r} correction"
    if corr.name in _CORRECTION_GAP:
        return _CORRECTION_GAP[corr.name]
    if corr.name == "mis":
        if corr.batch_normalize:
            return "TRL does not renormalise the kept weights to mean 1. Instead: batch_normalize = false"
        if corr.level == "sequence" and corr.seq_weight != "ratio":
            return ("TRL's sequence_mask keeps Π_t w_t as the weight of a kept response, not 1. Instead: "
                    "seq_weight = 'ratio'")
        if corr.level == "sequence" and (corr.veto_low is not None or corr.veto_high is not None):
            return "TRL has no per-token veto inside sequence_mask. Instead: no veto, or verl's rollout_rs veto"
    if corr.name == "decoupled_ppo" and corr.level != "token":
        return ("sequence-level rejection (any token over the cap drops the response) is not a TRL mode; TRL's "
                "sequence_mask bands the product of the ratios. Instead: level = 'token' (token_mask) or AReaL's "
                "decoupled loss")
    return None


_MODE_NOTES = {
    "token_truncate": "clamp(w_t, clip_min, clip_max) per token (grpo_trainer.py)",
    "sequence_truncate": "clamp(Π_t w_t, clip_min, clip_max): TRL sums the token log-ratios, a product of ratios",
    "token_mask": "w_t where clip_min ≤ w_t ≤ clip_max, else 0 (the token keeps its place in the denominator)",
    "sequence_mask": "Π_t w_t where clip_min ≤ Π_t w_t ≤ clip_max, else the whole response is 0",
}


def _correction_on(plan: Plan, source: str, value, mode: str, extra: str = "") -> None:
    plan.pinned("vllm_importance_sampling_correction", True,
                "the vLLM importance weight w = π_old/μ carries the correction (it acts only with use_vllm = True)")
    plan.converted(source, value, "vllm_importance_sampling_mode", mode, _MODE_NOTES[mode] + extra)


def _map_none(plan: Plan, corr) -> None:
    plan.converted("algorithm.correction", "none", "vllm_importance_sampling_correction", False,
                   "no correction: TRL's default mismatch correction (sequence_mask at 3.0) is switched off. In the "
                   "sandbox's bypass mode the objective's ratio π_θ/μ is the only weight, and at lag 0 it is 1, as "
                   "TRL's ratio is. With vLLM, kernel mismatch then goes uncorrected: consider a 'tis' correction")


def _map_tis(plan: Plan, corr) -> None:
    _correction_on(plan, "algorithm.correction.name + algorithm.correction.level", f"tis, {corr.level}",
                   f"{corr.level}_truncate")
    if corr.C is None:
        plan.converted("algorithm.correction.C", None, "vllm_importance_sampling_clip_max", corr.cap,
                       f"unset: the sandbox's default cap at {corr.level} level")
    else:
        plan.as_is("algorithm.correction.C", corr.C, "vllm_importance_sampling_clip_max", "the cap C")
    plan.as_is("algorithm.correction.C_low", corr.C_low, "vllm_importance_sampling_clip_min",
               "the floor (0 leaves every positive ratio as it is)")


def _map_mis(plan: Plan, corr) -> None:
    _correction_on(plan, "algorithm.correction.name + algorithm.correction.level", f"mis, {corr.level}",
                   f"{corr.level}_mask")
    plan.as_is("algorithm.correction.C", corr.C, "vllm_importance_sampling_clip_max", "upper band edge")
    plan.as_is("algorithm.correction.C_low", corr.C_low, "vllm_importance_sampling_clip_min", "lower band edge")
    if corr.level == "sequence":
        plan.implicit("algorithm.correction.seq_weight", "ratio", "a kept response carries Π_t w_t in TRL too")
        plan.implicit("algorithm.correction.veto_low + algorithm.correction.veto_high", None, "no veto")
    else:
        plan.implicit("algorithm.correction.seq_weight + algorithm.correction.veto_low + algorithm.correction.veto_high",
                      describe({"seq_weight": corr.seq_weight, "veto_low": corr.veto_low, "veto_high": corr.veto_high}),
                      "sequence-level knobs, unused at token level")
    plan.implicit("algorithm.correction.batch_normalize", False, "TRL does not renormalise the kept weights either")


def _map_icepop(plan: Plan, corr) -> None:
    _correction_on(plan, "algorithm.correction.name", "icepop", "token_mask", ": IcePop's band [α, β]")
    plan.as_is("algorithm.correction.alpha", corr.alpha, "vllm_importance_sampling_clip_min", "lower band edge α")
    plan.as_is("algorithm.correction.beta", corr.beta, "vllm_importance_sampling_clip_max", "upper band edge β")


def _map_opsm(plan: Plan, corr) -> None:
    plan.converted("algorithm.correction.name", "opsm", "vllm_importance_sampling_correction", False,
                   "OPSM is a mask only: no importance weight on top (TRL's default IS is switched off)")
    plan.as_is("algorithm.correction.delta", corr.delta, "off_policy_mask_threshold",
               "get_off_policy_mask drops response i iff Â_i < 0 and mean_t(log μ − log π_θ) > δ, the scenario's "
               "rule; μ is vLLM's log-probs (without vLLM the trainer's own, so nothing is dropped)")


def _map_decoupled_ppo(plan: Plan, corr) -> None:
    _correction_on(plan, "algorithm.correction.name + algorithm.correction.level", f"decoupled_ppo, {corr.level}",
                   "token_mask", ": tokens with w_t > cap are rejected, the others weighted by w_t")
    plan.as_is("algorithm.correction.behave_imp_weight_cap", corr.behave_imp_weight_cap,
               "vllm_importance_sampling_clip_max",
               "the cap; w = π_old/μ with π_old = π_θ at one optimizer step per generation batch, the bypass form "
               "the sandbox runs (its trust region then sits at μ, TRL's at π_old, and neither acts at lag 0)")
    plan.pinned("vllm_importance_sampling_clip_min", None, "no lower rejection")
    plan.implicit("algorithm.correction.require_prox", corr.require_prox,
                  "TRL recomputes π_old (old_per_token_logps) whenever the vLLM correction is on")


_CORRECTION_MAPPERS = {
    "none": _map_none,
    "tis": _map_tis,
    "mis": _map_mis,
    "icepop": _map_icepop,
    "opsm": _map_opsm,
    "decoupled_ppo": _map_decoupled_ppo,
}

# ------------------------------------------------------------------------------------------------
# stabilizers and optimizer
# ------------------------------------------------------------------------------------------------

_STABILIZER_GAP = {
    "vcpo_lr": "VCPO's ESS-driven learning-rate scaling. Instead: " + VCPO_INSTEAD,
    "gac": "GAC has no public code (arXiv 2603.01501 only). Instead: " + INTEGRATION + "; it runs GAC after TRL's "
           "gradient clipping (before it with clip_order = project_then_clip) through the optimizer's step hooks",
    "staleness_lr": "staleness-aware learning-rate rules have no TRL key. Instead: " + INTEGRATION + "; the lag is "
                    "counted in optimizer steps since each completion was generated",
}


_SCHEDULES = {"constant": "constant", "linear": "linear", "cosine": "cosine"}


def _optimizer(plan: Plan, scn: Scenario) -> None:
    opt = scn.algorithm.optimizer
    src = "algorithm.optimizer."
    adam = opt.name in ("adam", "adamw")
    if opt.name == "adam" and opt.weight_decay > 0:
        plan.no_equivalent(src + "name + " + src + "weight_decay", f"adam, weight_decay = {opt.weight_decay:g}",
                           "torch Adam's weight_decay is an L2 term added to the gradient; transformers' AdamW "
                           "decays the weights directly. Instead: use adamw in the sandbox and check the conclusion, "
                           "or pass your own torch.optim.Adam to the trainer (optimizers=(...))")
    elif adam:
        plan.converted(src + "name", opt.name, "optim", "adamw_torch",
                       "torch AdamW" + (" (with weight_decay = 0 it is Adam)" if opt.name == "adam" else ""))
        plan.as_is(src + "weight_decay", opt.weight_decay, "weight_decay",
                   "transformers decays every weight but biases and normalisation weights; the sandbox decays all"
                   if opt.weight_decay > 0 else "")
    else:
        plan.converted(src + "name", "sgd", "optim", "sgd", "torch SGD")
        plan.as_is(src + "weight_decay", opt.weight_decay, "weight_decay",
                   "transformers decays every weight but biases and normalisation weights" if opt.weight_decay > 0 else "")
    if adam:
        plan.converted(src + "betas", list(opt.betas), "adam_beta1", opt.betas[0], "β1")
        plan.converted(src + "betas", list(opt.betas), "adam_beta2", opt.betas[1], "β2")
        plan.as_is(src + "eps", opt.eps, "adam_epsilon")
        plan.implicit(src + "momentum", opt.momentum, "SGD only")
    else:
        plan.implicit(src + "betas + " + src + "eps", describe({"betas": list(opt.betas), "eps": opt.eps}), "Adam only")
        if opt.momentum > 0:
            plan.converted(src + "momentum", opt.momentum, "optim_args", f"momentum={opt.momentum:g}",
                           "passed to torch SGD by transformers' optimizer factory")
        else:
            plan.implicit(src + "momentum", 0.0, "torch SGD's default momentum is 0")
    schedule = _SCHEDULES[opt.schedule]
    if opt.schedule == "constant" and opt.warmup_steps > 0:
        schedule = "constant_with_warmup"
    plan.converted(src + "schedule", opt.schedule, "lr_scheduler_type", schedule,
                   "written explicitly (GRPOConfig defaults to linear decay); decay runs over max_steps, the sandbox's "
                   "over run.steps")
    plan.as_is(src + "warmup_steps", opt.warmup_steps, "warmup_steps",
               "transformers' warm-up factor is step/warmup_steps (0 at the first step), the sandbox's "
               "(step + 1)/warmup_steps: one step later" if opt.warmup_steps > 0 else "")


# ------------------------------------------------------------------------------------------------
# metrics, notes and the training script
# ------------------------------------------------------------------------------------------------


def _metrics(scn: Scenario, cls: str) -> dict[str, str]:
    clip = ("`cispo_clip_ratio`" if scn.algorithm.objective.name == "cispo" else "`clip_ratio/region_mean`")
    if cls == ASYNC_CLASS:
        return {
            "reward/mean": "`reward`",
            "staleness/mean": "`sample/staleness_mean` (versions, at dequeue)",
            "staleness/max": "`sample/staleness_max`",
            "dropped": "`sample/dropped_stale_total` (summed per logging step)",
            "is/kl_k3": "`kl`: token mean of k3(π_θ/μ), the same estimator",
            "is/ess_ratio": "not logged; `ratio` is the token mean of π_θ/μ",
            "clip/frac": "`clip_ratio/region_mean` (r = π_θ/μ, as in the sandbox)",
            "grad/norm": "`grad_norm` (before clipping)",
        }
    out = {
        "reward/mean": "`reward`",
        "adv/zero_var_groups": "`frac_reward_zero_std`",
        "is/ess_ratio": "not logged; `sampling/importance_sampling_ratio/min`, `/mean`, `/max` (the vLLM weight π_old/μ after "
                        "truncation or masking, only with use_vllm = True and the correction on)",
        "is/kl_k3": "`sampling/sampling_logp_difference/mean` (mean absolute log π_old − log μ, not k3; vLLM only)",
        "clip/frac": f"{clip} (0 here: TRL's ratio is 1 with one optimizer step per generation batch)",
        "grad/norm": "`grad_norm` (before clipping)",
        "staleness/mean": "0 by construction (one generation batch per optimizer step); not logged",
    }
    if scn.algorithm.objective.name == "grpo" and scn.algorithm.objective.beta_kl > 0:
        out["kl/ref_k3"] = "`kl`"
    return out


def _notes(scn: Scenario, cls: str, geometry_ok: bool) -> list[str]:
    B, G = scn.algorithm.groups_per_step, scn.algorithm.group_size
    notes = []
    if cls == SYNC_CLASS:
        notes.append(
            "Surrogate anchor: the sandbox runs in bypass mode (ratio π_θ/μ against the sampler's log-probs, "
            "corrections on w = π_θ/μ). GRPOTrainer's ratio is π_θ/π_old, with π_old recomputed by the trainer from "
            "the weights that generated the batch; with one optimizer step per generation batch (pinned) it is 1 in "
            "value, so the clip never acts and the gradient is Â·∇log π times the vLLM weight w = π_old/μ = π_θ/μ, "
            "truncated or masked as written: the sandbox's loss at lag 0, where its ratio is 1 too. "
            "The vllm_importance_sampling_* keys act only with use_vllm = True (TRL has the sampler's log-probs only "
            "from vLLM); with the trainer's own generate there is no mismatch to correct."
        )
        if geometry_ok:
            notes.append(
                f"Batch sizes are written for one training process (accelerate launch --num_processes 1): "
                f"per_device_train_batch_size ({G}) × gradient_accumulation_steps ({B}) × num_processes = {B * G} "
                "completions per optimizer step. With N processes keep the product: divide "
                "gradient_accumulation_steps and steps_per_generation by N (N must divide them), or the per-device "
                "batch."
            )
    else:
        notes.append(
            "Surrogate anchor: AsyncGRPOTrainer's ratio is π_θ/μ against the vLLM log-probs of each token "
            "(old_log_probs), the sandbox's bypass mode, clip included; AsyncGRPOConfig 1.16.0 has no correction "
            "keys, no KL term and no loss_type (token mean only)."
        )
        if geometry_ok:
            notes.append(
                f"Batch sizes are written for one training process (accelerate launch --num_processes 1): one "
                f"micro-batch of per_device_train_batch_size ({B * G}) × num_processes completions per optimizer step. "
                "With N processes divide per_device_train_batch_size by N (FixedCountBatcher takes "
                "per_device_train_batch_size × num_processes completions per micro-batch); raising "
                "gradient_accumulation_steps instead makes the loss a mean of per-micro-batch token means."
            )
    return notes


_SCRIPT = '''"""{trainer} (TRL {release}) with the {cls} settings that `sandbox export` wrote to {config}.

Launch (see PROMOTION.md):
{launch_comment}

The three TODOs below are yours: the model, the prompt dataset and the reward function (the
scenario's toy task is not exported).
"""

import json
from pathlib import Path

{imports}

SETTINGS = Path(__file__).with_name("{config}")
OUTPUT_DIR = "outputs/{slug}"

# TODO(model): a Hub id or a local path, e.g. "Qwen/Qwen2.5-0.5B-Instruct".
MODEL = None


def load_prompts():
    """TODO(dataset): return a datasets.Dataset with a "prompt" column (and any column your reward reads)."""
    raise NotImplementedError("load your prompt dataset here")


def reward(completions, **kwargs):
    """TODO(reward): one float per completion.{reward_extra}"""
    raise NotImplementedError("score the completions here")


def main():
    if MODEL is None:
        raise SystemExit("set MODEL in {script} first")
    settings = json.loads(SETTINGS.read_text())
{extra_settings}    args = {cls}(output_dir=OUTPUT_DIR, **settings)
    trainer = {trainer}(model=MODEL, reward_funcs=reward, args=args, train_dataset=load_prompts())
    trainer.train()


if __name__ == "__main__":
    main()
'''


def _train_script(cls: str, release: str, launch: str) -> str:
    if cls == ASYNC_CLASS:
        imports = "from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer"
        trainer, slug = "AsyncGRPOTrainer", "async-grpo"
        reward_extra = ("\n\n    AsyncGRPOTrainer scores in a spawned process: keep this a module-level function.")
        extra = ('    # The vLLM server started by the launch command; set its address if it is not local:\n'
                 '    # settings["vllm_server_base_url"] = "http://HOST:8000"\n')
    else:
        imports = "from trl import GRPOConfig, GRPOTrainer"
        trainer, slug = "GRPOTrainer", "grpo"
        reward_extra = ""
        extra = ('    # Generation with vLLM (the vllm_importance_sampling_* settings act only then):\n'
                 '    # settings.update(use_vllm=True, vllm_mode="colocate")\n')
    launch_comment = "\n".join(f"    {line}" for line in launch.rstrip().splitlines())
    return _SCRIPT.format(release=release, cls=cls, config=CONFIG_FILE, script=SCRIPT_FILE, imports=imports,
                          slug=slug, reward_extra=reward_extra, extra_settings=extra, trainer=trainer,
                          launch_comment=launch_comment)
