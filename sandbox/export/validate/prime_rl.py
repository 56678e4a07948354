"""The prime-rl 559b4477 export validator; what it checks and from which upstream files: docs/promotion.md#how-each-validator-checks-its-framework."""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import tomllib

from .common import flat, rule_problems

COMMIT = "559b44772e471d1538537b8805cc77f3824a5e64"
KEYS_DIR = Path(__file__).resolve().parents[1] / "keys"
CONFIGS_PATH = "packages/prime-rl-configs/src/prime_rl/configs"
VALIDATION_PATH = "packages/prime-rl-configs/src/prime_rl/utils/validation.py"  # holds one cross-field rule
CONFIG_MODULES = ("algorithm", "env_server", "evals", "inference", "monitors", "orchestrator", "rl", "sft", "shared", "trainer")
ROOT_MODEL = "rl.RLConfig"
MAIN_FILE = "rl.toml"


def key_list_path(commit: str = COMMIT) -> Path:
    return KEYS_DIR / f"prime_rl_{commit[:8]}.json"


def load_key_list(commit: str = COMMIT) -> dict:
    return json.loads(key_list_path(commit).read_text())


# ------------------------------------------------------------------------------------------------
# key list from the AST of the pydantic models
# ------------------------------------------------------------------------------------------------

_BUILTINS = {"int": "int", "float": "float", "str": "str", "bool": "bool", "Path": "path", "Any": "any"}

# Cross-field rules of prime-rl's model validators on the keys exporters write. Each names the
# validator it restates; the generator refuses to write a key list if that validator is gone.
CROSS_FIELD_RULES = [
    {"rule": "batch_size_divisible", "where": "orchestrator.OrchestratorConfig.resolve_batching",
     "text": "orchestrator.batch_size must be divisible by orchestrator.group_size"},
    {"rule": "one_batch_size", "where": "orchestrator.OrchestratorConfig.resolve_batching",
     "text": "set exactly one of orchestrator.batch_size and orchestrator.token_batch_size"},
    {"rule": "linear_scheduler_phases", "where": "trainer.validate_scheduler",
     "text": "a linear scheduler needs warmup_steps > 0 or decay_steps > 0; warmup_steps + decay_steps <= max_steps"},
    {"rule": "cosine_scheduler_phases", "where": "trainer.validate_scheduler",
     "text": "a cosine scheduler needs warmup_steps < max_steps"},
    {"rule": "same_max_steps", "where": "validation.validate_shared_max_steps",
     "text": "trainer.max_steps and orchestrator.max_steps must be equal"},
]


class _Module:
    """One configs module: its classes, type aliases and imported names."""

    def __init__(self, name: str, source: str):
        self.name = name
        self.tree = ast.parse(source)
        self.classes: dict[str, ast.ClassDef] = {}
        self.aliases: dict[str, ast.expr] = {}
        self.functions: set[str] = set()
        self.imports: dict[str, str] = {}  # local name -> "module.Name" (configs) or "external:..."
        for node in self.tree.body:
            if isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
            elif isinstance(node, ast.FunctionDef):
                self.functions.add(node.name)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                if ast.unparse(node.annotation) == "TypeAlias":
                    self.aliases[node.target.id] = node.value
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                if isinstance(node.value, ast.Subscript):
                    self.aliases[node.targets[0].id] = node.value
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    local = alias.asname or alias.name
                    if node.module.startswith("prime_rl.configs."):
                        self.imports[local] = f"{node.module.rsplit('.', 1)[1]}.{alias.name}"
                    else:
                        self.imports[local] = f"external:{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = f"external:{alias.name}"


