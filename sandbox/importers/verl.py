"""verl 0.9.x (V1 trainer of ``verl.trainer.main_ppo``) config -> scenario: the inverse of
``sandbox export --framework verl`` (docs/promotion.md), key by key.

Conventions inverted here (verl 0.9.1 sources as cited in the exporter's table):

* staleness: ``trainer.v1.sampler.max_off_policy_threshold`` T counts the versions a trajectory spans,
  both ends, so the sandbox's lag bound is ``k_max = T − 1`` (docs/system.md#counting-convention);
  ``separate_async.num_warmup_batches`` W is the admission window: W = k_max reads as the throttle
  ((k_max + 1)·B groups outstanding), any other W as drop-at-dequeue with ``queue_capacity = (W + 1)·B``;
* the loss route: ``algorithm.rollout_correction.bypass_mode = true`` is the PPO-clip surrogate on
  π_θ/μ (objective ``grpo``, or ``gspo``/``cispo`` by ``policy_loss.loss_mode``); ``false`` is the
  REINFORCE route with ``rollout_is`` weights (objective ``reinforce``);
* ``clip_ratio_c = 1e9`` (never fires: the log-ratio is clamped to ±20) is "no dual clip";
* ``ppo_mini_batch_size`` (prompts) gives ``minibatches = train_batch_size / ppo_mini_batch_size``;
* ``lr_warmup_steps`` counts scheduler steps (per batch in sync mode, per local update in separate_async).
"""

from __future__ import annotations

from typing import Any

from .common import Mapper, Settings, read_overrides, read_yaml

ACTOR = "actor_rollout_ref.actor"
CORR = "algorithm.rollout_correction"
V1 = "trainer.v1"
NO_DUAL_CLIP = 1e9
NO_REFERENCE = ("no task of the simulator supplies reference-policy log-probs, so the sandbox cannot run a KL penalty "
                "(sandbox.runner.check_runnable)")

AGGREGATION = {
    "token-mean": "token_mean",
    "seq-mean-token-mean": "seq_mean_token_mean",
    "seq-mean-token-sum": "seq_mean_token_sum",
    "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",
}
OPTIMIZER = {"adam": "adam", "adamw": "adamw", "sgd": "sgd"}

# verl 0.9.1 defaults (trainer/config/_generated_ppo_trainer.yaml) of the keys mapped below
DEFAULTS: dict[str, Any] = {
    f"{ACTOR}.clip_ratio_low": 0.2,
    f"{ACTOR}.clip_ratio_high": 0.2,
    f"{ACTOR}.clip_ratio_c": 3.0,
    f"{ACTOR}.loss_agg_mode": "token-mean",
    f"{ACTOR}.policy_loss.loss_mode": "vanilla",
    f"{ACTOR}.use_kl_loss": False,
    f"{ACTOR}.kl_loss_coef": 0.001,
    f"{ACTOR}.ppo_epochs": 1,
    f"{ACTOR}.optim.optimizer": "AdamW",
    f"{ACTOR}.optim.betas": [0.9, 0.999],
    f"{ACTOR}.optim.weight_decay": 0.01,
    f"{ACTOR}.optim.lr_scheduler_type": "constant",
    f"{ACTOR}.optim.lr_warmup_steps": -1,
    "algorithm.adv_estimator": "gae",
    "algorithm.norm_adv_by_std_in_grpo": True,
    f"{CORR}.bypass_mode": False,
    "actor_rollout_ref.rollout.n": 1,
    "trainer.use_v1": False,
}

