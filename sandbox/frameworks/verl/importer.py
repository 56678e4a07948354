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

from sandbox.frameworks.importing import (
    ConfigImportError,
    Mapper,
    Settings,
    read_overrides,
    read_yaml,
    suggest_framework,
)
from sandbox.frameworks.verl.config_names import ACTOR, CORR, NO_DUAL_CLIP, V1
from sandbox.frameworks.verl.config_names import AGGREGATION as SANDBOX_AGGREGATION
from sandbox.importers import verl_defaults

NO_REFERENCE = (
    "no task of the simulator supplies reference-policy log-probs, so the sandbox cannot run a KL penalty "
    "(sandbox.run.runner.check_runnable)"
)

AGGREGATION = {verl: sandbox for sandbox, verl in SANDBOX_AGGREGATION.items()}
OPTIMIZER = {"adam": "adam", "adamw": "adamw", "sgd": "sgd"}

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
    "reward.": "reward code or model: the proxy task's verifier replaces it",
    "critic.": "the critic: the group estimators the sandbox maps train none",
    "actor_rollout_ref.actor.strategy": "training backend (FSDP/Megatron): same loss",
    "actor_rollout_ref.actor.megatron.": "Megatron parallelism: memory and speed, same loss",
    "actor_rollout_ref.actor.checkpoint.": "checkpointing",
    "actor_rollout_ref.nccl_timeout": "communication timeout",
    "actor_rollout_ref.rollout.val_kwargs.": "evaluation sampling (the proxy scenario's evaluation applies)",
    "actor_rollout_ref.rollout.load_format": "inference engine weight loading",
    "actor_rollout_ref.rollout.layered_summon": "inference engine weight loading",
    "actor_rollout_ref.rollout.max_num_batched_tokens": "inference engine performance",
    "actor_rollout_ref.rollout.max_num_seqs": "inference engine concurrency: give cluster.num_workers with --cluster",
    "actor_rollout_ref.rollout.max_model_len": "inference engine memory",
    "actor_rollout_ref.rollout.enforce_eager": "inference engine performance",
    "actor_rollout_ref.rollout.free_cache_engine": "inference engine memory",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz": "micro-batching by tokens: same log-probs, memory only",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": "micro-batching by tokens: memory only",
    "actor_rollout_ref.rollout.agent.": "agent loop settings (multi-turn): the proxy task is single-turn",
    "actor_rollout_ref.rollout.multi_turn.": "multi-turn settings: the proxy task is single-turn",
    "actor_rollout_ref.rollout.data_parallel_size": "inference parallelism: cluster facts",
    "actor_rollout_ref.rollout.expert_parallel_size": "inference parallelism: cluster facts",
    "actor_rollout_ref.rollout.pipeline_model_parallel_size": "inference parallelism: cluster facts",
    "actor_rollout_ref.rollout.engine_kwargs.": "inference engine settings",
    "actor_rollout_ref.rollout.dtype": "inference precision",
    "actor_rollout_ref.rollout.standalone_gpu_memory_utilization": "inference engine memory",
    "algorithm.kl_ctrl.": "the in-reward KL controller: used only with use_kl_in_reward = true (mapped there)",
    "data.return_raw_chat": "data format",
    "data.shuffle": "data order",
    "data.dataloader_num_workers": "data loading",
    "data.image_key": "data format",
    "data.max_samples": "data size",
    "data.val_batch_size": "evaluation batch",
    "data.trust_remote_code": "data loading",
    "data.custom_cls.": "data loading",
    "data.tool_config_path": "data format",
    "trainer.resume_mode": "checkpoint resume",
    "trainer.resume_from_path": "checkpoint resume",
    "trainer.max_actor_ckpt_to_keep": "checkpointing",
    "trainer.max_critic_ckpt_to_keep": "checkpointing",
    "trainer.log_val_generations": "logging",
    "trainer.device": "device kind",
    "trainer.balance_batch": "sequence balancing across data-parallel ranks: same loss",
    "trainer.ray_wait_register_center_timeout": "timeouts",
    "trainer.rollout_data_dir": "logging",
    "trainer.validation_data_dir": "logging",
    "trainer.esi_redundant_time": "checkpointing",
    "ray_kwargs.": "Ray start-up settings",
    "ray_init.": "Ray start-up settings",
    "global_profiler.": "profiling",
    "transfer_queue.": "data transport",
    "model_engine": "training backend choice",
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


