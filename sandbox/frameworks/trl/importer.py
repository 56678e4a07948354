"""TRL 1.16 config -> scenario: ``GRPOConfig`` (synchronous ``GRPOTrainer``) or ``AsyncGRPOConfig``
(``trl.experimental.async_grpo``), as JSON or YAML keyword arguments (the exporter's ``grpo_config.json``
or your own). The inverse of ``sandbox export --framework trl`` (docs/promotion.md).

Conventions inverted here (trl 1.16.0 sources, as in the exporter):

* the class: a config with any of ``max_staleness``, ``weight_sync_steps``, ``max_inflight_tasks``,
  ``queue_maxsize``, ``token_budget`` is an ``AsyncGRPOConfig`` (bounded lag, ``max_lag``), any other a
  ``GRPOConfig`` (generate then train: ``sync``);
* batch geometry, one process: GRPOConfig's generation batch is ``per_device_train_batch_size ×
  steps_per_generation`` completions (``steps_per_generation`` defaults to ``gradient_accumulation_steps``),
  so ``groups_per_step = per_device_train_batch_size × steps_per_generation / num_generations`` and
  ``minibatches = steps_per_generation / gradient_accumulation_steps``, ``epochs = num_iterations``;
  AsyncGRPOConfig's optimizer step is ``per_device_train_batch_size`` completions and a version is
  ``weight_sync_steps`` optimizer steps: ``minibatches = weight_sync_steps``,
  ``groups_per_step = per_device_train_batch_size × weight_sync_steps / num_generations``;
* ``max_staleness`` is the lag bound in versions (k_max); ``max_inflight_tasks`` = (k_max·B)·G completions
  is the throttle's admission window, any other value drop-at-dequeue with ``queue_capacity =
  max_inflight_tasks / G + B`` groups;
* ``loss_type`` is the aggregation (grpo = seq-mean-token-mean, dapo = token-mean, luspo =
  seq-mean-token-sum, dr_grpo = seq-mean-token-sum-norm), ``loss_type = cispo`` the CISPO objective,
  ``importance_sampling_level = sequence`` GSPO; ``epsilon_high`` defaults to ``epsilon``;
* ``vllm_importance_sampling_mode``: ``*_truncate`` is TIS (cap ``clip_max``, floor ``clip_min``),
  ``*_mask`` is MIS (band [clip_min, clip_max]).
"""

from __future__ import annotations

import ast
import json
from typing import Any

from sandbox.frameworks.importing import (
    ConfigImportError,
    Mapper,
    Settings,
    _read,
    read_flags,
    read_json_config,
    read_yaml,
)
from sandbox.frameworks.verl.importer import NO_REFERENCE

ASYNC_KEYS = ("max_staleness", "weight_sync_steps", "max_inflight_tasks", "queue_maxsize", "token_budget")

# trl 1.16.0 dataclass defaults of the mapped keys (GRPOConfig; AsyncGRPOConfig where it differs)
SYNC_DEFAULTS: dict[str, Any] = {
    "num_generations": 8,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "num_iterations": 1,
    "beta": 0.0,
    "epsilon": 0.2,
    "epsilon_high": None,
    "delta": None,
    "importance_sampling_level": "token",
    "scale_rewards": "group",
    "loss_type": "dapo",
    "vllm_importance_sampling_correction": True,
    "vllm_importance_sampling_mode": "sequence_mask",
    "vllm_importance_sampling_clip_max": 3.0,
    "vllm_importance_sampling_clip_min": None,
    "optim": "adamw_torch_fused",
    "weight_decay": 0.0,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-8,
    "lr_scheduler_type": "linear",
    "warmup_steps": 0,
    "learning_rate": 1e-6,
    "max_grad_norm": 1.0,
}
ASYNC_DEFAULTS: dict[str, Any] = {
    **SYNC_DEFAULTS,
    "lr_scheduler_type": "constant",
    "max_staleness": 4,
    "weight_sync_steps": 1,
    "max_inflight_tasks": -1,
    "queue_maxsize": 1024,
}