# framework-side keys with no bearing on the simulated algorithm (prefix -> why)
IGNORED: dict[str, str] = {
    "data.train_files": "data paths: the proxy task replaces your data",
    "data.val_files": "data paths: the proxy task replaces your data",
    "data.max_prompt_length": "length limits: give a length distribution or trace with --cluster (generation_time)",
    "data.max_response_length": "length limits: give a length distribution or trace with --cluster (generation_time)",
    "data.filter_overlong_prompts": "data filtering",
    "data.truncation": "data filtering",
    "data.prompt_key": "data format",
    "data.reward_fn_key": "data format",
    "actor_rollout_ref.model.": "the model: the proxy task's toy model replaces it",
    "actor_rollout_ref.rollout.name": "inference engine choice (see `sandbox run` engines for mismatch models)",
    "actor_rollout_ref.rollout.mode": "inference engine mode",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "parallelism: cluster facts come from --cluster",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "inference engine memory",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "micro-batching: same loss, memory only",
    "actor_rollout_ref.rollout.checkpoint_engine.": "weight-sync transport: the sandbox's system.sync_delay models its time",
    "actor_rollout_ref.rollout.enable_chunked_prefill": "inference engine performance",
    "actor_rollout_ref.rollout.temperature": "sampling temperature 1 is assumed",
    "actor_rollout_ref.ref.": "reference-model placement and micro-batching",
    f"{ACTOR}.ppo_micro_batch_size_per_gpu": "micro-batching: same loss, memory only",
    f"{ACTOR}.clip_ratio": "legacy symmetric clip, superseded by clip_ratio_low / clip_ratio_high",
    f"{ACTOR}.use_dynamic_bsz": "micro-batching by tokens: same loss, memory only",
    f"{ACTOR}.ppo_max_token_len_per_gpu": "micro-batching by tokens: same loss, memory only",
    f"{ACTOR}.fsdp_config.": "sharding: memory only",
    f"{ACTOR}.ulysses_sequence_parallel_size": "sequence parallelism: memory only",
    "actor_rollout_ref.hybrid_engine": "placement",
    "trainer.logger": "logging",
    "trainer.project_name": "logging",
    "trainer.experiment_name": "logging",
    "trainer.n_gpus_per_node": "cluster size: give it with --cluster (trainer_gpus)",
    "trainer.nnodes": "cluster size: give it with --cluster",
    "trainer.save_freq": "checkpointing",
    "trainer.test_freq": "evaluation schedule (the proxy scenario's run.eval_every applies)",
    "trainer.total_epochs": "run length (the proxy scenario's run.steps applies)",
    "trainer.total_training_steps": "run length (the proxy scenario's run.steps applies)",
    "trainer.val_before_train": "evaluation schedule",
    "trainer.critic_warmup": "no critic in the sandbox",
    "trainer.default_local_dir": "checkpoint path",
    "trainer.v1.separate_async.rollout.": "standalone rollout pool layout: cluster facts come from --cluster",
    "custom_reward_function.": "reward code: the proxy task's verifier replaces it",
    "reward_model.": "reward model: the proxy task's verifier replaces it",
}


def ignore_framework_keys(m: Mapper, table: dict[str, str] = IGNORED) -> None:
    for key in list(m.s.values):
        if key in m.used:
            continue
        for prefix, why in table.items():
            if key == prefix or (prefix.endswith(".") and key.startswith(prefix)):
                m.ignore(key, why)
                break


def d(key: str) -> Any:
    return DEFAULTS[key]


# ------------------------------------------------------------------------------------------------