class _Schema:
    """Resolves names across the configs modules and turns annotations into type descriptors."""

    def __init__(self, sources: dict[str, str]):
        self.modules = {name: _Module(name, src) for name, src in sources.items()}

    def resolve(self, module: str, name: str) -> tuple[str, str, str]:
        """``(kind, module, name)`` with kind ``class`` | ``alias`` | ``external`` | ``unknown``."""
        mod = self.modules[module]
        if name in mod.classes:
            return "class", module, name
        if name in mod.aliases:
            return "alias", module, name
        target = mod.imports.get(name)
        if target is None:
            return "unknown", module, name
        if target.startswith("external:"):
            return "external", module, target.removeprefix("external:")
        tmod, tname = target.split(".", 1)
        if tmod in self.modules:
            return self.resolve(tmod, tname)
        return "external", module, target

    # -- types ---------------------------------------------------------------------------------
    def type_of(self, module: str, node: ast.expr) -> dict:
        if isinstance(node, ast.Constant):
            if node.value is None:
                return {"kind": "none"}
            if isinstance(node.value, str):  # forward reference
                return self.type_of(module, ast.parse(node.value, mode="eval").body)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self._anyof([self.type_of(module, node.left), self.type_of(module, node.right)])
        if isinstance(node, ast.Name):
            if node.id in _BUILTINS and self.resolve(module, node.id)[0] in ("unknown", "external"):
                return {"kind": _BUILTINS[node.id]}
            if node.id == "list":
                return {"kind": "list", "item": {"kind": "any"}}
            if node.id == "dict":
                return {"kind": "dict", "value": {"kind": "any"}}
            kind, tmod, tname = self.resolve(module, node.id)
            if kind == "class":
                return {"kind": "model", "model": f"{tmod}.{tname}"}
            if kind == "alias":
                return self.type_of(tmod, self.modules[tmod].aliases[tname])
            return {"kind": "opaque", "name": tname if kind == "external" else node.id}
        if isinstance(node, ast.Attribute):
            return {"kind": "opaque", "name": ast.unparse(node)}
        if isinstance(node, ast.Subscript):
            head = ast.unparse(node.value)
            args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if head == "Literal":
                return {"kind": "literal", "choices": [ast.literal_eval(a) for a in args]}
            if head == "list":
                return {"kind": "list", "item": self.type_of(module, args[0])}
            if head == "dict":
                return {"kind": "dict", "value": self.type_of(module, args[1])}
            if head in ("Optional",):
                return self._anyof([self.type_of(module, args[0]), {"kind": "none"}])
            if head == "Union":
                return self._anyof([self.type_of(module, a) for a in args])
            if head == "Annotated":
                return self._annotated(module, args)
            return {"kind": "opaque", "name": ast.unparse(node)}
        return {"kind": "opaque", "name": ast.unparse(node)}

    def _annotated(self, module: str, args: list[ast.expr]) -> dict:
        inner = self.type_of(module, args[0])
        for meta in args[1:]:
            if isinstance(meta, ast.Call):
                fn = ast.unparse(meta.func)
                if fn == "BeforeValidator":  # the raw value is rewritten before validation: accept anything
                    return {"kind": "opaque", "name": ast.unparse(args[0]), "before_validator": True}
                if fn == "Field":
                    disc = next((k.value.value for k in meta.keywords if k.arg == "discriminator"), None)
                    if disc is not None:
                        return self._discriminated(inner, disc)
        return inner

    def _discriminated(self, inner: dict, disc: str) -> dict:
        members = inner["of"] if inner["kind"] == "anyof" else [inner]
        variants: dict[str, str] = {}
        for m in members:
            if m["kind"] != "model":
                continue
            tag = self.fields_of(m["model"])[disc]["default"]
            variants[tag] = m["model"]
        return {"kind": "union", "discriminator": disc, "variants": variants}

    @staticmethod
    def _anyof(types: list[dict]) -> dict:
        flat: list[dict] = []
        for t in types:
            flat.extend(t["of"] if t["kind"] == "anyof" else [t])
        return {"kind": "anyof", "of": flat}

    # -- models --------------------------------------------------------------------------------
    def fields_of(self, qualified: str) -> dict[str, dict]:
        module, name = qualified.split(".", 1)
        cls = self.modules[module].classes[name]
        fields: dict[str, dict] = {}
        for base in cls.bases:
            kind, bmod, bname = self.resolve(module, ast.unparse(base))
            if kind == "class":
                fields.update(self.fields_of(f"{bmod}.{bname}"))
        for stmt in cls.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            if ast.unparse(stmt.annotation).startswith("ClassVar"):
                continue
            fields[stmt.target.id] = self._field(module, stmt)
        return fields

    def extra_of(self, qualified: str) -> str:
        module, name = qualified.split(".", 1)
        cls = self.modules[module].classes[name]
        for stmt in cls.body:
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "model_config" for t in stmt.targets):
                for kw in getattr(stmt.value, "keywords", []):
                    if kw.arg == "extra":
                        return ast.literal_eval(kw.value)
        for base in cls.bases:
            kind, bmod, bname = self.resolve(module, ast.unparse(base))
            if kind == "class":
                return self.extra_of(f"{bmod}.{bname}")
        return "forbid"  # prime-pydantic-config's BaseConfig forbids extra keys

    def _field(self, module: str, stmt: ast.AnnAssign) -> dict:
        out: dict[str, Any] = {"type": self.type_of(module, stmt.annotation)}
        value = stmt.value
        if value is None:
            out["required"] = True
            return out
        if isinstance(value, ast.Call) and ast.unparse(value.func) == "Field":
            if value.args and not (isinstance(value.args[0], ast.Constant) and value.args[0].value is Ellipsis):
                out["default"] = self._default(module, value.args[0])
            for kw in value.keywords:
                if kw.arg == "default":
                    out["default"] = self._default(module, kw.value)
                elif kw.arg == "default_factory":
                    out["default"] = self._default(module, ast.Call(func=kw.value, args=[], keywords=[]))
                elif kw.arg in ("ge", "gt", "le", "lt", "min_length", "max_length"):
                    out[kw.arg] = ast.literal_eval(kw.value)
            if "default" not in out:
                out["required"] = True
            return out
        out["default"] = self._default(module, value)
        return out

    def _default(self, module: str, node: ast.expr) -> Any:
        try:
            return ast.literal_eval(node)
        except (ValueError, SyntaxError):
            pass
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            kind, tmod, tname = self.resolve(module, node.func.id)
            if kind == "class":
                return {"model_default": f"{tmod}.{tname}"}
        return {"expr": ast.unparse(node)}

    def reachable(self, root: str) -> list[str]:
        seen: list[str] = []
        todo = [root]
        while todo:
            q = todo.pop()
            if q in seen:
                continue
            seen.append(q)
            for f in self.fields_of(q).values():
                todo.extend(_models_in(f["type"]))
        return sorted(seen)

    def has_function(self, dotted: str) -> bool:
        module, rest = dotted.split(".", 1)
        if module not in self.modules:
            return False
        mod = self.modules[module]
        if "." not in rest:
            return rest in mod.functions
        cls_name, meth = rest.split(".", 1)
        cls = mod.classes.get(cls_name)
        return cls is not None and any(isinstance(s, ast.FunctionDef) and s.name == meth for s in cls.body)