AGGREGATION = {
    "grpo": "seq_mean_token_mean",
    "dapo": "token_mean",
    "luspo": "seq_mean_token_sum",
    "dr_grpo": "seq_mean_token_sum_norm",
}
ADAM = ("adamw_torch", "adamw_torch_fused", "adamw_hf", "adamw_apex_fused", "adam")
SCHEDULES = {"constant": "constant", "constant_with_warmup": "constant", "linear": "linear", "cosine": "cosine"}

IGNORED: dict[str, str] = {
    k: why
    for why, keys in {
        "output, logging and checkpointing": (
            "trackio_space_id",
            "project",
            "output_dir",
            "logging_steps",
            "logging_dir",
            "report_to",
            "run_name",
            "save_steps",
            "save_strategy",
            "save_total_limit",
            "push_to_hub",
            "hub_model_id",
            "log_completions",
            "logging_first_step",
            "log_level",
        ),
        "precision and memory: same loss": (
            "bf16",
            "fp16",
            "gradient_checkpointing",
            "gradient_checkpointing_kwargs",
            "dtype",
            "torch_dtype",
            "model_init_kwargs",
            "ds3_gather_for_generation",
        ),
        "run length: the proxy scenario's run.steps applies": ("num_train_epochs", "max_steps"),
        "length limits: give a length distribution or trace with --cluster (generation_time)": (
            "max_prompt_length",
            "max_completion_length",
        ),
        "generation server and its placement: cluster facts come from --cluster": (
            "vllm_mode",
            "vllm_server_host",
            "vllm_server_port",
            "vllm_gpu_memory_utilization",
            "vllm_tensor_parallel_size",
            "vllm_server_base_url",
            "vllm_server_timeout",
            "request_timeout",
            "weight_sync_timeout",
            "heartbeat_stale_after_s",
            "fork_threshold_tokens",
        ),
        "seeds: the sandbox's run.seed applies": ("seed", "data_seed"),
        "data handling": ("remove_unused_columns", "dataloader_num_workers", "shuffle_dataset"),
        "sampling temperature 1 is assumed": ("temperature", "top_p", "top_k"),
    }.items()
    for k in keys
}


#: dict-valued fields of GRPOConfig (TRL 1.16): their nested tables are read, not refused
NESTED = (
    "model_init_kwargs",
    "gradient_checkpointing_kwargs",
    "generation_kwargs",
    "chat_template_kwargs",
    "activation_checkpointing_kwargs",
    "liger_kernel_config",
    "accelerator_config",
    "fsdp_config",
    "deepspeed",
    "transformers_continuous_batching_config",
)
#: arguments of the trl CLI and example scripts beside the config (ScriptArguments, ModelConfig)
SCRIPT_ARGS = (
    "model_name_or_path",
    "model_revision",
    "dataset_name",
    "dataset_config",
    "dataset_train_split",
    "dataset_test_split",
    "trust_remote_code",
    "attn_implementation",
    "use_peft",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "lora_target_modules",
    "lora_task_type",
    "load_in_4bit",
    "load_in_8bit",
    "torch_dtype",
    "reward_funcs",
    "reward_model_name_or_path",
    "dataset_streaming",
    "gradient_checkpointing_use_reentrant",
    "config",
    "eval_strategy",
    "eval_steps",
    "per_device_eval_batch_size",
    "do_eval",
    "use_liger_kernel",
    "dataset_mixture",
    "dataset_name_or_path",
    "ignore_bias_buffers",
    "hub_strategy",
    "overwrite_output_dir",
    "use_cpu",
    "lora_modules_to_save",
    "bnb_4bit_quant_type",
    "use_bnb_nested_quant",
    "dataloader_drop_last",
    "save_only_model",
    "use_transformers_paged",
    "cache_implementation",
    "vllm_enable_sleep_mode",
    "vllm_model_impl",
    "vllm_max_model_length",
    "vllm_structured_outputs_regex",
    "mask_truncated_completions",
    "log_completions_steps",
    "num_completions_to_print",
    "wandb_log_unique_prompts",
    "log_unique_prompts",
    "generation_batch_size",
    "max_length",
    "use_transformers_paged",
    "disable_dropout",
    "ddp_find_unused_parameters",
)
CLASSES = ("GRPOConfig", "AsyncGRPOConfig")