def map_staleness_v1(m: Mapper, B: int, minibatches: int) -> str:
    """system.staleness from the V1 trainer's keys; returns the trainer mode."""
    use_v1 = m.value("trainer.use_v1", "bool", d("trainer.use_v1"))
    if not use_v1:
        m.row("converted", "trainer.use_v1", use_v1, "system.staleness.kind", "sync",
              "the legacy trainer (use_v1 = false) generates and trains in turn: synchronous; its own async keys are not read")
        return "sync"
    m.row("pinned", "trainer.use_v1", True, note="the V1 trainer")
    mode = m.value(f"{V1}.trainer_mode", "str", "sync")
    if mode == "sync":
        m.mapped(f"{V1}.trainer_mode", "system.staleness.kind", mode, "generate then train, every step on fresh weights",
                 convert=lambda _: "sync")
        return "sync"
    if mode != "separate_async":
        m.row("unsupported", f"{V1}.trainer_mode", mode,
              note="only sync and separate_async are mapped (verl 0.9.1); the scenario runs synchronously")
        m.set("system.staleness.kind", "sync")
        return "sync"
    m.row("converted", f"{V1}.trainer_mode", mode, "system.staleness.kind", "max_lag",
          "streaming: rollout on its own GPUs, the trainer samples finished groups (a bounded lag)")
    key_t = f"{V1}.sampler.max_off_policy_threshold"
    T = m.value(key_t, "int")
    if T < 1:
        raise m.bad(key_t, "expected an integer >= 1 (the versions a trajectory may span)")
    k_max = T - 1
    m.row("converted", key_t, T, "system.staleness.k_max", k_max,
          "T counts the versions a trajectory spans, both ends: lag bound k_max = T − 1 (docs/system.md#counting-convention)")
    strategy_key = f"{V1}.sampler.max_off_policy_strategy"
    strategy = m.value(strategy_key, "str", "drop")
    if strategy != "drop":
        m.row("unsupported", strategy_key, strategy,
              note="'wait' stalls the trainer until fresh groups arrive; the sandbox enforces the bound at dequeue "
                   "(drop) or at admission (throttle); the scenario drops over-bound groups")
    if strategy == "drop" and m.has(strategy_key):
        m.row("pinned", strategy_key, strategy, note="over-bound groups are dropped when sampled, as the sandbox drops them")
    wkey = f"{V1}.separate_async.num_warmup_batches"
    W = m.value(wkey, "int", k_max)
    if W < 0:
        raise m.bad(wkey, "expected an integer >= 0")
    if W == k_max:
        m.row("converted" if m.has(wkey) else "default", wkey, W, "system.staleness.enforcement", "throttle",
              "admission window W = k_max: (k_max + 1)·B groups outstanding, the sandbox's throttle (the same window "
              "reads as drop with the default queue; the throttle is chosen)")
    else:
        m.row("converted", wkey, W, "system.staleness.enforcement", "drop",
              "admission window W ≠ k_max: groups are admitted ahead and dropped when over the bound")
        m.row("converted", wkey, W, "system.staleness.queue_capacity", (W + 1) * B,
              f"(W + 1)·B = {(W + 1) * B} groups admitted ahead")
    pkey = f"{V1}.separate_async.parameter_sync_step"
    P = m.value(pkey, "int", 1)
    if P != minibatches:
        m.row("unsupported", pkey, P, note=f"weights pushed every {P} optimizer steps while a batch takes {minibatches}: "
                                           "the sandbox publishes one version per trainer step")
    else:
        m.row("pinned", pkey, P, note="weights pushed after every trainer step (one version per step)")
    return mode