def d(m: Mapper, key: str) -> Any:
    """The framework's default of ``key`` for the config the file composes (``m.s.known``: verl 0.9.1's
    composed tree of the entry point, or the fork's), its ``${...}`` interpolations resolved against the
    file's values as Hydra resolves them."""
    known = m.s.known or {}
    if key not in known:
        raise AssertionError(f"importer bug: no default for {key} in {m.s.known_source}")
    value = known[key]
    if isinstance(value, str) and "${" in value:
        value = _resolve(m, key)
    return value


def _resolve(m: Mapper, key: str) -> Any:
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    merged: dict = {}
    for k, v in {**(m.s.known or {}), **m.s.values}.items():
        node = merged
        *parents, leaf = k.split(".")
        for p in parents:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                break
            node = nxt
        else:
            node[leaf] = v
    try:
        return OmegaConf.select(OmegaConf.create(merged), key, throw_on_resolution_failure=True)
    except OmegaConfBaseException as exc:
        raise ConfigImportError(
            f"{m.s.path}: {key}: verl's default {m.s.known[key]!r} cannot be resolved ({exc})"
        ) from None


# ------------------------------------------------------------------------------------------------


def map_staleness_v1(m: Mapper, B: int, minibatches: int) -> str:
    """system.staleness from the V1 trainer's keys; returns the trainer mode."""
    use_v1 = m.value("trainer.use_v1", "bool", d(m, "trainer.use_v1"))
    if not use_v1:
        m.row(
            "converted",
            "trainer.use_v1",
            use_v1,
            "system.staleness.kind",
            "sync",
            "the legacy trainer (use_v1 = false) generates and trains in turn: synchronous; its own async keys are not read",
        )
        return "sync"
    m.row("pinned", "trainer.use_v1", True, note="the V1 trainer")
    mode = m.value(f"{V1}.trainer_mode", "str", d(m, f"{V1}.trainer_mode"))
    if mode == "sync":
        m.mapped(
            f"{V1}.trainer_mode",
            "system.staleness.kind",
            mode,
            "generate then train, every step on fresh weights",
            convert=lambda _: "sync",
        )
        return "sync"
    if mode != "separate_async":
        m.row(
            "unsupported",
            f"{V1}.trainer_mode",
            mode,
            note="only sync and separate_async are mapped (verl 0.9.1); the scenario runs synchronously",
        )
        m.set("system.staleness.kind", "sync")
        return "sync"
    m.row(
        "converted",
        f"{V1}.trainer_mode",
        mode,
        "system.staleness.kind",
        "max_lag",
        "streaming: rollout on its own GPUs, the trainer samples finished groups (a bounded lag)",
    )
    key_t = f"{V1}.sampler.max_off_policy_threshold"
    T = m.value(key_t, "int", d(m, key_t))
    if T < 1:
        raise m.bad(key_t, "expected an integer >= 1 (the versions a trajectory may span)")
    k_max = T - 1
    m.row(
        "converted" if m.has(key_t) else "default",
        key_t,
        T,
        "system.staleness.k_max",
        k_max,
        "T counts the versions a trajectory spans, both ends: lag bound k_max = T − 1 (docs/system.md#counting-convention)",
    )
    strategy_key = f"{V1}.sampler.max_off_policy_strategy"
    strategy = m.value(strategy_key, "str", d(m, strategy_key))
    if strategy != "drop":
        m.row(
            "unsupported",
            strategy_key,
            strategy,
            note="'wait' stalls the trainer until fresh groups arrive; the sandbox enforces the bound at dequeue "
            "(drop) or at admission (throttle); the scenario drops over-bound groups",
        )
    if strategy == "drop" and m.has(strategy_key):
        m.row(
            "pinned",
            strategy_key,
            strategy,
            note="over-bound groups are dropped when sampled, as the sandbox drops them",
        )
    wkey = f"{V1}.separate_async.num_warmup_batches"
    W = m.value(wkey, "int", d(m, wkey))
    if W < 0:
        raise m.bad(wkey, "expected an integer >= 0")
    if W == k_max:
        m.row(
            "converted" if m.has(wkey) else "default",
            wkey,
            W,
            "system.staleness.enforcement",
            "throttle",
            "admission window W = k_max: (k_max + 1)·B groups outstanding, the sandbox's throttle (the same window "
            "reads as drop with the default queue; the throttle is chosen)",
        )
    else:
        m.row(
            "converted" if m.has(wkey) else "default",
            wkey,
            W,
            "system.staleness.enforcement",
            "drop",
            "admission window W ≠ k_max: groups are admitted ahead and dropped when over the bound",
        )
        m.row(
            "converted" if m.has(wkey) else "default",
            wkey,
            W,
            "system.staleness.queue_capacity",
            (W + 1) * B,
            f"(W + 1)·B = {(W + 1) * B} groups admitted ahead",
        )
    pkey = f"{V1}.separate_async.parameter_sync_step"
    P = m.value(pkey, "int", d(m, pkey))
    if P != minibatches:
        m.row(
            "unsupported",
            pkey,
            P,
            note=f"weights pushed every {P} optimizer steps while a batch takes {minibatches}: "
            "the sandbox publishes one version per trainer step",
        )
    else:
        m.row("pinned", pkey, P, note="weights pushed after every trainer step (one version per step)")
    return mode


