"""The scenario reference (docs/scenario-reference.md), generated from the pydantic models: every
key of every table with its type, default, allowed values and description, one section per table;
a discriminated union (``kind``/``name``/``backend``) gets one section per member, and a table
reachable at several places (the delay models of ``system.generation_time``, ``train_time`` and
``sync_delay``) is listed once with all its places.

Regenerate the committed file with ``sandbox scenario --reference > docs/scenario-reference.md``
(tests/scenario/test_scenario_reference.py fails while it is out of date).
"""

from __future__ import annotations

import inspect
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from sandbox.scenario.model import Scenario
from sandbox.scenario.schema import Choice, DictOf, Leaf, ListOf, Model, Node, Shape, field_shape

REGENERATE = "sandbox scenario --reference > docs/scenario-reference.md"


@dataclass
class Section:
    """One table of the reference: a model, every place it is reachable at, and the union member
    it is there (``(key, tag)``, None for a plain table)."""

    cls: type[BaseModel]
    places: list[str] = field(default_factory=list)
    selector: tuple[str, list[str]] | None = None
    """The union key and the values of it that select this table."""
    within: str = ""
    """The enclosing union member, when the table only exists inside one (``task.name = "lm"``)."""
    suffix: str = ""
    """Appended to the anchor when another section's anchor is the same (``_collect``)."""

    @property
    def anchor(self) -> str:
        base = self.places[0] if self.places else "top-level"
        tag = f"-{self.selector[1][0]}" if self.selector else ""
        return re.sub(r"[^a-z0-9_-]+", "-", f"{base}{tag}".lower()).strip("-") + self.suffix

    @property
    def title(self) -> str:
        where = ", ".join(f"`{p}`" for p in self.places) or "top level"
        sel = f" ({self.selector[0]} = {' or '.join(_value(t) for t in self.selector[1])})" if self.selector else ""
        inside = f", inside {self.within}" if self.within else ""
        return f"{where}{sel}{inside}"


def _collect(root: type[BaseModel]) -> list[Section]:
    """Every table reachable from ``root``, depth first in field order, one section per model."""
    sections: dict[type[BaseModel], Section] = {}
    order: list[Section] = []

    def visit(node: Node, place: str, selector: tuple[str, str] | None, within: str) -> None:
        if isinstance(node, Model):
            sec = sections.get(node.cls)
            first = sec is None
            if sec is None:
                sec = sections[node.cls] = Section(
                    node.cls, selector=(selector[0], []) if selector else None, within=within
                )
                order.append(sec)
            if place and place not in sec.places:
                sec.places.append(place)
            if selector and sec.selector and selector[1] not in sec.selector[1]:
                sec.selector[1].append(selector[1])
            if not first:
                return
            inner = within
            if selector and place:
                inner = f"{place}.{selector[0]} = {_value(selector[1])}"
            for name, info in node.cls.model_fields.items():
                visit(field_shape(info).node, f"{place}.{name}" if place else name, None, inner)
        elif isinstance(node, Choice):
            for tag, member in node.members.items():
                visit(member, place, (node.key, tag), within)
        elif isinstance(node, ListOf):
            visit(node.item, f"{place}[]", selector, within)
        elif isinstance(node, DictOf):
            visit(node.value, f"{place}.<name>", selector, within)

    visit(Model(root), "", None, "")
    # A nested plain table can slug like a union member (`generation_time.hardware` and `generation_time`
    # kind "hardware"): the plain table's anchor gets a suffix, so every anchor is unique.
    taken = {s.anchor for s in order if s.selector}
    for sec in order:
        if not sec.selector and sec.anchor in taken:
            sec.suffix = "-table"
    return order


def _anchor_of(sections: list[Section], cls: type[BaseModel]) -> str:
    return next(s.anchor for s in sections if s.cls is cls)


def _type_name(tp: Any) -> str:
    if tp is Any:
        return "any"
    if get_origin(tp) is Literal:
        kinds = {type(v).__name__ for v in get_args(tp)}
        return " | ".join(sorted(kinds))
    if isinstance(tp, type):
        return tp.__name__
    return re.sub(r"\btyping\.", "", str(tp))


def _type(node: Node, sections: list[Section]) -> str:
    if isinstance(node, Model):
        return f"[table](#{_anchor_of(sections, node.cls)})"
    if isinstance(node, Choice):
        links = ", ".join(
            f"[{tag}](#{_anchor_of(sections, m.cls)})" for tag, m in node.members.items() if isinstance(m, Model)
        )
        return f"table; `{node.key}` = {links}"
    if isinstance(node, ListOf):
        inner = _type(node.item, sections)
        if isinstance(node.item, Choice):
            return f"list of tables; {inner.removeprefix('table; ')}"
        return f"list of {inner}s" if isinstance(node.item, Model) else f"list[{inner}]"
    if isinstance(node, DictOf):
        return f"dict[str, {_type(node.value, sections)}]"
    return _type_name(node.annotation)


def _value(v: Any) -> str:
    """A default as TOML writes it (strings quoted, booleans lower case)."""
    if v is None:
        return "unset"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isfinite(v) and v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-4):
            return f"{v:g}"
        return repr(v)
    if isinstance(v, int) and v == 2**63 - 1:
        return "2^63 − 1"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + "}"
    return str(v)