def _class(m: Mapper) -> str:
    """The config class: named (``--entry``), from the launch command (a module or script of
    trl.experimental.async_grpo), else from the keys (AsyncGRPOConfig's own knobs); the row says which."""
    s = m.s
    if s.entry_override is not None:
        if s.entry_override not in CLASSES:
            raise ConfigImportError(f"--entry: {s.entry_override!r}: expected one of {', '.join(CLASSES)} for trl")
        m.row("converted", "(config class)", s.entry_override, note="named with --entry")
        return s.entry_override
    if s.entry is not None and ("async_grpo" in s.entry.replace("-", "_") or s.entry.endswith("AsyncGRPOConfig")):
        m.row(
            "converted",
            "(config class)",
            "AsyncGRPOConfig",
            note=f"line {s.entry_line}: {s.entry} runs AsyncGRPOTrainer",
        )
        return "AsyncGRPOConfig"
    if any(m.has(k) for k in ASYNC_KEYS):
        m.row(
            "converted",
            "(config class)",
            "AsyncGRPOConfig",
            note=f"the file sets AsyncGRPOConfig's own keys ({', '.join(k for k in ASYNC_KEYS if m.has(k))})",
        )
        return "AsyncGRPOConfig"
    m.row(
        "default",
        "(config class)",
        "GRPOConfig",
        note="none of AsyncGRPOConfig's own keys: GRPOConfig (synchronous "
        "GRPOTrainer) assumed; if you launch AsyncGRPOTrainer with its default knobs, say so with --entry AsyncGRPOConfig",
    )
    return "GRPOConfig"


def map_trl(m: Mapper) -> None:
    cls = _class(m)
    D = ASYNC_DEFAULTS if cls == "AsyncGRPOConfig" else SYNC_DEFAULTS

    def v(key: str, kind: str) -> Any:
        return m.value(key, kind, D[key])

    G = v("num_generations", "int")
    if G < 2:
        raise m.bad("num_generations", "expected at least 2 completions per prompt (GRPO needs a group)")
    m.row(
        "setup" if m.has("num_generations") else "default",
        "num_generations",
        G,
        "algorithm.group_size",
        G,
        "completions per prompt (the group)",
    )
    P = v("per_device_train_batch_size", "int")
    gas = v("gradient_accumulation_steps", "int")
    if P < 1 or gas < 1:
        raise m.bad(
            "per_device_train_batch_size" if P < 1 else "gradient_accumulation_steps", "expected a positive integer"
        )
    if cls == "AsyncGRPOConfig":
        _async_geometry_and_staleness(m, v, G, P, gas)
    else:
        _sync_geometry(m, v, G, P, gas)
    _objective(m, v, cls)
    _correction(m, v, cls)
    _optimizer(m, v)
    m.scale(
        "learning_rate",
        "algorithm.optimizer.lr",
        "your learning rate: the proxy task keeps its own; compare learning rates as multipliers of yours",
        D["learning_rate"],
    )
    m.scale("max_grad_norm", "algorithm.optimizer.grad_clip", "gradient clip for your model's scale")
    for key, why in IGNORED.items():
        m.ignore(key, why)
    for top in NESTED:
        m.ignore(top, "model, generation and memory options: the proxy task's model replaces them")
        m.ignore_prefix(top + ".", "model, generation and memory options: the proxy task's model replaces them")
    for key in SCRIPT_ARGS:
        m.ignore(
            key,
            "an argument of the trl CLI or example script (model, data, PEFT, evaluation): the proxy task "
            "replaces them",
        )
    kw = [k for k in m.s.values if k == "lr_scheduler_kwargs" or k.startswith("lr_scheduler_kwargs.")]
    for k in kw:
        m.row(
            "unsupported",
            k,
            m.raw(k),
            note="options of the LR schedule (e.g. cosine_with_min_lr's min_lr_rate): the "
            "sandbox's schedules decay to 0",
        )