def map_objective(m: Mapper, route: str, route_key: str | None = f"{CORR}.bypass_mode") -> str:
    """algorithm.objective from loss_mode, adv_estimator, norm, clip, aggregation and KL; returns its name."""
    lm_key = f"{ACTOR}.policy_loss.loss_mode"
    mode = m.value(lm_key, "str", d(m, lm_key))
    adv_key = "algorithm.adv_estimator"
    adv = m.value(adv_key, "str", d(m, adv_key))
    norm_key = "algorithm.norm_adv_by_std_in_grpo"
    norm = m.value(norm_key, "bool", d(m, norm_key))
    if adv not in ("grpo", "rloo"):
        m.row(
            "unsupported",
            adv_key,
            adv,
            note="only the group estimators grpo and rloo are mapped (others train a critic "
            "or a different baseline); the scenario uses grpo",
        )
        adv = "grpo"
    if route == "reinforce":
        name = "reinforce"
        given = m.s.values.get(route_key, False)  # both trainers default to this route (bypass / skip off)
        m.row(
            "converted" if m.has(route_key) else "default",
            route_key,
            given,
            "algorithm.objective.name",
            name,
            f"{route_key} = {str(given).lower()}: the REINFORCE route (vanilla loss with ratio 1 against π_old, "
            "times rollout_is weights)",
        )
        if m.has(lm_key) and mode != "vanilla":
            m.row("unsupported", lm_key, m.raw(lm_key), note="the REINFORCE route uses the vanilla loss")
        elif m.has(lm_key):
            m.row("pinned", lm_key, mode, note="vanilla loss with ratio 1 on the REINFORCE route")
        baseline = "group_mean" if adv == "grpo" else "leave_one_out"
        m.row(
            "converted",
            adv_key,
            adv,
            "algorithm.objective.baseline",
            baseline,
            "grpo = group-mean baseline; rloo = leave-one-out",
        )
        m.mapped(
            norm_key,
            "algorithm.objective.normalize_std",
            norm if adv == "grpo" else False,
            "divide by the group std (rloo: never)",
        )
        if adv == "rloo" and norm and m.has(norm_key):
            m.row("unsupported", norm_key, norm, note="verl's rloo estimator ignores it")
        for key in (f"{ACTOR}.clip_ratio_low", f"{ACTOR}.clip_ratio_high", f"{ACTOR}.clip_ratio_c"):
            m.ignore(
                key,
                "unused on the REINFORCE route: the ratio to π_old is 1 at one optimizer step per batch, "
                "the clip never binds (the sandbox's reinforce has no clip)",
            )
    else:
        if route_key is not None and m.has(route_key):
            m.row("pinned", route_key, m.raw(route_key), note="the surrogate's ratio is π_θ/μ (the rollout log-probs)")
        if mode in ("gspo", "cispo"):
            name = mode
            m.row("converted", lm_key, mode, "algorithm.objective.name", name, f"{mode} surrogate")
            m.mapped(
                norm_key,
                "algorithm.objective.advantage",
                norm,
                "group-mean advantage, divided by the std (grpo) or not (dr_grpo)",
                convert=lambda n: "grpo" if n else "dr_grpo",
            )
            if adv == "grpo":
                m.row("pinned", adv_key, adv, note="group estimator")
            else:
                m.row(
                    "unsupported", adv_key, adv, note=f"{mode} with rloo advantages is not mapped; grpo advantages used"
                )
        elif mode == "vanilla":
            name = "rloo" if adv == "rloo" else "grpo"
            m.row(
                "converted",
                lm_key,
                mode,
                "algorithm.objective.name",
                name,
                "PPO clip surrogate on π_θ/μ with "
                + (
                    "leave-one-out advantages (the sandbox's rloo)"
                    if adv == "rloo"
                    else "group-normalised advantages (the sandbox's grpo)"
                ),
            )
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
        m.mapped(lo, "algorithm.objective.eps_low", m.value(lo, "float", d(m, lo)), "ratio floor 1 − eps_low")
        m.mapped(hi, "algorithm.objective.eps_high", m.value(hi, "float", d(m, hi)), "ratio cap 1 + eps_high")
        ck = f"{ACTOR}.clip_ratio_c"
        c = m.value(ck, "float", d(m, ck))
        if mode == "vanilla":
            if c >= NO_DUAL_CLIP:
                m.row(
                    "converted" if m.has(ck) else "default",
                    ck,
                    c,
                    "algorithm.objective.dual_clip_c",
                    None,
                    "≥ 1e9 never fires (the log-ratio is clamped to ±20): no dual clip",
                )
            else:
                m.mapped(
                    ck, "algorithm.objective.dual_clip_c", c, "dual clip on negative advantages (verl's default 3)"
                )
        else:
            m.ignore(ck, f"the {mode} loss does not apply the dual clip")
    agg_key = f"{ACTOR}.loss_agg_mode"
    agg = m.value(agg_key, "str", d(m, agg_key))
    if agg not in AGGREGATION:
        raise m.bad(agg_key, f"expected one of {', '.join(AGGREGATION)}")
    m.mapped(
        agg_key, "algorithm.objective.aggregation", agg, "same formula, the sandbox's spelling", convert=AGGREGATION.get
    )
    kl_key, coef_key = f"{ACTOR}.use_kl_loss", f"{ACTOR}.kl_loss_coef"
    use_kl = m.value(kl_key, "bool", d(m, kl_key))
    if use_kl:
        beta = m.value(coef_key, "float", d(m, coef_key))
        m.row(
            "unsupported",
            kl_key,
            True,
            note="a KL term to the reference model: "
            + (NO_REFERENCE if name == "grpo" else f"the sandbox's {name} objective has no KL term")
            + "; the scenario runs with β = 0",
        )
        m.row("unsupported", coef_key, beta, note="β of the KL term (see use_kl_loss)")
        m.unsupported(f"{ACTOR}.kl_loss_type", "the KL estimator (see use_kl_loss)")
    else:
        m.row(
            "converted" if m.has(kl_key) else "default",
            kl_key,
            False,
            "algorithm.objective.beta_kl" if name == "grpo" else None,
            0.0 if name == "grpo" else None,
            "no KL term: β = 0",
        )
        m.ignore(coef_key, "unused: use_kl_loss = false")
        m.ignore(f"{ACTOR}.kl_loss_type", "unused: use_kl_loss = false")
    m.pinned("algorithm.use_kl_in_reward", False, "no KL penalty in the reward")
    m.pinned("algorithm.gamma", 1.0, "no discount within a response (the group estimators use the sequence reward)")
    m.ignore("algorithm.lam", "GAE's λ: unused by the group estimators")
    m.pinned(f"{ACTOR}.entropy_coeff", 0, "no entropy bonus")
    return name


