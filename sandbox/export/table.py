"""A framework's export table: rows and notes read from ``sandbox/frameworks/<framework>/tables.toml``
(package data), with ``sandbox/export/tables/common.toml`` holding what several frameworks share.

A **row** maps one scenario field (or a pinned framework key) to the framework: its ``kind`` (a
:class:`~sandbox.export.plan.ExportPlan` row kind), the scenario ``source``, the framework ``target`` key and the
``note`` PROMOTION.md prints. Its texts are templates with named fields (``str.format``: ``{k_max}``,
``{value!r}``, literal braces doubled); the exporter supplies the values it computed (scenario value, the
converted value) and the fields. A **note** is a template alone (a reason, a "what to do instead" text, a
line of the framework's ``expresses`` table). The tables are data only: which row applies and the converted
values are Python, in each framework's ``rules.py`` and ``export.py``. A row per key keeps a table easy to extend.
"""

from __future__ import annotations

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