def map_objective(m: Mapper, route: str, route_key: str = f"{CORR}.bypass_mode") -> str:
    """algorithm.objective from loss_mode, adv_estimator, norm, clip, aggregation and KL; returns its name."""
    lm_key = f"{ACTOR}.policy_loss.loss_mode"
    mode = m.value(lm_key, "str", d(lm_key))
    adv_key = "algorithm.adv_estimator"
    adv = m.value(adv_key, "str", d(adv_key))
    norm_key = "algorithm.norm_adv_by_std_in_grpo"
    norm = m.value(norm_key, "bool", d(norm_key))
    if adv not in ("grpo", "rloo"):
        m.row("unsupported", adv_key, adv, note="only the group estimators grpo and rloo are mapped (others train a critic "
                                                "or a different baseline); the scenario uses grpo")
        adv = "grpo"
    if route == "reinforce":
        name = "reinforce"
        given = m.s.values.get(route_key, False)  # both trainers default to this route (bypass / skip off)
        m.row("converted" if m.has(route_key) else "default", route_key, given, "algorithm.objective.name", name,
              f"{route_key} = {str(given).lower()}: the REINFORCE route (vanilla loss with ratio 1 against π_old, "
              "times rollout_is weights)")
        if m.has(lm_key) and mode != "vanilla":
            m.row("unsupported", lm_key, m.raw(lm_key), note="the REINFORCE route uses the vanilla loss")
        elif m.has(lm_key):
            m.row("pinned", lm_key, mode, note="vanilla loss with ratio 1 on the REINFORCE route")
        baseline = "group_mean" if adv == "grpo" else "leave_one_out"
        m.row("converted", adv_key, adv, "algorithm.objective.baseline", baseline,
              "grpo = group-mean baseline; rloo = leave-one-out")
        m.mapped(norm_key, "algorithm.objective.normalize_std", norm if adv == "grpo" else False,
                 "divide by the group std (rloo: never)")
        if adv == "rloo" and norm and m.has(norm_key):
            m.row("unsupported", norm_key, norm, note="verl's rloo estimator ignores it")
        for key in (f"{ACTOR}.clip_ratio_low", f"{ACTOR}.clip_ratio_high", f"{ACTOR}.clip_ratio_c"):
            m.ignore(key, "unused on the REINFORCE route: the ratio to π_old is 1 at one optimizer step per batch, "
                          "the clip never binds (the sandbox's reinforce has no clip)")
    else:
        if m.has(route_key):
            m.row("pinned", route_key, m.raw(route_key), note="the surrogate's ratio is π_θ/μ (the rollout log-probs)")
        if mode in ("gspo", "cispo"):
            name = mode
            m.row("converted", lm_key, mode, "algorithm.objective.name", name, f"{mode} surrogate")
            m.mapped(norm_key, "algorithm.objective.advantage", norm, "group-mean advantage, divided by the std "
                     "(grpo) or not (dr_grpo)", convert=lambda n: "grpo" if n else "dr_grpo")
            if adv == "grpo":
                m.row("pinned", adv_key, adv, note="group estimator")
            else:
                m.row("unsupported", adv_key, adv, note=f"{mode} with rloo advantages is not mapped; grpo advantages used")
        elif mode == "vanilla":
            name = "rloo" if adv == "rloo" else "grpo"
            m.row("converted", lm_key, mode, "algorithm.objective.name", name,
                  "PPO clip surrogate on π_θ/μ with " + ("leave-one-out advantages (the sandbox's rloo)" if adv == "rloo"
                                                          else "group-normalised advantages (the sandbox's grpo)"))
            if name == "grpo":
                m.row("converted", adv_key, adv, "algorithm.objective.baseline", "group_mean", "group-mean baseline")
                m.mapped(norm_key, "algorithm.objective.normalize_std", norm, "divide by the group std or not")
            else:
                m.row("pinned", adv_key, adv, note="leave-one-out advantages")
                if norm and m.has(norm_key):
                    m.row("unsupported", norm_key, norm, note="verl's rloo estimator ignores it")
                elif m.has(norm_key):
                    m.row("pinned", norm_key, norm, note="no std division")
        else:
            m.row("unsupported", lm_key, mode, note="no sandbox objective for this loss mode; the scenario uses grpo")
            name = "grpo"
            m.set("algorithm.objective.name", name)
            m.row("converted", adv_key, adv, "algorithm.objective.baseline", "group_mean", "group-mean baseline")
            m.mapped(norm_key, "algorithm.objective.normalize_std", norm, "divide by the group std or not")
        lo, hi = f"{ACTOR}.clip_ratio_low", f"{ACTOR}.clip_ratio_high"
        m.mapped(lo, "algorithm.objective.eps_low", m.value(lo, "float", d(lo)), "ratio floor 1 − eps_low")
        m.mapped(hi, "algorithm.objective.eps_high", m.value(hi, "float", d(hi)), "ratio cap 1 + eps_high")
        ck = f"{ACTOR}.clip_ratio_c"
        c = m.value(ck, "float", d(ck))
        if mode == "vanilla":
            if c >= NO_DUAL_CLIP:
                m.row("converted" if m.has(ck) else "default", ck, c, "algorithm.objective.dual_clip_c", None,
                      "≥ 1e9 never fires (the log-ratio is clamped to ±20): no dual clip")
            else:
                m.mapped(ck, "algorithm.objective.dual_clip_c", c, "dual clip on negative advantages (verl's default 3)")
        else:
            m.ignore(ck, f"the {mode} loss does not apply the dual clip")
    agg_key = f"{ACTOR}.loss_agg_mode"
    agg = m.value(agg_key, "str", d(agg_key))
    if agg not in AGGREGATION:
        raise m.bad(agg_key, f"expected one of {', '.join(AGGREGATION)}")
    m.mapped(agg_key, "algorithm.objective.aggregation", agg, "same formula, the sandbox's spelling",
             convert=AGGREGATION.get)
    kl_key, coef_key = f"{ACTOR}.use_kl_loss", f"{ACTOR}.kl_loss_coef"
    use_kl = m.value(kl_key, "bool", d(kl_key))
    if use_kl:
        beta = m.value(coef_key, "float", d(coef_key))
        m.row("unsupported", kl_key, True, note="a KL term to the reference model: " + (NO_REFERENCE if name == "grpo" else
              f"the sandbox's {name} objective has no KL term") + "; the scenario runs with β = 0")
        m.row("unsupported", coef_key, beta, note="β of the KL term (see use_kl_loss)")
        m.unsupported(f"{ACTOR}.kl_loss_type", "the KL estimator (see use_kl_loss)")
    else:
        m.row("converted" if m.has(kl_key) else "default", kl_key, False,
              "algorithm.objective.beta_kl" if name == "grpo" else None, 0.0 if name == "grpo" else None,
              "no KL term: β = 0")
        m.ignore(coef_key, "unused: use_kl_loss = false")
        m.ignore(f"{ACTOR}.kl_loss_type", "unused: use_kl_loss = false")
    m.pinned("algorithm.use_kl_in_reward", False, "no KL penalty in the reward")
    m.pinned(f"{ACTOR}.entropy_coeff", 0, "no entropy bonus")
    return name