def map_correction(m: Mapper, route: str) -> None:
    is_key, thr_key, rs_key = f"{CORR}.rollout_is", f"{CORR}.rollout_is_threshold", f"{CORR}.rollout_rs"
    level = m.value(is_key, "str?", None)
    rs = m.value(rs_key, "str?", None)
    if rs is not None:
        m.row(
            "unsupported",
            rs_key,
            rs,
            note="rejection sampling modes are not mapped by this importer (mis / geo_mis "
            "/ icepop: write the correction in the scenario by hand)",
        )
        m.unsupported(f"{CORR}.rollout_rs_threshold", "see rollout_rs")
    elif m.has(rs_key):
        m.row("pinned", rs_key, None, note="no rejection sampling")
    if level is None:
        m.row(
            "converted" if m.has(is_key) else "default",
            is_key,
            None,
            "algorithm.correction.name",
            "none",
            "no IS weights",
        )
        m.ignore(thr_key, "unused: rollout_is = null")
        m.ignore(f"{CORR}.rollout_is_batch_normalize", "unused: rollout_is = null")
        return
    if route != "reinforce":
        m.row(
            "unsupported",
            is_key,
            level,
            note="bypass mode: the rollout_is weights multiply the clipped surrogate, which "
            "the sandbox's objectives do not express; no correction in the scenario",
        )
        m.set("algorithm.correction.name", "none")
        m.unsupported(thr_key, "see rollout_is")
        return
    if level not in ("token", "sequence"):
        raise m.bad(is_key, "expected token, sequence or null")
    m.row("converted", is_key, level, "algorithm.correction.name", "tis", "truncated IS weight min(w, C) on w = π_θ/μ")
    m.set("algorithm.correction.level", level)
    thr = m.raw(thr_key, 2.0)
    if isinstance(thr, str):
        m.row(
            "unsupported",
            thr_key,
            thr,
            note="a 'lo_hi' band (masking) is not mapped by this importer; C = the upper edge",
        )
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
    n = m.value("actor_rollout_ref.rollout.n", "int", d(m, "actor_rollout_ref.rollout.n"))
    if n < 1:
        raise m.bad("actor_rollout_ref.rollout.n", "expected a positive integer")
    if (
        n < 2
    ):  # verl's default n = 1 goes with its default gae estimator (a critic), which the sandbox does not simulate
        m.row(
            "unsupported",
            "actor_rollout_ref.rollout.n",
            n,
            note="one response per prompt: the group estimators the "
            "sandbox simulates (grpo, rloo) need at least 2; the scenario uses groups of 2",
        )
        m.set("algorithm.group_size", 2)
    else:
        m.row(
            "setup" if m.has("actor_rollout_ref.rollout.n") else "default",
            "actor_rollout_ref.rollout.n",
            n,
            "algorithm.group_size",
            n,
            "responses per prompt (the group)",
        )
    B = m.value(prompts_key, "int")
    if B < 1:
        raise m.bad(prompts_key, "expected a positive number of prompts per step")
    m.row("setup", prompts_key, B, "algorithm.groups_per_step", B, "prompts per trainer step")
    mini_key = f"{ACTOR}.ppo_mini_batch_size"
    mini = m.value(mini_key, "int", B)
    if mini < 1 or B % mini:
        raise m.bad(mini_key, f"expected a divisor of {prompts_key} = {B} (prompts per optimizer step)")
    m.row(
        "converted" if m.has(mini_key) else "default",
        mini_key,
        mini,
        "algorithm.minibatches",
        B // mini,
        f"minibatches = train_batch_size / ppo_mini_batch_size = {B} / {mini}",
    )
    ep_key = f"{ACTOR}.ppo_epochs"
    E = m.value(ep_key, "int", d(m, ep_key))
    if E < 1:
        raise m.bad(ep_key, "expected a positive integer")
    m.mapped(ep_key, "algorithm.epochs", E, "passes over each batch")
    return B, B // mini, E