def _async_geometry_and_staleness(m: Mapper, v, G: int, P: int, gas: int) -> None:
    if gas != 1:
        m.row(
            "unsupported",
            "gradient_accumulation_steps",
            gas,
            note="AsyncGRPOTrainer with accumulation: the sandbox's step is per_device_train_batch_size completions",
        )
    else:
        m.pinned("gradient_accumulation_steps", 1, "one micro-batch per optimizer step")
    m.pinned("token_budget", 0, "batches by sample count, not by tokens")
    ws = v("weight_sync_steps", "int")
    if ws < 1:
        raise m.bad("weight_sync_steps", "expected a positive integer")
    if (P * ws) % G:
        raise m.bad(
            "per_device_train_batch_size",
            f"per_device_train_batch_size × weight_sync_steps = {P * ws} is not a "
            f"multiple of num_generations = {G} (whole groups per version)",
        )
    B = P * ws // G
    m.row(
        "setup" if m.has("per_device_train_batch_size") else "default",
        "per_device_train_batch_size",
        P,
        "algorithm.groups_per_step",
        B,
        f"groups per version = per_device_train_batch_size × weight_sync_steps / "
        f"num_generations = {P}·{ws}/{G} (one process)",
    )
    m.row(
        "converted" if m.has("weight_sync_steps") else "default",
        "weight_sync_steps",
        ws,
        "algorithm.minibatches",
        ws,
        "optimizer steps per published version",
    )
    m.set("algorithm.epochs", 1)
    m.set("algorithm.proximal", "behaviour")
    m.row(
        "converted",
        "(AsyncGRPOConfig)",
        "AsyncGRPOConfig",
        "system.staleness.kind",
        "max_lag",
        "the asynchronous trainer: generation streams, samples older than max_staleness are dropped",
    )
    k = v("max_staleness", "int")
    if k < 0:
        raise m.bad("max_staleness", "expected an integer >= 0")
    m.row(
        "converted" if m.has("max_staleness") else "default",
        "max_staleness",
        k,
        "system.staleness.k_max",
        k,
        "lag bound in versions (TRL counts published weight versions, as the sandbox's lag)",
    )
    given = v("max_inflight_tasks", "int")
    inflight = (
        k * P * gas if given == -1 else given
    )  # TRL's -1: max_staleness x per_device x accumulation (one process)
    throttle = max(k, 1) * B * G
    if inflight == throttle:
        m.row(
            "converted" if m.has("max_inflight_tasks") else "default",
            "max_inflight_tasks",
            given,
            "system.staleness.enforcement",
            "throttle",
            f"k_max·B·G = {throttle} completions in flight: the throttle's admission window (k_max + 1)·B groups, "
            "queued included"
            + (
                " (-1: TRL's default max_staleness·per_device_train_batch_size·"
                "gradient_accumulation_steps, the same here)"
                if given == -1
                else ""
            ),
        )
    else:
        if inflight < 1 or inflight % G:
            raise m.bad("max_inflight_tasks", f"expected -1 or a positive multiple of num_generations = {G}")
        cap = inflight // G + B
        m.row(
            "converted" if given != -1 else "default",
            "max_inflight_tasks",
            given,
            "system.staleness.enforcement",
            "drop",
            f"{inflight} completions in flight, not the throttle's {throttle}: over-bound groups are dropped "
            "at dequeue",
        )
        m.row(
            "converted" if given != -1 else "default",
            "max_inflight_tasks",
            given,
            "system.staleness.queue_capacity",
            cap,
            f"queue_capacity = max_inflight_tasks / G + B = {cap} groups (running + one step queued)",
        )
    q = v("queue_maxsize", "int")
    if m.has("queue_maxsize") and q >= B * G:
        m.row(
            "ignored",
            "queue_maxsize",
            q,
            note=f"scored completions waiting for the trainer: at least one step "
            f"({B * G}), so it does not bind before the staleness bound",
        )
    elif m.has("queue_maxsize"):
        m.row(
            "unsupported",
            "queue_maxsize",
            q,
            note=f"below one step ({B * G} completions) the trainer starves; the sandbox's queue always holds a step",
        )
    m.row(
        "converted",
        "(AsyncGRPOConfig)",
        "AsyncGRPOConfig",
        "algorithm.objective.name",
        "grpo",
        "AsyncGRPOTrainer's loss: PPO clip on π_θ/μ with group-normalised advantages (population std)",
    )
    m.set("algorithm.objective.normalize_std", True)
    m.set("algorithm.objective.aggregation", "token_mean")
    m.set("algorithm.objective.beta_kl", 0.0)
    m.set("algorithm.correction.name", "none")


