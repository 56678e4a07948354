"""The VCPO fork of verl (mit-han-lab/vcpo at c7f030f0, fully-async recipe) override list -> scenario: the
inverse of ``sandbox export --framework verl-vcpo`` (docs/promotion.md). The objective, clip, aggregation
and correction keys are upstream verl's (:mod:`.verl`); the fork adds its own staleness, OPOB and ESS keys.

Conventions inverted here:

* ``async_training.staleness_threshold`` s > 0 is the lag bound ``k_max = s`` enforced at admission (the
  throttle; the fork never drops), 0 is synchronous; ``async_training.partial_rollout`` is
  ``system.partial_rollouts``;
* ``async_training.skip_recompute_old_log_prob = true`` is the REINFORCE route (ratio 1 against the rollout
  log-probs, times the ``rollout_is`` weights), ``false`` the PPO-clip surrogate on π_θ/μ;
* one trainer step is one mini-batch: ``ppo_mini_batch_size`` prompts per step (``data.train_batch_size = 0``,
  ``gen_batch_size = 1``), ``minibatches = 1``;
* ``grad_baselining.enable`` is VCPO's off-policy optimal baseline (``baseline = "opob"``, ``norm_by_std`` =
  normalize_std, ``scope`` = opob_scope); ``ess_scaling.enable`` is the ESS learning-rate rule
  (stabilizer ``vcpo_lr`` with ``base_ess_ratio`` = rho_ref, ``scaling_rule`` = mode);
* Megatron's optimizer: ``optim.optimizer`` adam is AdamW (Adam at weight_decay = 0); betas and ε come from
  ``override_optimizer_config.adam_beta1/adam_beta2/adam_eps`` (``optim.betas`` is not read).
"""

from __future__ import annotations

import json
import math

from sandbox.frameworks.importing import (
    ConfigImportError,
    Mapper,
    Settings,
    read_overrides,
    read_yaml,
    suggest_framework,
)
from sandbox.frameworks.verl.importer import ACTOR, IGNORED, ignore_framework_keys, map_correction, map_objective
from sandbox.frameworks.verl_vcpo.config_names import ESS, GB, KEYS_FILE, OPTIM
from sandbox.frameworks.verl_vcpo.config_names import MEGATRON_EXTRA as EXTRA

AT = "async_training"