def map_optimizer(m: Mapper, per: int) -> None:
    """``actor_rollout_ref.actor.optim``; ``per``: scheduler steps per trainer step's worth of warm-up."""
    optim = f"{ACTOR}.optim"
    name_key = f"{optim}.optimizer"
    cls = m.value(name_key, "str", d(m, name_key))
    if cls.lower() not in OPTIMIZER:
        m.row("unsupported", name_key, cls, note="only Adam, AdamW and SGD are simulated; AdamW used")
        name = "adamw"
    else:
        name = OPTIMIZER[cls.lower()]
        m.mapped(name_key, "algorithm.optimizer.name", cls, "torch.optim class", convert=lambda _: name)
    if name != "sgd":
        betas = m.value(f"{optim}.betas", "floats", d(m, f"{optim}.betas"))
        if len(betas) != 2:
            raise m.bad(f"{optim}.betas", "expected two numbers")
        m.mapped(f"{optim}.betas", "algorithm.optimizer.betas", betas, "Adam moment decays")
    wd = m.value(f"{optim}.weight_decay", "float", d(m, f"{optim}.weight_decay"))
    m.mapped(
        f"{optim}.weight_decay", "algorithm.optimizer.weight_decay", wd, "decoupled for AdamW, L2 for Adam and SGD"
    )
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
    if not m.has(sched_key) and (m.has(f"{optim}.lr_decay_style") or sched_key not in (m.s.known or {})):
        sched_key = f"{optim}.lr_decay_style"  # Megatron's optimizer config (McoreOptimizerConfig)
    sched = m.value(sched_key, "str", d(m, sched_key))
    if sched not in ("constant", "cosine"):
        m.row("unsupported", sched_key, sched, note="constant and cosine are mapped; constant used")
        m.set("algorithm.optimizer.schedule", "constant")
    else:
        m.mapped(sched_key, "algorithm.optimizer.schedule", sched, "learning-rate schedule after the warm-up")
    if sched == "cosine" and f"{optim}.min_lr" in (m.s.known or {}):
        m.pinned(f"{optim}.min_lr", 0.0, "cosine decays to 0", default=d(m, f"{optim}.min_lr"))
    elif sched == "cosine":
        m.pinned(f"{optim}.min_lr_ratio", 0.0, "cosine decays to 0", default=0.0)
        m.pinned(f"{optim}.num_cycles", 0.5, "a half cosine", default=0.5)
    wk = f"{optim}.lr_warmup_steps"
    w = m.value(wk, "int", d(m, wk))
    if w < 0 and m.has(f"{optim}.lr_warmup_steps_ratio"):
        m.row(
            "unsupported",
            f"{optim}.lr_warmup_steps_ratio",
            m.raw(f"{optim}.lr_warmup_steps_ratio"),
            note="a warm-up as a fraction of the run: give lr_warmup_steps instead; no warm-up used",
        )
    m.row(
        "converted" if m.has(wk) else "default",
        wk,
        w,
        "algorithm.optimizer.warmup_steps",
        max(w, 0) * per,
        "no warm-up" if w <= 0 else f"scheduler steps × {per} optimizer step(s) per scheduler step",
    )
    m.scale(
        f"{optim}.lr",
        "algorithm.optimizer.lr",
        "your learning rate: the proxy task keeps its own; compare learning rates as multipliers of yours",
        (m.s.known or {}).get(f"{optim}.lr"),
    )
    m.scale(f"{optim}.clip_grad", "algorithm.optimizer.grad_clip", "gradient clip for your model's scale")
    m.scale(f"{ACTOR}.grad_clip", "algorithm.optimizer.grad_clip", "gradient clip for your model's scale")
    m.ignore(f"{optim}.lr_warmup_steps_ratio", "unused: lr_warmup_steps is set")
    m.ignore(f"{optim}.warmup_style", "legacy spelling of the schedule")
    map_sampling(m)


