"""The shape of a scenario, read from its pydantic models: which keys each table holds, which
tables are one member of a discriminated union (``kind``/``name``/``backend`` selects the member),
and which values each leaf takes.

Used by the loader (the valid keys where an unknown key was written, for a did-you-mean) and by the
reference generator (``sandbox scenario --reference``, docs/scenario-reference.md). Every shape is
derived from the models, so a field added to any config appears in both without further work.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field
from typing import Any, Union

from pydantic import BaseModel, Discriminator, Tag
from pydantic.fields import FieldInfo

from sandbox.base.registry import LazyUnion

NoneType = type(None)


@dataclass(frozen=True)
class Model:
    """A table with the fields of ``cls``."""

    cls: type[BaseModel]


@dataclass(frozen=True)
class Choice:
    """A discriminated union of tables: the value of ``key`` selects the member (tag → node)."""

    key: str
    members: dict[str, Node]


@dataclass(frozen=True)
class ListOf:
    item: Node


@dataclass(frozen=True)
class DictOf:
    value: Node


@dataclass(frozen=True)
class Leaf:
    """A value: its annotation (after removing ``None`` and ``Annotated``) and the constraints of
    the ``Annotated`` metadata around it (annotated_types ``Ge``, ``Gt``, ...)."""

    annotation: Any
    constraints: tuple = ()


Node = Model | Choice | ListOf | DictOf | Leaf


@dataclass(frozen=True)
class Shape:
    """A node and whether the value may be left unset (``None``)."""

    node: Node
    nullable: bool = False
    constraints: tuple = field(default=())


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _split_annotated(tp: Any) -> tuple[Any, list]:
    """The annotated type and its metadata, a registry's union (:class:`LazyUnion`) resolved."""
    meta: list = []
    while typing.get_origin(tp) is typing.Annotated:
        args = typing.get_args(tp)
        lazy = next((m for m in args[1:] if isinstance(m, LazyUnion)), None)
        tp, meta = (lazy.resolve(), meta) if lazy else (args[0], meta + list(args[1:]))
    return tp, meta


def _discriminator_of(meta: list) -> str | Discriminator | None:
    for m in meta:
        if isinstance(m, Discriminator):
            return m
        if isinstance(m, FieldInfo) and m.discriminator is not None:
            return m.discriminator
    return None


def _literal_default(cls: type[BaseModel], key: str) -> str | None:
    f = cls.model_fields.get(key)
    return f.default if f is not None and isinstance(f.default, str) else None


def _tags(cls: type[BaseModel], key: str) -> list[str]:
    """The values of ``key`` that select ``cls``: its ``Literal`` (a member may take several, like
    ``kind = "sort" | "reverse"``), else its default."""
    f = cls.model_fields.get(key)
    if f is not None and typing.get_origin(f.annotation) is typing.Literal:
        return [str(v) for v in typing.get_args(f.annotation)]
    default = _literal_default(cls, key)
    return [default] if default is not None else []


def _choice(members: list[Any], discriminator: str | Discriminator | None) -> Choice | None:
    """A union of models as a :class:`Choice`, or None when it is not a discriminated union."""
    tagged: list[tuple[str | None, type[BaseModel]]] = []
    for m in members:
        inner, meta = _split_annotated(m)
        if not _is_model(inner):
            return None
        tag = next((x.tag for x in meta if isinstance(x, Tag)), None)
        tagged.append((tag, inner))
    if isinstance(discriminator, str):
        key = discriminator
    else:  # a callable discriminator with Tag()s: the key is the field every member fixes to its tag
        common = set.intersection(*(set(cls.model_fields) for _, cls in tagged))
        key = next((k for k in sorted(common) if all(_tags(cls, k) == [tag] for tag, cls in tagged)), None)
        if key is None:
            return None
    out: dict[str, Node] = {}
    for tag, cls in tagged:
        names = [tag] if tag is not None else _tags(cls, key)
        if not names:
            return None
        for name in names:
            out[name] = Model(cls)
    return Choice(key, out)


def shape(tp: Any, discriminator: str | Discriminator | None = None) -> Shape:
    """The :class:`Shape` of an annotation (a field's ``annotation`` with its ``discriminator``)."""
    tp, meta = _split_annotated(tp)
    discriminator = _discriminator_of(meta) or discriminator
    constraints = tuple(m for m in meta if not isinstance(m, (FieldInfo, Discriminator, Tag)))
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not NoneType]
        nullable = len(args) < len(typing.get_args(tp))
        if len(args) == 1:
            inner = shape(args[0], discriminator)
            return Shape(inner.node, nullable or inner.nullable, constraints + inner.constraints)
        choice = _choice(args, discriminator)
        return Shape(choice if choice is not None else Leaf(tp, constraints), nullable, constraints)
    if origin in (list, tuple, set, frozenset) and typing.get_args(tp):
        return Shape(ListOf(shape(typing.get_args(tp)[0]).node), False, constraints)
    if origin is dict and len(typing.get_args(tp)) == 2:
        return Shape(DictOf(shape(typing.get_args(tp)[1]).node), False, constraints)
    if _is_model(tp):
        return Shape(Model(tp), False, constraints)
    return Shape(Leaf(tp, constraints), False, constraints)


def field_shape(info: FieldInfo) -> Shape:
    """The shape of one model field, its own constraints (``Field(ge=1)``) included."""
    lazy = next((m for m in info.metadata if isinstance(m, LazyUnion)), None)
    s = shape(lazy.resolve() if lazy else info.annotation, info.discriminator or _discriminator_of(list(info.metadata)))
    own = tuple(m for m in info.metadata if not isinstance(m, (FieldInfo, Discriminator, Tag, LazyUnion)))
    if isinstance(s.node, Leaf):
        return Shape(Leaf(s.node.annotation, own + s.node.constraints), s.nullable, own + s.constraints)
    return Shape(s.node, s.nullable, own + s.constraints)


def node_at(root: type[BaseModel], loc: tuple) -> Node | None:
    """The node a pydantic error location leads to from ``root``: field names, list indices, dict
    keys and the union tags pydantic inserts (``('system', 'staleness', 'max_lag')``). None when the
    location does not follow the models (a value where a table was expected, ...)."""
    node: Node = Model(root)
    for item in loc:
        if isinstance(node, Model):
            info = node.cls.model_fields.get(item) if isinstance(item, str) else None
            if info is None:
                return None
            node = field_shape(info).node
        elif isinstance(node, Choice):
            if item not in node.members:
                return None
            node = node.members[item]
        elif isinstance(node, ListOf) and isinstance(item, int):
            node = node.item
        elif isinstance(node, DictOf) and isinstance(item, str):
            node = node.value
        else:
            return None
    return node


__all__ = ["Choice", "DictOf", "Leaf", "ListOf", "Model", "Node", "Shape", "field_shape", "node_at", "shape"]
