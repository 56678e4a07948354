"""A framework's declarative export table: rows and notes read from ``sandbox/export/tables/<framework>.toml``
(package data), with ``common.toml`` holding what several frameworks share.

A **row** maps one scenario field (or a pinned framework key) to the framework: its ``kind`` (a
:class:`~sandbox.export.plan.ExportPlan` row kind), the scenario ``source``, the framework ``target`` key and the
``note`` PROMOTION.md prints. Its texts are templates with named fields (``str.format``: ``{k_max}``,
``{value!r}``, literal braces doubled); the exporter supplies the values it computed (scenario value, the
converted value) and the fields. A **note** is a template alone (a reason, a "what to do instead" text, a
line of the framework's ``expresses`` table). The exporters' Python decides which row applies and computes
converted values; the tables hold the keys and the words. A row per key keeps a table easy to extend.

A **rule** (``[[rule.<name>]]``, applied by :meth:`Table.apply`) moves a converter's per-component branching into
the table: the first case whose ``when`` holds runs its ``rows`` in order, each either a row, ``[row id, value
expression, ..., {field = expression}]``, an expression run for its effect (a helper the converter passes by
name, e.g. ``"map_tis(plan, c)"``), or a nested case ``{when = ..., rows = [...]}``; :meth:`Table.pick` returns
the ``value`` of the first matching case instead. Expressions are a small subset of Python (names the converter
passes, attributes, indexing, literals, comparisons, ``and``/``or``/``not``, arithmetic, ``a if c else b``,
f-strings, calls by name of passed helpers and of ``note``, ``abs``, ``float``, ``str``, ``list``, ``min``,
``max``), checked when first read: a table reaches nothing but what its converter passes.
"""

from __future__ import annotations

import ast
import inspect
import tomllib
from collections.abc import Iterable
from functools import cache
from importlib import resources
from typing import Any

from sandbox.export.plan import ROW_KINDS, ExportPlan

# Plan method -> its parameters in order; the text parameters come from the row, the others from the caller
PARAMS: dict[str, tuple[str, ...]] = {
    kind: tuple(inspect.signature(getattr(ExportPlan, kind)).parameters)[1:] for kind in ROW_KINDS
}
TEXT = frozenset({"source", "target", "note"})

_NODES = (
    ast.Expression,
    ast.Name,
    ast.Load,
    ast.Attribute,
    ast.Constant,
    ast.Compare,
    ast.BoolOp,
    ast.UnaryOp,
    ast.BinOp,
    ast.IfExp,
    ast.Call,
    ast.Subscript,
    ast.List,
    ast.Tuple,
    ast.Dict,
    ast.JoinedStr,
    ast.FormattedValue,
    ast.boolop,
    ast.cmpop,
    ast.unaryop,
    ast.operator,
    ast.keyword,
)
_BUILTINS = {
    "abs": abs,
    "float": float,
    "str": str,
    "list": list,
    "min": min,
    "max": max,
    "None": None,
    "True": True,
    "False": False,
}


