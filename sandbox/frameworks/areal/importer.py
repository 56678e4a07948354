"""AReaL 1.0.4 GRPO config (YAML, ``areal/api/cli_args.py``) -> scenario: the inverse of
``sandbox export --framework areal`` (docs/promotion.md), key by key.

Conventions inverted here:

* ``rollout.max_head_offpolicyness`` η is the lag bound counted as the sandbox counts it (versions between
  the weights a rollout started on and the trainer's): η = 0 is synchronous, η > 0 is ``max_lag`` with
  ``k_max = η``, enforced at submission (the throttle); AReaL's streaming rollouts are interrupted and resumed
  under new weights (``partial_rollouts = true``);
* ``gconfig.n_samples`` is the group, ``rollout.consumer_batch_size`` the prompts per step,
  ``actor.ppo_n_minibatches`` the optimizer steps per batch (one pass: epochs = 1);
* ``actor.reward_norm``: mean_level group = group-mean baseline (``mean_leave1out`` = leave-one-out),
  std_level group = divided by the group std, ``eps`` = ε of that std;
* ``actor.rejection_sampling`` (metric ratio): token + clamp = token TIS with [lower, upper], token + mask =
  token MIS, sequence + mask = Geo-RS's band; ``actor.m2_threshold`` = M2PO's token mask;
* ``actor.optimizer.warmup_steps_proportion`` is a fraction of the run (× the proxy's run.steps).
"""

from __future__ import annotations

import math
import re
from typing import Any

from sandbox.frameworks.importing import Mapper, Settings, read_yaml
from sandbox.frameworks.verl.importer import NO_REFERENCE

A = "actor"
RN = "actor.reward_norm"
RS = "actor.rejection_sampling"
OPT = "actor.optimizer"

DEFAULTS: dict[str, Any] = {
    "rollout.max_head_offpolicyness": 0,
    "gconfig.n_samples": 1,
    "actor.ppo_n_minibatches": 4,
    "actor.eps_clip": 0.2,
    "actor.eps_clip_higher": None,
    "actor.c_clip": None,
    "actor.kl_ctl": 0.1,
    f"{OPT}.type": "adam",
    f"{OPT}.beta1": 0.9,
    f"{OPT}.beta2": 0.999,
    f"{OPT}.eps": 1e-8,
    f"{OPT}.weight_decay": 0.01,
    f"{OPT}.lr_scheduler_type": "constant",
    f"{OPT}.warmup_steps_proportion": 0.001,
}
SCHEDULES = {"constant": "constant", "linear": "linear", "cosine": "cosine"}

IGNORED: dict[str, str] = {
    "experiment_name": "run bookkeeping",
    "trial_name": "run bookkeeping",
    "saver.": "checkpointing",
    "evaluator.": "evaluation schedule",
    "stats_logger.": "logging",
    "recover.": "recovery",
    "cluster.": "cluster layout: give cluster facts with --cluster",
    "allocation_mode": "GPU allocation: give it with --cluster",
    "actor.path": "the model: the proxy task's toy model replaces it",
    "actor.backend": "training backend: same loss",
    "actor.experiment_name": "run bookkeeping",
    "actor.trial_name": "run bookkeeping",
    "rollout.backend": "inference engine",
    "rollout.experiment_name": "run bookkeeping",
    "rollout.trial_name": "run bookkeeping",
    "rollout.max_concurrent_rollouts": "concurrency: give cluster.num_workers with --cluster",
    "train_dataset.": "data: the proxy task replaces it",
    "valid_dataset.": "data: the proxy task replaces it",
    "gconfig.max_new_tokens": "length limits: give a length distribution or trace with --cluster (generation_time)",
    "gconfig.temperature": "sampling temperature 1 is assumed",
    "gconfig.min_new_tokens": "length limits",
    "actor.mb_spec.": "micro-batching: same loss",
    "actor.gradient_checkpointing": "memory only",
    "actor.dtype": "precision",
    "total_train_epochs": "run length (the proxy's run.steps)",
    "seed": "the sandbox's run.seed",
    "sglang.": "inference engine settings",
    "vllm.": "inference engine settings",
    "launcher.": "launcher",
    "actor.disable_dropout": "the toy model has no dropout",
    "actor.recompute_logprob": "π_old bookkeeping",
    "scheduler.": "job scheduler",
    "enable_offload": "memory only",
    "rollout.queue_size": "the rollout queue: the staleness bound (max_head_offpolicyness) limits it first",
    "rollout.enable_rollout_tracing": "logging",
    "rollout.scheduling_spec": "placement",
    "rollout.fileroot": "paths",
    "rollout.tokenizer_path": "the model",
    "rollout.dump_to_file": "logging",
    "rollout.setup_timeout": "timeouts",
    "rollout.request_timeout": "timeouts",
    "rollout.request_retries": "timeouts",
    "actor.init_from_scratch": "the model",
    "actor.scheduling_spec": "placement",
    "actor.pad_to_maximum": "memory only",
    "actor.weight_update_mode": "weight-sync transport: system.sync_delay models its time",
    "actor.group_size": "the group size, as gconfig.n_samples",
    "actor.max_new_tokens": "length limits",
    "rollout.openai.": "agent serving",
    "rollout.use_lora": "the model",
    "actor.use_lora": "the model",
    "actor.lora_rank": "the model",
    "actor.lora_alpha": "the model",
    "actor.target_modules": "the model",
    "actor.peft_type": "the model",
    "actor.megatron.": "Megatron parallelism: memory and speed",
    "actor.fsdp.": "sharding",
    "perf_tracer.": "profiling",
    "rollout.return_routed_experts": "engine output",
    "rollout.pause_grace_period": "timeouts",
    "ref.": "the reference model",
    "critic.": "the critic: the group estimators the sandbox maps train none",
    "gconfig.stop": "stop strings of the proxy task's own",
    "gconfig.stop_token_ids": "stop tokens",
    "valid_gconfig.": "evaluation sampling",
    "eval_gconfig.": "evaluation sampling",
    "tokenizer_path": "the model",
    "actor.prox_logp_method": "how π_prox is computed in decoupled mode",
}