def _default(info: FieldInfo, shape: Shape) -> str:
    if info.default is not PydanticUndefined:
        value = info.default
    elif info.default_factory is not None and not info.default_factory_takes_validated_data:
        value = info.default_factory()
    else:
        return "required"
    if isinstance(value, BaseModel):
        if isinstance(shape.node, Choice):  # the selector and what differs from that member's own defaults
            key = shape.node.key
            return _value(
                {key: getattr(value, key), **value.model_dump(mode="json", exclude_defaults=True, exclude={key})}
            )
        return "(its section's defaults)"
    if isinstance(value, list) and value and all(isinstance(x, BaseModel) for x in value):
        return _value([x.model_dump(mode="json") for x in value])
    return _value(value)


def _leaves(node: Node) -> list[Leaf]:
    if isinstance(node, Leaf):
        return [node]
    if isinstance(node, (ListOf,)):
        return _leaves(node.item)
    if isinstance(node, DictOf):
        return _leaves(node.value)
    return []


_BOUNDS = ((at.Ge, "ge", "≥"), (at.Gt, "gt", ">"), (at.Le, "le", "≤"), (at.Lt, "lt", "<"))


def _allowed(shape: Shape) -> str:
    out: list[str] = []
    constraints = list(shape.constraints)
    for leaf in _leaves(shape.node):
        constraints += [c for c in leaf.constraints if c not in constraints]
        tp = leaf.annotation
        args = get_args(tp) if get_origin(tp) is not Literal else (tp,)
        for arg in (a for a in args or (tp,) if get_origin(a) is Literal):
            out.append(", ".join(_value(v) for v in get_args(arg)))
    for c in constraints:
        for cls, attr, sym in _BOUNDS:
            if isinstance(c, cls):
                out.append(f"{sym} {_value(getattr(c, attr))}")
        if isinstance(c, at.MinLen):
            out.append(f"at least {c.min_length} items")
        elif isinstance(c, at.MaxLen):
            out.append(f"at most {c.max_length} items")
        elif isinstance(c, at.MultipleOf):
            out.append(f"multiple of {_value(c.multiple_of)}")
    return "; ".join(dict.fromkeys(out))


def _cell(text: str) -> str:
    """One table cell: one line, ``|`` escaped, repository pages (``docs/<page>.md#<anchor>``, not in code) linked
    relative to docs/."""
    text = re.sub(r"\s+", " ", text).replace("|", "\\|").strip()
    return re.sub(r"(?<![`\w/])docs/([\w/.-]+\.md(?:#[\w-]+)?)", r"[docs/\1](\1)", text)


def _intro(cls: type[BaseModel]) -> str:
    doc = inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0]
    doc = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", doc)  # Sphinx roles (:func:`x`) as code
    return re.sub(r"\s+", " ", doc.replace("``", "`")).strip()


def _table(sec: Section, sections: list[Section]) -> list[str]:
    lines = [f'<a id="{sec.anchor}"></a>', "", f"## {sec.title}", ""]
    intro = _intro(sec.cls)
    if intro:
        lines += [intro, ""]
    lines += ["| key | type | default | allowed | description |", "|---|---|---|---|---|"]
    for name, info in sec.cls.model_fields.items():
        shape = field_shape(info)
        typ = _type(shape.node, sections)
        if shape.nullable and info.default is not None:
            typ += " (or unset)"
        desc = info.description or ("selects this table" if sec.selector and name == sec.selector[0] else "")
        lines.append(
            f"| `{name}` | {_cell(typ)} | {_cell(_default(info, shape))} | {_cell(_allowed(shape))} | {_cell(desc)} |"
        )
    return lines + [""]


def reference_markdown(root: type[BaseModel] = Scenario) -> str:
    """The whole reference as markdown (deterministic: the same models give the same text)."""
    sections = _collect(root)
    lines = [
        "# Scenario reference",
        "",
        "Every key a scenario file (`scenarios/*.toml`) or a `--set dotted.key=value` override can set, "
        "generated from the pydantic models: do not edit by hand; regenerate with",
        "",
        f"    {REGENERATE}",
        "",
        "Types are TOML's: `int`, `float` (an integer is accepted), `bool`, `str`; a table is a `[section]` "
        "or an inline `{...}`; `unset` means the key is left out. A table with a selector "
        "(`kind`, `name`, `backend`) has one section per choice: the selector picks which keys are valid. "
        "Checks across sections (for example `algorithm.group_size` against the objective) are stated in "
        "the error they raise. The methods and components are explained in [docs/index.md](index.md).",
        "",
        "Contents: "
        + ", ".join(
            f"[{(s.places[0] if s.places else 'top level')}"
            f"{' ' + '/'.join(s.selector[1]) if s.selector else ''}](#{s.anchor})"
            for s in sections
        ),
        "",
    ]
    for sec in sections:
        lines += _table(sec, sections)
    return "\n".join(lines).rstrip() + "\n"


__all__ = ["REGENERATE", "reference_markdown"]