def _models_in(t: dict) -> list[str]:
    kind = t["kind"]
    if kind == "model":
        return [t["model"]]
    if kind == "union":
        return list(t["variants"].values())
    if kind == "anyof":
        return [m for x in t["of"] for m in _models_in(x)]
    if kind == "list":
        return _models_in(t["item"])
    if kind == "dict":
        return _models_in(t["value"])
    return []


def read_sources(repo: Path, commit: str) -> dict[str, str]:
    """The configs modules at ``commit`` from a bare mirror (``git show``) or a checkout (files)."""
    repo = Path(repo)
    sources: dict[str, str] = {}
    checkout = repo / CONFIGS_PATH
    for name in CONFIG_MODULES + ("validation",):
        rel = f"{CONFIGS_PATH}/{name}.py" if name != "validation" else VALIDATION_PATH
        if checkout.is_dir():
            path = repo / rel
            if path.exists():
                sources[name] = path.read_text()
            continue
        proc = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{rel}"], capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            sources[name] = proc.stdout
    if "rl" not in sources:
        raise FileNotFoundError(f"{repo}: no {CONFIGS_PATH}/rl.py at {commit} (expected a prime-rl checkout or mirror)")
    return sources


def build_key_list(sources: dict[str, str], commit: str) -> dict:
    """The pinned key list of every model reachable from ``RLConfig`` (see the module docstring)."""
    schema = _Schema(sources)
    for rule in CROSS_FIELD_RULES:
        if not schema.has_function(rule["where"]):
            raise ValueError(f"cross-field rule {rule['rule']}: {rule['where']} no longer exists at {commit}; re-read it")
    models = {}
    for q in schema.reachable(ROOT_MODEL):
        module = q.split(".", 1)[0]
        models[q] = {
            "file": f"{CONFIGS_PATH}/{module}.py",
            "extra": schema.extra_of(q),
            "fields": schema.fields_of(q),
        }
    return {
        "framework": "prime-rl",
        "commit": commit,
        "read_at": f"PrimeIntellect-ai/prime-rl git {commit[:8]}",
        "generated_by": "python -m sandbox.export.validate.prime_rl --refresh <checkout-or-mirror>",
        "root": ROOT_MODEL,
        "rules": CROSS_FIELD_RULES,
        "models": models,
    }


