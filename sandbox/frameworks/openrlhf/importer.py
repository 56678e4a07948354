"""OpenRLHF 0.11.2 (``openrlhf.cli.train_ppo_ray``) flag list -> scenario: the inverse of
``sandbox export --framework openrlhf`` (docs/promotion.md). Defaults are those of the 0.11.2 parser.

Conventions inverted here:

* ``--train.async_enable`` is the bounded-lag trainer: ``k_max = --train.async_queue_size`` (the rollout
  batches that may wait, each one version behind the next), enforced at admission (the throttle);
  without it, generate-then-train (``sync``);
* one rollout batch = ``--rollout.batch_size`` prompts × ``--rollout.n_samples_per_prompt`` samples;
  ``--train.batch_size`` samples per optimizer step, so ``minibatches = batch samples / train.batch_size``,
  ``epochs = --train.max_epochs``; π_old is recomputed once per rollout batch (``proximal = batch_start``,
  the same as the behaviour anchor at one optimizer step per batch);
* ``--algo.advantage.estimator`` group_norm = group-mean baseline divided by the std, dr_grpo = not divided,
  rloo = leave-one-out (the sandbox's ``rloo`` objective);
* ``--algo.advantage.is_correction_*``: level token + mode clip = token TIS with [C_low, C] = threshold;
  token + mask = token MIS on the band; seq + mask = Geo-RS's band (``geo_mis`` lo, hi);
* ``--actor.lr_warmup_ratio`` is a fraction of the run: warm-up steps = ratio × the proxy's run.steps.
"""

from __future__ import annotations

from typing import Any

from sandbox.frameworks.importing import ConfigImportError, Mapper, Settings, read_flags, suggest_framework
from sandbox.frameworks.verl.importer import NO_REFERENCE

DEFAULTS: dict[str, Any] = {
    "train.async_queue_size": 1,
    "rollout.n_samples_per_prompt": 1,
    "rollout.batch_size": 1024,
    "train.batch_size": 128,
    "train.max_epochs": 1,
    "actor.policy_loss_type": "ppo",
    "algo.advantage.estimator": "gae",
    "actor.eps_clip": 0.2,
    "actor.dual_clip": None,
    "actor.loss_agg_mode": "token-mean",
    "algo.kl.init_coef": 0.01,
    "algo.advantage.is_correction_level": "off",
    "algo.advantage.is_correction_mode": "mask",
    "algo.advantage.is_correction_threshold": [0.5, 5.0],
    "algo.advantage.is_correction_gating": "ratio",
    "actor.optim": "adam",
    "actor.adam.betas": [0.9, 0.95],
    "actor.adam.eps": 1e-8,
    "actor.adam.weight_decay": 0.0,
    "actor.lr_scheduler": "cosine_with_min_lr",
    "actor.lr_warmup_ratio": 0.03,
}
AGGREGATION = {"token-mean": "token_mean", "seq-mean-token-mean": "seq_mean_token_mean"}
SCHEDULES = {"constant": "constant", "constant_with_warmup": "constant", "linear": "linear", "cosine": "cosine"}

IGNORED_PREFIXES: dict[str, str] = {
    "ref.": "reference-model placement",
    "actor.num_nodes": "cluster size: give it with --cluster",
    "actor.num_gpus_per_node": "cluster size: give it with --cluster",
    "vllm.": "inference engine placement and memory",
    "model.": "the model: the proxy task's toy model replaces it",
    "data.": "data: the proxy task replaces it",
    "reward.": "the reward: the proxy task's verifier replaces it",
    "ckpt.": "checkpointing",
    "logger.": "logging",
    "ds.": "DeepSpeed settings: memory and speed, same loss",
    "train.micro_batch_size": "micro-batching: same loss",
    "rollout.micro_batch_size": "micro-batching: same loss",
    "rollout.max_new_tokens": "length limits: give a length distribution or trace with --cluster (generation_time)",
    "rollout.temperature": "sampling temperature 1 is assumed",
    "train.seed": "seeds: the sandbox's run.seed applies",
    "train.num_episodes": "run length (the proxy's run.steps)",
    "colocate_all_models": "placement",
    "actor.gradient_checkpointing_enable": "memory only",
    "rollout.vllm_generate_batch_size": "generation chunking: the sandbox's workers generate group by group",
    "actor.adam.lr": None,
    "actor.max_norm": None,
    "actor.model_name_or_path": "the model: the proxy task's toy model replaces it",
    "critic.": "the critic: the group estimators the sandbox maps train none",
    "eval.": "evaluation schedule",
    "train.colocate_all": "placement (cluster facts)",
    "train.colocate_actor_ref": "placement",
    "train.agent_func_path": "the agent function: the proxy task replaces it",
    "train.dynamic_batch_enable": "micro-batching by tokens: same loss",
    "train.max_tokens_per_gpu": "micro-batching by tokens: same loss",
    "rollout.max_tokens_per_gpu": "micro-batching by tokens",
    "train.deepcompile": "compilation: speed only",
}


