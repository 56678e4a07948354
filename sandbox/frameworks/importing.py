"""The import engine shared by every framework: reading a config file into flat ``key -> value``
settings (with the line each key came from), the :class:`Mapper` an importer consumes them with
(one :class:`Row` per key: mapped, converted, pinned, scale, setup, unsupported, ignored, unknown),
and the scenario it builds on a shipped proxy task. Guide: ``docs/import.md``.

Nothing is dropped silently: a key no rule takes ends as an ``unknown`` row in IMPORT.md, and a
key whose value the sandbox cannot simulate ends as ``unsupported`` with the reason.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sandbox.base.readfile import MAX_DEPTH, TOML_LIMIT, InputFileError, check_depth, read_text, value_depth
from sandbox.importers.errors import ConfigImportError
from sandbox.importers.launch import Launch, read_launch

MAX_INT_DIGITS = 15
"""An integer in a config has at most this many digits (GPU counts, batch sizes, token caps, seeds
are far smaller): a larger one is refused before any arithmetic, so no list is sized by it and no
conversion overflows (Python refuses to print an integer of over 4,300 digits at all)."""
YAML_MAX_NODES = 100_000
"""A YAML config expands to at most this many values, aliases (``*a``) counted each time they are
used: a config has a few hundred; an alias bomb (9 levels of 9 aliases: 9^9 values) is refused
before anything walks it."""


def _check_scalar(value: Any, key: str, where: str, path: str) -> None:
    """An integer beyond :data:`MAX_INT_DIGITS` digits or a string no UTF-8 file can hold (a lone
    surrogate, as a JSON ``"\\ud800"`` escape gives): :class:`ConfigImportError` naming the key."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10**MAX_INT_DIGITS:
            digits = "over 4,300" if v.bit_length() > 14_000 else f"{len(str(abs(v)))}"
            raise ConfigImportError(
                f"{path}: {where}: {key}: an integer of {digits} digits; expected at most {MAX_INT_DIGITS} digits"
            )
        elif isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise ConfigImportError(
                    f"{path}: {where}: {key}: the text holds a lone surrogate ({v.encode('utf-8', 'backslashreplace')[:40]!r}); "
                    "expected UTF-8 text"
                ) from None


# ------------------------------------------------------------------------------------------------
# reading: every format becomes {dotted key: value} plus {dotted key: where}
# ------------------------------------------------------------------------------------------------


@dataclass
class Settings:
    """A config file read flat: ``values[key]`` and ``where[key]`` (``"line 3"``, ``"key a.b"``)."""

    path: str
    values: dict[str, Any] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)
    entry: str | None = None  # the module, script or console script the launch command runs
    entry_line: int = 0
    config_name: str | None = None  # Hydra --config-name (and --config-path) of the launch command
    config_path: str | None = None
    notes: list[str] = field(default_factory=list)  # what reading the file assumed (IMPORT.md lists them)
    unresolved: dict[str, int] = field(default_factory=dict)  # shell variables the file uses but never sets
    launcher_args: dict[str, list[str]] = field(default_factory=dict)
    known: dict[str, Any] | None = None  # the framework's own keys with their defaults, when known
    known_source: str = ""
    entry_override: str | None = None  # the entry point or config class named on the command line (--entry)

    def add(self, key: str, value: Any, where: str) -> None:
        _check_scalar(key, "a key", where, self.path)
        _check_scalar(value, key, where, self.path)
        if key in self.values:
            raise ConfigImportError(f"{self.path}: {where}: {key} given twice (first at {self.where[key]})")
        self.values[key] = value
        self.where[key] = where


def _read(path: str | Path) -> str:
    try:
        text = read_text(path, TOML_LIMIT, "config file")
        check_depth(text, path, "config file")
    except InputFileError as exc:
        raise ConfigImportError(str(exc)) from None
    except FileNotFoundError:
        raise ConfigImportError(f"{path}: file not found") from None
    return text


def _flatten(tree: Any, prefix: str, out: Settings, lines: dict[str, int] | None = None) -> None:
    if isinstance(tree, dict) and tree:
        for k, v in tree.items():
            if not isinstance(k, str):
                raise ConfigImportError(f"{out.path}: key {prefix}{k!r} is not a string")
            _flatten(v, f"{prefix}{k}.", out, lines)
        return
    key = prefix[:-1]
    where = f"line {lines[key]}" if lines and key in lines else f"key {key}"
    out.add(key, tree, where)


