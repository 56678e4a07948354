"""AReaL exporter: a scenario as the configuration of AReaL's GRPO trainer (``GRPOConfig`` in
``areal/api/cli_args.py``, areal 1.0.4), written as ``areal_config.yaml`` and started with
``python3 <entry script> --config areal_config.yaml`` (``launch.sh``). Guide: ``docs/promotion.md``.

Facts used (areal 1.0.4 wheel):

* **Versions and staleness.** The trainer publishes version ``global_step + 1`` after every train
  step (``areal/trainer/rl_trainer.py``), and a train step runs ``actor.ppo_n_minibatches``
  optimizer steps (``areal/trainer/ppo/actor.py``); it is written as ``algorithm.minibatches``, so a
  version is one batch in both (one optimizer step with the default ``minibatches = 1``). Admission (``areal/infra/staleness_manager.py``) submits a
  rollout only while ``(η + v + 1)·B − (accepted + running) > 0`` with ``η =
  rollout.max_head_offpolicyness``, ``v`` the inference engine's version and ``B =
  rollout.consumer_batch_size`` (groups per step): the sandbox's throttle rule
  ``(k_max + v + 1)·B − (consumed + queued + running)`` term for term, since AReaL's ``accepted``
  counts consumed and queued rollouts. Hence ``η = k_max``; ``η = 0`` is synchronous.
* **Interruptible rollouts.** Every weight update aborts the requests in flight and the client
  resubmits them with the tokens so far, tagging each token with the version that produced it
  (``areal/infra/remote_inf_engine.py``): in-flight updates are always on.
* **Ratio anchor.** With ``use_decoupled_loss = false`` and ``recompute_logprob = false`` the PPO
  ratio is ``π_θ/μ`` against the inference log-probs (``areal/trainer/ppo/actor.py``,
  ``compute_advantages``): the sandbox's bypass mode. ``actor.rejection_sampling`` acts on
  ``w = π_prox/μ`` and only does something with ``use_decoupled_loss = true``, where the ratio
  becomes ``u = π_θ/π_prox``; without ``rejection_sampling`` the decoupled loss carries no ``w`` at
  all (``areal/utils/functional/functional.py``, ``ppo_actor_loss_fn``). With one mini-batch
  ``π_prox`` is recomputed from the weights being trained, so ``w`` equals the sandbox's detached
  ``ρ = π_θ/μ`` and ``u`` is 1 in value: the decoupled loss is then ``−sg(weight)·Â·∇log π_θ``, which
  reproduces REINFORCE, CISPO and token-level truncation or masking exactly, while a PPO clip on
  ``u`` never binds (the sandbox clips ``ρ``).
* **Loss and advantages.** The actor loss is a token mean over the step (micro-batches weighted by
  their valid-token count across data-parallel ranks); rewards are normalised per group by
  ``actor.reward_norm`` (``areal/utils/data.py``, ``Normalization``) and, with ``discount = 1``,
  ``gae_lambda = 1`` and no critic, every token of a response gets its normalised reward;
  ``actor.kl_ctl`` puts a KL penalty into the rewards, not into the loss. ``actor.reward_norm`` is written in
  every export (AReaL defaults it and ``adv_norm`` to None: raw rewards): an advantage AReaL cannot express
  is reported and the normalisation its objective implies written in its place (``_nearest_reward_norm``).
* **Optimizer.** ``adam`` is ``torch.optim.AdamW`` in the FSDP engine
  (``areal/engine/fsdp_engine.py``); the warm-up is ``int(warmup_steps_proportion ·
  total_train_steps)`` steps of HF-style linear warm-up.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, ClassVar

from ..scenario import Scenario
from ..algorithms.objectives.base import OPOB_KNOBS
from .base import Exporter, Given, Version, describe, register
from .common import MINIBATCH_INSTEAD, fixed_lag_gap, proximal_row, scale_rows, unmapped_stabilizer_note
from .plan import Plan

CONFIG_FILE = "areal_config.yaml"
LAUNCH_FILE = "launch.sh"

RATIO_CLIP_OBJECTIVES = ("grpo", "dr_grpo", "rloo", "ppo", "dapo", "gspo")
SANDBOX_COMPONENTS = ("the sandbox's torch loss (`sandbox.algorithms.build_policy_loss`, see "
                      "`examples/plain_torch_loop.py`)")
SANDBOX_OPTIMIZER = ("the sandbox's `StabilizedOptimizer` (`sandbox.algorithms`, see `examples/plain_torch_loop.py`) "
                     "around the optimizer step of AReaL's train engine (optimizer_step in areal/engine/fsdp_engine.py)")

# Keys AReaL requires that describe the user's run, not the scenario: filled by launch.sh
# (``???`` = AReaL's "must be set") or wired as AReaL's own example configs do.
USER_KEYS: tuple[tuple[str, str], ...] = (
    ("experiment_name", "???"),
    ("trial_name", "???"),
    ("tokenizer_path", "${actor.path}"),
    ("train_dataset.path", "???"),
    ("train_dataset.type", "rl"),
    ("actor.path", "???"),
    ("actor.backend", "???"),
    ("actor.experiment_name", "${experiment_name}"),
    ("actor.trial_name", "${trial_name}"),
    ("rollout.backend", "???"),
) + tuple(
    (f"{section}.{field}", value)
    for section in ("saver", "evaluator", "stats_logger", "recover")
    for field, value in (("experiment_name", "${experiment_name}"), ("trial_name", "${trial_name}"),
                         ("fileroot", "${cluster.fileroot}"))
)


@register
class ArealExporter(Exporter):
    """AReaL's GRPO trainer (inclusionAI/AReaL, ``areal`` on PyPI)."""

    name = "areal"
    title = "AReaL (inclusionAI/AReaL)"
    versions = (Version("1.0", "1.0.4", "areal 1.0.4 wheel"),)
    expresses: ClassVar[dict[str, str]] = {
        "max lag": "rollout.max_head_offpolicyness = k_max (admission control on the head version; "
                   "one version per optimizer step with actor.ppo_n_minibatches = 1)",
        "fixed lag": "no equivalent: AReaL only bounds the lag by admission",
        "async ratio": "no equivalent: no drop at dequeue and no fractional quota (use max lag)",
        "partial rollouts": "partly: always on (interruptible rollouts, per-token versions); cannot be switched off",
        "batch geometry": "rollout.consumer_batch_size and train_dataset.batch_size (prompts per step), "
                          "gconfig.n_samples (group size), actor.ppo_n_minibatches = minibatches (no epochs)",
        "learning rate": "actor.optimizer.lr",
        "clip range": "actor.eps_clip, actor.eps_clip_higher (on π_θ/μ without a correction)",
        "dual clip": "actor.c_clip",
        "KL penalty": "no equivalent for a loss-side KL: actor.kl_ctl adds the KL to the rewards (pinned to 0)",
        "loss aggregation": "partly: token mean over the step only (no key)",
        "advantage": "actor.reward_norm (group mean, leave-one-out mean, group std, eps, std_unbiased)",
        "token TIS": "actor.rejection_sampling {level: token, action: clamp, metric: ratio, upper: C} "
                     "with actor.use_decoupled_loss = true",
        "sequence TIS": "no equivalent: rejection_sampling at sequence level weights by the geometric mean, not the product",
        "masked IS / IcePop": "actor.rejection_sampling {level: token, action: mask, lower, upper} (token MIS, IcePop); "
                              "{level: sequence, agg: mean} for the geometric-mean band",
        "M2PO": "partly: actor.m2_threshold with actor.use_decoupled_loss = true (mask variant; the clip-band variant has no equivalent)",
        "decoupled PPO": "actor.use_decoupled_loss + actor.rejection_sampling {level: token, action: mask, upper: cap}",
        "VCPO": "no equivalent: only in the mit-han-lab/vcpo verl fork (--framework verl-vcpo)",
        "GAC": "no equivalent: no public implementation and no gradient hook in AReaL's actor",
    }

    # ------------------------------------------------------------------------------------------
    def plan(self, scn: Scenario, version: Version, given: Given) -> Plan:
        plan = self.new_plan(version, "AReaL GRPO trainer (GRPOConfig), python3 <entry script> --config areal_config.yaml")
        self._batch(plan, scn)
        streaming = self._staleness(plan, scn)
        self._partial_rollouts(plan, scn, streaming)
        loss = _LossMapping(plan, scn)
        loss.run()
        self._minibatches(plan, scn, loss.decoupled)
        self._stabilizers(plan, scn)
        self._optimizer(plan, scn, given)
        plan.setup("system.num_workers", scn.system.num_workers,
                   f"{scn.system.num_workers} rollout groups in flight at most in the sandbox. AReaL's "
                   "rollout.max_concurrent_rollouts (default: consumer_batch_size) caps the rollouts in flight; "
                   "size it and your inference engines so that generation keeps up: the lag you measured depends "
                   "on that ratio (not written: it depends on your hardware)")
        plan.metrics.update(_metrics(scn))
        plan.notes.extend(_notes(loss.decoupled))
        return plan

    def files(self, plan: Plan) -> dict[str, str]:
        return {CONFIG_FILE: render_yaml(plan), LAUNCH_FILE: render_launch(plan)}

    def launch(self, plan: Plan, files: dict[str, str]) -> str:
        return ("# fill in the <placeholders> at the top of launch.sh (or export those variables), then:\n"
                "bash launch.sh")

    # ------------------------------------------------------------------------------------------
    def _batch(self, plan: Plan, scn: Scenario) -> None:
        a = scn.algorithm
        plan.setup("algorithm.group_size", a.group_size,
                   "responses per prompt; AReaL's RLVR workflow returns them together, which the group-level "
                   "reward normalisation relies on", "gconfig.n_samples")
        plan.setup("algorithm.groups_per_step", a.groups_per_step,
                   "prompts (rollout groups) per train step: the B of the admission rule", "rollout.consumer_batch_size")
        plan.pinned("train_dataset.batch_size", a.groups_per_step,
                    "= groups_per_step: a train step consumes one dataloader batch of prompts "
                    "(WorkflowExecutor.prepare_batch), which must equal consumer_batch_size for the staleness bound")
        m = a.minibatches
        if m == 1:
            plan.converted("algorithm.minibatches", m, "actor.ppo_n_minibatches", 1,
                           "one optimizer step per train step, so one published version = one optimizer step as in "
                           "the sandbox (AReaL's default 4 would make η count 4 optimizer steps per version)")
        else:
            plan.converted("algorithm.minibatches", m, "actor.ppo_n_minibatches", m,
                           f"{m} optimizer steps per train step and one published version per train step, as the "
                           "sandbox per batch (versions count batches, so η keeps its value). AReaL splits the batch by "
                           "token count (split_padded_tensor_dict_into_mb_list), not into whole groups in consumption "
                           "order: the same lags per step, other data per step")

    def _minibatches(self, plan: Plan, scn: Scenario, decoupled: bool) -> None:
        """After the loss rows: what several mini-batches do to the loss route, the epochs (no key) and
        the ratio anchor."""
        a = scn.algorithm
        if a.minibatches > 1 and decoupled:
            plan.no_equivalent("algorithm.minibatches", a.minibatches,
                               "the decoupled loss route written here reproduces the sandbox's loss only while π_prox "
                               "is the weights being trained (one mini-batch, u = 1); with several mini-batches u moves "
                               f"and AReaL's clip on it binds. Instead: {MINIBATCH_INSTEAD}")
        if a.epochs == 1:
            plan.implicit("algorithm.epochs", 1, "AReaL 1.0.4's ppo_update passes over the batch once (no epoch key)")
        else:
            plan.no_equivalent("algorithm.epochs", a.epochs,
                               f"AReaL 1.0.4's ppo_update passes over the batch once and has no epoch key. Instead: "
                               f"{MINIBATCH_INSTEAD}")
        proximal_row(plan, scn, "batch_start" if decoupled else "behaviour",
                     "actor.use_decoupled_loss = true recomputes π_prox once per train step" if decoupled else
                     "actor.use_decoupled_loss = false and recompute_logprob = false")

    def _staleness(self, plan: Plan, scn: Scenario) -> bool:
        """Rows for ``system.staleness``; returns whether rollouts overlap training (streaming)."""
        st = scn.system.staleness
        if st.kind == "sync":
            plan.converted("system.staleness", "sync", "rollout.max_head_offpolicyness", 0,
                           "η = 0: AReaL admits (v + 1)·B groups for version v, so every consumed group was "
                           "generated by the current weights (synchronous, lag 0)")
            return False
        if st.kind == "fixed_lag":
            fixed_lag_gap(plan, scn, "Nothing is written: AReaL's default rollout.max_head_offpolicyness = 0 "
                                     "(synchronous) applies")
            return True
        if st.kind == "async_ratio":
            bound = (f"system.staleness = {{kind = \"max_lag\", k_max = {math.ceil(st.alpha)}}} (AReaL η = "
                     f"{math.ceil(st.alpha)})")
            plan.no_equivalent("system.staleness", describe(st.model_dump()),
                               "ROLL's asynchronous ratio drops groups older than step − ceil(α) at dequeue and admits "
                               "only a fraction (α mod 1) from the oldest version; AReaL has neither (admission only). "
                               f"Instead: export {bound} and check in the sandbox that the conclusion holds under that "
                               "control. Nothing is written: AReaL's default rollout.max_head_offpolicyness = 0 "
                               "(synchronous) applies")
            return True
        plan.converted("system.staleness.kind + system.staleness.k_max", {"kind": st.kind, "k_max": st.k_max},
                       "rollout.max_head_offpolicyness", st.k_max,
                       "η = k_max (versions = optimizer steps with ppo_n_minibatches = 1): AReaL's capacity "
                       "(η + v + 1)·B − (accepted + running) is the sandbox's throttle rule, and the bound is on the "
                       "head (first-token) version as the sandbox's lag")
        extra = {"enforcement": st.enforcement, "queue_capacity": st.queue_capacity}
        source = "system.staleness.enforcement + system.staleness.queue_capacity"
        if st.enforcement == "throttle":
            plan.implicit(source, extra,
                          "admission control is AReaL's only enforcement (queue_capacity is used only with "
                          "enforcement = drop). Residual difference: the sandbox also drops a job that still ends up "
                          "over the bound (a straggler overtaken by newer rollouts; counted in system/dropped), while "
                          "AReaL trains on it: if the sandbox run dropped nothing, the two are identical")
        else:
            plan.no_equivalent(source, extra,
                               "AReaL cannot drop over-stale rollouts at dequeue nor bound a queue of "
                               f"{st.queue_capacity or (st.k_max + 1) * scn.algorithm.groups_per_step} groups: the "
                               "written η enforces the same bound by admission instead (generation waits rather than "
                               "being discarded, so the lag distribution and the work wasted differ). Instead: re-run "
                               "the scenario with enforcement = \"throttle\" (--set system.staleness.enforcement=throttle) "
                               "and check that the conclusion holds under admission control")
        return True

    def _partial_rollouts(self, plan: Plan, scn: Scenario, streaming: bool) -> None:
        on = scn.system.partial_rollouts
        if not streaming:
            plan.implicit("system.partial_rollouts", on,
                          "with η = 0 no rollout is in flight when AReaL updates the weights (the batch used up the "
                          "version's capacity), so its interruption of in-flight requests never triggers")
        elif on:
            plan.implicit("system.partial_rollouts", on,
                          "AReaL's rollouts are always interruptible: a weight update aborts the requests in flight, "
                          "which continue under the new version with per-token versions and behaviour log-probs "
                          "(areal/infra/remote_inf_engine.py); the bound is on the head version as in the sandbox")
        else:
            plan.no_equivalent("system.partial_rollouts", on,
                               "AReaL always interrupts generations in flight at a weight update and finishes them "
                               "with the new weights (no key turns this off), so later tokens are fresher than in the "
                               "sandbox, where a job finishes with the weights it started with. Instead: re-run the "
                               "sandbox with system.partial_rollouts = true (needs generation_time.kind = "
                               "\"cost_model\") and check that the conclusion holds with in-flight updates")

    def _stabilizers(self, plan: Plan, scn: Scenario) -> None:
        for i, stab in enumerate(scn.algorithm.stabilizers):
            source = f"algorithm.stabilizers[{i}]"
            if stab.name == "gac":
                note = ("GAC (arXiv 2603.01501) has no public implementation and AReaL's actor has no hook between "
                        "backward and the optimizer step. Instead: the sandbox's GAC component (GACConfig) in "
                        + SANDBOX_OPTIMIZER + ", i.e. between backward and the step, in a subclass of the engine")
            elif stab.name == "vcpo_lr":
                note = ("VCPO's ESS learning-rate rule exists only in the mit-han-lab/vcpo verl fork. Instead: export "
                        "with --framework verl-vcpo, or use VCPOLRConfig in " + SANDBOX_OPTIMIZER
                        + ", fed the batch's ESS ratio")
            elif stab.name == "staleness_lr":
                note = ("AReaL has no staleness-aware learning rate. Instead: StalenessLRConfig in " + SANDBOX_OPTIMIZER
                        + ", fed the batch's version gap (per-token `versions` are in the batch)")
            else:
                note = unmapped_stabilizer_note(stab, "AReaL", "between backward and the step, in a subclass of the engine")
            plan.no_equivalent(source, describe(stab.model_dump()), note)

    def _optimizer(self, plan: Plan, scn: Scenario, given: Given) -> None:
        opt = scn.algorithm.optimizer
        p = "algorithm.optimizer."
        if opt.name == "sgd":
            plan.as_is(p + "name", "sgd", "actor.optimizer.type", "torch.optim.SGD in AReaL's FSDP engine")
            plan.implicit(p + "betas + " + p + "eps", {"betas": list(opt.betas), "eps": opt.eps}, "unused by SGD")
            if opt.momentum == 0:
                plan.implicit(p + "momentum", 0.0, "AReaL's SGD has no momentum (torch default 0)")
            else:
                plan.no_equivalent(p + "momentum", opt.momentum,
                                   "AReaL builds torch.optim.SGD without momentum. Instead: use adam, or check in the "
                                   "sandbox that the conclusion holds with momentum = 0")
            plan.as_is(p + "weight_decay", opt.weight_decay, "actor.optimizer.weight_decay",
                       "L2 added to the gradient by torch.optim.SGD, as in the sandbox")
        else:
            plan.converted(p + "name", opt.name, "actor.optimizer.type", "adam",
                           "AReaL's adam is torch.optim.AdamW (decoupled weight decay) in the FSDP engine"
                           + ("; identical to torch Adam with weight_decay = 0" if opt.name == "adam" else ""))
            plan.converted(p + "betas", list(opt.betas), "actor.optimizer.beta1", opt.betas[0], "β1 = betas[0]")
            plan.converted(p + "betas", list(opt.betas), "actor.optimizer.beta2", opt.betas[1], "β2 = betas[1]")
            plan.as_is(p + "eps", opt.eps, "actor.optimizer.eps")
            plan.implicit(p + "momentum", opt.momentum, "unused by Adam")
            if opt.name == "adamw" or opt.weight_decay == 0:
                plan.as_is(p + "weight_decay", opt.weight_decay, "actor.optimizer.weight_decay",
                           "written explicitly: AReaL's default is 0.01")
            else:
                plan.no_equivalent(p + "weight_decay", opt.weight_decay,
                                   "the sandbox's adam adds L2 decay to the gradient (torch Adam); AReaL's adam decays "
                                   "the weights (AdamW). Nothing is written, so AReaL's default 0.01 (decoupled) "
                                   "applies. Instead: re-run the sandbox with algorithm.optimizer.name = \"adamw\" and "
                                   "export that")
        plan.as_is(p + "schedule", opt.schedule, "actor.optimizer.lr_scheduler_type",
                   "HF-style schedules over AReaL's total_train_steps (linear and cosine decay to 0 with "
                   "min_lr_ratio = 0, its default)")
        proportion = warmup_proportion(opt.warmup_steps, scn.run.steps)
        plan.converted(p + "warmup_steps", opt.warmup_steps, "actor.optimizer.warmup_steps_proportion", proportion,
                       f"AReaL warms up for int(p · total_train_steps) steps: p = warmup_steps / run.steps = "
                       f"{opt.warmup_steps}/{scn.run.steps}, exact when the GPU run has {scn.run.steps} steps"
                       + ("; AReaL's default 0.001 is replaced" if opt.warmup_steps == 0 else
                          "; HF's warm-up starts at LR 0 (the sandbox's at lr/warmup_steps)"))
        scale_rows(plan, scn, given, "actor.optimizer.lr", "actor.optimizer.gradient_clipping",
                   framework_lr_default=1e-3, framework_clip_default=1.0)