def _sync_geometry(m: Mapper, v, G: int, P: int, gas: int) -> None:
    spg = m.value("steps_per_generation", "int", gas) if m.has("steps_per_generation") else gas
    if spg < 1 or spg % gas:
        raise m.bad("steps_per_generation", f"expected a multiple of gradient_accumulation_steps = {gas}")
    if (P * spg) % G:
        raise m.bad(
            "per_device_train_batch_size",
            f"per_device_train_batch_size × steps_per_generation = {P * spg} is "
            f"not a multiple of num_generations = {G} (whole groups) on one process; "
            "TRL counts the generation batch over all processes, which the launcher "
            "(accelerate --num_processes, or its config file) sets: give "
            "per_device_train_batch_size for one process",
        )
    B, mb = P * spg // G, spg // gas
    m.row(
        "converted",
        "(GRPOConfig)",
        "GRPOConfig",
        "system.staleness.kind",
        "sync",
        "GRPOTrainer generates a batch, then trains on it: synchronous",
    )
    m.row(
        "setup" if m.has("per_device_train_batch_size") else "default",
        "per_device_train_batch_size",
        P,
        "algorithm.groups_per_step",
        B,
        f"groups per generation batch = per_device_train_batch_size × "
        f"steps_per_generation / num_generations = {P}·{spg}/{G} (one process)",
    )
    m.row(
        "converted" if m.has("gradient_accumulation_steps") else "default",
        "gradient_accumulation_steps",
        gas,
        "algorithm.minibatches",
        mb,
        f"optimizer steps per generation batch = steps_per_generation / gradient_accumulation_steps = {spg}/{gas}",
    )
    if m.has("steps_per_generation"):
        m.row(
            "converted",
            "steps_per_generation",
            spg,
            note="generation batch = per_device_train_batch_size × steps_per_generation completions",
        )
    E = v("num_iterations", "int")
    if E < 1:
        raise m.bad("num_iterations", "expected a positive integer")
    m.mapped("num_iterations", "algorithm.epochs", E, "passes over each generation batch")
    m.set("algorithm.proximal", "behaviour" if mb * E == 1 else "batch_start")