def safe_yaml(text: str, path: str | Path, where: str = "") -> Any:
    """``yaml.safe_load(text)`` with its size bounded before anything is built: the events are
    scanned first (PyYAML's parser keeps its own stack, so this never recurses) and a mapping or
    list nested deeper than :data:`MAX_DEPTH` levels, in block style (indentation) as well as in
    brackets, is refused; then the composed node graph is measured with every alias expanded (each
    node's expanded size computed once) and a document over :data:`YAML_MAX_NODES` values, or an
    alias that contains itself, is refused. A number Python cannot read (an integer of over 4,300
    digits) is a :class:`ConfigImportError` too."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ConfigImportError(
                        f"{path}: {where}nested too deeply (over {MAX_DEPTH} levels of mappings or lists)"
                    )
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc, where) from None
    if node is not None:
        _check_yaml_size(node, path, where)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc, where) from None
    except ValueError as exc:  # int("9" * 5000): over Python's integer conversion limit
        raise ConfigImportError(f"{path}: {where}a number cannot be read ({exc})") from None


def _check_yaml_size(root: yaml.Node, path: str | Path, where: str) -> None:
    """Refuse a node graph whose expansion (aliases repeated where used) exceeds :data:`YAML_MAX_NODES`."""
    size: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    open_: set[int] = set()
    while stack:
        node, done = stack.pop()
        if id(node) in size:
            continue
        kids = (
            [n for kv in node.value for n in kv]
            if isinstance(node, yaml.MappingNode)
            else list(node.value)
            if isinstance(node, yaml.SequenceNode)
            else []
        )
        if done:
            open_.discard(id(node))
            size[id(node)] = 1 + sum(size[id(k)] for k in kids)
            if size[id(node)] > YAML_MAX_NODES:
                raise ConfigImportError(
                    f"{path}: {where}the YAML expands to over {YAML_MAX_NODES:,} values (aliases "
                    "counted where used): an alias bomb or not a config"
                )
            continue
        if id(node) in open_:
            raise ConfigImportError(f"{path}: {where}a YAML alias contains itself (a recursive structure)")
        open_.add(id(node))
        stack.append((node, True))
        for k in kids:
            if id(k) in open_:
                raise ConfigImportError(f"{path}: {where}a YAML alias contains itself (a recursive structure)")
            if id(k) not in size:
                stack.append((k, False))


def _yaml_lines(text: str) -> dict[str, int]:
    """Dotted key -> line number of a YAML mapping (from the composed node tree)."""
    lines: dict[str, int] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = f"{prefix}{k.value}"
                lines[key] = k.start_mark.line + 1
                walk(v, key + ".")

    try:
        walk(yaml.compose(text, Loader=yaml.SafeLoader), "")
    except yaml.YAMLError:
        pass
    return lines


def _yaml_error(path: str | Path, exc: yaml.YAMLError, prefix: str = "") -> ConfigImportError:
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None and not prefix else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return ConfigImportError(f"{path}: {prefix}{where}not valid YAML ({problem})")


def _tree(data: Any, path: str | Path, lines: dict[str, int] | None = None) -> Settings:
    if not isinstance(data, dict):
        raise ConfigImportError(f"{path}: expected a mapping of keys at the top level, got {type(data).__name__}")
    if value_depth(data) > MAX_DEPTH:
        raise ConfigImportError(f"{path}: nested too deeply")
    out = Settings(str(path))
    _flatten(data, "", out, lines)
    return out


def read_yaml(path: str | Path) -> Settings:
    text = _read(path)
    data = safe_yaml(text, path)
    return _tree(_numbers(data) if data is not None else {}, path, _yaml_lines(text))


def _numbers(x: Any) -> Any:
    """YAML 1.1 reads ``1e-8`` (no dot) and ``.inf``-less ``inf`` as strings; the frameworks' loaders (OmegaConf,
    Hydra) read numbers."""
    if isinstance(x, dict):
        return {k: _numbers(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_numbers(v) for v in x]
    if isinstance(x, str) and _is_number(x.strip()) and x.strip().lower() not in ("nan",):
        return float(x)
    return x


def read_json_config(path: str | Path) -> Settings:
    text = _read(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigImportError(f"{path}: line {exc.lineno}, column {exc.colno}: not valid JSON ({exc.msg})") from None
    except ValueError as exc:  # an integer over Python's 4,300-digit conversion limit
        raise ConfigImportError(f"{path}: a number cannot be read ({exc})") from None
    lines = {k: i + 1 for i, ln in enumerate(text.splitlines()) for k in [_json_key(ln)] if k}
    return _tree(
        data, path, lines if isinstance(data, dict) and all(not isinstance(v, dict) for v in data.values()) else None
    )


def _json_key(line: str) -> str | None:
    s = line.strip()
    if s.startswith('"') and '":' in s:
        return s[1 : s.index('":')]
    return None


def read_toml_config(path: str | Path) -> Settings:
    import tomllib

    text = _read(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigImportError(f"{path}: not valid TOML ({exc})") from None
    except ValueError as exc:  # an integer over Python's 4,300-digit conversion limit
        raise ConfigImportError(f"{path}: a number cannot be read ({exc})") from None
    return _tree(data, path)


def _hydra_value(text: str, path: str | Path, line: int) -> Any:
    """A value of Hydra's override grammar, read as YAML flow (null, true, numbers, [a,b], 'quoted')."""
    if text == "":
        return ""
    try:
        value = safe_yaml(text, path, f"line {line}: ")
    except ConfigImportError as exc:
        if "not valid YAML" not in str(exc):
            raise
        raise ConfigImportError(
            f"{path}: line {line}: value {text!r} is not a Hydra value (number, true/false, null, [a,b], 'string')"
        ) from None
    if isinstance(value, str) and not text.startswith(("'", '"')) and _is_number(text):
        return float(text)  # YAML 1.1 reads 1e-08 (no dot) and inf as words; Hydra and argparse read numbers
    if isinstance(value, bool) and text.lower() not in ("true", "false"):
        return text  # YAML 1.1's on/off/yes/no are words in Hydra's grammar and in argparse
    return value