def warmup_proportion(warmup_steps: int, total_steps: int) -> float:
    """The smallest float ``p`` with ``int(p · total_steps) == warmup_steps`` near ``warmup_steps/total_steps``
    (AReaL truncates ``p · total_train_steps`` to an int)."""
    if warmup_steps == 0:
        return 0.0
    p = warmup_steps / total_steps
    while int(p * total_steps) < warmup_steps:
        p = math.nextafter(p, math.inf)
    return p


# ------------------------------------------------------------------------------------------------
# objective and correction
# ------------------------------------------------------------------------------------------------


class _LossMapping:
    """Rows for ``algorithm.objective`` and ``algorithm.correction``, which share AReaL's loss mode.

    Order of decisions: the objective may claim ``actor.rejection_sampling`` (CISPO's clipped weight);
    the correction then maps to ``rejection_sampling`` or ``m2_threshold`` if the slot is free and the
    semantics match; decoupled mode is needed by REINFORCE, CISPO and every mapped correction; only
    then are the objective's clip rows written (they are inert in decoupled mode)."""

    def __init__(self, plan: Plan, scn: Scenario):
        self.plan = plan
        self.scn = scn
        self.obj = scn.algorithm.objective
        self.corr = scn.algorithm.correction
        self.G = scn.algorithm.group_size
        self.rs_owner: str | None = None
        self.decoupled = False

    def run(self) -> None:
        obj, plan = self.obj, self.plan
        if obj.name == "tba":
            plan.no_equivalent("algorithm.objective", describe(obj.model_dump()),
                               "trajectory balance (TBA) is not a policy-gradient loss; AReaL's actor loss is PPO-clip "
                               "(or SAPO). Instead: " + SANDBOX_COMPONENTS + " as a custom AReaL actor loss")
            plan.implicit("algorithm.correction", self.corr.name, "TBA runs without correction")
            self._nearest_reward_norm("objective (TBA)", mean=True, std=True,
                                      difference="the written config trains AReaL's GRPO, with GRPO's group mean and std")
            self._pin_mode()
            return
        if obj.name in ("reinforce", "cispo"):
            self.decoupled = True
        if obj.name == "cispo":
            self._cispo()
        self._correction()
        self._objective_name()
        if obj.name in RATIO_CLIP_OBJECTIVES:
            self._clip_rows()
        self._advantage()
        self._aggregation()
        self._pin_mode()

    # -- mode ----------------------------------------------------------------------------------
    def _pin_mode(self) -> None:
        plan = self.plan
        if self.decoupled:
            plan.pinned("actor.use_decoupled_loss", True,
                        "decoupled mode: π_prox is recomputed from the weights being trained (one mini-batch), so "
                        "w = π_prox/μ equals the sandbox's ρ = π_θ/μ and u = π_θ/π_prox is 1 in value, carrying the "
                        "gradient ∇log π_θ without an importance weight (one extra forward pass per step)")
            plan.pinned("actor.prox_logp_method", "recompute",
                        "exact π_prox (the log-linear approximation would change w)")
        else:
            plan.pinned("actor.use_decoupled_loss", False,
                        "bypass mode: the PPO ratio is π_θ/μ against the inference log-probs, as in the sandbox")
            plan.pinned("actor.recompute_logprob", False,
                        "keep the inference log-probs as the ratio's anchor (recomputing would anchor at π_prox)")
        plan.pinned("actor.kl_ctl", 0.0,
                    "no KL-regularised reward: AReaL's default 0.1 subtracts 0.1·k1(log μ − log π_ref) from every "
                    "token's reward, with log π_ref = 0 when there is no reference model")
        plan.pinned("actor.adv_norm", None,
                    "no batch-level advantage normalisation (AReaL's example configs set one); the sandbox "
                    "normalises rewards per group only (actor.reward_norm)")
        plan.pinned("actor.disable_dropout", True, "the learner's log-probs are the policy's, without dropout noise")

    # -- objective ------------------------------------------------------------------------------
    def _objective_name(self) -> None:
        name, plan = self.obj.name, self.plan
        src = "algorithm.objective.name"
        if name == "gspo":
            plan.converted(src, name, "actor.importance_sampling_level", "sequence",
                           "GSPO: the clip acts on the sequence's geometric-mean ratio exp(mean_t log(π_θ/μ)) "
                           "(same value and gradient as the sandbox's GSPO-token form)")
        elif name == "reinforce":
            plan.implicit(src, name,
                          "REINFORCE −sg(Â)·log π_θ: AReaL's decoupled loss with u = 1 in value (use_decoupled_loss "
                          "pinned), the clip never binds")
        elif name == "cispo":
            plan.implicit(src, name,
                          "CISPO −sg(clip(ρ))·Â·log π_θ: AReaL's decoupled loss with u = 1 in value and w clamped by "
                          "actor.rejection_sampling (below)")
        else:
            plan.implicit(src, name,
                          "AReaL's actor loss is the PPO-clip surrogate (ppo_actor_loss_fn); with the group-normalised "
                          "rewards below it is " + name)

    def _cispo(self) -> None:
        obj, plan = self.obj, self.plan
        if obj.eps_high <= 0:
            plan.no_equivalent("algorithm.objective.eps_low + algorithm.objective.eps_high",
                               {"eps_low": obj.eps_low, "eps_high": obj.eps_high},
                               "AReaL's rejection_sampling needs an upper bound > 1 for the ratio metric, so CISPO's "
                               "weight cap 1 + eps_high = 1 cannot be written. Instead: check in the sandbox with "
                               "eps_high > 0")
            return
        self.rs_owner = "objective"
        plan.pinned("actor.rejection_sampling.level", "token", "CISPO clips each token's weight")
        plan.pinned("actor.rejection_sampling.action", "clamp", "truncate w into the CISPO band (tokens keep their gradient)")
        plan.pinned("actor.rejection_sampling.metric", "ratio", "the band is on w = π_prox/μ = ρ")
        lower = 1.0 - obj.eps_low
        plan.converted("algorithm.objective.eps_low", obj.eps_low, "actor.rejection_sampling.lower",
                       lower if lower > 0 else None,
                       "lower = 1 − eps_low" + ("; 0 is written as null (AReaL's clamp then floors at 0, and it "
                                                "rejects a lower bound of 0 for the ratio metric)" if lower <= 0 else ""))
        plan.converted("algorithm.objective.eps_high", obj.eps_high, "actor.rejection_sampling.upper",
                       1.0 + obj.eps_high, "upper = 1 + eps_high")

    def _clip_rows(self) -> None:
        obj, plan = self.obj, self.plan
        dual = getattr(obj, "dual_clip_c", None)
        if self.decoupled:
            src = "algorithm.objective.eps_low + algorithm.objective.eps_high"
            value: dict[str, Any] = {"eps_low": obj.eps_low, "eps_high": obj.eps_high}
            if dual is not None:
                src += " + algorithm.objective.dual_clip_c"
                value["dual_clip_c"] = dual
            plan.no_equivalent(src, value,
                               "the correction needs use_decoupled_loss = true, where AReaL's clip bounds "
                               "u = π_θ/π_prox, 1 in value within the single mini-batch, so it never binds: tokens "
                               "the sandbox clips (ρ = π_θ/μ outside the band) still get the gradient w·Â·∇log π_θ. "
                               "Instead: check in the sandbox that the conclusion holds with the clip off "
                               "(--set algorithm.objective.eps_low=1.0 --set algorithm.objective.eps_high=1e6"
                               + (" --set algorithm.objective.dual_clip_c=1e6" if dual is not None else "") + ")")
            if dual is None:
                plan.implicit("algorithm.objective.dual_clip_c", None, "no dual clip (AReaL's c_clip defaults to null)")
            return
        what = "the sequence ratio" if obj.name == "gspo" else "π_θ/μ"
        plan.as_is("algorithm.objective.eps_low", obj.eps_low, "actor.eps_clip", f"ratio floor 1 − eps_clip on {what}")
        plan.as_is("algorithm.objective.eps_high", obj.eps_high, "actor.eps_clip_higher",
                   f"ratio cap 1 + eps_clip_higher on {what}")
        plan.as_is("algorithm.objective.dual_clip_c", dual, "actor.c_clip",
                   "dual clip: the loss of a negative-advantage token is capped at c·|Â|" if dual is not None else
                   "no dual clip")

    def _aggregation(self) -> None:
        obj, plan = self.obj, self.plan
        src = "algorithm.objective.aggregation" + (" + algorithm.objective.max_len" if obj.name == "dr_grpo" else "")
        value: Any = obj.aggregation if obj.name != "dr_grpo" else {"aggregation": obj.aggregation, "max_len": obj.max_len}
        if obj.aggregation == "token_mean":
            plan.implicit(src, value,
                          "AReaL's actor loss is the token mean over the step: each micro-batch's summed loss is "
                          "divided by its valid tokens and weighted by them across micro-batches and data-parallel "
                          "ranks (ppo_actor_loss_fn, loss_weight_fn in areal/trainer/ppo/actor.py)")
        else:
            effect = {
                "seq_mean_token_mean": "AReaL weighs long responses more",
                "seq_mean_token_sum": "the same token weights, but divided by the step's token count instead of the "
                                      "number of responses, so the loss scale follows the response length",
                "seq_mean_token_sum_norm": "divided by the step's token count instead of B·L_const",
            }[obj.aggregation]
            plan.no_equivalent(src, value,
                               f"AReaL has no aggregation key: its loss is the token mean over the step, not "
                               f"{obj.aggregation} ({effect}). Instead: re-run the sandbox with "
                               "--set algorithm.objective.aggregation=token_mean and check the conclusion")

    # -- advantages ------------------------------------------------------------------------------
    def _advantage(self) -> None:
        obj = self.obj
        if obj.name == "reinforce":
            self._reinforce_baseline()
        elif obj.name == "grpo":
            self._grpo()
        elif obj.name == "dr_grpo":
            self._unused_opob(obj.baseline)
            if obj.baseline == "opob":
                self._opob_gap("algorithm.objective.baseline", std=False)
            else:
                self.plan.converted("algorithm.objective.baseline", obj.baseline, "actor.reward_norm.mean_level", "group",
                                    "Dr.GRPO centres rewards on the group mean, without std")
                self._reward_norm_rest(std=None, leave1out=False)
        elif obj.name == "rloo":
            self.plan.pinned("actor.reward_norm.mean_level", "group", "RLOO: Â_i = R_i − mean of the other rewards of the group")
            self.plan.pinned("actor.reward_norm.mean_leave1out", True, "leave-one-out group mean")
            self.plan.pinned("actor.reward_norm.std_level", None, "no std normalisation")
            self.plan.pinned("actor.reward_norm.group_size", self.G, "= group_size")
        else:
            self._advantage_knob()

    def _grpo(self) -> None:
        obj, plan = self.obj, self.plan
        self._unused_opob(obj.baseline)
        if obj.beta_kl == 0:
            plan.implicit("algorithm.objective.beta_kl", 0.0, "no KL term (actor.kl_ctl pinned to 0)")
        else:
            plan.no_equivalent("algorithm.objective.beta_kl", obj.beta_kl,
                               "the sandbox adds β·k3(π_ref/π_θ) to the loss; AReaL's actor.kl_ctl subtracts a KL "
                               "estimate (computed from the behaviour log-probs, no gradient) from the rewards, a "
                               "different regulariser. Instead: check in the sandbox with beta_kl = 0, or use verl's "
                               "loss-side KL (--framework verl)")
        if obj.baseline == "opob":
            self._opob_gap("algorithm.objective.baseline + algorithm.objective.normalize_std + "
                           "algorithm.objective.eps_std + algorithm.objective.std_unbiased", std=obj.normalize_std,
                           eps=obj.eps_std, unbiased=obj.std_unbiased is not False)
            return
        plan.converted("algorithm.objective.baseline", obj.baseline, "actor.reward_norm.mean_level", "group",
                       "group-mean baseline")
        plan.converted("algorithm.objective.normalize_std", obj.normalize_std, "actor.reward_norm.std_level",
                       "group" if obj.normalize_std else None,
                       "divide by the group's reward std" if obj.normalize_std else "Dr.GRPO-style centring, no std")
        if obj.normalize_std:
            plan.as_is("algorithm.objective.eps_std", obj.eps_std, "actor.reward_norm.eps",
                       "Â = (R − mean)/(std + eps); AReaL's default is 1e-5")
            unbiased = True if obj.std_unbiased is None else obj.std_unbiased
            plan.converted("algorithm.objective.std_unbiased", obj.std_unbiased, "actor.reward_norm.std_unbiased",
                           unbiased, "Bessel-corrected std" if unbiased else "population std")
        else:
            plan.implicit("algorithm.objective.eps_std + algorithm.objective.std_unbiased",
                          {"eps_std": obj.eps_std, "std_unbiased": obj.std_unbiased}, "unused without std normalisation")
        plan.pinned("actor.reward_norm.mean_leave1out", False, "the group mean includes the sample itself")
        plan.pinned("actor.reward_norm.group_size", self.G, "= group_size")

    def _advantage_knob(self) -> None:
        """ppo, dapo, gspo, cispo: ``advantage`` ∈ grpo, dr_grpo, rloo, reward, opob."""
        obj, plan = self.obj, self.plan
        kind = obj.advantage
        self._unused_opob(kind)
        if kind == "opob":
            # the sandbox's opob advantage divides by the population group std (objectives/base.py: opob_advantage)
            self._opob_gap("algorithm.objective.advantage + algorithm.objective.eps_std", std=True, eps=obj.eps_std,
                           unbiased=False)
            return
        if kind == "reward":
            plan.converted("algorithm.objective.advantage", kind, "actor.reward_norm", None, "raw rewards as advantages")
        else:
            plan.converted("algorithm.objective.advantage", kind, "actor.reward_norm.mean_level", "group",
                           {"grpo": "group mean and std", "dr_grpo": "group mean, no std",
                            "rloo": "leave-one-out group mean"}[kind])
            self._reward_norm_rest(std="group" if kind == "grpo" else None, leave1out=kind == "rloo",
                                   eps_source="algorithm.objective.eps_std" if kind == "grpo" else None)
        if kind != "grpo":
            plan.implicit("algorithm.objective.eps_std", obj.eps_std, f"unused with advantage = {kind}")

    def _reward_norm_rest(self, std: str | None, leave1out: bool, eps_source: str | None = None) -> None:
        plan = self.plan
        plan.pinned("actor.reward_norm.mean_leave1out", leave1out,
                    "leave-one-out group mean" if leave1out else "the group mean includes the sample itself")
        plan.pinned("actor.reward_norm.std_level", std, "divide by the group std" if std else "no std normalisation")
        if std:
            if eps_source:
                plan.as_is(eps_source, self.obj.eps_std, "actor.reward_norm.eps", "Â = (R − mean)/(std + eps)")
            plan.pinned("actor.reward_norm.std_unbiased", True, "Bessel-corrected group std, as the sandbox's")
        plan.pinned("actor.reward_norm.group_size", self.G, "= group_size")

    def _reinforce_baseline(self) -> None:
        obj, plan = self.obj, self.plan
        kind, norm = obj.baseline, obj.normalize_std
        used = {"constant": {"constant_baseline"}, "ema": {"ema_decay", "ema_init"}}.get(kind, set())
        for knob in ("constant_baseline", "ema_decay", "ema_init"):
            if knob not in used:
                plan.implicit(f"algorithm.objective.{knob}", getattr(obj, knob), f"unused with baseline = {kind}")
        self._unused_opob(kind)
        std_src = "algorithm.objective.normalize_std"
        if kind in ("ema", "optimal", "opob") or (norm and kind in ("none", "constant", "leave_one_out")):
            src = "algorithm.objective.baseline + " + std_src + "".join(
                f" + algorithm.objective.{k}" for k in sorted(used))
            if kind == "opob":
                self._opob_gap(src, std=norm)
                return
            why = {
                "ema": "AReaL has no moving-average baseline",
                "optimal": "the variance-optimal baseline needs per-trajectory gradient norms, which AReaL does not compute",
            }.get(kind, "AReaL's reward_norm computes the std around the baseline it subtracts (the RMS of R − b, or "
                        f"G/(G−1) times the group std for leave-one-out), not the group std of R the sandbox divides "
                        f"by with baseline = {kind}")
            instead = ("baseline = \"group_mean\" or \"leave_one_out\"" if kind in ("ema", "optimal") else
                       "baseline = \"group_mean\" (GRPO-style normalisation) or normalize_std = false")
            plan.no_equivalent(src, {"baseline": kind, "normalize_std": norm},
                               f"{why}. Instead: re-run the sandbox with {instead} and export that")
            if kind in ("ema", "optimal"):
                self._nearest_reward_norm(f"{kind} baseline", mean=True, std=norm,
                                          difference="the group mean replaces the "
                                          + ("moving average of past rewards" if kind == "ema" else
                                             "gradient-norm-weighted optimal baseline"))
            elif kind == "leave_one_out":
                self._nearest_reward_norm("leave-one-out baseline with std normalisation", mean=True, std=True,
                                          leave1out=True, difference="AReaL divides by the std of the leave-one-out "
                                          "advantages, G/(G−1) times the group std the sandbox divides by")
            else:  # none, constant with std normalisation
                if kind == "constant":
                    plan.pinned("actor.reward_bias", -obj.constant_baseline,
                                "AReaL's reward is (R + reward_bias)·reward_scaling: bias = −b, the scenario's constant baseline")
                self._nearest_reward_norm(f"{kind!r} baseline with std normalisation", mean=False, std=True,
                                          difference="AReaL divides by the RMS of R − b over the group, the sandbox by "
                                          "the group std of R")
            return
        if kind in ("none", "constant"):
            plan.converted("algorithm.objective.baseline", kind, "actor.reward_norm", None,
                           "no group normalisation" + (" (the constant is the reward bias below)" if kind == "constant" else ""))
            if kind == "constant":
                plan.converted("algorithm.objective.constant_baseline", obj.constant_baseline, "actor.reward_bias",
                               -obj.constant_baseline, "AReaL's reward is (R + reward_bias)·reward_scaling: bias = −b")
            plan.implicit(std_src, norm, "no std normalisation")
            return
        plan.converted("algorithm.objective.baseline", kind, "actor.reward_norm.mean_level", "group",
                       "group mean" if kind == "group_mean" else "leave-one-out group mean")
        plan.converted(std_src, norm, "actor.reward_norm.std_level", "group" if norm else None,
                       "divide by the group std" if norm else "no std normalisation")
        plan.pinned("actor.reward_norm.mean_leave1out", kind == "leave_one_out",
                    "leave-one-out group mean" if kind == "leave_one_out" else "the group mean includes the sample itself")
        if norm:
            plan.pinned("actor.reward_norm.eps", 1e-6, "the sandbox's REINFORCE std normaliser uses ε = 1e-6 (fixed)")
            plan.pinned("actor.reward_norm.std_unbiased", True, "Bessel-corrected group std, as the sandbox's")
        plan.pinned("actor.reward_norm.group_size", self.G, "= group_size")

    def _unused_opob(self, kind: str) -> None:
        if kind == "opob" or not hasattr(self.obj, "opob_weight"):
            return
        knobs = OPOB_KNOBS
        self.plan.implicit(" + ".join(f"algorithm.objective.{k}" for k in knobs),
                           {k: getattr(self.obj, k) for k in knobs}, f"OPOB knobs, unused with {kind}")

    def _opob_gap(self, source: str, std: bool, eps: float = 1e-6, unbiased: bool = True) -> None:
        knobs = OPOB_KNOBS
        source += "".join(f" + algorithm.objective.{k}" for k in knobs)
        fields = [s.strip().rsplit(".", 1)[1] for s in source.split("+")]
        self.plan.no_equivalent(source, {f: getattr(self.obj, f) for f in fields},
                                "VCPO's off-policy optimal baseline needs per-trajectory gradient norms, which AReaL "
                                "does not compute. Instead: export with --framework verl-vcpo, or use "
                                + SANDBOX_COMPONENTS + " in a custom AReaL actor")
        self._nearest_reward_norm("OPOB baseline", mean=True, std=std, eps=eps, unbiased=unbiased,
                                  difference="AReaL's baseline is the plain group mean, OPOB's the group mean weighted by "
                                             "w_i²‖∇log π(y_i)‖² (equal when the weights are equal within a group)")

    def _nearest_reward_norm(self, what: str, mean: bool, std: bool, difference: str, eps: float = 1e-6,
                             unbiased: bool = True, leave1out: bool = False) -> None:
        """Write the group normalisation nearest to the scenario's advantage when the advantage itself has no
        equivalent (its row says so). AReaL 1.0.4 defaults ``actor.reward_norm`` and ``actor.adv_norm`` to None
        (``areal/api/cli_args.py``, ``PPOActorConfig``): left unwritten, the run would train on raw, uncentred
        rewards, a different algorithm from the one the scenario's objective describes (group centring, std
        scaling as the objective says)."""
        plan = self.plan
        note = f"nearest to the scenario's {what} (no equivalent above), written so that AReaL does not train on raw rewards: "
        if not mean and not std:
            plan.pinned("actor.reward_norm", None, note + difference)
            return
        plan.pinned("actor.reward_norm.mean_level", "group" if mean else None,
                    note + difference if mean else note + "no centring, as the scenario; " + difference)
        plan.pinned("actor.reward_norm.mean_leave1out", leave1out,
                    "leave-one-out group mean" if leave1out else "the group mean includes the sample itself")
        plan.pinned("actor.reward_norm.std_level", "group" if std else None,
                    "divide by the group std, as the scenario's objective" if std else "no std normalisation, as the scenario's objective")
        if std:
            plan.pinned("actor.reward_norm.eps", eps, "the scenario objective's std guard ε")
            plan.pinned("actor.reward_norm.std_unbiased", unbiased,
                        "Bessel-corrected group std" if unbiased else "population std, as the scenario's objective")
        plan.pinned("actor.reward_norm.group_size", self.G, "= group_size")

    # -- correction ------------------------------------------------------------------------------
    def _correction(self) -> None:
        corr, plan = self.corr, self.plan
        name = corr.name
        if name == "none":
            plan.implicit("algorithm.correction", "none",
                          "no correction: actor.rejection_sampling stays null"
                          + (" (AReaL then warns that decoupled mode filters nothing: intended, REINFORCE only needs "
                             "u = 1)" if self.decoupled and self.rs_owner is None else ""))
            return
        gap = self._correction_gap()
        if gap:
            plan.no_equivalent("algorithm.correction", describe(corr.model_dump()), gap)
            return
        self.decoupled = True
        if name == "m2po_mask":
            self._m2po()
            return
        self.rs_owner = "correction"
        rs = "actor.rejection_sampling."
        if name == "tis":
            plan.converted("algorithm.correction.name + algorithm.correction.level", {"name": name, "level": corr.level},
                           rs + "level", "token", "token TIS truncates each token's weight")
            plan.pinned(rs + "action", "clamp", "truncate (tokens keep their gradient with the bounded weight)")
            plan.pinned(rs + "metric", "ratio", "on w = π_prox/μ = ρ")
            plan.converted("algorithm.correction.C", corr.C, rs + "upper", corr.cap,
                           "cap C" + (" (unset: 2.0 at token level)" if corr.C is None else ""))
            self._lower("algorithm.correction.C_low", corr.C_low, "floor")
        elif name == "mis":
            plan.converted("algorithm.correction.name + algorithm.correction.level", {"name": name, "level": corr.level},
                           rs + "level", "token", "token MIS")
            plan.pinned(rs + "action", "mask", "tokens outside the band are dropped; kept tokens carry w")
            plan.pinned(rs + "metric", "ratio", "on w = π_prox/μ = ρ")
            plan.as_is("algorithm.correction.C", corr.C, rs + "upper", "upper band edge")
            self._lower("algorithm.correction.C_low", corr.C_low, "lower band edge")
            plan.implicit("algorithm.correction.seq_weight + algorithm.correction.veto_low + algorithm.correction.veto_high"
                          " + algorithm.correction.batch_normalize",
                          {"seq_weight": corr.seq_weight, "veto_low": corr.veto_low, "veto_high": corr.veto_high,
                           "batch_normalize": corr.batch_normalize},
                          "sequence-level knobs, unused at token level; no batch normalisation")
        elif name == "icepop":
            plan.pinned(rs + "level", "token", "IcePop masks tokens")
            plan.converted("algorithm.correction.name", name, rs + "action", "mask",
                           "coefficient w inside [α, β], 0 outside")
            plan.pinned(rs + "metric", "ratio", "on w = π_prox/μ = ρ")
            plan.as_is("algorithm.correction.beta", corr.beta, rs + "upper", "β")
            self._lower("algorithm.correction.alpha", corr.alpha, "α")
        elif name == "geo_mis":
            plan.converted("algorithm.correction.name", name, rs + "level", "sequence",
                           "mask a response whose geometric-mean ratio exp(mean_t log w) leaves [lo, hi]. Residual "
                           "difference: AReaL weights the surviving tokens by that geometric mean (within [lo, hi]), "
                           "the sandbox by 1")
            plan.pinned(rs + "action", "mask", "reject the whole response")
            plan.pinned(rs + "metric", "ratio", "ratio metric, aggregated in log space")
            plan.pinned(rs + "agg", "mean", "geometric mean over the response's tokens")
            plan.as_is("algorithm.correction.hi", corr.hi, rs + "upper", "upper band edge")
            plan.as_is("algorithm.correction.lo", corr.lo, rs + "lower", "lower band edge")
            plan.implicit("algorithm.correction.token_weight + algorithm.correction.C",
                          {"token_weight": corr.token_weight, "C": corr.C}, "no token truncation (C unused)")
        elif name == "decoupled_ppo":
            plan.converted("algorithm.correction.name + algorithm.correction.level", {"name": name, "level": corr.level},
                           rs + "level", "token", "AReaL's decoupled PPO rejects tokens")
            plan.pinned(rs + "action", "mask", "reject tokens with w above the cap; kept tokens carry w")
            plan.pinned(rs + "metric", "ratio", "on w = π_prox/μ")
            plan.as_is("algorithm.correction.behave_imp_weight_cap", corr.behave_imp_weight_cap, rs + "upper",
                       "cap (the key behave_imp_weight_cap was removed in favour of rejection_sampling)")
            plan.implicit("algorithm.correction.require_prox", corr.require_prox,
                          "AReaL always has π_prox in decoupled mode (recomputed)")

    def _lower(self, source: str, value: float, what: str) -> None:
        target = "actor.rejection_sampling.lower"
        if value > 0:
            self.plan.as_is(source, value, target, what)
        else:
            self.plan.converted(source, value, target, None,
                                f"no {what}: null (AReaL rejects a lower bound of 0 for the ratio metric)")

    def _correction_gap(self) -> str | None:
        """Why the correction cannot be written (None if it can)."""
        corr = self.corr
        name = corr.name
        slot = ("CISPO already uses actor.rejection_sampling for its clipped weight and AReaL has one such slot"
                if self.rs_owner else None)
        instead = "Instead: " + SANDBOX_COMPONENTS + " as a custom AReaL actor loss"
        if self.obj.name == "gspo":
            return ("a correction needs AReaL's decoupled mode, where the GSPO loss −w_t·Â·u(y) with u(y) = "
                    "exp(mean_t log(π_θ/π_prox)) spreads each token's weight w_t over the whole response "
                    "(∇u = mean_t ∇log π_θ), while the sandbox's GSPO-token form keeps it on its token. " + instead)
        if name == "tis":
            if corr.level == "sequence":
                return ("the sandbox truncates the product Π_t w_t of the response; AReaL's rejection_sampling at "
                        "sequence level weights every token by the geometric mean exp(mean_t log w) and truncates that, "
                        "a different estimator. Instead: token-level TIS (level = \"token\"), or verl's "
                        "rollout_is = sequence (--framework verl), or " + SANDBOX_COMPONENTS)
            return slot or (None if corr.cap > 1 else "AReaL needs upper > 1 for the ratio metric. " + instead)
        if name == "mis":
            if corr.level == "sequence":
                return ("sequence MIS keeps responses whose product Π_t w_t lies in the band with weight Π w (or 1); "
                        "AReaL can filter on the product (agg = sum) but then weights by the geometric mean. " + instead)
            if corr.batch_normalize:
                return "AReaL cannot renormalise the kept weights to batch mean 1. " + instead
            return slot or (None if corr.C > 1 else "AReaL needs upper > 1 for the ratio metric. " + instead)
        if name == "icepop":
            return slot or (None if corr.beta > 1 else "AReaL needs upper > 1 for the ratio metric. " + instead)
        if name == "geo_mis":
            if corr.token_weight == "tis":
                return ("AReaL cannot combine the geometric-mean sequence mask with token truncation (one "
                        "rejection_sampling rule). " + instead)
            return slot or (None if corr.hi > 1 else "AReaL needs upper > 1 for the ratio metric. " + instead)
        if name == "decoupled_ppo":
            if corr.level == "sequence":
                return ("AReaL can reject a response whose largest w exceeds the cap (level = sequence, agg = max) but "
                        "then weights its tokens by the geometric mean instead of each token's w. Instead: level = "
                        "\"token\", or " + SANDBOX_COMPONENTS)
            return slot or (None if corr.behave_imp_weight_cap > 1 else "AReaL needs upper > 1 for the ratio metric. " + instead)
        if name == "m2po_mask":
            return None
        return {
            "opsm": "AReaL has no off-policy sequence masking (DeepSeek-V3.2 OPSM). " + instead,
            "m2po_clipband": "AReaL implements M2PO as a token mask (actor.m2_threshold), not the official code's "
                             "adaptive clip band. Instead: the m2po_mask correction, or " + SANDBOX_COMPONENTS,
            "bapo": "AReaL has no adaptive (BAPO) clip bounds. " + instead,
            "topr": "AReaL has no tapered off-policy REINFORCE weight. " + instead,
            "dppo_mask": "AReaL has no probability-difference (DPPO) mask or (log ρ)² penalty; prime-rl's default loss "
                         "does this (--framework prime-rl). " + instead,
        }.get(name, f"AReaL has no equivalent of the {name!r} correction. " + instead)  # unknown here (issue 26)

    def _m2po(self) -> None:
        corr, plan = self.corr, self.plan
        plan.converted("algorithm.correction.name + algorithm.correction.m2_threshold",
                       {"name": corr.name, "m2_threshold": corr.m2_threshold}, "actor.m2_threshold", corr.m2_threshold,
                       "AReaL masks the tokens with the largest δ² = (log μ − log π_prox)² until the mean of the rest is "
                       "below the threshold. Residual differences: AReaL selects per micro-batch and data-parallel "
                       "rank (the sandbox over the whole step) and divides the loss by the kept tokens of each "
                       "micro-batch (the sandbox by all of them)")
        plan.implicit("algorithm.correction.anchor", corr.anchor,
                      "δ uses π_prox, which equals π_θ in value with one mini-batch, so both anchors agree")
        weight_needed = self.obj.name in RATIO_CLIP_OBJECTIVES or (self.obj.name == "reinforce" and corr.behaviour_weight)
        if self.obj.name == "cispo":
            plan.implicit("algorithm.correction.behaviour_weight", corr.behaviour_weight,
                          "no effect with CISPO: its clipped weight (rejection_sampling) is the token's weight")
        elif weight_needed:
            note = ("kept tokens carry w = π_prox/μ = ρ" if self.obj.name == "reinforce" else
                    "no effect in the sandbox's bypass mode (the surrogate already carries ρ); AReaL needs w")
            plan.implicit("algorithm.correction.behaviour_weight", corr.behaviour_weight, note)
            rs = "actor.rejection_sampling."
            self.rs_owner = "correction"
            plan.pinned(rs + "level", "token", "weight kept tokens by w (AReaL's decoupled loss drops w without rejection_sampling)")
            plan.pinned(rs + "action", "clamp", "an unbounded clamp: w itself")
            plan.pinned(rs + "metric", "ratio", "w = π_prox/μ")
            plan.pinned(rs + "upper", math.inf, "no truncation")
        else:
            plan.implicit("algorithm.correction.behaviour_weight", corr.behaviour_weight,
                          "kept tokens carry no behaviour weight: actor.rejection_sampling stays null")