def map_vcpo(m: Mapper) -> None:
    m.s.known = json.loads(KEYS_FILE.read_text())["keys"]
    m.s.known_source = "the VCPO fork (mit-han-lab/vcpo c7f030f0, fully_async_ppo_megatron_trainer)"
    entry = m.s.entry or ""
    if m.s.entry is not None and "fully_async" not in entry:
        raise ConfigImportError(
            f"{m.s.path}: line {m.s.entry_line}: the launch command runs {entry!r}, not the fork's "
            "fully-async recipe (recipe.fully_async_policy.fully_async_main): the fork's one-mini-batch "
            f"step would misread its batch geometry{suggest_framework(entry, 'verl-vcpo') or ' (use -f verl)'}"
        )
    if (
        m.s.entry is None
        and not any(k.startswith(AT + ".") for k in m.s.values)
        and m.s.values.get("data.train_batch_size", 0)
    ):
        raise ConfigImportError(
            f"{m.s.path}: {m.s.where.get('data.train_batch_size')}: data.train_batch_size = "
            f"{m.s.values['data.train_batch_size']} and no async_training keys: a synchronous verl config, "
            "whose batch geometry the fork's one-mini-batch step would misread (use -f verl)"
        )
    if m.s.entry is not None:
        m.row("converted", "(entry point)", entry, note=f"line {m.s.entry_line}: the fork's fully-async recipe")
    n = m.value("actor_rollout_ref.rollout.n", "int", 1)
    m.row(
        "setup" if m.has("actor_rollout_ref.rollout.n") else "default",
        "actor_rollout_ref.rollout.n",
        n,
        "algorithm.group_size",
        n,
        "responses per prompt (the group)",
    )
    B = m.value(f"{ACTOR}.ppo_mini_batch_size", "int")
    if B < 1:
        raise m.bad(f"{ACTOR}.ppo_mini_batch_size", "expected a positive number of prompts")
    m.row(
        "setup",
        f"{ACTOR}.ppo_mini_batch_size",
        B,
        "algorithm.groups_per_step",
        B,
        "prompts per trainer step (the fork's step is one mini-batch)",
    )
    m.set("algorithm.minibatches", 1)
    m.mapped(
        f"{ACTOR}.ppo_epochs", "algorithm.epochs", m.value(f"{ACTOR}.ppo_epochs", "int", 1), "passes over each batch"
    )
    m.pinned("data.train_batch_size", 0, "the fully-async recipe streams: no fixed train batch")
    m.pinned("data.gen_batch_size", 1, "prompts dispatched one at a time")
    for key, want, why in (
        (f"{AT}.trigger_parameter_sync_step", 1, "weights pushed after every trainer step"),
        (f"{AT}.require_batches", 1, "one mini-batch per trainer step"),
        (f"{AT}.use_rollout_log_probs", True, "the rollout log-probs μ are used"),
        (f"{AT}.compute_prox_log_prob", False, "no proximal policy"),
        ("actor_rollout_ref.rollout.calculate_log_probs", True, "the sampler's log-probs μ are recorded"),
        ("actor_rollout_ref.hybrid_engine", False, "rollout and training on separate GPUs"),
        (f"{ACTOR}.ppo_micro_batch_size_per_gpu", 1, "one trajectory per micro-batch"),
        (f"{ACTOR}.use_dynamic_bsz", False, "fixed micro-batches"),
    ):
        m.pinned(key, want, why)
    s = m.value(f"{AT}.staleness_threshold", "float", m.s.known[f"{AT}.staleness_threshold"])
    if not math.isfinite(s) or s < 0:
        raise m.bad(f"{AT}.staleness_threshold", "expected a finite number of versions >= 0")
    if s != int(s):
        m.row(
            "converted" if m.has(f"{AT}.staleness_threshold") else "default",
            f"{AT}.staleness_threshold",
            s,
            "system.staleness.kind",
            "async_ratio",
            "a fractional threshold: the rollouter runs ahead by at most s "
            "versions' batches (window (1 + s)·B, as upstream verl's fully-async rollouter)",
        )
        m.set("system.staleness.alpha", s)
    elif s == 0:
        m.row(
            "converted" if m.has(f"{AT}.staleness_threshold") else "default",
            f"{AT}.staleness_threshold",
            s,
            "system.staleness.kind",
            "sync",
            "0: no rollout runs ahead of the weights (synchronous)",
        )
    else:
        m.row(
            "converted",
            f"{AT}.staleness_threshold",
            s,
            "system.staleness.kind",
            "max_lag",
            "a bounded lag, enforced at admission",
        )
        m.row(
            "converted", f"{AT}.staleness_threshold", s, "system.staleness.k_max", int(s), "k_max = staleness_threshold"
        )
        m.set("system.staleness.enforcement", "throttle")
    pr = m.value(f"{AT}.partial_rollout", "bool", False)
    m.mapped(f"{AT}.partial_rollout", "system.partial_rollouts", pr, "generations resumed under new weights")
    skip = m.value(f"{AT}.skip_recompute_old_log_prob", "bool", False)
    route = "reinforce" if skip else "ratio"
    name = map_objective(m, route, f"{AT}.skip_recompute_old_log_prob")
    map_correction(m, route)
    m.set("algorithm.proximal", "behaviour")
    if m.value(f"{GB}.enable", "bool", False):
        m.override("algorithm.objective.baseline", "opob")
        m.row(
            "converted",
            f"{GB}.enable",
            True,
            "algorithm.objective.baseline",
            "opob",
            "VCPO's off-policy optimal baseline (gradient baselining), replacing the group mean",
        )
        if m.has(f"{GB}.norm_by_std"):
            norm = m.value(f"{GB}.norm_by_std", "bool")
            m.override("algorithm.objective.normalize_std", norm)
            m.row("converted", f"{GB}.norm_by_std", norm, "algorithm.objective.normalize_std", norm, "std division")
        m.mapped(
            f"{GB}.scope", "algorithm.objective.opob_scope", m.value(f"{GB}.scope", "str", "group"), "baseline scope"
        )
        for key, want in (
            ("agg_mode", "mean"),
            ("use_is_weights", True),
            ("use_clipped_is_ratios", False),
            ("normalize_by_length", False),
        ):
            m.pinned(f"{GB}.{key}", want, "the sandbox's OPOB estimator")
    if m.value(f"{ESS}.enable", "bool", False):
        rho = m.value(f"{ESS}.base_ess_ratio", "float", 1.0)
        rule = m.value(f"{ESS}.scaling_rule", "str", "sqrt")
        m.row(
            "converted",
            f"{ESS}.enable",
            True,
            "algorithm.stabilizers",
            [{"name": "vcpo_lr", "rho_ref": rho, "mode": rule}],
            "VCPO's ESS learning-rate rule",
        )
        m.row("mapped" if m.has(f"{ESS}.base_ess_ratio") else "default", f"{ESS}.base_ess_ratio", rho, note="rho_ref")
        m.row("mapped" if m.has(f"{ESS}.scaling_rule") else "default", f"{ESS}.scaling_rule", rule, note="mode")
        m.pinned(f"{ESS}.use_clipped", False, "unclipped ESS")
    m.pinned(
        f"{ACTOR}.update_policy_per_traj",
        m.s.values.get(f"{ACTOR}.update_policy_per_traj", False),
        "per-trajectory updates (the ESS rule needs them)",
    )
    _optimizer(m)
    ignore_framework_keys(
        m, {**IGNORED, "async_training.": "the fully-async recipe's other settings (placement, queues)"}
    )
    _ = name