def _override(out: Settings, path: str | Path, n: int, item: str, line: str) -> None:
    key, eq, value = item.partition("=")
    key = key.strip().lstrip("+~")
    if not eq or not key or any(c.isspace() for c in key) or key.startswith("-"):
        raise ConfigImportError(f"{path}: line {n}: expected key=value (a Hydra override), got {line!r}")
    out.add(key, _hydra_value(value.strip(), path, n), f"line {n}")


HYDRA_FLAGS = {
    "--config-path": "config_path",
    "-cp": "config_path",
    "--config-name": "config_name",
    "-cn": "config_name",
    "--config-dir": "config_dir",
    "-cd": "config_dir",
}


def _launch(path: str | Path, text: str) -> tuple[Settings, Launch]:
    launch = read_launch(str(path), text)
    out = Settings(
        str(path),
        entry=launch.entry,
        entry_line=launch.entry_line,
        notes=list(launch.notes),
        unresolved=dict(launch.unresolved),
        launcher_args=dict(launch.launcher_args),
    )
    if launch.entry is None and launch.others:
        text_, n = launch.others[0]
        raise ConfigImportError(
            f"{path}: line {n}: expected key=value (a Hydra override), a --flag or a launch command "
            f"(python -m MODULE, torchrun, ray job submit -- ...), got {text_!r}"
        )
    if launch.entry is None and not launch.args:
        raise ConfigImportError(
            f"{path}: no launch command (python -m MODULE, torchrun, ray job submit -- ...) and no "
            "overrides or flags found"
        )
    return out, launch


