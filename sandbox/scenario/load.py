"""Loading scenarios: TOML → dict → dotted-key overrides → validated :class:`Scenario`.

User mistakes become a :class:`ScenarioError` listing each bad field by its dotted path with what
was expected, never a traceback.
"""

from __future__ import annotations

import copy
import difflib
import re
import tomllib
from pathlib import Path
from typing import Any

import tomli_w
from pydantic import ValidationError

from sandbox.base.errors import ScenarioError
from sandbox.base.readfile import MAX_DEPTH, InputFileError, bracket_depth, read_toml_text
from sandbox.scenario.model import Scenario
from sandbox.scenario.schema import Choice, node_at
from sandbox.scenario.schema import Model as SchemaModel
from sandbox.scenario.shipped import DEFAULT_SCENARIO, not_found_hint, resolve_scenario_path  # noqa: F401  (re-exported)


def parse_value(text: str) -> Any:
    """A command-line value as TOML would read it (numbers, booleans, lists, inline tables),
    falling back to a plain string. Nested more than 64 levels: a :class:`ScenarioError`."""
    if bracket_depth(text) > MAX_DEPTH:
        raise ScenarioError(
            [f"{text[:40]}...: nested too deeply (over {MAX_DEPTH} levels of arrays or tables)"], "override"
        )
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def set_dotted(data: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    if not all(keys):
        raise ScenarioError([f"{dotted!r}: expected a dotted key like system.staleness.k_max"], "override")
    node = data
    for k in keys[:-1]:
        nxt = node.setdefault(k, {})
        if not isinstance(nxt, dict):
            raise ScenarioError([f"{dotted}: '{k}' is a value, not a section"], "override")
        node = nxt
    node[keys[-1]] = value


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ScenarioError([f"{item!r}: expected dotted.key=value"], "override")
        key, text = item.split("=", 1)
        out[key.strip()] = parse_value(text.strip())
    return out


def apply_overrides(data: dict, overrides: dict[str, Any]) -> dict:
    data = copy.deepcopy(data)
    for key, value in overrides.items():
        set_dotted(data, key, value)
    return data


def _dotted_loc(loc: tuple, data: Any) -> str:
    """Dotted path of a pydantic error location, without the union tags pydantic inserts
    (a tag is a location element that is not a key of the input at that level)."""
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(node, dict) and item in node:
            parts.append(str(item))
            node = node[item]
        elif isinstance(node, list) and isinstance(item, int) and item < len(node):
            parts.append(f"[{item}]")
            node = node[item]
        elif isinstance(item, str) and node is not None and not isinstance(node, (dict, list)):
            break
        elif isinstance(node, dict) and isinstance(item, str) and item not in node and _looks_like_tag(item, node):
            continue
        else:
            parts.append(str(item))
            node = None
    return ".".join(parts).replace(".[", "[") or "(top level)"


def _looks_like_tag(item: str, node: dict) -> bool:
    # task.model's union is keyed by "backend", which defaults to "builtin" when absent
    tags = {node.get("kind"), node.get("name"), node.get("backend", "builtin")}
    return item in tags or "[" in item or item.startswith("function-")


REFERENCE = "docs/scenario-reference.md"


def _unknown_key(loc: tuple) -> str:
    """The message for an unknown key at pydantic location ``loc``: the closest valid key at that
    level (difflib ratio ≥ 0.6) as a did-you-mean, the union member that has the key when it
    belongs to another ``kind``/``name``, or else the valid keys."""
    key = loc[-1] if loc else ""
    node = node_at(Scenario, tuple(loc[:-1]))
    if not isinstance(node, SchemaModel) or not isinstance(key, str):
        return f"unknown key (every key: {REFERENCE})"
    valid = list(node.cls.model_fields)
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        return f"unknown key; did you mean '{close[0]}'? (every key: {REFERENCE})"
    parent = node_at(Scenario, tuple(loc[:-2])) if len(loc) >= 2 else None
    if isinstance(parent, Choice) and loc[-2] in parent.members:
        owners = [
            tag
            for tag, m in parent.members.items()
            if tag != loc[-2] and isinstance(m, SchemaModel) and key in m.cls.model_fields
        ]
        if owners:
            kinds = " or ".join(f"{parent.key} = '{t}'" for t in owners)
            return (
                f"unknown key for {parent.key} = '{loc[-2]}' ('{key}' is a key of {kinds}); "
                f"expected one of {', '.join(valid)}"
            )
    return f"unknown key; expected one of {', '.join(valid)} (every key: {REFERENCE})"


def _describe(err: dict, data: dict) -> str:
    where = _dotted_loc(tuple(err.get("loc", ())), data)
    msg = err.get("msg", "invalid")
    if err.get("type") == "extra_forbidden":
        msg = _unknown_key(tuple(err.get("loc", ())))
        switched = re.match(r"unknown key for (\w+) = '([^']*)' \(", msg)
        if switched and "." in where:
            # a dotted --set of the tag keeps the old member's keys: the table must be replaced whole
            table, (tag_key, tag) = where.rsplit(".", 1)[0], switched.groups()
            msg += f"; to switch {tag_key}, replace the whole table: --set '{table}={{{tag_key} = \"{tag}\", ...}}'"
    elif err.get("type") in ("union_tag_invalid", "union_tag_not_found"):
        ctx = err.get("ctx", {})
        field = str(ctx.get("discriminator", "kind")).strip("'")
        tag, expected = str(ctx.get("tag", "")), str(ctx.get("expected_tags", "?"))
        close = difflib.get_close_matches(tag, re.findall(r"'([^']*)'", expected), n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        msg = f"unknown {field} {tag!r}; {hint}expected one of {expected}"
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if "input" in err and err.get("type") not in ("missing", "extra_forbidden") and not isinstance(err["input"], dict):
        msg += f" (got {err['input']!r})"
    if re.match(r"^[a-z_]+(\.[a-z_]+)+: ", msg) and (where == "(top level)" or msg.startswith(f"{where}.")):
        return msg  # a cross-section check that names its own (deeper) field
    return f"{where}: {msg}"


def validate_scenario(data: dict, source: str = "scenario") -> Scenario:
    """Strict types: a string "16" is not an int and a float is not an int (an int is a float, as
    TOML writes ``lr = 1``); values from ``--set`` are TOML, so ``--set x=16`` is an int."""
    try:
        return Scenario.model_validate(data, strict=True)
    except ValidationError as exc:
        raise ScenarioError([_describe(e, data) for e in exc.errors()], source) from None
    except ValueError as exc:  # validators that run outside pydantic's wrapping
        raise ScenarioError([str(exc)], source) from None


def read_toml(path: str | Path) -> dict:
    """A TOML file as a dict; the relative ``path`` of every ``{kind = "trace", path = ...}`` table in
    it (a trace-driven delay, docs/system.md#trace) is made absolute against the file's directory.
    A ``path`` that does not exist may name a shipped scenario (:mod:`sandbox.scenario.shipped`).

    Read through :func:`sandbox.base.readfile.read_toml_text`: a regular file (no directory, FIFO or
    device) of at most 4 MiB of UTF-8 text nested at most 64 levels; anything else is a
    :class:`ScenarioError` naming the file (and the byte offset of a bad byte)."""
    given = Path(path)
    path = resolve_scenario_path(given)
    if not path.exists() and not path.is_symlink():
        raise ScenarioError([f"file not found: {given} ({not_found_hint(given)})"], str(given))
    try:
        data = read_toml_text(path, "scenario file" if path.suffix == ".toml" else "file")
    except InputFileError as exc:
        raise ScenarioError([_without_path(str(exc), path)], str(path)) from None
    _resolve_trace_paths(data, path.resolve().parent)
    return data


def _without_path(message: str, path: Path) -> str:
    """``message`` without its leading ``<path>: `` (the ScenarioError's source names the file)."""
    prefix = f"{path}: "
    return message[len(prefix) :] if message.startswith(prefix) else message


def _resolve_trace_paths(node: Any, base: Path) -> None:
    if isinstance(node, dict):
        if (
            node.get("kind") == "trace"
            and isinstance(node.get("path"), str)
            and not Path(node["path"]).expanduser().is_absolute()
        ):
            node["path"] = str(base / node["path"])
        for value in node.values():
            _resolve_trace_paths(value, base)
    elif isinstance(node, list):
        for value in node:
            _resolve_trace_paths(value, base)


SWEEP_ONLY_KEYS = frozenset({"base", "sweep", "grid", "zip", "seeds", "set"})
"""Top-level keys of a sweep file (sandbox/sweep/spec.py) that no scenario has."""
SCENARIO_ONLY_KEYS = frozenset({"task", "system", "algorithm", "run", "variants"})
"""Top-level tables of a scenario that no sweep file has."""


def load_scenario(path: str | Path | None = None, overrides: list[str] | dict | None = None) -> tuple[Scenario, dict]:
    """Read, override and validate a scenario; returns the model and the raw (overridden) dict.

    A problem the overrides cause (absent when the file is validated alone) is blamed on them:
    ``invalid override --set system.k=16 (applied to scenarios/fixed_lag.toml)``."""
    path = Path(path) if path is not None else DEFAULT_SCENARIO
    data = read_toml(path)
    if SWEEP_ONLY_KEYS & set(data) and not SCENARIO_ONLY_KEYS & set(data):
        raise ScenarioError(
            [
                f"this is a sweep file ({', '.join(sorted(SWEEP_ONLY_KEYS & set(data)))} at the top), not a "
                f"scenario: use `sandbox sweep {path}`"
            ],
            str(path),
        )
    ov = overrides if isinstance(overrides, dict) else parse_overrides(overrides)
    merged = apply_overrides(data, ov)
    try:
        return validate_scenario(merged, str(path)), merged
    except ScenarioError as exc:
        if not ov:
            raise
        raise blame_overrides(exc, data, ov, overrides, str(path)) from None


def override_texts(ov: dict[str, Any], given: list[str] | dict | None) -> dict[str, str]:
    """``--set key=value`` as the user wrote it (the last one per key), by key."""
    if isinstance(given, dict) or not given:
        return {k: f"--set {k}={tomli_w.dumps({'v': v}).strip()[4:]}" for k, v in ov.items()}
    return {item.split("=", 1)[0].strip(): f"--set {item.strip()}" for item in given if "=" in item}


def _related(problem: str, key: str) -> bool:
    """Whether a problem (``dotted.where: message``) is at, under or beside the override ``key``
    (an override of ``system.staleness.kind`` makes the other keys of ``system.staleness`` invalid)."""
    where = problem.split(": ", 1)[0].split("[", 1)[0]
    section = key.rpartition(".")[0]
    return where == key or where.startswith(key + ".") or (bool(section) and where.startswith(section + "."))


def blame_overrides(
    exc: ScenarioError, data: dict, ov: dict[str, Any], given: list[str] | dict | None, path: str
) -> ScenarioError:
    """``exc`` (raised validating ``data`` with the overrides ``ov`` applied) with each problem the
    overrides caused blamed on them: those absent when ``data`` is validated alone. ``given`` is what
    the user wrote (``["key=value", ...]``) for the message; ``path`` names the file."""
    try:
        validate_scenario(data, path)
        from_file: set[str] = set()
    except ScenarioError as alone:
        from_file = set(alone.problems)
    texts = override_texts(ov, given)
    caused = [p for p in exc.problems if p not in from_file]
    if not caused:
        return exc
    culprits = [t for k, t in texts.items() if any(_related(p, k) for p in caused)] or list(texts.values())
    if len(caused) == len(exc.problems):
        return ScenarioError(exc.problems, f"override {' '.join(culprits)} (applied to {path})")
    problems = [p if p in from_file else f"{p} [from {' '.join(culprits)}]" for p in exc.problems]
    return ScenarioError(problems, f"{path} with override {' '.join(culprits)}")


def variant_scenarios(scn: Scenario, raw: dict) -> dict[str, Scenario]:
    """One validated scenario per variant (or ``{"": scn}`` when there are none)."""
    if not scn.variants:
        return {"": scn}
    base = {k: v for k, v in raw.items() if k != "variants"}
    out = {}
    for name, ov in scn.variants.items():
        out[name] = validate_scenario(apply_overrides(base, ov), f"variant '{name}'")
    return out


def _strip_none(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _strip_none(v) for k, v in x.items() if v is not None}
    if isinstance(x, (list, tuple)):
        return [_strip_none(v) for v in x]
    return x


def dump_scenario(scn: Scenario, variants: bool = False) -> str:
    """The resolved scenario as TOML (every default made explicit; None fields omitted); with ``variants``
    its ``[variants]`` tables too, as written (overrides of the base), so that the text loads and runs as the
    whole scenario (``sandbox scenario``, the top-level ``scenario.toml`` of a multi-variant run)."""
    data = _strip_none(scn.model_dump(mode="json", exclude={"variants"}))
    if variants and scn.variants:
        data["variants"] = scn.model_dump(include={"variants"})["variants"]  # the overrides as read (inf stays inf)
    return tomli_w.dumps(data)