# ------------------------------------------------------------------------------------------------
# metrics and notes
# ------------------------------------------------------------------------------------------------


def _metrics(scn: Scenario) -> dict[str, str]:
    """The sandbox's metrics and AReaL's logged names (stats_tracker keys, areal/trainer/ppo/actor.py)."""
    m = {
        "reward/mean": "`ppo_actor/task_reward/avg` (raw reward per response)",
        "adv/mean": "`ppo_actor/advantages/avg` (per valid token)",
        "loss/pg": "`ppo_actor/update/actor_loss/avg` (per-token loss, averaged over valid tokens)",
        "clip/frac": "`ppo_actor/update/clip_ratio/avg` (ratio π_θ/μ in bypass mode, π_θ/π_prox in decoupled mode)",
        "clip/frac_lower": "`ppo_actor/update/dual_clip_ratio/avg`",
        "grad/norm": "`ppo_actor/update/grad_norm` (total norm before clipping)",
        "is/kl_k3": "`ppo_actor/update/compute_logp/kl_div_dual/avg` (k3 of π_θ/μ per token; logged when rollouts "
                    "carry per-token versions)",
        "is/log_ratio_mean": "−`ppo_actor/update/compute_logp/kl_div_direct/avg`",
        "is/ess_ratio": "not logged (AReaL logs token-level ratios only: `ppo_actor/update/importance_weight/avg`)",
        "staleness/mean": "`ppo_actor/update/version_stats/sample_staleness_theta_avg` (per generated token)",
        "staleness/max": "`ppo_actor/update/version_stats/sample_staleness_theta_max`",
        "system/dropped": "not logged: AReaL never drops over-stale rollouts",
        "system/learner_wait": "`timeperf/rollout` (time the trainer waits for a full batch)",
        "grad/cos_prev": "not logged",
    }
    corr = scn.algorithm.correction.name
    if corr in ("tis", "mis", "icepop", "geo_mis", "decoupled_ppo") or scn.algorithm.objective.name == "cispo":
        m["is/coef_mean"] = "`ppo_actor/update/behave_imp_weight/avg` (w after rejection sampling, kept tokens)"
        m["is/trunc_frac" if corr == "tis" else "mask/frac"] = "`ppo_actor/update/rs_filtered_fraction`"
    if corr == "m2po_mask":
        m["m2/value"] = "not logged"
    if scn.algorithm.stabilizers:
        m["lr/scale"] = "not logged (`ppo_actor/update/lr` is the scheduled learning rate)"
    return m