def _optimizer(m: Mapper) -> None:
    t = m.value(f"{OPTIM}.optimizer", "str", "adam")
    wd = m.value(f"{OPTIM}.weight_decay", "float", 0.01)
    if t == "sgd":
        m.mapped(f"{OPTIM}.optimizer", "algorithm.optimizer.name", t, "Megatron SGD")
        m.mapped(
            f"{EXTRA}.sgd_momentum",
            "algorithm.optimizer.momentum",
            m.value(f"{EXTRA}.sgd_momentum", "float", 0.9),
            "SGD momentum (Megatron's default 0.9)",
        )
    else:
        if t != "adam":
            m.row("unsupported", f"{OPTIM}.optimizer", t, note="adam and sgd are mapped; adam used")
        name = "adam" if wd == 0 else "adamw"
        m.mapped(
            f"{OPTIM}.optimizer",
            "algorithm.optimizer.name",
            t,
            "Megatron's adam is AdamW: Adam at weight_decay = 0",
            convert=lambda _: name,
        )
        b1 = m.value(f"{EXTRA}.adam_beta1", "float", 0.9)
        b2 = m.value(f"{EXTRA}.adam_beta2", "float", 0.999)
        m.row(
            "converted" if m.has(f"{EXTRA}.adam_beta1") else "default",
            f"{EXTRA}.adam_beta1",
            b1,
            "algorithm.optimizer.betas",
            [b1, b2],
            "betas = (adam_beta1, adam_beta2)",
        )
        if m.has(f"{EXTRA}.adam_beta2"):
            m.row("converted", f"{EXTRA}.adam_beta2", b2, note="the second of betas")
        m.mapped(f"{EXTRA}.adam_eps", "algorithm.optimizer.eps", m.value(f"{EXTRA}.adam_eps", "float", 1e-8), "Adam ε")
        m.ignore(
            f"{OPTIM}.betas", "not read by the fork's Megatron optimizer (override_optimizer_config.adam_beta1/2 are)"
        )
    m.mapped(f"{OPTIM}.weight_decay", "algorithm.optimizer.weight_decay", wd, "decoupled weight decay")
    sched = m.value(f"{OPTIM}.lr_decay_style", "str", "constant")
    if sched in ("constant", "cosine", "linear"):
        m.mapped(f"{OPTIM}.lr_decay_style", "algorithm.optimizer.schedule", sched, "schedule after the warm-up")
    else:
        m.row(
            "unsupported",
            f"{OPTIM}.lr_decay_style",
            sched,
            note="constant, linear and cosine are mapped; constant used",
        )
        m.set("algorithm.optimizer.schedule", "constant")
    w = m.value(f"{OPTIM}.lr_warmup_steps", "int", 0)
    m.mapped(f"{OPTIM}.lr_warmup_steps", "algorithm.optimizer.warmup_steps", max(w, 0), "warm-up in optimizer steps")
    m.scale(f"{OPTIM}.lr", "algorithm.optimizer.lr", "your learning rate: the proxy task keeps its own")
    m.scale(f"{OPTIM}.clip_grad", "algorithm.optimizer.grad_clip", "gradient clip for your model's scale")


def read_vcpo(path: str) -> Settings:
    return read_yaml(path) if str(path).endswith((".yaml", ".yml")) else read_overrides(path)