ENTRY = "openrlhf.cli.train_ppo_ray"


def map_openrlhf(m: Mapper) -> None:
    def v(key: str, kind: str) -> Any:
        return m.value(key, kind, DEFAULTS.get(key))

    entry = m.s.entry
    if entry is None:
        m.row(
            "default",
            "(entry point)",
            ENTRY,
            note="no launch command in the file: python -m openrlhf.cli.train_ppo_ray assumed",
        )
    elif entry.removesuffix(".py").replace("/", ".").endswith(ENTRY):
        m.row(
            "converted",
            "(entry point)",
            entry,
            note=f"line {m.s.entry_line}: the Ray PPO trainer (--train.async_enable selects its asynchronous loop)",
        )
    else:
        raise ConfigImportError(
            f"{m.s.path}: line {m.s.entry_line}: the launch command runs {entry!r}, not "
            f"{ENTRY}{suggest_framework(entry, 'openrlhf')}"
        )

    G = v("rollout.n_samples_per_prompt", "int")
    B = v("rollout.batch_size", "int")
    if G < 1 or B < 1:
        raise m.bad("rollout.n_samples_per_prompt" if G < 1 else "rollout.batch_size", "expected a positive integer")
    if G < 2:
        m.row(
            "unsupported",
            "rollout.n_samples_per_prompt",
            G,
            note="one sample per prompt (a critic's gae setting): the "
            "group estimators the sandbox simulates need at least 2; the scenario uses groups of 2",
        )
        m.set("algorithm.group_size", 2)
    else:
        m.row(
            "setup" if m.has("rollout.n_samples_per_prompt") else "default",
            "rollout.n_samples_per_prompt",
            G,
            "algorithm.group_size",
            G,
            "samples per prompt (the group)",
        )
    m.row(
        "setup" if m.has("rollout.batch_size") else "default",
        "rollout.batch_size",
        B,
        "algorithm.groups_per_step",
        B,
        "prompts per rollout batch = per trainer step",
    )
    tb = v("train.batch_size", "int")
    if tb < 1 or (B * G) % tb:
        raise m.bad("train.batch_size", f"expected a divisor of rollout.batch_size × n_samples_per_prompt = {B * G}")
    mb = B * G // tb
    m.row(
        "converted" if m.has("train.batch_size") else "default",
        "train.batch_size",
        tb,
        "algorithm.minibatches",
        mb,
        f"minibatches = {B}·{G} samples / train.batch_size {tb}",
    )
    E = v("train.max_epochs", "int")
    m.mapped("train.max_epochs", "algorithm.epochs", E, "passes over each rollout batch")
    m.set("algorithm.proximal", "behaviour" if mb * E == 1 else "batch_start")
    # staleness
    if m.value("train.async_enable", "bool", False):
        k = v("train.async_queue_size", "int")
        if k < 1:
            raise m.bad("train.async_queue_size", "expected a positive integer")
        m.row("converted", "train.async_enable", True, "system.staleness.kind", "max_lag", "the asynchronous trainer")
        m.row(
            "converted" if m.has("train.async_queue_size") else "default",
            "train.async_queue_size",
            k,
            "system.staleness.k_max",
            k,
            "rollout batches queued ahead of the trainer: lag ≤ queue size",
        )
        m.set("system.staleness.enforcement", "throttle")
        pr = m.value("train.partial_rollout_enable", "bool", False)
        m.row(
            "converted" if m.has("train.partial_rollout_enable") else "default",
            "train.partial_rollout_enable",
            pr,
            "system.partial_rollouts",
            pr,
            "generations in flight continue under new weights",
        )
    else:
        m.row("default", "train.async_enable", False, "system.staleness.kind", "sync", "generate then train")
        m.ignore("train.async_queue_size", "unused without --train.async_enable")
        m.unsupported("train.partial_rollout_enable", "partial rollouts need the asynchronous trainer")
    _objective(m, v)
    _correction(m, v)
    m.pinned("actor.entropy_coef", 0.0, "no entropy bonus")
    m.pinned("algo.advantage.gamma", 1.0, "no discount within a response")
    if m.value("algo.dynamic_filtering_enable", "bool", False):
        m.row(
            "unsupported",
            "algo.dynamic_filtering_enable",
            True,
            note="dynamic filtering (groups whose rewards fall "
            "outside the range are dropped and resampled) is not simulated; the scenario trains on every group",
        )
        m.unsupported("algo.dynamic_filtering_range", "see dynamic_filtering_enable")
    else:
        m.ignore("algo.dynamic_filtering_enable", "off")
        m.ignore("algo.dynamic_filtering_range", "unused: dynamic filtering is off")
    _optimizer(m, v)
    m.scale("actor.adam.lr", "algorithm.optimizer.lr", "your learning rate: the proxy task keeps its own")
    m.scale("actor.max_norm", "algorithm.optimizer.grad_clip", "gradient clip for your model's scale")
    for key in list(m.s.values):
        if key in m.used:
            continue
        for prefix, why in IGNORED_PREFIXES.items():
            if why and (key == prefix or (prefix.endswith(".") and key.startswith(prefix))):
                m.ignore(key, why)
                break