def read_overrides(path: str | Path) -> Settings:
    """Hydra override lines ``key=value`` (``+key=`` / ``++key=`` / ``~key`` accepted), one per line as the
    exporter writes them, or a launch script read as the shell reads it (:mod:`.launch`: variables,
    continuations, ``ray job submit -- python3 -m MODULE``, quoted ``'key=value'``); ``--config-path`` /
    ``--config-name`` are kept on the settings for the importer to compose against."""
    out, launch = _launch(path, _read(path))
    words = launch.args
    i = 0
    while i < len(words):
        w = words[i]
        flag, eq, inline = w.text.partition("=")
        if flag in HYDRA_FLAGS:
            if not eq:
                i += 1
                if i >= len(words):
                    raise ConfigImportError(f"{path}: line {w.line}: {flag} needs a value")
                inline = words[i].text
            if HYDRA_FLAGS[flag] == "config_dir":
                out.notes.append(f"line {w.line}: {flag} {inline}: an extra config directory is not read")
            else:
                setattr(out, HYDRA_FLAGS[flag], inline)
        elif w.text.startswith("-"):
            raise ConfigImportError(
                f"{path}: line {w.line}: {w.text!r} is not a Hydra override or flag this importer "
                "reads (--config-path, --config-name)"
                f"{suggest_framework([launch.entry or '', w.text], 'verl')}"
            )
        else:
            _override(out, path, w.line, w.text, w.text)
        i += 1
    return out


#: how a file gives away its framework: (entry-point or key pattern, framework)
_FRAMEWORK_HINTS: tuple[tuple[str, str], ...] = (
    (r"(^|[./])openrlhf|^--?(rollout|actor|train|vllm|algo)\.", "openrlhf"),
    (r"(^|[./])areal|max_head_offpolicyness|^gconfig\.|allocation_mode", "areal"),
    (r"(^|[./])prime_rl|^(rl|orchestrator|trainer)$|^orchestrator\.|^deployment\.", "prime-rl"),
    (r"(^|[./])trl\b|grpo\.py$|^num_generations$|^per_device_train_batch_size$", "trl"),
    (r"^async_training\.|fully_async_policy", "verl"),
    (r"(^|[./])verl|main_ppo|^actor_rollout_ref\.", "verl"),
)


def suggest_framework(text: str | list[str], current: str) -> str:
    """`` (this looks like an X config: use -f X)`` when an entry point or keys point at another framework."""
    for item in [text] if isinstance(text, str) else text:
        for pattern, fw in _FRAMEWORK_HINTS:
            if re.search(pattern, item) and fw != current and not (current == "verl-vcpo" and fw == "verl"):
                return f" (this looks like a{'n' if fw[0] in 'aeio' else ''} {fw} config: use -f {fw})"
    return ""


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def read_flags(path: str | Path, framework: str = "openrlhf") -> Settings:
    """A command-line flag list (``--flag value``, ``--switch``, ``--flag=value``), one or several per line,
    or a launch script read as the shell reads it (:mod:`.launch`: arrays, ``ray job submit -- python3 -m``)."""
    out, launch = _launch(path, _read(path))
    tokens = [(w.text, w.line) for w in launch.args]
    i = 0
    while i < len(tokens):
        tok, n = tokens[i]
        if not tok.startswith("--"):
            raise ConfigImportError(
                f"{path}: line {n}: expected a --flag, got {tok!r}"
                f"{suggest_framework([launch.entry or '', tok.split('=')[0]], framework)}"
            )
        name, eq, inline = tok[2:].partition("=")
        if not name:
            raise ConfigImportError(f"{path}: line {n}: empty flag name")
        if eq:
            out.add(name, _hydra_value(inline, path, n), f"line {n}")
            i += 1
            continue
        values = []
        i += 1
        while i < len(tokens) and not (tokens[i][0].startswith("--") and not _is_number(tokens[i][0])):
            values.append(_hydra_value(tokens[i][0], path, tokens[i][1]))
            i += 1
        # a bare flag is a store_true switch; several values are an nargs list (--actor.adam.betas 0.9 0.95)
        out.add(name, True if not values else values[0] if len(values) == 1 else values, f"line {n}")
    return out


# ------------------------------------------------------------------------------------------------
# mapping: consume keys, record rows, set scenario fields
# ------------------------------------------------------------------------------------------------

RowKind = str  # mapped | converted | pinned | default | scale | setup | unsupported | ignored | unknown

