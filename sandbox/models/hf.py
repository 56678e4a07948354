"""Hugging Face ``transformers`` causal LMs as the LM task's policy (optional dependency).

Two ways to name the model (``task.model``):

* ``{ backend = "hf", config = { model_type = "llama", hidden_size = 64, ... } }``: any architecture
  ``AutoModelForCausalLM`` knows, built from ``AutoConfig.for_model(model_type, **rest)`` with no
  download; weights initialised by the architecture's own init (its ``_init_weights``) under a torch
  RNG seeded from the run's init generator (:func:`build_module`), so the same seed gives bitwise the
  same weights whatever the global torch RNG state.
* ``{ backend = "hf", path = "/a/local/checkpoint" }``: ``from_pretrained(path, local_files_only=True)``.
  The checkpoint's tokenizer is NOT used: the task's character tokenizer decides the vocabulary, so
  the embedding (and untied output head) are cut to the first ``vocab_size`` rows; a checkpoint with
  fewer rows than the tokenizer needs is refused.

The task fills ``vocab_size`` and the position limit (``max_position_embeddings``, which GPT-2 maps to
``n_positions``) and sets ``eos_token_id`` to the character tokenizer's end token (1).
``bos_token_id`` and ``pad_token_id`` are set to None: the tokenizer has no BOS (prompts are not
prefixed), and padding (token 0) only ever follows a response's end, where causal attention cannot
see it from a valid position and the loss masks it, so the model never needs to know a pad id.

:func:`causal_lm_forward` adapts the module to the task's ``Forward`` signature
(``(tokens, past) -> (logits, cache)``, :mod:`sandbox.models.transformer`): ``past`` is the model's
own KV cache (a ``DynamicCache``, passed and returned under transformers 5.24's ``cache`` name, which
replaced ``past_key_values``; the old keyword is deprecated in 5.24 and removed in 5.40, so the ``hf``
extra asks for ``transformers>=5.24,<6``), updated in place, positions come
from the cache length, and no attention mask is passed (prompts have a fixed width, padding only
follows a response's end, and causal attention never looks ahead). Parameters go in through
``torch.func.functional_call`` exactly as for the builtin transformer.

Attention defaults to ``attn_implementation = "eager"`` (the written-out softmax(QK^T)V): it runs on
every device and dtype, and ``torch.func.vmap(grad(...))`` over sequences (VCPO's OPOB baseline)
works with it. ``"sdpa"`` (``torch.nn.functional.scaled_dot_product_attention``) gives the same
per-sequence gradients on the CPU, but torch 2.13 has no vmap batching rule for its CPU kernel and
falls back to a slow per-sample loop (a warning says so); on CUDA it is faster for sampling and
untested under vmap.

``transformers`` is imported lazily; without it, asking for this backend is a validation error that
names ``task.model.backend`` and the install command (:data:`INSTALL`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sandbox.base.lazy_torch import lazy_import

if TYPE_CHECKING:
    from torch import Tensor, nn

torch = lazy_import("torch", globals())
functional_call = lazy_import("torch.func:functional_call", globals())

INSTALL = 'pip install -c constraints-cpu.txt -e ".[hf]"'
"""Install command of the optional dependency (the ``hf`` extra)."""


def require_transformers():
    """The ``transformers`` module, or a ValueError naming ``task.model.backend`` and :data:`INSTALL`."""
    try:
        import transformers
    except ImportError:
        raise ValueError(
            f"task.model.backend = 'hf' needs the optional package 'transformers', which is not installed: {INSTALL}"
        ) from None
    return transformers


def _has_transformers() -> bool:
    try:
        require_transformers()
    except ValueError:
        return False
    return True


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class HFModelConfig(BaseModel):
    """A Hugging Face ``transformers`` causal LM, built from a config dict or loaded from a local
    checkpoint directory (``docs/tasks.md#lm``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    backend: Literal["hf"] = Field(description="'hf': a transformers AutoModelForCausalLM (optional dependency).")
    config: dict[str, Any] | None = Field(
        None,
        description="Architecture config: 'model_type' (llama, gpt2, qwen2, ...) plus that architecture's config "
        "fields (hidden_size, num_hidden_layers, ...); built with AutoConfig.for_model, nothing downloaded. "
        "vocab_size and the position limit default to what the task needs.",
    )
    path: str | None = Field(
        None,
        description="Local checkpoint directory (config.json + weights) loaded with local_files_only=True; its "
        "tokenizer is not used (the task's character tokenizer decides the vocabulary).",
    )
    attn_implementation: Literal["eager", "sdpa"] = Field(
        "eager", description="transformers attention kernel: 'eager' (written out, works with torch.func) or 'sdpa'."
    )

    @field_validator("backend")
    @classmethod
    def _transformers_installed(cls, v):
        require_transformers()
        return v

    @field_validator("config")
    @classmethod
    def _check_config(cls, v):
        if v is None or not _has_transformers():
            return v
        kind = v.get("model_type")
        if not isinstance(kind, str):
            raise ValueError("needs 'model_type' (a string such as 'llama', 'gpt2' or 'qwen2')")
        cfg = config_from_dict(v)
        # the smallest sizes: the task's own (known later) are checked when it is built
        fill_config(cfg, v, vocab_size=2, max_positions=2, eos_id=1)
        try:
            with torch.device("meta"):
                _auto_model().from_config(cfg)
        except Exception as exc:  # transformers raises ValueError, TypeError, ... depending on the architecture
            if "AutoModelForCausalLM" in str(exc):
                raise ValueError(
                    f"model_type {kind!r} has no causal-LM class in transformers (AutoModelForCausalLM)"
                ) from None
            raise ValueError(f"transformers cannot build a causal LM from it: {_short(exc)}") from None
        return v

    @field_validator("path")
    @classmethod
    def _check_path(cls, v):
        if v is None or not _has_transformers():
            return v
        p = Path(v).expanduser()
        if not p.is_dir():
            raise ValueError(f"checkpoint directory {str(p)!r} does not exist (only local checkpoints are supported)")
        if not (p / "config.json").is_file():
            raise ValueError(f"checkpoint directory {str(p)!r} has no config.json")
        checkpoint_config(str(p))
        return v

    @model_validator(mode="after")
    def _one_source(self):
        if (self.config is None) == (self.path is None):
            raise ValueError("backend 'hf' needs exactly one of config (an architecture) or path (a local checkpoint)")
        return self


def _auto_model():
    return require_transformers().AutoModelForCausalLM


def config_from_dict(raw: dict[str, Any]):
    """``AutoConfig.for_model(model_type, **rest)``; ValueError on an unknown model type, a field the
    architecture rejects, or a key that is no field of that architecture's config (transformers would
    keep such a typo as an unused attribute)."""
    tf = require_transformers()
    rest = {k: v for k, v in raw.items() if k != "model_type"}
    kind = raw["model_type"]
    if kind not in tf.CONFIG_MAPPING:
        known = ", ".join(k for k in ("llama", "gpt2", "qwen2", "mistral", "gpt_neox", "phi") if k in tf.CONFIG_MAPPING)
        raise ValueError(
            f"unknown model_type {kind!r} (transformers {tf.__version__} knows e.g. {known}; all: transformers.CONFIG_MAPPING)"
        )
    try:
        cfg = tf.AutoConfig.for_model(kind, **rest)
    except Exception as exc:  # strict dataclass validation errors, TypeError, ValueError
        raise ValueError(f"transformers rejects the {kind!r} config: {_short(exc)}") from None
    cls = type(cfg)
    if dataclasses.is_dataclass(cls):
        fields = {f.name for f in dataclasses.fields(cls)} | set(getattr(cls, "attribute_map", {}))
        stored = cfg.to_dict()
        unknown = sorted(k for k in rest if k not in fields and k in stored)
        if unknown:
            raise ValueError(
                f"{', '.join(map(repr, unknown))} is no field of transformers' {cls.__name__} (check the spelling)"
            )
    return cfg


def checkpoint_config(path: str):
    """The checkpoint's own config (``AutoConfig.from_pretrained(path, local_files_only=True)``)."""
    tf = require_transformers()
    try:
        return tf.AutoConfig.from_pretrained(path, local_files_only=True)
    except Exception as exc:
        raise ValueError(f"cannot read the checkpoint config in {path!r}: {_short(exc)}") from None


def fill_config(cfg, raw: dict[str, Any] | None, vocab_size: int, max_positions: int, eos_id: int):
    """Set the task's sizes and special tokens on ``cfg`` in place (module docstring). A size given in
    ``raw`` (the user's config dict; None for a checkpoint) is kept but must be large enough."""
    raw = raw or {}
    aliases = {v: k for k, v in getattr(type(cfg), "attribute_map", {}).items()}
    given = {aliases.get(k, k) for k in raw}
    if "vocab_size" in given:
        if cfg.vocab_size < vocab_size:
            raise ValueError(f"vocab_size={cfg.vocab_size} is smaller than the tokenizer's {vocab_size}")
    else:
        cfg.vocab_size = vocab_size
    if hasattr(cfg, "max_position_embeddings"):
        if "max_position_embeddings" in given:
            if cfg.max_position_embeddings < max_positions:
                raise ValueError(
                    f"max_position_embeddings={cfg.max_position_embeddings} is below prompt + response length {max_positions}"
                )
        else:
            cfg.max_position_embeddings = max_positions
    # pad_token_id stays None: with a pad id and no attention mask, transformers 5.23
    # (PreTrainedModel.warn_if_padding_and_no_attention_mask, e.g. GPT-2) tests the inputs for it with
    # a data-dependent branch that torch.func.vmap rejects; the task never needs it (module docstring)
    for name, value in (("eos_token_id", eos_id), ("pad_token_id", None), ("bos_token_id", None)):
        if hasattr(cfg, name):
            setattr(cfg, name, value)
    return cfg


def task_config(spec: HFModelConfig, vocab_size: int, max_positions: int, eos_id: int):
    """The transformers config the task builds: the architecture (or the checkpoint's config, its
    vocabulary cut to the tokenizer's) with the task's sizes and special tokens."""
    if spec.config is not None:
        cfg = config_from_dict(spec.config)
        try:
            return fill_config(cfg, spec.config, vocab_size, max_positions, eos_id)
        except ValueError as exc:
            raise ValueError(f"task.model.config: {exc}") from None
    cfg = checkpoint_config(str(Path(spec.path).expanduser()))
    if cfg.vocab_size < vocab_size:
        raise ValueError(
            f"task.model.path: the checkpoint's vocabulary ({cfg.vocab_size}) is smaller than the character tokenizer's ({vocab_size})"
        )
    limit = getattr(cfg, "max_position_embeddings", None)
    if limit is not None and limit < max_positions:
        raise ValueError(
            f"task.model.path: the checkpoint's max_position_embeddings={limit} is below prompt + response length {max_positions}"
        )
    cfg.vocab_size = vocab_size
    kept = {"vocab_size": vocab_size} if limit is None else {"vocab_size": vocab_size, "max_position_embeddings": limit}
    return fill_config(cfg, kept, vocab_size, max_positions, eos_id)


def build_module(spec: HFModelConfig, cfg, gen: torch.Generator | None) -> nn.Module:
    """The module on the CPU in float32, eval mode (no dropout). From a config: the architecture's
    own init under ``torch.random.fork_rng`` seeded with one draw of ``gen`` (the global RNG is left
    as it was, and the weights depend on ``gen`` only). From a checkpoint: its weights (``gen`` is
    not used), with the embedding rows beyond the task's vocabulary cut (``resize_token_embeddings``)."""
    auto = _auto_model()
    if spec.config is not None:
        seed = int(torch.randint(0, 2**62, (1,), generator=gen)) if gen is not None else 0
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = auto.from_config(cfg, attn_implementation=spec.attn_implementation, dtype=torch.float32)
    else:
        try:
            model = auto.from_pretrained(
                str(Path(spec.path).expanduser()),
                local_files_only=True,
                attn_implementation=spec.attn_implementation,
                dtype=torch.float32,
            )
        except Exception as exc:  # missing or unreadable weight files, architecture errors
            raise ValueError(f"task.model.path: cannot load the checkpoint {spec.path!r}: {_short(exc)}") from None
        if model.get_input_embeddings().weight.shape[0] != cfg.vocab_size:
            model.resize_token_embeddings(cfg.vocab_size, mean_resizing=False)
        for name in ("eos_token_id", "pad_token_id", "bos_token_id"):
            if hasattr(model.config, name):
                setattr(model.config, name, getattr(cfg, name))
    model.eval()
    return model


def to_device(model: nn.Module, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """Move ``model`` to ``device`` and cast its floating parameters to ``dtype``; buffers (e.g. the
    rotary ``inv_freq``) stay float32 so that positions are not rounded to bfloat16."""
    model = model.to(device)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.data = p.data.to(dtype)
    return model


def causal_lm_forward(module: nn.Module, params: dict[str, Tensor] | None, use_cache: bool = True):
    """``Forward`` of ``module`` under ``params`` (``functional_call``; None: the module's own
    parameters): ``(tokens (B, L), past) -> (logits (B, L, V), cache)``; ``cache`` is the model's
    ``DynamicCache`` (None when ``use_cache`` is False: teacher-forced scoring needs none)."""

    def forward(tokens: Tensor, past=None):
        kwargs = {"input_ids": tokens, "cache": past, "use_cache": use_cache}
        out = module(**kwargs) if params is None else functional_call(module, params, (), kwargs)
        return out.logits, out.cache

    return forward


def checkpoint_digest(path: str) -> str:
    """SHA-256 over the relative names and contents of every file under ``path`` (sorted): the
    checkpoint's identity for the warm-start cache key."""
    h = hashlib.sha256()
    root = Path(path).expanduser()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(root)).encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def shape(spec: HFModelConfig, vocab_size: int, max_positions: int) -> dict[str, int]:
    """Sizes the run-budget estimate needs: exact parameter count (the module built on the ``meta``
    device: no memory, no init) and width ``d``, layers ``L``, MLP width ``ff``, heads."""
    cfg = task_config(spec, vocab_size, max_positions, eos_id=1)
    with torch.device("meta"):
        model = _auto_model().from_config(cfg)
    d = int(cfg.hidden_size)
    ff = getattr(cfg, "intermediate_size", None) or getattr(cfg, "n_inner", None) or 4 * d
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "d": d,
        "L": int(cfg.num_hidden_layers),
        "ff": int(ff),
        "heads": int(cfg.num_attention_heads),
    }