def _objective(m: Mapper, v) -> None:
    loss = v("actor.policy_loss_type", "str")
    est = v("algo.advantage.estimator", "str")
    if est not in ("group_norm", "dr_grpo", "rloo"):
        m.row(
            "unsupported",
            "algo.advantage.estimator",
            est,
            note="only the critic-free group estimators (group_norm, "
            "dr_grpo, rloo) are mapped; gae trains a critic. The scenario uses group_norm",
        )
        est = "group_norm"
    if loss == "gspo":
        m.row("converted", "actor.policy_loss_type", loss, "algorithm.objective.name", "gspo", "sequence-ratio GSPO")
        m.row(
            "converted",
            "algo.advantage.estimator",
            est,
            "algorithm.objective.advantage",
            {"group_norm": "grpo", "dr_grpo": "dr_grpo", "rloo": "rloo"}[est],
            "the advantage of the GSPO surrogate",
        )
    elif loss != "ppo":
        m.row("unsupported", "actor.policy_loss_type", loss, note="only ppo and gspo are mapped; the scenario uses ppo")
        loss = "ppo"
    one_step = m.fields["algorithm.minibatches"] * m.fields["algorithm.epochs"] == 1
    if loss == "ppo" and one_step and est != "rloo":
        # π_old is recomputed once per rollout batch: at one optimizer step per batch the ratio is 1 and the clip
        # never binds, so the loss is REINFORCE with the group advantages
        m.row(
            "converted" if m.has("actor.policy_loss_type") else "default",
            "actor.policy_loss_type",
            "ppo",
            "algorithm.objective.name",
            "reinforce",
            "ppo at one optimizer step per rollout batch: the ratio to the "
            "recomputed π_old is 1, the clip never binds, the loss is REINFORCE with group advantages",
        )
        m.set("algorithm.objective.baseline", "group_mean")
        m.row(
            "converted",
            "algo.advantage.estimator",
            est,
            "algorithm.objective.normalize_std",
            est == "group_norm",
            "group_norm divides by the group std, dr_grpo does not",
        )
        for k in ("actor.eps_clip_low_high", "actor.eps_clip", "actor.dual_clip"):
            m.ignore(k, "the ratio is 1 at one optimizer step per batch: the clip never binds")
        loss = "reinforce"
    elif loss == "ppo":
        name = "rloo" if est == "rloo" else "grpo"
        m.row(
            "converted" if m.has("actor.policy_loss_type") else "default",
            "actor.policy_loss_type",
            "ppo",
            "algorithm.objective.name",
            name,
            "PPO clip surrogate with "
            + ("leave-one-out advantages (rloo)" if name == "rloo" else "group advantages (grpo)"),
        )
        if name == "grpo":
            m.row(
                "converted",
                "algo.advantage.estimator",
                est,
                "algorithm.objective.normalize_std",
                est == "group_norm",
                "group_norm divides by the group std, dr_grpo does not",
            )
            m.set("algorithm.objective.baseline", "group_mean")
        else:
            m.row("pinned", "algo.advantage.estimator", est, note="leave-one-out advantages")
    if loss == "reinforce":
        pass
    elif m.has("actor.eps_clip_low_high"):
        band = m.value("actor.eps_clip_low_high", "floats")
        if len(band) != 2:
            raise m.bad("actor.eps_clip_low_high", "expected two numbers LOW HIGH")
        m.row("mapped", "actor.eps_clip_low_high", band, "algorithm.objective.eps_low", band[0], "ratio floor 1 − low")
        m.row("mapped", "actor.eps_clip_low_high", band, "algorithm.objective.eps_high", band[1], "ratio cap 1 + high")
        m.ignore("actor.eps_clip", "overridden by --actor.eps_clip_low_high")
    else:
        e = v("actor.eps_clip", "float")
        m.mapped("actor.eps_clip", "algorithm.objective.eps_low", e, "symmetric clip: ratio floor 1 − eps")
        m.set("algorithm.objective.eps_high", e)
    dual = m.value("actor.dual_clip", "float?", None)
    if loss == "gspo":
        m.unsupported("actor.dual_clip", "the GSPO loss has no dual clip")
    elif m.has("actor.dual_clip") and loss == "ppo":
        m.mapped("actor.dual_clip", "algorithm.objective.dual_clip_c", dual, "dual clip on negative advantages")
    agg = v("actor.loss_agg_mode", "str")
    if agg not in AGGREGATION:
        m.row(
            "unsupported",
            "actor.loss_agg_mode",
            agg,
            note="only token-mean and seq-mean-token-mean are mapped; token-mean used",
        )
        agg = "token-mean"
        m.set("algorithm.objective.aggregation", "token_mean")
    else:
        m.mapped(
            "actor.loss_agg_mode",
            "algorithm.objective.aggregation",
            agg,
            "the sandbox's spelling",
            convert=AGGREGATION.get,
        )
    beta = v("algo.kl.init_coef", "float")
    if beta > 0:
        m.row(
            "unsupported",
            "algo.kl.init_coef",
            beta,
            note=f"a KL penalty (OpenRLHF's default 0.01): {NO_REFERENCE}; the scenario runs with β = 0",
        )
        for k in ("algo.kl.use_loss", "algo.kl.estimator"):
            m.unsupported(k, "the KL term (see init_coef)")
    else:
        m.row(
            "converted",
            "algo.kl.init_coef",
            beta,
            "algorithm.objective.beta_kl" if m.fields.get("algorithm.objective.name") == "grpo" else None,
            0.0 if m.fields.get("algorithm.objective.name") == "grpo" else None,
            "no KL term",
        )
        m.ignore("algo.kl.use_loss", "unused: init_coef = 0")
        m.ignore("algo.kl.estimator", "unused: init_coef = 0")