def _objective(m: Mapper, v, cls: str) -> None:
    eps = v("epsilon", "float")
    hi = m.value("epsilon_high", "float?", None)
    if cls == "AsyncGRPOConfig":
        m.mapped("epsilon", "algorithm.objective.eps_low", eps, "ratio floor 1 − epsilon")
        m.mapped(
            "epsilon_high",
            "algorithm.objective.eps_high",
            eps if hi is None else hi,
            "ratio cap 1 + epsilon_high (defaults to epsilon)",
        )
        for key in ("loss_type", "scale_rewards", "beta", "importance_sampling_level", "delta"):
            m.unsupported(key, "not a field of AsyncGRPOConfig")
        return
    level = v("importance_sampling_level", "str")
    loss = v("loss_type", "str")
    if level == "sequence":
        name = "gspo"
        m.row(
            "converted",
            "importance_sampling_level",
            level,
            "algorithm.objective.name",
            name,
            "sequence-level ratio: GSPO",
        )
    elif level != "token":
        raise m.bad("importance_sampling_level", "expected token or sequence")
    elif loss == "cispo":
        name = "cispo"
        m.row("converted", "loss_type", loss, "algorithm.objective.name", name, "CISPO: sg(min(r, 1 + epsilon_high))·A")
    else:
        name = "grpo"
        m.row(
            "pinned" if m.has("importance_sampling_level") else "default",
            "importance_sampling_level",
            level,
            "algorithm.objective.name",
            name,
            "token-level ratio: PPO clip surrogate (the sandbox's grpo)",
        )
    if name == "cispo":
        m.row(
            "converted",
            "epsilon_high",
            hi,
            "algorithm.objective.eps_high",
            (hi if hi is not None else eps) - 1.0,
            "CISPO caps the weight at epsilon_high itself: eps_high = epsilon_high − 1",
        )
        m.ignore("epsilon", "CISPO has no lower bound")
        m.set("algorithm.objective.eps_low", 1.0)
        m.set("algorithm.objective.aggregation", "token_mean")
    else:
        m.mapped("epsilon", "algorithm.objective.eps_low", eps, "ratio floor 1 − epsilon")
        m.mapped(
            "epsilon_high",
            "algorithm.objective.eps_high",
            eps if hi is None else hi,
            "ratio cap 1 + epsilon_high (defaults to epsilon)",
        )
        if loss not in AGGREGATION:
            m.row(
                "unsupported",
                "loss_type",
                loss,
                note=f"only {', '.join(AGGREGATION)} and cispo are mapped; the scenario uses token_mean (dapo)",
            )
            m.set("algorithm.objective.aggregation", "token_mean")
        else:
            m.mapped(
                "loss_type", "algorithm.objective.aggregation", loss, "loss normalisation", convert=AGGREGATION.get
            )
        delta = m.value("delta", "float?", None)
        if name == "grpo":
            if delta is not None:
                m.mapped(
                    "delta",
                    "algorithm.objective.dual_clip_c",
                    delta,
                    "two-sided clip: the ratio is capped at delta for negative advantages (the dual clip)",
                )
            elif m.has("delta"):
                m.row("mapped", "delta", None, "algorithm.objective.dual_clip_c", None, "no dual clip")
        else:
            m.unsupported("delta", "the dual clip is mapped for the token-level surrogate only")
    scale = v("scale_rewards", "str")
    if scale not in ("group", "none", "batch"):
        raise m.bad("scale_rewards", "expected group, batch or none")
    if scale == "batch":
        m.row(
            "unsupported", "scale_rewards", scale, note="batch-std scaling: the sandbox divides by the group std; used"
        )
        scale = "group"
    if name == "grpo":
        m.mapped(
            "scale_rewards",
            "algorithm.objective.normalize_std",
            scale,
            "divide by the group std or not",
            convert=lambda s: s == "group",
        )
        beta = v("beta", "float")
        if beta > 0:
            m.row("unsupported", "beta", beta, note=f"{NO_REFERENCE}; the scenario runs with β = 0")
            m.set("algorithm.objective.beta_kl", 0.0)
            m.unsupported("use_bias_correction_kl", "the KL term's estimator (see beta)")
        else:
            m.mapped("beta", "algorithm.objective.beta_kl", beta, "no KL term")
            m.ignore("use_bias_correction_kl", "unused: beta = 0")
    else:
        m.mapped(
            "scale_rewards",
            "algorithm.objective.advantage",
            scale,
            "group-mean advantages divided by the group std (grpo) or not (dr_grpo)",
            convert=lambda s: "grpo" if s == "group" else "dr_grpo",
        )
        if v("beta", "float") != 0:
            m.row("unsupported", "beta", m.raw("beta"), note=f"the sandbox's {name} has no KL term")
        elif m.has("beta"):
            m.row("pinned", "beta", 0.0, note="no KL term")