def _notes(decoupled: bool) -> list[str]:
    mode = (
        "This export uses AReaL's decoupled mode (actor.use_decoupled_loss = true) with one mini-batch: π_prox is "
        "recomputed from the weights being trained, so the behaviour weight w = π_prox/μ equals the sandbox's "
        "detached ρ = π_θ/μ and the ratio u = π_θ/π_prox is 1 in value, up to numerical differences between the "
        "recompute and the training forward pass. AReaL's warning about rejection_sampling = null in decoupled mode "
        "is expected when no weight is wanted."
        if decoupled else
        "This export uses bypass mode like the sandbox (actor.use_decoupled_loss = false, recompute_logprob = "
        "false): the PPO ratio is π_θ/μ against the inference engine's log-probs."
    )
    return [
        ("areal_config.yaml holds only the keys this export maps or pins, plus the keys AReaL requires for any run "
         "(names, paths, backends: `???` until launch.sh sets them); AReaL fills every other key from its "
         "dataclass defaults (areal/api/cli_args.py)."),
        mode,
        ("Rewards: AReaL computes (R + reward_bias)·reward_scaling and clips it to ±actor.reward_clip (20) before "
         "normalising; the sandbox does not clip."),
    ]


# ------------------------------------------------------------------------------------------------
# files
# ------------------------------------------------------------------------------------------------

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:/-]*$")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "none", "~"}