MAIN_SPELLING = ("algo.advantage.is_correction_enable", "algo.advantage.is_correction_type")


def _correction_main(m: Mapper) -> None:
    """OpenRLHF's main branch (after 0.11.2) spells the correction ``--algo.advantage.is_correction_enable`` and
    ``--algo.advantage.is_correction_type`` tis | icepop | seq-mask-tis, with the same
    ``--algo.advantage.is_correction_threshold LOW HIGH`` (default 0.5 5.0): tis clamps the token weight into
    the band, icepop drops tokens outside it, seq-mask-tis rejects responses whose geometric-mean weight
    leaves it."""
    old = [
        k
        for k in (
            "algo.advantage.is_correction_level",
            "algo.advantage.is_correction_mode",
            "algo.advantage.is_correction_gating",
        )
        if m.has(k)
    ]
    if old:
        raise m.bad(
            old[0],
            "mixes the 0.11.2 spelling (is_correction_level/mode) with the main branch's "
            "(is_correction_enable/type): use one",
        )
    on = m.value(MAIN_SPELLING[0], "bool", False)
    kind = m.value(MAIN_SPELLING[1], "str", "tis")
    thr_key = "algo.advantage.is_correction_threshold"
    if not on:
        m.row(
            "converted" if m.has(MAIN_SPELLING[0]) else "default",
            MAIN_SPELLING[0],
            False,
            "algorithm.correction.name",
            "none",
            "no IS correction (OpenRLHF main: --algo.advantage.is_correction_enable off)",
        )
        m.ignore(MAIN_SPELLING[1], "unused: is_correction_enable is off")
        m.ignore(thr_key, "unused: is_correction_enable is off")
        return
    raw = m.raw(thr_key, [0.5, 5.0])
    band = [0.0, float(raw)] if isinstance(raw, (int, float)) and not isinstance(raw, bool) else raw
    if not (isinstance(band, list) and len(band) == 2 and all(isinstance(x, (int, float)) for x in band)):
        raise m.bad(thr_key, "expected LOW HIGH")
    lo, hi = float(band[0]), float(band[1])
    m.row("pinned", MAIN_SPELLING[0], True, note="importance weights π_old/μ on the sampler's log-probs")
    if kind in ("tis", "icepop"):
        name = "tis" if kind == "tis" else "mis"
        m.row(
            "converted" if m.has(MAIN_SPELLING[1]) else "default",
            MAIN_SPELLING[1],
            kind,
            "algorithm.correction.name",
            name,
            "tis: token weight clamped into [low, high] (TIS); icepop: tokens outside [low, high] dropped (MIS)",
        )
        m.set("algorithm.correction.level", "token")
        m.row(
            "converted" if m.has(thr_key) else "default",
            thr_key,
            raw,
            "algorithm.correction.C",
            hi,
            "upper edge C = high",
        )
        m.row(
            "converted" if m.has(thr_key) else "default",
            thr_key,
            raw,
            "algorithm.correction.C_low",
            lo,
            "lower edge C_low = low",
        )
    elif kind == "seq-mask-tis":
        m.row(
            "converted",
            MAIN_SPELLING[1],
            kind,
            "algorithm.correction.name",
            "geo_mis",
            "responses whose geometric-mean weight leaves [low, high] rejected (Geo-RS); the token clamp OpenRLHF "
            "adds on the kept responses is not simulated",
        )
        m.row("converted" if m.has(thr_key) else "default", thr_key, raw, "algorithm.correction.lo", lo, "lower edge")
        m.row("converted" if m.has(thr_key) else "default", thr_key, raw, "algorithm.correction.hi", hi, "upper edge")
    else:
        raise m.bad(MAIN_SPELLING[1], "expected tis, icepop or seq-mask-tis")