def map_sampling(m: Mapper) -> None:
    """The sampler: the proxy tasks sample the full distribution at temperature 1."""
    for key, want in (("actor_rollout_ref.rollout.temperature", 1.0), ("actor_rollout_ref.rollout.top_p", 1.0)):
        m.pinned(key, want, "the proxy task samples at temperature 1, no nucleus cut")
    if m.has("actor_rollout_ref.rollout.top_k"):
        k = m.raw("actor_rollout_ref.rollout.top_k")
        if k in (-1, 0):
            m.row("pinned", "actor_rollout_ref.rollout.top_k", k, note="no top-k cut (-1 for vLLM, 0 for HF)")
        else:
            m.row(
                "unsupported",
                "actor_rollout_ref.rollout.top_k",
                k,
                note="a top-k cut: the proxy task samples the full distribution; the scenario runs without it",
            )


#: verl's entry points (the module after ``python -m``) -> (kind, the config its ``@hydra.main`` composes)
ENTRY_POINTS: dict[str, tuple[str, str]] = {
    "verl.trainer.main_ppo": ("main_ppo", "ppo_trainer"),
    "verl.experimental.one_step_off_policy.main_ppo": ("one_step_off", "one_step_off_ppo_trainer"),
    "recipe.one_step_off_policy.main_ppo": ("one_step_off", "one_step_off_ppo_trainer"),
    "verl.experimental.fully_async_policy.fully_async_main": ("fully_async", "fully_async_ppo_trainer"),
    "recipe.fully_async_policy.fully_async_main": ("fully_async", "fully_async_ppo_trainer"),
}
ENTRY_TITLES = {
    "main_ppo": "verl.trainer.main_ppo (the PPO trainer: generate, then train)",
    "one_step_off": "the one-step-off-policy trainer (generation of batch t+1 overlaps training on batch t)",
    "fully_async": "the fully-async trainer (a streaming rollouter, weights pushed every "
    "trigger_parameter_sync_step trainer steps)",
}


def verl_entry(m: Mapper) -> tuple[str, str]:
    """The entry point the file launches and the config it composes; listed in IMPORT.md."""
    s = m.s
    entry = s.entry
    if entry is None:
        kind, config = "main_ppo", "ppo_trainer"
        m.row(
            "default",
            "(entry point)",
            "verl.trainer.main_ppo",
            note="no launch command in the file: verl's PPO trainer (python -m verl.trainer.main_ppo) assumed",
        )
    else:
        module = entry[:-3].replace("/", ".") if entry.endswith(".py") else entry
        match = next(
            (v for k, v in ENTRY_POINTS.items() if module == k or module.endswith("." + k) or k.endswith(module)), None
        )
        if match is None and ("main_ppo" in module or module.startswith(("verl.", "recipe."))):
            match = ("main_ppo", "ppo_trainer")
            m.row(
                "default",
                "(entry point)",
                entry,
                note=f"line {s.entry_line}: {entry} is not one of verl 0.9.1's "
                "entry points: read as verl.trainer.main_ppo (generate, then train)",
            )
        elif match is None:
            raise ConfigImportError(
                f"{s.path}: line {s.entry_line}: the launch command runs {entry!r}, not a verl entry "
                f"point ({', '.join(ENTRY_POINTS)}){suggest_framework(entry, 'verl')}"
            )
        else:
            m.row("converted", "(entry point)", entry, note=f"line {s.entry_line}: {ENTRY_TITLES[match[0]]}")
        kind, config = match
    if s.config_name is not None:
        name = s.config_name.removesuffix(".yaml")
        if name in verl_defaults.CONFIGS:
            config = name
            m.row("converted", "(--config-name)", s.config_name, note=f"verl 0.9.1's {name} composed (from its wheel)")
        else:
            m.row(
                "unsupported",
                "(--config-name)",
                s.config_name,
                note=f"a config outside verl 0.9.1's tree (--config-path {s.config_path}): its own defaults are not "
                f"read; the keys of the file are laid over {config}, the entry point's config",
            )
    s.known = verl_defaults.defaults(config)
    s.known_source = f"verl {verl_defaults.VERSION} ({config})"
    return kind, config


