"""prime-rl (PrimeIntellect-ai/prime-rl, git 559b4477) ``rl.toml`` -> scenario: the inverse of
``sandbox export --framework prime-rl`` (docs/promotion.md), key by key.

Conventions inverted here:

* ``orchestrator.max_off_policy_steps`` counts versions of lag from the oldest version that generated a
  rollout to the version the batch trains on, inclusive, as the sandbox's lag: ``k_max`` =
  max_off_policy_steps, over-stale rollouts dropped (``enforcement = "drop"``); prime-rl has no
  synchronous trainer (0 is a bound of 0 with drops); rollouts in flight continue under new weights
  (``partial_rollouts = true``);
* ``orchestrator.batch_size`` counts samples: ``groups_per_step = batch_size / group_size``; one optimizer
  step per batch;
* the default loss is the unclipped ratio surrogate r·Â on group-centred advantages (no std division),
  averaged over tokens: the sandbox's ``grpo`` with ``eps_low = 1`` (no floor above 0), ``eps_high = inf``,
  ``normalize_std = false``, ``aggregation = "token_mean"``;
* ``trainer.loss`` masks: ``dppo_mask_low``/``dppo_mask_high`` of 1 never mask (|π_θ − μ| ≤ 1) and
  ``kl_tau = 0``: no correction; smaller masks are DPPO's (``dppo_mask``, variant dppo); ``type = "ipo"``
  with ``ipo_threshold`` is the IPO variant.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import Any

from sandbox.frameworks.importing import Mapper, Settings, read_toml_config
from sandbox.frameworks.prime_rl.config_names import OFF_MASK

SCHEDULES = ("constant", "linear", "cosine")

IGNORED: dict[str, str] = {
    "model.": "the model: the proxy task's toy model replaces it",
    "orchestrator.model.": "the model",
    "inference.": "inference server settings: cluster facts come from --cluster",
    "orchestrator.client.": "inference client",
    "orchestrator.env": "the environment: the proxy task replaces it",
    "orchestrator.environment.": "the environment: the proxy task replaces it",
    "orchestrator.sampling.": "sampling settings (temperature 1, lengths: give a length distribution with --cluster)",
    "max_steps": "run length (the proxy's run.steps)",
    "trainer.max_steps": "run length",
    "orchestrator.max_steps": "run length",
    "wandb.": "logging",
    "log.": "logging",
    "trainer.log.": "logging",
    "orchestrator.log.": "logging",
    "ckpt.": "checkpointing",
    "trainer.ckpt.": "checkpointing",
    "orchestrator.seed": "seeds: the sandbox's run.seed",
    "output_dir": "outputs",
    "seq_len": "sequence length limit (memory)",
    "deployment.": "GPU layout: a cluster fact (Q3/Q4/Q7 of sandbox preflight)",
    "slurm.": "job scheduler",
    "monitors.": "logging",
    "weight_broadcast.": "weight-sync transport: system.sync_delay models its time",
    "orchestrator.train.source": "the environment: the proxy task replaces it",
    "orchestrator.train.source.": "the environment",
    "orchestrator.eval.": "evaluation schedule",
    "orchestrator.eval": "evaluation schedule",
    "orchestrator.renderer.": "chat rendering",
    "orchestrator.concurrency.": "concurrency: give cluster.num_workers with --cluster",
    "trainer.model.": "the model and its parallelism",
    "orchestrator.train.sampling.max_completion_tokens": "length limits: give a length distribution (the response cap "
    "feeds Q3/Q4/Q7)",
    "run.": "run bookkeeping",
    "clean": "outputs",
    "env_vars.": "environment",
    "trainer.env_vars.": "environment",
    "orchestrator.env_vars.": "environment",
    "tokenizer.": "the model",
    "resume.": "checkpoint resume",
    "async_level": "see orchestrator.max_off_policy_steps",
    "trainer.micro_batch_size": "micro-batching: same loss",
    "orchestrator.micro_batch_size": "micro-batching: same loss",
}


MODELS = Path(__file__).resolve().parent / "keys" / "prime_rl_559b4477.json"
#: a field whose default is one model of a union: the variant the ``type`` key selects
_UNION_DEFAULTS = {
    "trainer.loss": {"default": "trainer.DefaultLossConfig", "ipo": "trainer.IPOLossConfig"},
    "trainer.optim": {
        "adamw": "trainer.AdamWConfig",
        "sgd": "trainer.SGDConfig",
        "muon": "trainer.MuonConfig",
        "sign_sgd": "trainer.SignSGDConfig",
    },
    "trainer.scheduler": {
        "constant": "trainer.ConstantSchedulerConfig",
        "linear": "trainer.LinearSchedulerConfig",
        "cosine": "trainer.CosineSchedulerConfig",
    },
}


@cache
def _models() -> dict:
    return json.loads(MODELS.read_text())["models"]


def prime_default(m: Mapper, key: str, fallback: Any = None) -> Any:
    """prime-rl's own default of ``key`` (its pydantic models at git 559b4477, read from the source into
    ``sandbox/export/keys``): the field's default, walking ``rl.RLConfig`` -> ``orchestrator`` ->
    ``OrchestratorConfig`` ...; a union section (``trainer.loss``) takes the variant its ``type`` selects.
    ``fallback`` when the models do not give one (a required field, or a computed default)."""
    models = _models()
    parts = key.split(".")
    model = "rl.RLConfig"
    roots = {"orchestrator": "orchestrator.OrchestratorConfig", "trainer": "trainer.TrainerConfig"}
    for i, part in enumerate(parts):
        section = ".".join(parts[:i])
        if section in _UNION_DEFAULTS:
            t = m.s.values.get(f"{section}.type")
            default_type = {"trainer.loss": "default", "trainer.optim": "adamw", "trainer.scheduler": "constant"}[
                section
            ]
            model = _UNION_DEFAULTS[section].get(t or default_type, model)
        if i == 0 and part in roots:
            model = roots[part]
            continue
        fld = models.get(model, {}).get("fields", {}).get(part)
        if fld is None:
            return fallback
        d = fld.get("default")
        if i == len(parts) - 1:
            return (
                fallback
                if (fld.get("required") or isinstance(d, dict) and ("expr" in d or "model_default" in d))
                else d
            )
        if isinstance(d, dict) and "model_default" in d:
            model = d["model_default"]
        else:
            ty = fld.get("type", {})
            sub = ty.get("model") or next((o.get("model") for o in ty.get("of", []) if o.get("model")), None)
            if sub is None:
                return fallback
            model = sub
    return fallback


def map_prime_rl(m: Mapper) -> None:
    m.s.known_source = "prime-rl (git 559b4477)"
    G = m.value("orchestrator.group_size", "int", prime_default(m, "orchestrator.group_size", 1))
    if G < 1:
        raise m.bad("orchestrator.group_size", "expected a positive integer")
    if G < 2:
        m.row(
            "unsupported",
            "orchestrator.group_size",
            G,
            note=f"{'prime-rl' + chr(39) + 's default ' if not m.has('orchestrator.group_size') else ''}"
            "one rollout per prompt: group-centred advantages are 0; the scenario uses groups of 2",
        )
        m.set("algorithm.group_size", 2)
        G = 1
    else:
        m.row(
            "setup" if m.has("orchestrator.group_size") else "default",
            "orchestrator.group_size",
            G,
            "algorithm.group_size",
            G,
            "rollouts per prompt (the group)",
        )
    n = m.value("orchestrator.batch_size", "int")
    if n < 1 or n % G:
        raise m.bad(
            "orchestrator.batch_size", f"expected a positive multiple of orchestrator.group_size = {G} (samples)"
        )
    m.row(
        "setup",
        "orchestrator.batch_size",
        n,
        "algorithm.groups_per_step",
        n // max(G, 1) if G > 1 else n // 2,
        f"groups per step = batch_size / group_size = {n}/{G} (prime-rl counts samples)",
    )
    m.set("algorithm.minibatches", 1)
    m.set("algorithm.epochs", 1)
    m.set("algorithm.proximal", "behaviour")
    k = m.value("orchestrator.max_off_policy_steps", "int", prime_default(m, "orchestrator.max_off_policy_steps", 8))
    if k < 0:
        raise m.bad("orchestrator.max_off_policy_steps", "expected an integer >= 0")
    m.row(
        "converted" if m.has("orchestrator.max_off_policy_steps") else "default",
        "orchestrator.max_off_policy_steps",
        k,
        "system.staleness.kind",
        "max_lag",
        "a bounded lag: rollouts older than the bound are dropped",
    )
    m.row(
        "converted" if m.has("orchestrator.max_off_policy_steps") else "default",
        "orchestrator.max_off_policy_steps",
        k,
        "system.staleness.k_max",
        k,
        "versions of lag, counted as the sandbox counts them, bound inclusive",
    )
    m.set("system.staleness.enforcement", "drop")
    m.row(
        "converted",
        "(prime-rl orchestrator)",
        "continues in flight",
        "system.partial_rollouts",
        True,
        "prime-rl's rollouts in flight continue under new weights",
    )
    algo = m.value("orchestrator.algo.type", "str", "grpo")
    if algo != "grpo":
        m.row("unsupported", "orchestrator.algo.type", algo, note="only grpo advantages are mapped")
    elif m.has("orchestrator.algo.type"):
        m.row("pinned", "orchestrator.algo.type", algo, note="group-centred advantages")
    m.pinned(
        "orchestrator.train.filter_zero_advantages", False, "groups with zero advantage are trained on (no filter)"
    )
    _loss(m)
    _optimizer(m)
    m.scale(
        "trainer.optim.lr",
        "algorithm.optimizer.lr",
        "your learning rate: the proxy task keeps its own",
        prime_default(m, "trainer.optim.lr"),
    )
    m.scale("trainer.optim.max_norm", "algorithm.optimizer.grad_clip", "gradient clip for your model's scale")
    for key in list(m.s.values):
        if key in m.used:
            continue
        for prefix, why in IGNORED.items():
            if key == prefix or (prefix.endswith(".") and key.startswith(prefix)):
                m.ignore(key, why)
                break


def _loss(m: Mapper) -> None:
    m.row(
        "converted",
        "(prime-rl loss)",
        "r·Â",
        "algorithm.objective.name",
        "grpo",
        "prime-rl's loss: the unclipped ratio surrogate on group-centred advantages, averaged over tokens",
    )
    for knob, value in (
        ("eps_low", 1.0),
        ("eps_high", math.inf),
        ("normalize_std", False),
        ("aggregation", "token_mean"),
        ("beta_kl", 0.0),
        ("baseline", "group_mean"),
    ):
        m.set(f"algorithm.objective.{knob}", value)
    t = m.value("trainer.loss.type", "str", "default")
    lo = m.value("trainer.loss.dppo_mask_low", "float", prime_default(m, "trainer.loss.dppo_mask_low", OFF_MASK))
    hi = m.value("trainer.loss.dppo_mask_high", "float", prime_default(m, "trainer.loss.dppo_mask_high", OFF_MASK))
    kl = m.value("trainer.loss.kl_tau", "float", prime_default(m, "trainer.loss.kl_tau", 0.0))
    adv = m.value("trainer.loss.adv_tau", "float", prime_default(m, "trainer.loss.adv_tau", 1.0))
    if t == "default" and lo >= OFF_MASK and hi >= OFF_MASK and kl == 0 and adv == 1.0:
        m.row(
            "converted" if m.has("trainer.loss.type") else "default",
            "trainer.loss.type",
            t,
            "algorithm.correction.name",
            "none",
            "masks of 1 never fire and kl_tau = 0: no correction",
        )
        for key in (
            "trainer.loss.dppo_mask_low",
            "trainer.loss.dppo_mask_high",
            "trainer.loss.kl_tau",
            "trainer.loss.adv_tau",
        ):
            if m.has(key):
                m.row("pinned", key, m.raw(key), note="the mask or penalty is off")
        return
    if t not in ("default", "ipo"):
        m.row("unsupported", "trainer.loss.type", t, note="only default (DPPO masks) and ipo are mapped; no correction")
        m.set("algorithm.correction.name", "none")
        return
    variant = "dppo" if t == "default" else "ipo"
    m.row(
        "converted" if m.has("trainer.loss.type") else "default",
        "trainer.loss.type",
        t,
        "algorithm.correction.name",
        "dppo_mask",
        f"DPPO's trust-region mask, variant {variant}",
    )
    m.set("algorithm.correction.variant", variant)
    if variant == "dppo":
        m.row(
            "mapped" if m.has("trainer.loss.dppo_mask_low") else "default",
            "trainer.loss.dppo_mask_low",
            lo,
            "algorithm.correction.dppo_mask_low",
            lo,
            "mask below",
        )
        m.row(
            "mapped" if m.has("trainer.loss.dppo_mask_high") else "default",
            "trainer.loss.dppo_mask_high",
            hi,
            "algorithm.correction.dppo_mask_high",
            hi,
            "mask above",
        )
    else:
        thr = m.value("trainer.loss.ipo_threshold", "float")
        m.row("mapped", "trainer.loss.ipo_threshold", thr, "algorithm.correction.ipo_threshold", thr, "IPO threshold")
        m.ignore("trainer.loss.dppo_mask_low", "unused by the ipo variant")
        m.ignore("trainer.loss.dppo_mask_high", "unused by the ipo variant")
    m.mapped("trainer.loss.adv_tau", "algorithm.correction.adv_tau", adv, "advantage temperature")
    m.mapped("trainer.loss.kl_tau", "algorithm.correction.kl_tau", kl, "KL temperature")


def _optimizer(m: Mapper) -> None:
    t = m.value("trainer.optim.type", "str", "adamw")
    wd = m.value("trainer.optim.weight_decay", "float", 0.01)
    if t == "sgd":
        m.mapped("trainer.optim.type", "algorithm.optimizer.name", t, "torch SGD")
        m.mapped(
            "trainer.optim.momentum",
            "algorithm.optimizer.momentum",
            m.value("trainer.optim.momentum", "float", 0.0),
            "SGD momentum",
        )
        m.pinned("trainer.optim.nesterov", False, "plain momentum")
    else:
        if t != "adamw":
            m.row("unsupported", "trainer.optim.type", t, note="only adamw and sgd are mapped; adamw used")
        name = "adam" if wd == 0 else "adamw"
        m.mapped(
            "trainer.optim.type",
            "algorithm.optimizer.name",
            t,
            "AdamW: Adam at weight_decay = 0",
            convert=lambda _: name,
        )
        b1 = m.value("trainer.optim.betas1", "float", 0.9)
        b2 = m.value("trainer.optim.betas2", "float", 0.999)
        m.row(
            "converted" if m.has("trainer.optim.betas1") else "default",
            "trainer.optim.betas1",
            b1,
            "algorithm.optimizer.betas",
            [b1, b2],
            "betas = (betas1, betas2)",
        )
        if m.has("trainer.optim.betas2"):
            m.row("converted", "trainer.optim.betas2", b2, note="the second of betas")
    m.mapped("trainer.optim.weight_decay", "algorithm.optimizer.weight_decay", wd, "weight decay")
    s = m.value("trainer.scheduler.type", "str", "constant")
    w = m.value("trainer.scheduler.warmup_steps", "int", 0)
    if s not in SCHEDULES:
        m.row("unsupported", "trainer.scheduler.type", s, note="constant, linear and cosine are mapped; constant used")
        s = "constant"
        m.set("algorithm.optimizer.schedule", s)
    elif s == "linear" and m.has("trainer.scheduler.decay_steps") and m.raw("trainer.scheduler.decay_steps") == 0:
        m.row(
            "converted",
            "trainer.scheduler.type",
            s,
            "algorithm.optimizer.schedule",
            "constant",
            "linear with decay_steps = 0: a warm-up, then constant",
        )
        m.row("pinned", "trainer.scheduler.decay_steps", 0, note="no decay after the warm-up")
    else:
        m.mapped("trainer.scheduler.type", "algorithm.optimizer.schedule", s, "schedule after the warm-up")
        if s == "linear":
            m.unsupported("trainer.scheduler.decay_steps", "the sandbox's linear schedule decays over the whole run")
    m.mapped("trainer.scheduler.warmup_steps", "algorithm.optimizer.warmup_steps", w, "linear warm-up in steps")
    m.pinned("trainer.scheduler.min_lr", 0.0, "decays to 0")


def read_prime_rl(path: str) -> Settings:
    return read_toml_config(path)