# ------------------------------------------------------------------------------------------------
# validation
# ------------------------------------------------------------------------------------------------


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


def _matches_scalar(t: dict, value: Any) -> bool:
    kind = t["kind"]
    if kind in ("any", "opaque"):
        return True
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind in ("str", "path"):
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "literal":
        return any(value == c and type(value) is type(c) for c in t["choices"])
    return False


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
        if t["kind"] == "union" and isinstance(value, dict) and t["discriminator"] not in value \
                and isinstance(default, dict) and "model_default" in default:
            self.table(default["model_default"], value, where)  # prime-rl fills the tag from the default variant
            return
        if not self.check_type(t, value, where):
            return
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            for op, ok, sym in (("ge", lambda v, b: v >= b, ">="), ("gt", lambda v, b: v > b, ">"),
                                ("le", lambda v, b: v <= b, "<="), ("lt", lambda v, b: v < b, "<")):
                if op in field and not ok(value, field[op]):
                    self.problems.append(f"{where} = {value!r}: must be {sym} {field[op]}")
            if isinstance(value, float) and math.isnan(value):
                self.problems.append(f"{where}: NaN is not a valid value")
        if isinstance(value, list) and "min_length" in field and len(value) < field["min_length"]:
            self.problems.append(f"{where}: needs at least {field['min_length']} entries")

    def check_type(self, t: dict, value: Any, where: str) -> bool:
        kind = t["kind"]
        if kind == "model":
            if not isinstance(value, dict):
                self.problems.append(f"{where} = {value!r}: expected {_type_name(t)}")
                return False
            self.table(t["model"], value, where)
            return True
        if kind == "union":
            if not isinstance(value, dict):
                self.problems.append(f"{where} = {value!r}: expected {_type_name(t)}")
                return False
            tag = value.get(t["discriminator"])
            if tag not in t["variants"]:
                self.problems.append(
                    f"{where}.{t['discriminator']} = {tag!r}: expected one of "
                    + ", ".join(repr(v) for v in t["variants"])
                )
                return False
            self.table(t["variants"][tag], value, where)
            return True
        if kind == "list":
            if not isinstance(value, list):
                self.problems.append(f"{where} = {value!r}: expected {_type_name(t)}")
                return False
            for i, item in enumerate(value):
                self.check_type(t["item"], item, f"{where}[{i}]")
            return True
        if kind == "dict":
            if not isinstance(value, dict):
                self.problems.append(f"{where} = {value!r}: expected a table")
                return False
            for k, item in value.items():
                self.check_type(t["value"], item, f"{where}.{k}")
            return True
        if kind == "anyof":
            for option in t["of"]:
                if option["kind"] in ("model", "union", "list", "dict"):
                    probe = _Walker({"models": self.models})
                    if probe.check_type(option, value, where) and not probe.problems:
                        return True
                elif _matches_scalar(option, value):
                    return True
            self.problems.append(f"{where} = {value!r}: expected {_type_name(t)}")
            return False
        if kind == "none":
            self.problems.append(f"{where}: null cannot be written in TOML; leave the key out")
            return False
        if not _matches_scalar(t, value):
            self.problems.append(f"{where} = {value!r}: expected {_type_name(t)}")
            return False
        return True