def _correction(m: Mapper, v, cls: str) -> None:
    keys = (
        "vllm_importance_sampling_correction",
        "vllm_importance_sampling_mode",
        "vllm_importance_sampling_clip_max",
        "vllm_importance_sampling_clip_min",
    )
    if cls == "AsyncGRPOConfig":
        for k in keys:
            m.unsupported(k, "not a field of AsyncGRPOConfig")
        m.ignore("use_vllm", "AsyncGRPOTrainer always generates on a vLLM server")
        return
    on = v("vllm_importance_sampling_correction", "bool")
    use_vllm = m.value("use_vllm", "bool", False)
    if m.has("use_vllm"):
        m.row(
            "ignored",
            "use_vllm",
            use_vllm,
            note="how completions are generated (not simulated): "
            + (
                "a vLLM sampler, whose log-probs μ the correction reads"
                if use_vllm
                else "the trained model itself, no sampler mismatch: the correction is unused"
            ),
        )
    if on and not m.has("use_vllm") and any(m.has(k) for k in keys):
        # the file configures the vLLM correction without saying how it generates: read as launched with vLLM
        use_vllm = True
        m.row(
            "default",
            "use_vllm",
            None,
            note="not in the file, which sets vllm_importance_sampling_*: launched with "
            "vLLM assumed (GRPOConfig's default use_vllm = false would leave the correction unused)",
        )
    if on and not use_vllm:
        m.row(
            "converted" if m.has(keys[0]) else "default",
            keys[0],
            on,
            "algorithm.correction.name",
            "none",
            "the correction acts on vLLM's sampling log-probs: with use_vllm = false (GRPOConfig's default) "
            "completions come from the trained model itself and no weight is applied",
        )
        for k in keys[1:]:
            m.ignore(k, "unused: use_vllm = false")
        return
    if not on:
        m.row(
            "converted" if m.has(keys[0]) else "default",
            keys[0],
            False,
            "algorithm.correction.name",
            "none",
            "no importance weights on the sampler's mismatch",
        )
        for k in keys[1:]:
            m.ignore(k, "unused: vllm_importance_sampling_correction = false")
        return
    mode = v("vllm_importance_sampling_mode", "str")
    level, _, how = mode.partition("_")
    if level not in ("token", "sequence") or how not in ("truncate", "mask"):
        raise m.bad(
            "vllm_importance_sampling_mode", "expected token_truncate, sequence_truncate, token_mask or sequence_mask"
        )
    name = "tis" if how == "truncate" else "mis"
    m.row(
        "pinned" if m.has(keys[0]) else "default",
        keys[0],
        True,
        note="importance weights π_θ/μ on the sampler's log-probs (they act with use_vllm = true)",
    )
    m.row(
        "converted" if m.has(keys[1]) else "default",
        keys[1],
        mode,
        "algorithm.correction.name",
        name,
        "truncate = TIS min(w, C); mask = MIS (weights outside [C_low, C] zeroed)",
    )
    m.set("algorithm.correction.level", level)
    cmax = m.value(keys[2], "float?", SYNC_DEFAULTS[keys[2]])
    if cmax is None:
        raise m.bad(keys[2], "an open upper edge is not mapped; give a number")
    m.mapped(keys[2], "algorithm.correction.C", cmax, "upper edge / cap C")
    cmin = m.value(keys[3], "float?", None)
    if cmin is not None or m.has(keys[3]):
        m.mapped(keys[3], "algorithm.correction.C_low", 0.0 if cmin is None else cmin, "lower edge C_low (null = 0)")


def _optimizer(m: Mapper, v) -> None:
    optim = v("optim", "str")
    wd = v("weight_decay", "float")
    if optim in ADAM:
        name = "adam" if wd == 0 else "adamw"
        m.mapped(
            "optim",
            "algorithm.optimizer.name",
            optim,
            "AdamW (decoupled decay); at weight_decay = 0 it is Adam",
            convert=lambda _: name,
        )
        m.row(
            "converted",
            "adam_beta1",
            v("adam_beta1", "float"),
            "algorithm.optimizer.betas",
            [v("adam_beta1", "float"), v("adam_beta2", "float")],
            "betas = (adam_beta1, adam_beta2)",
        )
        if m.has("adam_beta2"):
            m.row("converted", "adam_beta2", m.raw("adam_beta2"), note="the second of betas")
        m.mapped("adam_epsilon", "algorithm.optimizer.eps", v("adam_epsilon", "float"), "Adam ε")
    elif optim == "sgd":
        name = "sgd"
        m.mapped("optim", "algorithm.optimizer.name", optim, "torch SGD")
    else:
        m.row("unsupported", "optim", optim, note="only the AdamW and SGD optimizers are simulated; AdamW used")
        name = "adamw"
        m.set("algorithm.optimizer.name", name)
    m.mapped("weight_decay", "algorithm.optimizer.weight_decay", wd, "decoupled weight decay")
    sched = v("lr_scheduler_type", "str")
    if sched not in SCHEDULES:
        m.row("unsupported", "lr_scheduler_type", sched, note=f"only {', '.join(SCHEDULES)} are mapped; constant used")
        m.set("algorithm.optimizer.schedule", "constant")
    else:
        m.mapped(
            "lr_scheduler_type",
            "algorithm.optimizer.schedule",
            sched,
            "schedule after the warm-up",
            convert=SCHEDULES.get,
        )
    w = v("warmup_steps", "int")
    m.mapped("warmup_steps", "algorithm.optimizer.warmup_steps", w, "linear warm-up in optimizer steps")
    m.unsupported("warmup_ratio", "a warm-up as a fraction of the run: give warmup_steps instead")