def yaml_scalar(value: Any) -> str:
    """One YAML scalar that OmegaConf reads back as ``value`` (floats keep a dot so every YAML loader
    reads them as floats)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        if math.isnan(value):
            return ".nan"
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:
            mantissa, exponent = text.split("e")
            text = f"{mantissa}.0e{exponent}"
        return text
    text = str(value)
    if text == "???" or (_PLAIN.match(text) and text.lower() not in _YAML_WORDS):
        return text
    return json.dumps(text)


def _nest(pairs: list[tuple[str, Any, str]]) -> dict:
    tree: dict = {}
    for key, value, comment in pairs:
        *parents, leaf = key.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = (value, comment)
    return tree


def _emit(tree: dict, indent: int, out: list[str]) -> None:
    for key, item in tree.items():
        pad = "  " * indent
        if isinstance(item, dict):
            out.append(f"{pad}{key}:")
            _emit(item, indent + 1, out)
        else:
            value, comment = item
            line = f"{pad}{key}: {yaml_scalar(value)}"
            out.append(f"{line}  # {comment}" if comment else line)


def render_yaml(plan: Plan) -> str:
    """``areal_config.yaml``: the plan's keys nested as AReaL's dataclasses, each commented with its
    scenario source, plus the keys any AReaL run requires (commented "your run")."""
    why: dict[str, str] = {}
    for r in plan.rows:
        if r.target is not None and r.target not in why:
            why[r.target] = f"{r.source} ({r.kind})" if r.source else r.kind
    lines = [
        f"# AReaL {plan.release} GRPO config written by `sandbox export` ({plan.framework} {plan.version}).",
        "# Only the keys the export maps or pins, plus those any AReaL run requires (\"your run\");",
        "# AReaL fills the rest from its defaults (areal/api/cli_args.py). PROMOTION.md explains each key.",
    ]
    pairs = [(k, v, why.get(k, "")) for k, v in plan.settings.items()]
    pairs += [(k, v, "your run: set by launch.sh" if v == "???" else "your run")
              for k, v in USER_KEYS if k not in plan.settings]
    _emit(_nest(pairs), 0, lines)
    return "\n".join(lines) + "\n"


PLACEHOLDERS: tuple[tuple[str, str], ...] = (
    ("ENTRY_SCRIPT", "<your AReaL GRPO training script, e.g. examples/math/gsm8k_rl.py>"),
    ("MODEL_PATH", "<model path or Hugging Face id>"),
    ("DATASET_PATH", "<dataset path or Hugging Face id>"),
    ("EXPERIMENT_NAME", "<experiment name, no '_' or '/'>"),
    ("TRIAL_NAME", "<trial name, no '-' or '/'>"),
    ("ACTOR_BACKEND", "<training backend and parallelism, e.g. fsdp:d4>"),
    ("ROLLOUT_BACKEND", "<inference backend and parallelism, e.g. sglang:d4>"),
)


def render_launch(plan: Plan) -> str:
    lines = [
        "#!/usr/bin/env bash",
        f"# Start the AReaL {plan.release} run exported by `sandbox export` (see PROMOTION.md).",
        "# Replace each <placeholder> below (or export the variable). Everything algorithmic is in",
        "# areal_config.yaml; extra Hydra overrides go after the script's arguments, and keys that",
        "# areal_config.yaml does not contain need Hydra's +key=value form.",
        "set -euo pipefail",
        "",
    ]
    lines += [f'{var}="${{{var}:-{text}}}"' for var, text in PLACEHOLDERS]
    names = " ".join(var for var, _ in PLACEHOLDERS)
    lines += [
        "",
        f"for var in {names}; do",
        '  if [[ "${!var}" == "<"* ]]; then echo "launch.sh: set $var" >&2; exit 2; fi',
        "done",
        'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        "",
        f'python3 "$ENTRY_SCRIPT" --config "$HERE/{CONFIG_FILE}" \\',
        '  experiment_name="$EXPERIMENT_NAME" trial_name="$TRIAL_NAME" \\',
        '  actor.path="$MODEL_PATH" train_dataset.path="$DATASET_PATH" \\',
        '  actor.backend="$ACTOR_BACKEND" rollout.backend="$ROLLOUT_BACKEND" \\',
        '  "$@"',
    ]
    return "\n".join(lines) + "\n"