def _cross_field(data: dict) -> list[str]:
    """The cross-field rules of ``[prime-rl]`` in ``facts.toml`` (``CROSS_FIELD_RULES`` says which validators they restate)."""
    table = lambda d, key: d[key] if isinstance(d.get(key), dict) else {}
    orch, trainer = table(data, "orchestrator"), table(data, "trainer")
    sched = table(trainer, "scheduler")
    both = "max_steps" in trainer and "max_steps" in orch
    return rule_problems("prime-rl", batch=orch.get("batch_size"), tokens=orch.get("token_batch_size"),
                         group=orch.get("group_size", 1), max_steps=data.get("max_steps", trainer.get("max_steps")),
                         steps=(trainer["max_steps"], orch["max_steps"]) if both else None, schedule=sched.get("type"),
                         warmup=sched.get("warmup_steps", 10), decay=sched.get("decay_steps", 10), is_int=lambda x: isinstance(x, int))


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
                built = cls(**raw).model_dump(mode="json")
            except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
                problems.append(f"{section}: rejected by prime-rl's {cls.__name__}: {exc}")
                continue
            for key, value in flat(raw).items():
                node: Any = built
                for part in key.split("."):
                    node = node.get(part) if isinstance(node, dict) else None
                if node != value:
                    problems.append(f"{section}.{key}: reads back as {node!r}, exported {value!r}")
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
    problems = [f"{section}: the exporter writes only [trainer], [orchestrator] and [inference]"
                for section in data if section not in ("trainer", "orchestrator", "inference")]
    problems += schema_problems(data)
    launch = files.get("launch.sh", "")
    if "uv run rl @" not in launch or MAIN_FILE not in launch:
        problems.append(f"launch.sh: expected a `uv run rl @ ... {MAIN_FILE}` command")
    if not problems:
        problems += _pydantic_check(data, wheel_dir)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.export.validate.prime_rl", description=__doc__.split("\n\n")[0])
    parser.add_argument("--refresh", metavar="REPO", type=Path, required=True,
                        help="prime-rl checkout or bare git mirror to read the pydantic models from")
    parser.add_argument("--commit", default=COMMIT, help=f"commit to read in a mirror (default {COMMIT[:8]})")
    parser.add_argument("--out", type=Path, default=None, help="where to write the key list (default: the pinned file)")
    args = parser.parse_args(argv)
    commit = args.commit
    if (args.refresh / "HEAD").exists() and not (args.refresh / CONFIGS_PATH).is_dir():
        full = subprocess.run(["git", "-C", str(args.refresh), "rev-parse", commit], capture_output=True, text=True, check=False)
        if full.returncode != 0:
            print(f"error: {commit} is not in {args.refresh}", file=sys.stderr)
            return 1
        commit = full.stdout.strip()
    keys = build_key_list(read_sources(args.refresh, commit), commit)
    out = args.out or key_list_path(commit)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(keys, indent=1, sort_keys=True) + "\n")
    print(f"{len(keys['models'])} models -> {out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
