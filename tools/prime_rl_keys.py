"""Regenerate the pinned prime-rl key list (``sandbox/export/keys/prime_rl_<commit>.json``) that
``sandbox/frameworks/prime_rl/validation.py`` checks exports against.

A maintenance tool, not part of an export: it reads prime-rl's pydantic config models from a checkout
or a bare git mirror (their AST, nothing imported) and writes every model reachable from ``RLConfig``
with its fields, types, defaults, bounds and ``extra`` policy (docs/promotion.md, the prime-rl validator)::

    python tools/prime_rl_keys.py --refresh <checkout-or-mirror> [--commit 559b4477] [--out FILE]
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from sandbox.frameworks.prime_rl.validation import COMMIT, key_list_path

CONFIGS_PATH = "packages/prime-rl-configs/src/prime_rl/configs"
VALIDATION_PATH = "packages/prime-rl-configs/src/prime_rl/utils/validation.py"  # holds one cross-field rule
CONFIG_MODULES = (
    "algorithm",
    "env_server",
    "evals",
    "inference",
    "monitors",
    "orchestrator",
    "rl",
    "sft",
    "shared",
    "trainer",
)
ROOT_MODEL = "rl.RLConfig"


_BUILTINS = {"int": "int", "float": "float", "str": "str", "bool": "bool", "Path": "path", "Any": "any"}

# Cross-field rules of prime-rl's model validators on the keys exporters write. Each names the
# validator it restates; the generator refuses to write a key list if that validator is gone.
CROSS_FIELD_RULES = [
    {
        "rule": "batch_size_divisible",
        "where": "orchestrator.OrchestratorConfig.resolve_batching",
        "text": "orchestrator.batch_size must be divisible by orchestrator.group_size",
    },
    {
        "rule": "one_batch_size",
        "where": "orchestrator.OrchestratorConfig.resolve_batching",
        "text": "set exactly one of orchestrator.batch_size and orchestrator.token_batch_size",
    },
    {
        "rule": "linear_scheduler_phases",
        "where": "trainer.validate_scheduler",
        "text": "a linear scheduler needs warmup_steps > 0 or decay_steps > 0; warmup_steps + decay_steps <= max_steps",
    },
    {
        "rule": "cosine_scheduler_phases",
        "where": "trainer.validate_scheduler",
        "text": "a cosine scheduler needs warmup_steps < max_steps",
    },
    {
        "rule": "same_max_steps",
        "where": "validation.validate_shared_max_steps",
        "text": "trainer.max_steps and orchestrator.max_steps must be equal",
    },
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
            if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "model_config" for t in stmt.targets
            ):
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
        proc = subprocess.run(
            ["git", "-C", str(repo), "show", f"{commit}:{rel}"], capture_output=True, text=True, check=False
        )
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
            raise ValueError(
                f"cross-field rule {rule['rule']}: {rule['where']} no longer exists at {commit}; re-read it"
            )
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
        "generated_by": "python tools/prime_rl_keys.py --refresh <checkout-or-mirror>",
        "root": ROOT_MODEL,
        "rules": CROSS_FIELD_RULES,
        "models": models,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/prime_rl_keys.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--refresh",
        metavar="REPO",
        type=Path,
        required=True,
        help="prime-rl checkout or bare git mirror to read the pydantic models from",
    )
    parser.add_argument("--commit", default=COMMIT, help=f"commit to read in a mirror (default {COMMIT[:8]})")
    parser.add_argument("--out", type=Path, default=None, help="where to write the key list (default: the pinned file)")
    args = parser.parse_args(argv)
    commit = args.commit
    if (args.refresh / "HEAD").exists() and not (args.refresh / CONFIGS_PATH).is_dir():
        full = subprocess.run(
            ["git", "-C", str(args.refresh), "rev-parse", commit], capture_output=True, text=True, check=False
        )
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