def read_trl(path: str) -> Settings:
    """JSON (``.json``) or YAML keyword arguments of GRPOConfig / AsyncGRPOConfig (nested dict kwargs such as
    ``lr_scheduler_kwargs`` read as tables), or a launch script whose flags ``HfArgumentParser`` would parse
    (``accelerate launch grpo.py --per_device_train_batch_size 8 --lr_scheduler_kwargs '{"min_lr_rate": 0.1}'``:
    a dict-valued flag is JSON, a bare boolean flag is true)."""
    if str(path).endswith(".py"):
        return read_python(path)
    if str(path).endswith(".json"):
        return read_json_config(path)
    if str(path).endswith((".yaml", ".yml")):
        return read_yaml(path)
    s = read_flags(path, "trl")
    for key in list(s.values):
        v = s.values[key]
        if key in NESTED + ("lr_scheduler_kwargs",) and isinstance(v, str) and v.strip().startswith("{"):
            try:
                table = json.loads(v)
            except json.JSONDecodeError as exc:
                raise ConfigImportError(f"{path}: {s.where[key]}: --{key}: not a JSON object ({exc.msg})") from None
            where = s.where.pop(key)
            del s.values[key]
            for k2, v2 in table.items() if isinstance(table, dict) else []:
                s.add(f"{key}.{k2}", v2, where)
    return s


def read_python(path: str) -> Settings:
    """A training script: the keyword arguments of its ``GRPOConfig(...)`` / ``AsyncGRPOConfig(...)`` call, read
    with :mod:`ast` (never run); a keyword whose value is not a literal is listed, not read. The class called
    is the entry point."""
    text = _read(path)
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise ConfigImportError(f"{path}: line {exc.lineno}: not valid Python ({exc.msg})") from None
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and (getattr(n.func, "id", None) or getattr(n.func, "attr", None)) in CLASSES
    ]
    if not calls:
        raise ConfigImportError(
            f"{path}: no GRPOConfig(...) or AsyncGRPOConfig(...) call with keyword arguments found "
            "(a script parsed by TrlParser takes its values from the command line: import the launch "
            "command instead)"
        )
    call = calls[-1]
    out = Settings(str(path), entry=getattr(call.func, "id", None) or call.func.attr, entry_line=call.lineno)
    if out.entry == "AsyncGRPOConfig":
        out.entry = "trl.experimental.async_grpo.AsyncGRPOConfig"
    for kw in call.keywords:
        if kw.arg is None:
            out.notes.append(f"line {kw.value.lineno}: **kwargs passed to the config are not read")
            continue
        try:
            value = ast.literal_eval(kw.value)
        except ValueError:
            out.notes.append(f"line {kw.value.lineno}: {kw.arg} = {ast.unparse(kw.value)} is not a literal: not read")
            continue
        if isinstance(value, dict):
            for k2, v2 in value.items():
                out.add(f"{kw.arg}.{k2}", v2, f"line {kw.value.lineno}")
        else:
            out.add(kw.arg, list(value) if isinstance(value, tuple) else value, f"line {kw.value.lineno}")
    return out
