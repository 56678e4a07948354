"""The validators' shared driver: the pieces every framework check repeats, and the per-framework facts
(``facts.toml``: enum keys and where their values are read) applied as data.

Each validator loads the exported files with the framework's own config code and then asks the same
questions (docs/promotion.md, "How exports are validated"): does every exported key read back with its
value (:func:`readback`, :func:`same`), are enum values among the framework's own names (read from the
framework's sources by :func:`source_strings`), and do the start-up rules the framework asserts hold
(``startup_problems`` in each framework's ``validation.py``)."""

from __future__ import annotations

import ast
import enum
import importlib.util
import math
import re
import tomllib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any


@cache
def facts(framework: str) -> dict[str, Any]:
    """The ``[<framework>]`` table of ``facts.toml``."""
    return tomllib.loads((Path(__file__).with_name("facts.toml")).read_text(encoding="utf-8"))[framework]


def flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings -> ``{dotted path: leaf}`` (an empty mapping is a leaf)."""
    if isinstance(tree, dict) and tree:
        return {
            k: v for key, sub in tree.items() for k, v in flat(sub, f"{prefix}.{key}" if prefix else str(key)).items()
        }
    return {prefix: tree}


def same(a: Any, b: Any) -> bool:
    """Equal as the framework reads it: booleans only equal booleans, numbers to 1e-12, None only None,
    containers element-wise (``.value`` of str enums and OmegaConf containers unwrapped)."""
    a, b = plain(a), plain(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0) or a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def plain(value: Any) -> Any:
    """OmegaConf containers as Python containers, enums (transformers' ``SchedulerType``) as their value."""
    if type(value).__name__ in ("DictConfig", "ListConfig"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(value, resolve=False)
    return value.value if isinstance(value, enum.Enum) else value


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def readback(settings: dict[str, Any], read: Callable[[str], Any], say: Callable[[str, Any, Any], str]) -> list[str]:
    """``say(key, exported, read back)`` for every exported key the loaded config reads back differently."""
    return [say(key, want, plain(got)) for key, want in settings.items() if not same(got := read(key), want)]


def installed_file(package: str, rel: str) -> Path | None:
    """The file ``rel`` inside the installed ``package`` (found without importing it); None when either is absent."""
    spec = importlib.util.find_spec(package)
    path = Path(next(iter(spec.submodule_search_locations))) / rel if spec and spec.submodule_search_locations else None
    return path if path is not None and path.exists() else None


# ------------------------------------------------------------------------------------------------
# names read from a framework's sources by AST (nothing imported)
# ------------------------------------------------------------------------------------------------


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _string(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _named(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _within(tree: ast.AST, kind: type, name: str | None) -> ast.AST:
    if name is None:
        return tree
    return next(
        (n for n in ast.walk(tree) if isinstance(n, kind) and n.name == name), ast.Module(body=[], type_ignores=[])
    )


def _assigned(tree: ast.AST, name: str) -> list[str]:
    """String elements of every ``name = [...]`` / ``{...}`` assignment (annotated or not)."""
    targets = lambda n: n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
    return [
        s
        for n in ast.walk(tree)
        if any(isinstance(t, ast.Name) and t.id == name for t in targets(n)) and n.value
        for s in _strings(n.value)
    ]


def _decorated(tree: ast.AST, decorator: str) -> list[str]:
    """First string argument of every ``@decorator("x")`` / ``@obj.decorator("x")``."""
    return [
        _string(d.args[0])
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
        for d in n.decorator_list
        if isinstance(d, ast.Call) and d.args and _named(d.func) == decorator and _string(d.args[0])
    ]


def _enum(tree: ast.AST, cls: str) -> list[str]:
    """String values of the members of ``class cls(..., Enum)``."""
    body = _within(tree, ast.ClassDef, cls).body
    return [s.value.value for s in body if isinstance(s, ast.Assign) and _string(s.value) is not None]


def _membership(tree: ast.AST, attribute: str, within: str | None = None) -> list[str]:
    """Strings of every ``<...>.attribute in [...]`` test (only inside ``class within`` when given)."""
    return [
        s
        for n in ast.walk(_within(tree, ast.ClassDef, within))
        if isinstance(n, ast.Compare)
        and len(n.ops) == 1
        and isinstance(n.ops[0], ast.In)
        and _named(n.left) == attribute
        for s in _strings(n.comparators[0])
    ]


def _compared(tree: ast.AST, function: str, variable: str) -> list[str]:
    """Strings that ``variable`` is compared with (``==`` or ``in``) inside ``def function``."""
    out: list[str] = []
    for cmp in ast.walk(_within(tree, ast.FunctionDef, function)):
        if isinstance(cmp, ast.Compare) and isinstance(cmp.left, ast.Name) and cmp.left.id == variable:
            for op, right in zip(cmp.ops, cmp.comparators):
                out += (
                    [_string(right)]
                    if isinstance(op, ast.Eq) and _string(right)
                    else _strings(right)
                    if isinstance(op, ast.In)
                    else []
                )
    return out


def _literal(tree: ast.AST, function: str, arg: str) -> list[str]:
    """Strings of a ``Literal[...]`` annotation of ``arg`` in ``def function``."""
    for a in getattr(_within(tree, ast.FunctionDef, function), "args", ast.arguments(args=[])).args:
        if a.arg == arg and isinstance(a.annotation, ast.Subscript):
            sl = a.annotation.slice
            return [s for e in (sl.elts if isinstance(sl, ast.Tuple) else [sl]) if (s := _string(e)) is not None]
    return []


def _docstring(tree: ast.AST, cls: str, field: str) -> list[str]:
    """Quoted words on the ``field (type): ...`` line of ``class cls``'s docstring."""
    node = _within(tree, ast.ClassDef, cls)
    lines = (ast.get_docstring(node) or "").splitlines() if isinstance(node, ast.ClassDef) else []
    return next((re.findall(r'"([^"]+)"', ln) for ln in lines if ln.strip().startswith(f"{field} (")), [])


READERS = {
    "assigned": _assigned,
    "decorated": _decorated,
    "enum": _enum,
    "membership": _membership,
    "compared": _compared,
    "literal": _literal,
    "docstring": _docstring,
}


def source_strings(root: Path, spec: list) -> list[str]:
    """The strings ``[reader, file glob under root, *args]`` names (``READERS``), over every matching file."""
    reader, pattern, *args = spec
    paths = sorted(root.glob(pattern)) if any(c in pattern for c in "*?[") else [root / pattern]
    return [s for p in paths for s in READERS[reader](ast.parse(p.read_text(), filename=str(p)), *args)]