def map_areal(m: Mapper) -> None:
    def v(key: str, kind: str) -> Any:
        return m.value(key, kind, DEFAULTS.get(key))

    G = v("gconfig.n_samples", "int")
    m.row(
        "setup" if m.has("gconfig.n_samples") else "default",
        "gconfig.n_samples",
        G,
        "algorithm.group_size",
        G,
        "samples per prompt (the group)",
    )
    B = (
        m.value("rollout.consumer_batch_size", "int", None)
        if m.has("rollout.consumer_batch_size")
        else m.value("train_dataset.batch_size", "int")
    )
    key_b = "rollout.consumer_batch_size" if m.has("rollout.consumer_batch_size") else "train_dataset.batch_size"
    if B < 1:
        raise m.bad(key_b, "expected a positive integer")
    m.row("setup", key_b, B, "algorithm.groups_per_step", B, "prompts consumed per trainer step")
    if key_b == "rollout.consumer_batch_size" and m.has("train_dataset.batch_size"):
        m.row(
            "pinned" if m.raw("train_dataset.batch_size") == B else "ignored",
            "train_dataset.batch_size",
            m.raw("train_dataset.batch_size"),
            note="prompts loaded per dataloader step",
        )
    mb = v("actor.ppo_n_minibatches", "int")
    if mb < 1:
        raise m.bad("actor.ppo_n_minibatches", "expected a positive integer")
    m.row(
        "converted" if m.has("actor.ppo_n_minibatches") else "default",
        "actor.ppo_n_minibatches",
        mb,
        "algorithm.minibatches",
        mb,
        "optimizer steps per batch, one pass (epochs = 1)",
    )
    m.set("algorithm.epochs", 1)
    eta = v("rollout.max_head_offpolicyness", "int")
    if eta < 0:
        raise m.bad("rollout.max_head_offpolicyness", "expected an integer >= 0")
    if eta == 0:
        m.row(
            "converted" if m.has("rollout.max_head_offpolicyness") else "default",
            "rollout.max_head_offpolicyness",
            0,
            "system.staleness.kind",
            "sync",
            "η = 0: no rollout runs ahead of the weights (synchronous)",
        )
    else:
        m.row(
            "converted",
            "rollout.max_head_offpolicyness",
            eta,
            "system.staleness.kind",
            "max_lag",
            "η > 0: streaming rollouts, submission paused while the lag would exceed η",
        )
        m.row(
            "converted",
            "rollout.max_head_offpolicyness",
            eta,
            "system.staleness.k_max",
            eta,
            "the lag bound, counted as the sandbox counts it (docs/system.md#counting-convention)",
        )
        m.set("system.staleness.enforcement", "throttle")
        m.row(
            "converted",
            "rollout.max_head_offpolicyness",
            eta,
            "system.partial_rollouts",
            True,
            "AReaL interrupts generations in flight at a weight update and resumes them under the new weights",
        )
    decoupled = v("actor.use_decoupled_loss", "bool") if m.has("actor.use_decoupled_loss") else False
    corr = _correction(m)
    if corr != "none" and not decoupled:
        m.row(
            "unsupported",
            "actor.use_decoupled_loss",
            decoupled,
            note="the correction's band reads π_prox/μ, which "
            "AReaL computes in decoupled mode only: set use_decoupled_loss = true (the scenario applies the correction)",
        )
    decoupled = decoupled or corr != "none"
    if decoupled and m.has("actor.use_decoupled_loss") and m.raw("actor.use_decoupled_loss"):
        m.row(
            "pinned",
            "actor.use_decoupled_loss",
            True,
            note="decoupled PPO: the clip anchors at π_prox, the correction weighs π_prox/μ",
        )
        if corr == "none":
            m.row(
                "unsupported",
                "actor.use_decoupled_loss",
                True,
                note="decoupled loss without a rejection_sampling or "
                "m2_threshold band: the sandbox expresses it as correction decoupled_ppo with a cap; none used",
            )
    elif m.has("actor.use_decoupled_loss"):
        m.row("pinned", "actor.use_decoupled_loss", False, note="bypass mode: the clip anchors at the behaviour μ")
    m.set("algorithm.proximal", "behaviour")
    _objective(m, v, decoupled)
    if m.fields.get("algorithm.objective.name") == "gspo":
        _as_gspo(m)
    _optimizer(m, v)
    m.scale(f"{OPT}.lr", "algorithm.optimizer.lr", "your learning rate: the proxy task keeps its own")
    m.scale(f"{OPT}.gradient_clipping", "algorithm.optimizer.grad_clip", "gradient clip for your model's scale")
    for key in list(m.s.values):
        if key in m.used:
            continue
        for prefix, why in IGNORED.items():
            if key == prefix or (prefix.endswith(".") and key.startswith(prefix)):
                m.ignore(key, why)
                break