def map_verl(m: Mapper) -> None:
    kind, _ = verl_entry(m)
    if kind == "fully_async":
        B, minibatches, E, mode = map_fully_async(m)
    else:
        B_key = "data.train_batch_size"
        B, minibatches, E = map_batch(m, B_key)
        if kind == "one_step_off":
            m.row(
                "converted",
                "(entry point)",
                m.s.entry,
                "system.staleness.kind",
                "fixed_lag",
                "one step off: batch t trains on rollouts of the weights of step t − 1 (lag exactly 1)",
            )
            m.set("system.staleness.k", 1)
            mode = "one_step_off"
            for key in ("trainer.use_v1", f"{V1}.trainer_mode"):
                m.ignore(key, "the one-step-off entry point runs its own trainer")
        else:
            mode = map_staleness_v1(m, B, minibatches)
    bkey = f"{CORR}.bypass_mode"
    bypass = m.value(bkey, "bool", d(m, bkey))
    one_step = minibatches * E == 1
    if not bypass and one_step:
        # one optimizer step per batch: π_old recomputed at the batch start is the weights being trained, the
        # ratio is 1 at the only step and the clip never binds: the REINFORCE gradient with rollout_is weights
        map_objective(m, "reinforce", bkey)
    else:
        map_objective(m, "ratio", None)
    # bypass: the ratio is anchored at the rollout log-probs μ; otherwise π_old is recomputed once per batch
    # (verl's old_log_prob) and the PPO clip acts on π_θ/π_old over the batch's mini-batch steps, with the
    # rollout_is weights π_old/μ (decoupled mode)
    map_correction(m, "ratio" if bypass else "reinforce")
    anchor = "behaviour" if bypass or one_step else "batch_start"
    m.row(
        "converted" if m.has(bkey) else "default",
        bkey,
        bypass,
        "algorithm.proximal",
        anchor,
        "bypass_mode = true: the clip anchors at the rollout log-probs μ (behaviour)"
        if bypass
        else "bypass_mode = false: π_old recomputed once per batch, the PPO clip on π_θ/π_old over "
        f"{minibatches * E} optimizer step(s) per batch (batch_start; the rollout_is weights π_old/μ)",
    )
    m.pinned(
        "actor_rollout_ref.rollout.calculate_log_probs",
        True,
        "the sampler's log-probs μ are recorded",
        default=d(m, "actor_rollout_ref.rollout.calculate_log_probs") if kind != "main_ppo" else True,
    )
    map_optimizer(m, minibatches * E if mode == "sync" else E)
    ignore_framework_keys(m, {**IGNORED, **ASYNC_IGNORED})


ASYNC_IGNORED = {
    "rollout.nnodes": "rollout GPUs: a cluster fact (Q3/Q4/Q7 of sandbox preflight)",
    "rollout.n_gpus_per_node": "rollout GPUs: a cluster fact (Q3/Q4/Q7 of sandbox preflight)",
    "rollout.total_rollout_steps": "run length (the proxy scenario's run.steps applies)",
    "rollout.total_epochs": "run length (the proxy scenario's run.steps applies)",
    "rollout.test_freq": "evaluation schedule",
    "async_training.use_trainer_do_validate": "evaluation schedule",
    "async_training.use_dynamic_resource_scheduling": "GPU sharing between trainer and rollout: timing only",
    "async_training.concurrent_samples_per_replica": "engine concurrency: give cluster.num_workers with --cluster",
    "data.gen_batch_size": "prompts dispatched at a time by the rollouter",
}