def _correction(m: Mapper, v) -> None:
    if any(m.has(k) for k in MAIN_SPELLING):
        _correction_main(m)
        return
    level = v("algo.advantage.is_correction_level", "str")
    keys = ("algo.advantage.is_correction_mode", "algo.advantage.is_correction_threshold")
    m.pinned("algo.advantage.is_correction_gating", "ratio", "the gate reads the ratio π_θ/μ")
    if level == "off":
        m.row(
            "converted" if m.has("algo.advantage.is_correction_level") else "default",
            "algo.advantage.is_correction_level",
            level,
            "algorithm.correction.name",
            "none",
            "no IS correction",
        )
        for k in keys:
            m.ignore(k, "unused: is_correction_level = off")
        return
    mode = v(keys[0], "str")
    raw = m.raw(keys[1], DEFAULTS[keys[1]])
    band = [0.0, float(raw)] if isinstance(raw, (int, float)) and not isinstance(raw, bool) else raw
    if not (isinstance(band, list) and len(band) == 2 and all(isinstance(x, (int, float)) for x in band)):
        raise m.bad(keys[1], "expected HIGH or LOW HIGH")
    lo, hi = float(band[0]), float(band[1])
    if level == "token" and mode == "clip":
        m.row(
            "converted",
            "algo.advantage.is_correction_level",
            level,
            "algorithm.correction.name",
            "tis",
            "token TIS: w_t clamped into [low, high]",
        )
        m.set("algorithm.correction.level", "token")
        m.row("converted", keys[0], mode, note="clip = clamp the weight into the band")
        m.row("converted", keys[1], raw, "algorithm.correction.C", hi, "cap C = high")
        m.row("converted", keys[1], raw, "algorithm.correction.C_low", lo, "floor C_low = low")
    elif level == "token" and mode == "mask":
        m.row(
            "converted",
            "algo.advantage.is_correction_level",
            level,
            "algorithm.correction.name",
            "mis",
            "token MIS: tokens with w_t outside [low, high] masked",
        )
        m.set("algorithm.correction.level", "token")
        m.row("converted", keys[0], mode, note="mask = drop tokens outside the band")
        m.row("converted", keys[1], raw, "algorithm.correction.C", hi, "upper edge C = high")
        m.row("converted", keys[1], raw, "algorithm.correction.C_low", lo, "lower edge C_low = low")
    elif level == "seq" and mode == "mask":
        m.row(
            "converted",
            "algo.advantage.is_correction_level",
            level,
            "algorithm.correction.name",
            "geo_mis",
            "sequence mask on the geometric-mean ratio: Geo-RS",
        )
        m.row("converted", keys[0], mode, note="mask = reject responses outside the band")
        m.row("converted", keys[1], raw, "algorithm.correction.lo", lo, "lower edge of the geometric-mean band")
        m.row("converted", keys[1], raw, "algorithm.correction.hi", hi, "upper edge")
    else:
        m.row(
            "unsupported",
            "algo.advantage.is_correction_level",
            level,
            note=f"level {level} with mode {mode} is not mapped; no correction in the scenario",
        )
        m.set("algorithm.correction.name", "none")
        for k in keys:
            m.unsupported(k, "see is_correction_level")