def _objective(m: Mapper, v, decoupled: bool) -> None:
    level = m.value("actor.importance_sampling_level", "str", "token")
    if level == "sequence":
        m.row(
            "converted",
            "actor.importance_sampling_level",
            level,
            "algorithm.objective.name",
            "gspo",
            "sequence-level ratio (the geometric mean of the token ratios), clipped: GSPO",
        )
    else:
        m.row(
            "converted" if m.has("actor.importance_sampling_level") else "default",
            "actor.importance_sampling_level",
            level,
            "algorithm.objective.name",
            "grpo",
            "AReaL's actor loss: PPO clip surrogate with group advantages",
        )
    lo = v("actor.eps_clip", "float")
    hi = m.value("actor.eps_clip_higher", "float?", None)
    c = m.value("actor.c_clip", "float?", None)
    clips = (
        ("actor.eps_clip", "eps_low", lo, "ratio floor 1 − eps_clip"),
        (
            "actor.eps_clip_higher",
            "eps_high",
            lo if hi is None else hi,
            "ratio cap 1 + eps_clip_higher (null: eps_clip)",
        ),
        ("actor.c_clip", "dual_clip_c", c, "dual clip on negative advantages (null: none)"),
    )
    for key, knob, value, note in clips:
        if key == "actor.c_clip" and not m.has(key):
            continue
        if decoupled and m.has(
            key
        ):  # the values are kept, the anchor differs (the exporter lists these as gaps in decoupled mode)
            m.set(f"algorithm.objective.{knob}", value)
            m.row(
                "unsupported",
                key,
                m.s.values.get(key, value),
                note=f"{note}; decoupled mode clips π_θ/π_prox (π_prox recomputed per batch), the sandbox's surrogate "
                "clips π_θ/μ: the value is kept, the anchor differs",
            )
        else:
            m.mapped(key, f"algorithm.objective.{knob}", value, note)
    m.set("algorithm.objective.aggregation", "token_mean")
    mean = m.value(f"{RN}.mean_level", "str?", "group") if m.has(f"{RN}.mean_level") else "group"
    std = m.value(f"{RN}.std_level", "str?", "group") if m.has(f"{RN}.std_level") else "group"
    l1o = m.value(f"{RN}.mean_leave1out", "bool", False) if m.has(f"{RN}.mean_leave1out") else False
    if mean != "group":
        m.row("unsupported", f"{RN}.mean_level", mean, note="only group-mean baselines are mapped; group used")
    elif l1o:
        m.row(
            "unsupported",
            f"{RN}.mean_leave1out",
            True,
            note="a leave-one-out mean under the PPO clip has no sandbox objective; group mean used",
        )
    else:
        m.row(
            "converted" if m.has(f"{RN}.mean_level") else "default",
            f"{RN}.mean_level",
            mean,
            "algorithm.objective.baseline",
            "group_mean",
            "group-mean baseline",
        )
        if m.has(f"{RN}.mean_leave1out"):
            m.row("pinned", f"{RN}.mean_leave1out", False, note="the group mean includes the sample itself")
    if std not in ("group", None):
        m.row("unsupported", f"{RN}.std_level", std, note="only the group std is mapped; group used")
        std = "group"
    m.row(
        "converted" if m.has(f"{RN}.std_level") else "default",
        f"{RN}.std_level",
        std,
        "algorithm.objective.normalize_std",
        std == "group",
        "divide by the group std (null: no)",
    )
    if m.has(f"{RN}.eps"):
        m.mapped(f"{RN}.eps", "algorithm.objective.eps_std", m.value(f"{RN}.eps", "float"), "ε added to the group std")
    if m.has(f"{RN}.std_unbiased"):
        u = m.value(f"{RN}.std_unbiased", "bool")
        m.row(
            "converted",
            f"{RN}.std_unbiased",
            u,
            "algorithm.objective.std_unbiased",
            None if u else False,
            "Bessel-corrected std (the sandbox's default) or the population std",
        )
    m.ignore(f"{RN}.group_size", "the group size, as gconfig.n_samples")
    adv = {k: m.raw(k) for k in list(m.s.values) if k == "actor.adv_norm" or k.startswith("actor.adv_norm.")}
    if any(v is not None for v in adv.values()):
        for k, val in adv.items():
            m.row(
                "unsupported",
                k,
                val,
                note="batch-level advantage normalisation (AReaL's adv_norm) after the group "
                "normalisation: the sandbox normalises within the group only; the scenario runs without it",
            )
    else:
        for k, val in adv.items():
            m.row("pinned", k, val, note="no batch-level advantage normalisation")
    scaling, bias = m.value("actor.reward_scaling", "float", 1.0), m.value("actor.reward_bias", "float", 0.0)
    if (scaling, bias) == (1.0, 0.0):
        for k in ("actor.reward_scaling", "actor.reward_bias"):
            if m.has(k):
                m.row("pinned", k, m.raw(k), note="rewards as given")
    else:
        if std == "group" and scaling > 0:
            for k in ("actor.reward_scaling", "actor.reward_bias"):
                if m.has(k):
                    m.row(
                        "pinned",
                        k,
                        m.raw(k),
                        note="an affine map of the rewards: the group mean removes the bias and "
                        "the group std the scale (up to the std's ε), so the advantages are unchanged",
                    )
        else:
            for k in ("actor.reward_scaling", "actor.reward_bias"):
                if m.has(k):
                    m.row(
                        "unsupported",
                        k,
                        m.raw(k),
                        note="rewards scaled and shifted without a std normalisation "
                        "change the advantages' scale (the group mean removes the bias only): the proxy task's rewards "
                        "are used as they are",
                    )
    m.pinned("actor.temperature", 1.0, "log-probs at temperature 1")
    m.pinned("gconfig.greedy", False, "sampled, not greedy")
    m.pinned("actor.entropy_coeff", 0.0, "no entropy bonus")
    kl = v("actor.kl_ctl", "float")
    if kl > 0:
        m.row(
            "unsupported",
            "actor.kl_ctl",
            kl,
            note=f"a KL penalty (AReaL's default 0.1): {NO_REFERENCE}; the scenario runs with β = 0",
        )
        m.set("algorithm.objective.beta_kl", 0.0)
    else:
        m.row(
            "converted" if m.has("actor.kl_ctl") else "default",
            "actor.kl_ctl",
            kl,
            "algorithm.objective.beta_kl",
            0.0,
            "no KL term",
        )


