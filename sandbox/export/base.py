"""The exporter interface and the registry of frameworks.

An exporter is one file (``sandbox/export/<framework>.py``) with one :class:`Exporter` subclass,
decorated with :func:`register`. It turns a validated :class:`~sandbox.scenario.api.Scenario` into a
:class:`~sandbox.export.plan.ExportPlan` (the framework keys and one row per scenario field) for one of
its supported versions, and renders the plan as the framework's native files.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar

from sandbox.export.plan import ExportError, ExportPlan
from sandbox.scenario.api import Scenario


@dataclass(frozen=True)
class Given:
    """Values the user gave for the GPU run on the export command line (scale-dependent values are
    written only from here): ``lr`` from ``--lr`` or ``--set algorithm.optimizer.lr=...``,
    ``grad_clip`` from ``--set algorithm.optimizer.grad_clip=...``."""

    lr: float | None = None
    grad_clip: float | None = None


@dataclass(frozen=True)
class Version:
    """One supported framework version: the series users name (``"0.9"``), the release or commit
    the pinned keys were read at, and where they were read."""

    series: str
    release: str
    read_at: str


class Exporter:
    """Base class. Subclasses set the class attributes and implement :meth:`plan` and :meth:`files`."""

    name: ClassVar[str]
    title: ClassVar[str]
    versions: ClassVar[tuple[Version, ...]]  # newest first
    # concept -> framework key(s); "partly: ..." when only some settings (or always on), "no equivalent: ..."
    expresses: ClassVar[dict[str, str]]
    # family -> the component names this framework's tables map or explain (default: engine.KNOWN); any other
    # component falls to the engine (its own export_mappings, or a "no equivalent" row). The exporters derive it
    # from their tables (a property, since the tables follow the class)
    components: ClassVar[dict[str, frozenset[str]]] = {}

    def plan(self, scn: Scenario, version: Version, given: Given) -> ExportPlan:  # pragma: no cover
        raise NotImplementedError

    def files(self, plan: ExportPlan) -> dict[str, str]:  # pragma: no cover
        """File name -> text of the framework's native configuration (PROMOTION.md is added by the caller)."""
        raise NotImplementedError

    def launch(self, plan: ExportPlan, files: dict[str, str]) -> str:  # pragma: no cover
        """The shell command that starts the GPU run from the written files."""
        raise NotImplementedError

    # -- shared helpers -------------------------------------------------------------------------
    def new_plan(self, version: Version, target: str) -> ExportPlan:
        return ExportPlan(framework=self.name, version=version.series, release=version.release, target=target)

    @classmethod
    def resolve_version(cls, requested: str | None) -> Version:
        """``None`` → the newest supported version; ``"0.9"`` or ``"0.9.1"`` → that one."""
        if requested is None:
            return cls.versions[0]
        for v in cls.versions:
            if requested in (v.series, v.release):
                return v
        supported = ", ".join(f"{v.series} ({v.release})" for v in cls.versions)
        raise ExportError(f"--version: {cls.name} {requested!r} is not supported; supported: {supported}")


class _Exporters(dict):
    """Framework name -> exporter class. Until a framework is asked for, its entry is the name of its module
    (imported then: its :func:`register` replaces the entry by the class)."""

    def __getitem__(self, name: str) -> type[Exporter]:
        if isinstance(module := super().__getitem__(name), str):
            importlib.import_module(f"sandbox.frameworks.{module}.export")
        return super().__getitem__(name)

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self else default

    def values(self) -> list[type[Exporter]]:  # type: ignore[override]  (dict's would give unloaded module names)
        return [self[name] for name in self]

    def items(self) -> list[tuple[str, type[Exporter]]]:  # type: ignore[override]
        return [(name, self[name]) for name in self]


EXPORTERS: dict[str, type[Exporter]] = _Exporters(
    {
        "verl": "verl",
        "verl-vcpo": "verl_vcpo",
        "trl": "trl",
        "openrlhf": "openrlhf",
        "areal": "areal",
        "prime-rl": "prime_rl",
    }
)


def register(cls: type[Exporter]) -> type[Exporter]:
    """Class decorator: make an exporter available under ``cls.name``."""
    if not isinstance(dict.get(EXPORTERS, cls.name, ""), str):
        raise ValueError(f"exporter {cls.name!r} registered twice")
    EXPORTERS[cls.name] = cls
    return cls


def get_exporter(name: str) -> Exporter:
    try:
        return EXPORTERS[name]()
    except KeyError:
        raise ExportError(f"--framework: unknown framework {name!r}; expected one of {', '.join(EXPORTERS)}") from None


def nested(settings: dict[str, Any], leaf: Any = lambda v: v) -> dict[str, Any]:
    """Dotted keys → nested dicts (the shape of the framework's YAML or TOML), each value through ``leaf``."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        node = out
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = leaf(value)
    return out


def describe(value: Any) -> str:
    """A value as it appears in PROMOTION.md tables."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {describe(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(describe(v) for v in value) + "]"
    return str(value)