@cache
def _compile(text: str, where: str):
    """A rule expression, checked against the allowed subset (a clear error naming the rule otherwise)."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"{where}: expression {text!r} does not parse ({exc.msg})") from None
    for node in ast.walk(tree):
        if (
            not isinstance(node, _NODES)
            or (isinstance(node, ast.Attribute) and node.attr.startswith("_"))
            or (isinstance(node, ast.Call) and not isinstance(node.func, ast.Name))
        ):
            raise ValueError(f"{where}: expression {text!r} uses {type(node).__name__}, outside the rule language")
    return compile(tree, where, "eval")


def _eval(text: str, where: str, scope: dict[str, Any]) -> Any:
    return eval(_compile(text, where), {"__builtins__": {}}, scope)  # noqa: S307 (a checked subset, see _compile)


@cache
def _load(name: str) -> dict[str, dict[str, Any]]:
    data = tomllib.loads(
        (
            resources.files(__package__).joinpath("tables", "common.toml")
            if name == "common"
            else resources.files("sandbox.frameworks").joinpath(name, "tables.toml")
        ).read_text(encoding="utf-8")
    )
    return {
        "row": data.get("row", {}),
        "note": data.get("note", {}),
        **{k: v for k, v in data.items() if k not in ("row", "note")},
    }


class Table:
    """The rows and notes of one framework (``name``), falling back to ``common.toml``; loaded on first use."""

    def __init__(self, name: str):
        self.name = name

    def _entry(self, section: str, key: str) -> Any:
        for name in (self.name, "common"):
            entry = _load(name).get(section, {}).get(key)
            if entry is not None:
                return entry
        raise KeyError(f"export table {self.name}: no {section} {key!r} (nor in common.toml)")

    def section(self, name: str) -> dict[str, Any]:
        """A table of the framework's file as it stands (e.g. ``expresses``: concept -> how the framework says it)."""
        return dict(_load(self.name)[name])

    def components(self, **named: Iterable[str]) -> dict[str, frozenset[str]]:
        """Family -> the component names this framework's converters map or explain as gaps: its ``[components]``
        lists plus ``named[family]``, the names of the exporter's gap tables and mappers (read at call time); a
        family neither names takes ``common.toml``'s list. Any other component falls to the engine (engine.py)."""
        own, out = _load(self.name).get("components", {}), {}
        for family, names in _load("common")["components"].items():
            given = named.get(family.replace(" ", "_"))
            out[family] = frozenset(own.get(family, names if given is None else ())) | frozenset(given or ())
        return out

    def text(self, key: str) -> str:
        """A text of the ``[template]`` table (a file the exporter writes, e.g. its launch script), unformatted."""
        return self._entry("template", key)

    def note(self, key: str, /, **fields: Any) -> str:
        """The note ``key`` with its named fields filled in."""
        return self._entry("note", key).format(**fields)

    def apply(self, plan: ExportPlan, rule: str, /, **names: Any) -> bool:
        """Apply rule ``rule`` with ``names`` (scenario facts, helpers) in scope: the rows and calls of its first case
        whose ``when`` holds (a case without ``when`` always holds). False when no case holds. The names that are
        not callables also fill the rows' template fields (a row's own ``{field = ...}`` wins)."""
        scope = {**_BUILTINS, "note": self.note, **names}
        fields = {k: v for k, v in names.items() if not callable(v)}
        return any(
            self._case(plan, case, scope, fields, f"export table {self.name}: rule {rule} case {i + 1}")
            for i, case in enumerate(self._entry("rule", rule))
        )

    def metrics(self, section: str = "metrics", /, **names: Any) -> dict[str, str]:
        """The ``[<section>]`` table as PROMOTION.md's metric rows, in order: a text stands as it is; an inline table
        ``{when = expression, value = expression}`` gives the metric ``value`` where ``when`` holds (no ``when``: always)."""
        scope, out = {**_BUILTINS, "note": self.note, **names}, {}
        for metric, entry in _load(self.name)[section].items():
            where = f"export table {self.name}: [{section}] {metric}"
            if isinstance(entry, str) or "when" not in entry or _eval(entry["when"], where, scope):
                out[metric] = entry if isinstance(entry, str) else _eval(entry["value"], where, scope)
        return out

    def pick(self, rule: str, /, **names: Any) -> Any:
        """The ``value`` expression of rule ``rule``'s first case whose ``when`` holds (None when none does)."""
        scope = {**_BUILTINS, "note": self.note, **names}
        for i, case in enumerate(self._entry("rule", rule)):
            where = f"export table {self.name}: rule {rule} case {i + 1}"
            if "when" not in case or _eval(case["when"], where, scope):
                return _eval(case["value"], where, scope)
        return None

    def _case(
        self, plan: ExportPlan, case: dict[str, Any], scope: dict[str, Any], fields: dict[str, Any], where: str
    ) -> bool:
        ev = lambda text: _eval(text, where, scope)
        if "when" in case and not ev(case["when"]):
            return False
        for row in case.get("rows", ()):
            if isinstance(row, str):
                ev(row)
            elif isinstance(row, dict):  # a nested case: its rows when its own ``when`` holds
                self._case(plan, row, scope, fields, where)
            else:
                own = row[-1] if isinstance(row[-1], dict) else None
                values = row[1:-1] if own is not None else row[1:]
                self.row(plan, row[0], *map(ev, values), **{**fields, **{k: ev(v) for k, v in (own or {}).items()}})
        return True

    def row(self, plan: ExportPlan, key: str, /, *values: Any, **fields: Any) -> None:
        """Add row ``key`` to ``plan``: its texts filled with ``fields``, its other parameters (scenario value,
        written value, given value, in the order of the row kind's :class:`Plan` method) from ``values``."""
        row = self._entry("row", key)
        kind = row["kind"]
        args, rest = {}, iter(values)
        for p in PARAMS[kind]:
            if p in TEXT:
                args[p] = row[p].format(**fields) if p in row else None
            else:
                v = next(rest, rest)
                if v is not rest:
                    args[p] = v
        getattr(plan, kind)(**args)