def _as_gspo(m: Mapper) -> None:
    """GSPO's advantage is one knob (grpo: divided by the group std, dr_grpo: not); it has no KL term."""
    from dataclasses import replace

    norm = m.fields.pop("algorithm.objective.normalize_std", True)
    m.fields.pop("algorithm.objective.baseline", None)
    m.fields.pop("algorithm.objective.std_unbiased", None)
    if m.fields.pop("algorithm.objective.beta_kl", 0.0):
        raise AssertionError("importer bug: a KL term on gspo")
    adv = "grpo" if norm else "dr_grpo"
    m.fields["algorithm.objective.advantage"] = adv
    moved = {"algorithm.objective.normalize_std": ("algorithm.objective.advantage", adv)}
    m.rows[:] = [
        replace(r, field=moved[r.field][0], field_value=moved[r.field][1])
        if r.field in moved
        else replace(r, field=None, field_value=None, note=r.note + " (GSPO: no such knob)")
        if r.field
        in ("algorithm.objective.baseline", "algorithm.objective.beta_kl", "algorithm.objective.std_unbiased")
        else r
        for r in m.rows
    ]


def _correction(m: Mapper) -> str:
    if m.has("actor.m2_threshold"):
        t = m.value("actor.m2_threshold", "float")
        m.row(
            "converted",
            "actor.m2_threshold",
            t,
            "algorithm.correction.name",
            "m2po_mask",
            "M2PO: tokens masked until the second moment of log π_prox/μ is under the threshold",
        )
        m.row("converted", "actor.m2_threshold", t, "algorithm.correction.m2_threshold", t, "the M2 threshold")
        for k in ("level", "action", "metric", "upper", "lower"):
            m.ignore(f"{RS}.{k}", "the behaviour weight on M2PO's kept tokens (an unbounded clamp)")
        return "m2po_mask"
    if (
        not m.has(f"{RS}.level")
        and not m.has(f"{RS}.upper")
        and m.has("actor.behav_imp_weight_cap")
        and m.s.values.get("actor.use_decoupled_loss") is True
    ):
        cap = m.value("actor.behav_imp_weight_cap", "float")
        m.row(
            "converted",
            "actor.behav_imp_weight_cap",
            cap,
            "algorithm.correction.name",
            "decoupled_ppo",
            "decoupled PPO's behaviour weight π_prox/μ, tokens above the cap dropped (AReaL 1.0 spells it "
            "rejection_sampling: level token, action mask, upper = cap)",
        )
        m.row(
            "converted", "actor.behav_imp_weight_cap", cap, "algorithm.correction.behave_imp_weight_cap", cap, "the cap"
        )
        return "decoupled_ppo"
    if not m.has(f"{RS}.level") and not m.has(f"{RS}.upper"):
        m.row("default", RS, None, "algorithm.correction.name", "none", "no rejection_sampling table: no correction")
        return "none"
    level = m.value(f"{RS}.level", "str", "token")
    action = m.value(f"{RS}.action", "str", "mask")
    metric = m.value(f"{RS}.metric", "str", "ratio")
    upper = m.value(f"{RS}.upper", "float?", None)
    lower = m.value(f"{RS}.lower", "float?", None)
    if metric != "ratio" or upper is None or math.isinf(upper):
        m.row(
            "unsupported",
            f"{RS}.metric",
            metric,
            note="only a ratio band with a finite upper edge is mapped; no correction in the scenario",
        )
        m.set("algorithm.correction.name", "none")
        return "none"
    m.row("pinned", f"{RS}.metric", metric, note="the band reads w = π_prox/μ")
    lo = 0.0 if lower is None else lower
    if level == "token" and action in ("clamp", "mask"):
        name = "tis" if action == "clamp" else "mis"
        m.row(
            "converted",
            f"{RS}.action",
            action,
            "algorithm.correction.name",
            name,
            "clamp = token TIS (weights truncated into the band); mask = token MIS (tokens outside dropped)",
        )
        m.row("converted", f"{RS}.level", level, "algorithm.correction.level", "token", "per token")
        m.row("mapped", f"{RS}.upper", upper, "algorithm.correction.C", upper, "upper edge C")
        m.row(
            "converted" if m.has(f"{RS}.lower") else "default",
            f"{RS}.lower",
            lower,
            "algorithm.correction.C_low",
            lo,
            "lower edge C_low (null = 0)",
        )
        return name
    if level == "sequence" and action == "mask":
        m.row(
            "converted",
            f"{RS}.level",
            level,
            "algorithm.correction.name",
            "geo_mis",
            "sequence mask on the geometric-mean ratio: Geo-RS",
        )
        m.row("pinned", f"{RS}.action", action, note="reject whole responses outside the band")
        m.row("mapped", f"{RS}.upper", upper, "algorithm.correction.hi", upper, "upper edge")
        m.row("mapped", f"{RS}.lower", lower, "algorithm.correction.lo", lo, "lower edge")
        m.ignore(f"{RS}.agg", "the geometric mean of the token ratios")
        return "geo_mis"
    m.row("unsupported", f"{RS}.level", level, note=f"level {level} with action {action} is not mapped; no correction")
    m.set("algorithm.correction.name", "none")
    return "none"