def map_correction(m: Mapper, route: str) -> None:
    is_key, thr_key, rs_key = f"{CORR}.rollout_is", f"{CORR}.rollout_is_threshold", f"{CORR}.rollout_rs"
    level = m.value(is_key, "str?", None)
    rs = m.value(rs_key, "str?", None)
    if rs is not None:
        m.row("unsupported", rs_key, rs, note="rejection sampling modes are not mapped by this importer (mis / geo_mis "
                                              "/ icepop: write the correction in the scenario by hand)")
    elif m.has(rs_key):
        m.row("pinned", rs_key, None, note="no rejection sampling")
    if level is None:
        m.row("converted" if m.has(is_key) else "default", is_key, None, "algorithm.correction.name", "none",
              "no IS weights")
        m.ignore(thr_key, "unused: rollout_is = null")
        return
    if route != "reinforce":
        m.row("unsupported", is_key, level, note="bypass mode: the rollout_is weights multiply the clipped surrogate, which "
                                                 "the sandbox's objectives do not express; no correction in the scenario")
        m.set("algorithm.correction.name", "none")
        m.unsupported(thr_key, "see rollout_is")
        return
    if level not in ("token", "sequence"):
        raise m.bad(is_key, "expected token, sequence or null")
    m.row("converted", is_key, level, "algorithm.correction.name", "tis", "truncated IS weight min(w, C) on w = π_θ/μ")
    m.set("algorithm.correction.level", level)
    thr = m.raw(thr_key, 2.0)
    if isinstance(thr, str):
        m.row("unsupported", thr_key, thr, note="a 'lo_hi' band (masking) is not mapped by this importer; C = the upper edge")
        try:
            thr = float(thr.split("_")[-1])
        except ValueError:
            raise m.bad(thr_key, "expected a number or a 'lo_hi' band") from None
        m.set("algorithm.correction.C", thr)
    else:
        thr = m.value(thr_key, "float", 2.0)
        m.mapped(thr_key, "algorithm.correction.C", thr, "the truncation cap C")


