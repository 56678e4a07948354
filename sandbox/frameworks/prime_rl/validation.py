"""The prime-rl 559b4477 export validator; what it checks and from which upstream files: docs/promotion.md#how-each-validator-checks-its-framework.
The pinned key list it reads is written by ``tools/prime_rl_keys.py``."""

from __future__ import annotations

import importlib
import json
import math
import sys
import tomllib
from pathlib import Path
from typing import Any

from sandbox.export.validate.common import flat, is_int, is_number, readback

COMMIT = "559b44772e471d1538537b8805cc77f3824a5e64"
KEYS_DIR = Path(__file__).resolve().parent / "keys"
MAIN_FILE = "rl.toml"


def key_list_path(commit: str = COMMIT) -> Path:
    return KEYS_DIR / f"prime_rl_{commit[:8]}.json"


def load_key_list(commit: str = COMMIT) -> dict:
    return json.loads(key_list_path(commit).read_text())


def _type_name(t: dict) -> str:
    kind = t["kind"]
    if kind == "literal":
        return "one of " + ", ".join(repr(c) for c in t["choices"])
    if kind == "anyof":
        return " | ".join(_type_name(x) for x in t["of"])
    if kind == "model":
        return f"a table ({t['model']})"
    if kind == "union":
        return f"a table with {t['discriminator']} = " + " | ".join(repr(v) for v in t["variants"])
    if kind == "list":
        return f"a list of {_type_name(t['item'])}"
    return kind


_SCALARS = {
    "any": lambda v: True,
    "opaque": lambda v: True,
    "int": is_int,
    "float": is_number,
    "str": lambda v: isinstance(v, str),
    "path": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
}


def _matches_scalar(t: dict, value: Any) -> bool:
    if t["kind"] == "literal":
        return any(value == c and type(value) is type(c) for c in t["choices"])
    return _SCALARS.get(t["kind"], lambda v: False)(value)


_SHAPES = {"model": dict, "union": dict, "list": list, "dict": dict}  # container kinds and the TOML value each needs


class _Walker:
    def __init__(self, keys: dict):
        self.models = keys["models"]
        self.problems: list[str] = []

    def table(self, model: str, data: dict, path: str) -> None:
        spec = self.models[model]
        fields = spec["fields"]
        for key, value in data.items():
            where = f"{path}.{key}" if path else key
            if key not in fields:
                if spec["extra"] == "forbid":
                    self.problems.append(
                        f"{where}: unknown key (not a field of {model.split('.', 1)[1]} at prime-rl {COMMIT[:8]}; "
                        f"fields: {', '.join(sorted(fields))})"
                    )
                continue
            self.value(fields[key], value, where)
        for key, f in fields.items():
            if f.get("required") and key not in data:
                self.problems.append(f"{path + '.' if path else ''}{key}: required by {model.split('.', 1)[1]}")

    def value(self, field: dict, value: Any, where: str) -> None:
        t = field["type"]
        default = field.get("default")
        if (
            t["kind"] == "union"
            and isinstance(value, dict)
            and t["discriminator"] not in value
            and isinstance(default, dict)
            and "model_default" in default
        ):
            self.table(default["model_default"], value, where)  # prime-rl fills the tag from the default variant
            return
        if not self.check_type(t, value, where):
            return
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            for op, ok, sym in (
                ("ge", lambda v, b: v >= b, ">="),
                ("gt", lambda v, b: v > b, ">"),
                ("le", lambda v, b: v <= b, "<="),
                ("lt", lambda v, b: v < b, "<"),
            ):
                if op in field and not ok(value, field[op]):
                    self.problems.append(f"{where} = {value!r}: must be {sym} {field[op]}")
            if isinstance(value, float) and math.isnan(value):
                self.problems.append(f"{where}: NaN is not a valid value")
        if isinstance(value, list) and "min_length" in field and len(value) < field["min_length"]:
            self.problems.append(f"{where}: needs at least {field['min_length']} entries")

    def check_type(self, t: dict, value: Any, where: str) -> bool:
        kind = t["kind"]
        ok = (
            isinstance(value, _SHAPES[kind])
            if kind in _SHAPES
            else any(self._fits(option, value, where) for option in t["of"])
            if kind == "anyof"
            else _matches_scalar(t, value)
        )
        if not ok:
            self.problems.append(
                f"{where}: null cannot be written in TOML; leave the key out"
                if kind == "none"
                else f"{where} = {value!r}: expected {'a table' if kind == 'dict' else _type_name(t)}"
            )
            return False
        if kind == "model":
            self.table(t["model"], value, where)
        elif kind == "union":
            tag = value.get(t["discriminator"])
            if tag not in t["variants"]:
                self.problems.append(
                    f"{where}.{t['discriminator']} = {tag!r}: expected one of "
                    + ", ".join(repr(v) for v in t["variants"])
                )
                return False
            self.table(t["variants"][tag], value, where)
        elif kind == "list":
            for i, item in enumerate(value):
                self.check_type(t["item"], item, f"{where}[{i}]")
        elif kind == "dict":
            for k, item in value.items():
                self.check_type(t["value"], item, f"{where}.{k}")
        return True

    def _fits(self, option: dict, value: Any, where: str) -> bool:
        """One member of an ``anyof``: a container is checked by a throw-away walker (its problems are not kept)."""
        if option["kind"] not in _SHAPES:
            return _matches_scalar(option, value)
        probe = _Walker({"models": self.models})
        return probe.check_type(option, value, where) and not probe.problems