def _optimizer(m: Mapper, v) -> None:
    t = v(f"{OPT}.type", "str")
    wd = v(f"{OPT}.weight_decay", "float")
    if t == "sgd":
        name = "sgd"
    elif t in ("adam", "adamw"):
        name = "adam" if wd == 0 else "adamw"
    else:
        m.row("unsupported", f"{OPT}.type", t, note="only adam and sgd are mapped; adam used")
        name = "adam" if wd == 0 else "adamw"
    m.mapped(
        f"{OPT}.type",
        "algorithm.optimizer.name",
        t,
        "AReaL's adam decays decoupled (AdamW): Adam at weight_decay = 0",
        convert=lambda _: name,
    )
    m.mapped(f"{OPT}.weight_decay", "algorithm.optimizer.weight_decay", wd, "weight decay (AReaL's default 0.01)")
    if name != "sgd":
        b1, b2 = v(f"{OPT}.beta1", "float"), v(f"{OPT}.beta2", "float")
        m.row(
            "converted" if m.has(f"{OPT}.beta1") else "default",
            f"{OPT}.beta1",
            b1,
            "algorithm.optimizer.betas",
            [b1, b2],
            "betas = (beta1, beta2)",
        )
        if m.has(f"{OPT}.beta2"):
            m.row("converted", f"{OPT}.beta2", b2, note="the second of betas")
        m.mapped(f"{OPT}.eps", "algorithm.optimizer.eps", v(f"{OPT}.eps", "float"), "Adam ε")
    sched = v(f"{OPT}.lr_scheduler_type", "str")
    if sched in SCHEDULES:
        m.mapped(f"{OPT}.lr_scheduler_type", "algorithm.optimizer.schedule", sched, "schedule after the warm-up")
    else:
        m.row(
            "unsupported",
            f"{OPT}.lr_scheduler_type",
            sched,
            note="constant, linear and cosine are mapped; constant used",
        )
        m.set("algorithm.optimizer.schedule", "constant")
    p = v(f"{OPT}.warmup_steps_proportion", "float")
    m.row(
        "converted" if m.has(f"{OPT}.warmup_steps_proportion") else "default",
        f"{OPT}.warmup_steps_proportion",
        p,
        "algorithm.optimizer.warmup_steps",
        ("RUN_STEPS", p),
        "fraction of the run × the proxy's run.steps",
    )


