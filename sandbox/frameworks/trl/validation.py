"""The TRL 1.16.0 export validator; what it checks and from which upstream files: docs/promotion.md#how-each-validator-checks-its-framework."""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import json
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any

from sandbox.export.validate.common import facts, installed_file, readback
from sandbox.export.validate.wheels import PINNED
from sandbox.frameworks.trl.config_names import CONFIG_FILE, SCRIPT_FILE

CLASSES = {"GRPOConfig": "trl", "AsyncGRPOConfig": "trl.experimental.async_grpo"}


def validate(files: dict[str, str], wheel_dir: Path | None = None) -> list[str]:
    """Problems with a TRL export (empty = accepted). ``wheel_dir`` is accepted for the common validator
    signature and ignored: the installed ``trl`` is used (see the module docstring)."""
    settings = _settings(files)
    cls_name, problems = _config_class(files.get(SCRIPT_FILE))
    problems = ([settings] if isinstance(settings, str) else []) + problems
    if isinstance(settings, str) or cls_name is None:
        return problems
    if cls_name == "AsyncGRPOConfig":
        problems += [
            f"{k}: AsyncGRPOConfig has no importance-sampling correction keys at trl {PINNED['trl']}"
            for k in settings
            if k.startswith("vllm_importance_sampling")
        ]
    try:
        import trl
    except ImportError as exc:
        return problems + [f"trl is not importable ({exc}); install trl=={PINNED['trl']} with a CPU torch"]
    if trl.__version__ != PINNED["trl"]:
        problems.append(f"installed trl {trl.__version__}; the exporter's keys were read at {PINNED['trl']}")
    config = _instantiate(cls_name, settings, problems)
    if config is None:
        return problems
    problems += readback(
        settings,
        lambda key: getattr(config, key, _MISSING),
        lambda key, value, got: f"{key}: exported {value!r}, {cls_name} reads back {got!r}",
    )
    return problems + enum_problems(settings, type(config))


_MISSING = object()


def _settings(files: dict[str, str]) -> dict[str, Any] | str:
    """The config file's keyword arguments, or what is wrong with it."""
    if CONFIG_FILE not in files:
        return f"{CONFIG_FILE}: missing from the export"
    try:
        data = json.loads(files[CONFIG_FILE])
    except ValueError as exc:
        return f"{CONFIG_FILE}: not JSON ({exc})"
    return (
        data
        if isinstance(data, dict)
        else f"{CONFIG_FILE}: expected an object of keyword arguments, got {type(data).__name__}"
    )


def _config_class(script: str | None) -> tuple[str | None, list[str]]:
    """The config class the script imports (and so builds from the JSON), and the script's problems."""
    if script is None:
        return None, [f"{SCRIPT_FILE}: missing from the export"]
    try:
        tree = ast.parse(script, SCRIPT_FILE)
        compile(tree, SCRIPT_FILE, "exec")
    except SyntaxError as exc:
        return None, [f"{SCRIPT_FILE}: does not compile ({exc})"]
    found = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if CLASSES.get(alias.name) == node.module
    }
    if len(found) != 1:
        return None, [
            f"{SCRIPT_FILE}: expected to import exactly one of "
            + ", ".join(f"{m}.{c}" for c, m in CLASSES.items())
            + f", found {sorted(found) or 'none'}"
        ]
    return found.pop(), [] if CONFIG_FILE in script else [f"{SCRIPT_FILE}: does not read {CONFIG_FILE}"]


def _instantiate(cls_name: str, settings: dict[str, Any], problems: list[str]):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            cls = getattr(importlib.import_module(CLASSES[cls_name]), cls_name)
        except ImportError as exc:
            problems.append(f"cannot import {CLASSES[cls_name]}.{cls_name}: {exc}")
            return None
        with tempfile.TemporaryDirectory(prefix="trl-validate-") as tmp:
            try:
                return cls(output_dir=tmp, use_cpu=True, bf16=False, **settings)
            except TypeError as exc:
                problems.append(f"{cls_name} rejects the settings: {exc}")
            except ValueError as exc:
                problems.append(f"{cls_name} rejects the values: {exc}")
    return None


# ------------------------------------------------------------------------------------------------
# enum lists read from TRL itself
# ------------------------------------------------------------------------------------------------


def enum_problems(settings: dict[str, Any], config_cls: type) -> list[str]:
    """Enum values TRL accepts unchecked, against the names TRL's own texts give (and transformers' schedulers)."""
    from transformers.trainer_utils import SchedulerType

    allowed = {**allowed_values(config_cls), "lr_scheduler_type": [s.value for s in SchedulerType]}
    return [
        f"{key}: {settings[key]!r} is not one of {', '.join(names)}"
        for key, names in allowed.items()
        if key in settings and settings[key] not in names
    ]


@functools.cache
def allowed_values(config_cls: type) -> dict[str, list[str]]:
    """Enum key -> the values TRL names for it (field help of the config class, or the error message the
    trainer raises on a bad value); the pinned list where TRL's text names none."""
    helps = {f.name: f.metadata.get("help", "") for f in dataclasses.fields(config_cls)}
    trainer_texts = _trainer_messages()
    out = {}
    for key, (where, anchor, lead, *pinned) in facts("trl")["enums"].items():
        if key not in helps:
            continue
        texts = [helps[anchor]] if where == "help" else [t for t in trainer_texts if anchor in t]
        out[key] = next((v for v in (_quoted_after(t, lead) for t in texts) if v), None) or pinned
    return out


def _quoted_after(text: str, lead: str) -> list[str]:
    """The quoted names in the sentence of ``text`` that starts at ``lead``."""
    at = text.find(lead)
    if at < 0:
        return []
    sentence = re.split(r"\.(?:\s|$)", text[at + len(lead) :], maxsplit=1)[0]
    return re.findall(r"'([a-z_]+)'", sentence)


@functools.cache
def _trainer_messages() -> tuple[str, ...]:
    """String literals of ``trl/trainer/grpo_trainer.py`` (f-string holes as ``{}``), read by AST so that
    the trainer module (and its heavy imports) is not loaded."""
    path = installed_file("trl", "trainer/grpo_trainer.py")
    if path is None:
        return ()
    texts = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.JoinedStr):
            texts.append("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            texts.append(node.value)
    return tuple(texts)