def _cross_field(data: dict) -> list[str]:
    """The cross-field problems of the exported config (:func:`startup_problems`)."""
    table = lambda d, key: d[key] if isinstance(d.get(key), dict) else {}
    orch, trainer = table(data, "orchestrator"), table(data, "trainer")
    sched = table(trainer, "scheduler")
    both = "max_steps" in trainer and "max_steps" in orch
    return startup_problems(
        batch=orch.get("batch_size"),
        tokens=orch.get("token_batch_size"),
        group=orch.get("group_size", 1),
        max_steps=data.get("max_steps", trainer.get("max_steps")),
        steps=(trainer["max_steps"], orch["max_steps"]) if both else None,
        schedule=sched.get("type"),
        warmup=sched.get("warmup_steps", 10),
        decay=sched.get("decay_steps", 10),
        is_int=lambda x: isinstance(x, int),
    )


def _pydantic_check(data: dict, checkout: Path | None) -> list[str]:
    """Build ``[trainer]`` and ``[orchestrator]`` with prime-rl's own models when they import (a
    checkout's ``packages/prime-rl-configs/src`` on the path, dependencies installed by the user)."""
    added = None
    if checkout is not None and (Path(checkout) / "packages/prime-rl-configs/src").is_dir():
        added = str(Path(checkout) / "packages/prime-rl-configs/src")
        sys.path.insert(0, added)
    try:
        try:
            trainer_mod = importlib.import_module("prime_rl.configs.trainer")
            orch_mod = importlib.import_module("prime_rl.configs.orchestrator")
        except ImportError:  # not installed here: the pinned key list is the check
            return []
        problems: list[str] = []
        for section, cls in (("trainer", trainer_mod.TrainerConfig), ("orchestrator", orch_mod.OrchestratorConfig)):
            raw = data.get(section, {})
            try:
                built = flat(cls(**raw).model_dump(mode="json"))
            except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
                problems.append(f"{section}: rejected by prime-rl's {cls.__name__}: {exc}")
                continue
            problems += readback(
                flat(raw),
                built.get,
                lambda key, value, got: f"{section}.{key}: reads back as {got!r}, exported {value!r}",
            )
        return problems
    finally:
        if added is not None:
            sys.path.remove(added)


def schema_problems(data: dict) -> list[str]:
    """Problems of a whole ``rl`` configuration (the merged TOML tree) against the pinned key list:
    unknown keys, types, choices, bounds and the cross-field rules."""
    keys = load_key_list()
    walker = _Walker(keys)
    walker.table(keys["root"], data, "")
    return walker.problems + _cross_field(data)


def validate(files: dict[str, str], wheel_dir: Path | None = None) -> list[str]:
    """Problems with an exported prime-rl configuration (empty = accepted). ``wheel_dir`` is unused
    for the key-list check (prime-rl has no wheel); a prime-rl checkout given there is put on the path
    for the optional pydantic check."""
    if MAIN_FILE not in files:
        return [f"{MAIN_FILE}: missing (files: {', '.join(sorted(files))})"]
    try:
        data = tomllib.loads(files[MAIN_FILE])
    except tomllib.TOMLDecodeError as exc:
        return [f"{MAIN_FILE}: not valid TOML: {exc}"]
    problems = [
        f"{section}: the exporter writes only [trainer], [orchestrator] and [inference]"
        for section in data
        if section not in ("trainer", "orchestrator", "inference")
    ]
    problems += schema_problems(data)
    launch = files.get("launch.sh", "")
    if "uv run rl @" not in launch or MAIN_FILE not in launch:
        problems.append(f"launch.sh: expected a `uv run rl @ ... {MAIN_FILE}` command")
    if not problems:
        problems += _pydantic_check(data, wheel_dir)
    return problems


def startup_problems(*, batch, tokens, group, max_steps, steps, schedule, warmup, decay, is_int) -> list[str]:
    """The cross-field rules of prime-rl 559b4477's model validators that the config breaks, one problem each
    (``CROSS_FIELD_RULES`` of ``tools/prime_rl_keys.py`` says which validators they restate)."""
    out = []
    if batch is not None and tokens is not None:
        out.append("orchestrator: set exactly one of batch_size and token_batch_size")
    if is_int(batch) and is_int(group) and group > 0 and batch % group:
        out.append(f"orchestrator.batch_size = {batch} is not divisible by orchestrator.group_size = {group}")
    if steps is not None and steps[0] != steps[1]:
        out.append("trainer.max_steps and orchestrator.max_steps differ")
    if schedule == "linear" and warmup == 0 and decay == 0:
        out.append("trainer.scheduler: a linear scheduler needs warmup_steps > 0 or decay_steps > 0")
    if schedule == "linear" and is_int(max_steps) and decay > 0 and warmup + decay > max_steps:
        out.append(f"trainer.scheduler: warmup_steps + decay_steps = {warmup + decay} exceeds max_steps = {max_steps}")
    if schedule == "cosine" and is_int(max_steps) and warmup >= max_steps:
        out.append(f"trainer.scheduler: warmup_steps = {warmup} must be below max_steps = {max_steps}")
    return out