def read_areal(path: str) -> Settings:
    """AReaL's YAML as its loader reads it (``areal/api/cli_args.py`` load_expr_config: OmegaConf, then
    ``to_container(resolve=True)``): every ``${...}`` interpolation resolved against the file; one that does
    not resolve (a custom resolver, a key the file lacks) is an error naming the key."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    raw = read_yaml(path)
    tree: dict = {}
    for key, value in raw.values.items():
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    cfg = OmegaConf.create(tree)
    out = Settings(raw.path, where=dict(raw.where))
    for key, value in raw.values.items():
        if isinstance(value, str) and "${" in value:
            try:
                value = OmegaConf.select(cfg, key, throw_on_resolution_failure=True, throw_on_missing=True)
                value = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
                out.where[key] = f"{raw.where.get(key, 'key ' + key)}, {raw.values[key]} resolved"
            except OmegaConfBaseException as exc:
                # kept as written: an error only if a rule reads the key (Mapper.value names it)
                for name in re.findall(r"\$\{([^}]+)\}", value):
                    out.unresolved.setdefault(name, int(re.sub(r"\D", "", raw.where.get(key, "0")) or 0))
                out.notes.append(
                    f"{raw.where.get(key, key)}: {key} = {value!r} does not resolve "
                    f"({str(exc).splitlines()[0]}); kept as written"
                )
        out.values[key] = value
    return out