def _optimizer(m: Mapper, v) -> None:
    optim = v("actor.optim", "str")
    wd = v("actor.adam.weight_decay", "float")
    if optim != "adam":
        m.row("unsupported", "actor.optim", optim, note="only AdamW is mapped (Muon is not simulated); AdamW used")
    name = "adam" if wd == 0 else "adamw"
    m.mapped(
        "actor.optim",
        "algorithm.optimizer.name",
        optim,
        "OpenRLHF's adam is AdamW (decoupled decay): Adam at weight_decay = 0",
        convert=lambda _: name,
    )
    m.mapped("actor.adam.weight_decay", "algorithm.optimizer.weight_decay", wd, "decoupled weight decay")
    betas = v("actor.adam.betas", "floats")
    m.mapped("actor.adam.betas", "algorithm.optimizer.betas", betas, "Adam moment decays")
    m.mapped("actor.adam.eps", "algorithm.optimizer.eps", v("actor.adam.eps", "float"), "Adam ε")
    sched = v("actor.lr_scheduler", "str")
    if sched in SCHEDULES:
        m.mapped(
            "actor.lr_scheduler",
            "algorithm.optimizer.schedule",
            sched,
            "schedule after the warm-up",
            convert=SCHEDULES.get,
        )
    else:
        m.row(
            "unsupported",
            "actor.lr_scheduler",
            sched,
            note="only constant, linear and cosine are mapped (OpenRLHF's "
            "default cosine_with_min_lr decays to 10%); cosine used",
        )
        m.set("algorithm.optimizer.schedule", "cosine")
    ratio = v("actor.lr_warmup_ratio", "float")
    m.row(
        "converted" if m.has("actor.lr_warmup_ratio") else "default",
        "actor.lr_warmup_ratio",
        ratio,
        "algorithm.optimizer.warmup_steps",
        ("RUN_STEPS", ratio),
        "fraction of the run: ratio × the proxy's run.steps",
    )


def read_openrlhf(path: str) -> Settings:
    return read_flags(path)