def map_batch(m: Mapper, prompts_key: str = "data.train_batch_size") -> tuple[int, int, int]:
    """group_size, groups_per_step, minibatches, epochs; returns (B, minibatches, epochs)."""
    n = m.value("actor_rollout_ref.rollout.n", "int", d("actor_rollout_ref.rollout.n"))
    if n < 1:
        raise m.bad("actor_rollout_ref.rollout.n", "expected a positive integer")
    if n < 2:  # verl's default n = 1 goes with its default gae estimator (a critic), which the sandbox does not simulate
        m.row("unsupported", "actor_rollout_ref.rollout.n", n, note="one response per prompt: the group estimators the "
              "sandbox simulates (grpo, rloo) need at least 2; the scenario uses groups of 2")
        m.set("algorithm.group_size", 2)
    else:
        m.row("setup" if m.has("actor_rollout_ref.rollout.n") else "default", "actor_rollout_ref.rollout.n", n,
              "algorithm.group_size", n, "responses per prompt (the group)")
    B = m.value(prompts_key, "int")
    if B < 1:
        raise m.bad(prompts_key, "expected a positive number of prompts per step")
    m.row("setup", prompts_key, B, "algorithm.groups_per_step", B, "prompts per trainer step")
    mini_key = f"{ACTOR}.ppo_mini_batch_size"
    mini = m.value(mini_key, "int", B)
    if mini < 1 or B % mini:
        raise m.bad(mini_key, f"expected a divisor of {prompts_key} = {B} (prompts per optimizer step)")
    m.row("converted" if m.has(mini_key) else "default", mini_key, mini, "algorithm.minibatches", B // mini,
          f"minibatches = train_batch_size / ppo_mini_batch_size = {B} / {mini}")
    ep_key = f"{ACTOR}.ppo_epochs"
    E = m.value(ep_key, "int", d(ep_key))
    if E < 1:
        raise m.bad(ep_key, "expected a positive integer")
    m.mapped(ep_key, "algorithm.epochs", E, "passes over each batch")
    return B, B // mini, E