ROW_TITLES: dict[str, tuple[str, str]] = {
    "mapped": ("Mapped as is", "The config's value is the scenario's value."),
    "converted": ("Converted", "Mapped after a unit, direction or counting conversion (the note gives it)."),
    "default": ("Framework default", "Not in the config: the framework's default, mapped as if written."),
    "pinned": ("Checked conventions", "Keys the sandbox's model assumes; the config's value agrees."),
    "setup": ("Your setup", "Batch geometry and cluster facts: mapped, check them against the real run."),
    "scale": (
        "Scale-dependent",
        "Kept out of the scenario: the proxy task has its own scale (reported as a multiplier of yours).",
    ),
    "unsupported": ("Cannot be represented", "The sandbox cannot simulate this value; the scenario runs without it."),
    "ignored": (
        "Not simulated",
        "Framework-side settings (paths, logging, parallelism) with no bearing on the simulated algorithm.",
    ),
    "unknown": (
        "Unknown keys",
        "No rule reads these keys: framework keys the sandbox does not model, or misspelt "
        "keys; not mapped. Check the spelling and the framework version.",
    ),
}


@dataclass(frozen=True)
class Row:
    """One line of IMPORT.md: a framework ``key`` and its ``value``, the scenario ``field`` it set (and
    ``field_value``), and why."""

    kind: RowKind
    key: str
    value: Any
    field: str | None
    field_value: Any
    note: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": self.key,
            "value": self.value,
            "field": self.field,
            "field_value": self.field_value,
            "note": self.note,
        }


_MISSING = object()