def map_fully_async(m: Mapper) -> tuple[int, int, int, str]:
    """verl 0.9.1's fully-async trainer (verl/experimental/fully_async_policy): a trainer step takes
    ``required_samples = ppo_mini_batch_size × require_batches`` prompts (``require_batches`` optimizer
    steps), weights are pushed every ``trigger_parameter_sync_step`` steps (one version), and the rollouter
    pauses once ``(staleness_threshold + 1) × required_samples × trigger_parameter_sync_step`` samples are
    outstanding since the last push (fully_async_rollouter.set_max_required_samples): a window of
    ``1 + s`` versions' batches, ROLL Flash's asynchronous ratio α = s (docs/system.md#async_ratio)."""
    AT = "async_training"
    n = m.value("actor_rollout_ref.rollout.n", "int", d(m, "actor_rollout_ref.rollout.n"))
    if n < 2:
        m.row(
            "unsupported",
            "actor_rollout_ref.rollout.n",
            n,
            note="one response per prompt: the group estimators need at least 2; the scenario uses groups of 2",
        )
        m.set("algorithm.group_size", 2)
    else:
        m.row(
            "setup" if m.has("actor_rollout_ref.rollout.n") else "default",
            "actor_rollout_ref.rollout.n",
            n,
            "algorithm.group_size",
            n,
            "responses per prompt (the group)",
        )
    mini_key = f"{ACTOR}.ppo_mini_batch_size"
    mini = m.value(mini_key, "int", d(m, mini_key))
    req = m.value(f"{AT}.require_batches", "int", d(m, f"{AT}.require_batches"))
    trig = m.value(f"{AT}.trigger_parameter_sync_step", "int", d(m, f"{AT}.trigger_parameter_sync_step"))
    for key, v in ((mini_key, mini), (f"{AT}.require_batches", req), (f"{AT}.trigger_parameter_sync_step", trig)):
        if v < 1:
            raise m.bad(key, "expected a positive integer")
    B = mini * req * trig
    m.row(
        "setup" if m.has(mini_key) else "default",
        mini_key,
        mini,
        "algorithm.groups_per_step",
        B,
        f"prompts per published version = ppo_mini_batch_size × require_batches × trigger_parameter_sync_step = "
        f"{mini}·{req}·{trig}",
    )
    m.row(
        "converted" if m.has(f"{AT}.require_batches") else "default",
        f"{AT}.require_batches",
        req,
        "algorithm.minibatches",
        req * trig,
        f"optimizer steps per version = require_batches × trigger_parameter_sync_step = {req}·{trig}",
    )
    m.row(
        "converted" if m.has(f"{AT}.trigger_parameter_sync_step") else "default",
        f"{AT}.trigger_parameter_sync_step",
        trig,
        note="trainer steps per weight push (one version)",
    )
    ep_key = f"{ACTOR}.ppo_epochs"
    E = m.value(ep_key, "int", d(m, ep_key))
    m.mapped(ep_key, "algorithm.epochs", E, "passes over each mini-batch")
    tb = m.value("data.train_batch_size", "int", d(m, "data.train_batch_size"))
    if m.has("data.train_batch_size"):
        m.row(
            "ignored", "data.train_batch_size", tb, note="unused by the fully-async trainer (it streams mini-batches)"
        )
    sk = f"{AT}.staleness_threshold"
    st = m.value(sk, "float", d(m, sk))
    if st < 0:
        raise m.bad(sk, "expected a number >= 0")
    if st == 0:
        m.row(
            "converted" if m.has(sk) else "default",
            sk,
            st,
            "system.staleness.kind",
            "sync",
            "0: the rollouter stops at one version's batch (synchronous)",
        )
    else:
        m.row(
            "converted" if m.has(sk) else "default",
            sk,
            st,
            "system.staleness.kind",
            "async_ratio",
            f"the rollouter runs ahead by at most s = {st:g} versions' batches (window (1 + s)·B samples)",
        )
        m.row(
            "converted" if m.has(sk) else "default",
            sk,
            st,
            "system.staleness.alpha",
            float(st),
            "α = staleness_threshold",
        )
    pk = f"{AT}.partial_rollout"
    pr = m.value(pk, "bool", d(m, pk))
    m.mapped(pk, "system.partial_rollouts", pr, "generations interrupted at a weight push resume under the new weights")
    for key, want, why in (
        (f"{AT}.use_rollout_log_probs", True, "the rollout log-probs μ are used"),
        ("actor_rollout_ref.hybrid_engine", False, "rollout and training on separate GPUs"),
    ):
        m.pinned(key, want, why)
    return B, req * trig, E, "fully_async"


def read_verl(path: str) -> Settings:
    """YAML (``.yaml``/``.yml``), a Hydra override list, or a launch script (:mod:`.launch`)."""
    return read_yaml(path) if str(path).endswith((".yaml", ".yml")) else read_overrides(path)