def map_optimizer(m: Mapper, per: int) -> None:
    """``actor_rollout_ref.actor.optim``; ``per``: scheduler steps per trainer step's worth of warm-up."""
    optim = f"{ACTOR}.optim"
    name_key = f"{optim}.optimizer"
    cls = m.value(name_key, "str", d(name_key))
    if cls.lower() not in OPTIMIZER:
        m.row("unsupported", name_key, cls, note="only Adam, AdamW and SGD are simulated; AdamW used")
        name = "adamw"
    else:
        name = OPTIMIZER[cls.lower()]
        m.mapped(name_key, "algorithm.optimizer.name", cls, "torch.optim class", convert=lambda _: name)
    if name != "sgd":
        betas = m.value(f"{optim}.betas", "floats", d(f"{optim}.betas"))
        if len(betas) != 2:
            raise m.bad(f"{optim}.betas", "expected two numbers")
        m.mapped(f"{optim}.betas", "algorithm.optimizer.betas", betas, "Adam moment decays")
    wd = m.value(f"{optim}.weight_decay", "float", d(f"{optim}.weight_decay"))
    m.mapped(f"{optim}.weight_decay", "algorithm.optimizer.weight_decay", wd, "decoupled for AdamW, L2 for Adam and SGD")
    ov = f"{optim}.override_optimizer_config"
    if m.has(ov) or m.has(f"{ov}.eps"):
        key = f"{ov}.eps" if m.has(f"{ov}.eps") else ov
        eps = m.raw(key)
        eps = eps.get("eps") if isinstance(eps, dict) else eps
        if isinstance(eps, (int, float)) and not isinstance(eps, bool):
            m.row("converted", key, eps, "algorithm.optimizer.eps", float(eps), "Adam ε")
        else:
            m.row("unsupported", key, m.s.values[key], note="only eps is mapped from override_optimizer_config")
    sched_key = f"{optim}.lr_scheduler_type"
    if not m.has(sched_key) and m.has(f"{optim}.lr_decay_style"):
        sched_key = f"{optim}.lr_decay_style"
    sched = m.value(sched_key, "str", d(f"{optim}.lr_scheduler_type"))
    if sched not in ("constant", "cosine"):
        m.row("unsupported", sched_key, sched, note="constant and cosine are mapped; constant used")
        m.set("algorithm.optimizer.schedule", "constant")
    else:
        m.mapped(sched_key, "algorithm.optimizer.schedule", sched, "learning-rate schedule after the warm-up")
    if sched == "cosine":
        m.pinned(f"{optim}.min_lr_ratio", 0.0, "cosine decays to 0", default=0.0)
        m.pinned(f"{optim}.num_cycles", 0.5, "a half cosine", default=0.5)
    wk = f"{optim}.lr_warmup_steps"
    w = m.value(wk, "int", d(wk))
    if w < 0 and m.has(f"{optim}.lr_warmup_steps_ratio"):
        m.row("unsupported", f"{optim}.lr_warmup_steps_ratio", m.raw(f"{optim}.lr_warmup_steps_ratio"),
              note="a warm-up as a fraction of the run: give lr_warmup_steps instead; no warm-up used")
    m.row("converted" if m.has(wk) else "default", wk, w, "algorithm.optimizer.warmup_steps", max(w, 0) * per,
          "no warm-up" if w <= 0 else f"scheduler steps × {per} optimizer step(s) per scheduler step")
    m.scale(f"{optim}.lr", "algorithm.optimizer.lr", "your learning rate: the proxy task keeps its own; compare "
            "learning rates as multipliers of yours")
    m.scale(f"{optim}.clip_grad", "algorithm.optimizer.grad_clip", "gradient clip for your model's scale")
    m.ignore(f"{optim}.lr_warmup_steps_ratio", "unused: lr_warmup_steps is set")
    m.ignore(f"{optim}.warmup_style", "legacy spelling of the schedule")


def map_verl(m: Mapper) -> None:
    B_key = "data.train_batch_size"
    B, minibatches, E = map_batch(m, B_key)
    mode = map_staleness_v1(m, B, minibatches)
    route = "ratio" if m.value(f"{CORR}.bypass_mode", "bool", d(f"{CORR}.bypass_mode")) else "reinforce"
    map_objective(m, route)
    map_correction(m, route)
    m.pinned("actor_rollout_ref.rollout.calculate_log_probs", True, "the sampler's log-probs μ are recorded")
    map_optimizer(m, minibatches * E if mode == "sync" else E)
    # the REINFORCE route anchors at π_old recomputed once per batch: with one optimizer step per batch that is
    # the weights being trained, the same as the sandbox's default anchor (export: proximal.implicit.one_optimizer_step)
    anchor = "behaviour" if route == "ratio" or minibatches * E == 1 else "batch_start"
    m.row("converted", f"{CORR}.bypass_mode", route == "ratio", "algorithm.proximal", anchor,
          "the ratio is anchored at the rollout log-probs μ (bypass, or one optimizer step per batch) or at π_old "
          "recomputed once per batch (batch_start)")
    ignore_framework_keys(m)


def read_verl(path: str) -> Settings:
    """YAML (``.yaml``/``.yml``) or a Hydra override list (anything else)."""
    return read_yaml(path) if str(path).endswith((".yaml", ".yml")) else read_overrides(path)