class Mapper:
    """Consumes a config's keys for one importer: each call takes a key, checks its type, sets scenario
    fields and records a row; :meth:`finish` lists the keys no call took as ``unknown``."""

    def __init__(self, settings: Settings, framework: str):
        self.s = settings
        self.framework = framework
        self.used: set[str] = set()
        self.rows: list[Row] = []
        self.fields: dict[str, Any] = {}

    # -- reading values ----------------------------------------------------------------------------
    def has(self, key: str) -> bool:
        return key in self.s.values

    def _where(self, key: str) -> str:
        return f"{self.s.path}: {self.s.where.get(key, 'key ' + key)}"

    def raw(self, key: str, default: Any = _MISSING, check: bool = True) -> Any:
        """The value of ``key`` (marked as read), or ``default`` when the config does not set it; ``check``: a
        value holding a shell variable the file never sets is an error naming it (off for keys only listed)."""
        if key in self.s.values:
            self.used.add(key)
            v = self.s.values[key]
            if check and isinstance(v, str) and self.s.unresolved:
                for name, line in self.s.unresolved.items():
                    if "${" + name + "}" in v or "${" + name + "[" in v:
                        raise ConfigImportError(
                            f"{self._where(key)}: {key} = {v!r}: the shell variable {name} is not "
                            f"set in the file (first used on line {line}); set it there to import "
                            "this key"
                        )
            return v
        if default is _MISSING:
            raise ConfigImportError(f"{self.s.path}: {key}: required")
        return default

    def value(self, key: str, kind: str, default: Any = _MISSING) -> Any:
        """``key`` checked to be ``kind`` (``int``, ``float``, ``bool``, ``str``, ``floats``: a list of floats,
        ``str?``/``float?``: that or null); a wrong type is an error naming the key and its line."""
        v = self.raw(key, default)
        if key not in self.s.values:
            return v
        ok = {
            "int": isinstance(v, int) and not isinstance(v, bool),
            "float": isinstance(v, (int, float)) and not isinstance(v, bool),
            "bool": isinstance(v, bool),
            "str": isinstance(v, str),
            "str?": v is None or isinstance(v, str),
            "float?": v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)),
            "floats": isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v),
        }[kind]
        if not ok:
            want = {
                "int": "an integer",
                "float": "a number",
                "bool": "true or false",
                "str": "a string",
                "str?": "a string or null",
                "float?": "a number or null",
                "floats": "a list of numbers",
            }[kind]
            raise ConfigImportError(f"{self._where(key)}: {key} = {v!r}: expected {want}")
        if kind == "float" or (kind == "float?" and v is not None):
            v = float(v)
        if kind == "floats":
            v = [float(x) for x in v]
        return v

    def bad(self, key: str, why: str) -> ConfigImportError:
        return ConfigImportError(f"{self._where(key)}: {key} = {self.s.values.get(key)!r}: {why}")

    # -- rows ----------------------------------------------------------------------------------------
    def set(self, field_: str, value: Any) -> None:
        if field_ in self.fields and self.fields[field_] != value:
            raise AssertionError(f"importer bug: {field_} set twice ({self.fields[field_]!r}, then {value!r})")
        self.fields[field_] = value

    def override(self, field_: str, value: Any) -> None:
        """Replace a field an earlier rule set (a later key refines it: the fork's grad_baselining replaces
        the group-mean baseline); the rows say both."""
        self.fields[field_] = value

    def row(
        self, kind: RowKind, key: str, value: Any, field_: str | None = None, field_value: Any = None, note: str = ""
    ) -> None:
        if kind == "mapped" and key not in self.s.values:
            kind = "default"
        if field_ is not None and kind not in ("scale", "unsupported"):
            self.set(field_, field_value)
        self.rows.append(Row(kind, key, value, field_, field_value, note))

    def mapped(
        self, key: str, field_: str, value: Any, note: str = "", convert: Callable[[Any], Any] | None = None
    ) -> None:
        kind = "mapped" if convert is None else "converted"
        if key not in self.s.values:
            kind = "default"
        self.row(kind, key, value, field_, value if convert is None else convert(value), note)

    def pinned(self, key: str, expected: Any, note: str, default: Any = _MISSING) -> None:
        """A key whose value the sandbox's model assumes: agreeing is a ``pinned`` row; otherwise ``unsupported``."""
        if key not in self.s.values and default is _MISSING:
            return
        v = self.raw(key, default)
        same = v == expected or (isinstance(v, float) and isinstance(expected, float) and math.isclose(v, expected))
        if same:
            if key in self.s.values:
                self.row("pinned", key, v, note=note)
        else:
            self.row(
                "unsupported",
                key,
                v,
                note=f"the sandbox assumes {expected!r} here ({note}); the scenario runs as if {key} = {expected!r}",
            )

    def ignore(self, key: str, note: str) -> None:
        if key in self.s.values:
            self.row("ignored", key, self.raw(key, check=False), note=note)

    def ignore_prefix(self, prefix: str, note: str) -> None:
        for key in list(self.s.values):
            if key.startswith(prefix) and key not in self.used:
                self.ignore(key, note)

    def unsupported(self, key: str, note: str) -> None:
        if key in self.s.values:
            self.row("unsupported", key, self.raw(key), note=note)

    def scale(self, key: str, field_: str, note: str, default: Any = _MISSING) -> None:
        """A scale-dependent value, kept out of the scenario and recorded (IMPORT.md; preflight reads the learning
        rate to place it on its proxy): a learning rate must be a positive finite number, a gradient clip a
        number >= 0 (``inf``: no clipping); ``default``: the framework's own, listed when the file is silent."""
        if key in self.s.values:
            v = self.raw(key, check=False)
            number = isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)
            if field_ == "algorithm.optimizer.lr" and not (number and 0 < v < math.inf):
                raise self.bad(key, "expected a positive finite learning rate")
            if field_ == "algorithm.optimizer.grad_clip" and v is not None and not (number and v >= 0):
                raise self.bad(key, "expected a gradient clip >= 0 (or null)")
            self.row("scale", key, v, field_, None, note)
        elif default is not _MISSING and default is not None:
            self.rows.append(
                Row("scale", key, default, field_, None, f"{note} (not in the file: the framework's default)")
            )

    def finish(self) -> None:
        for key in self.s.values:
            if key not in self.used and self.s.values[key] == {}:
                self.rows.append(
                    Row(
                        "ignored",
                        key,
                        {},
                        None,
                        None,
                        f"an empty table ({self.s.where[key]}): the framework's defaults of its keys",
                    )
                )
                self.used.add(key)
            elif key not in self.used:
                where = self.s.where[key]
                if self.s.known is None:
                    note = f"no {self.framework} rule reads this key ({where})"
                elif key in self.s.known or any(k.startswith(key + ".") for k in self.s.known):
                    note = (
                        f"a {self.s.known_source} key (default {_short(self.s.known.get(key))}) that no rule of the "
                        f"sandbox reads ({where}): not simulated"
                    )
                else:
                    note = (
                        f"not a key of {self.s.known_source} ({where}): misspelt, added by a plug-in, or another "
                        "version's key; not mapped"
                    )
                self.rows.append(Row("unknown", key, self.s.values[key], None, None, note))
                self.used.add(key)


__all__ = [
    "ConfigImportError",
    "Mapper",
    "ROW_TITLES",
    "Row",
    "Settings",
    "read_flags",
    "read_json_config",
    "read_overrides",
    "read_toml_config",
    "read_yaml",
]
