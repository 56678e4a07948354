"""Registries of pluggable components: one per family (objective, correction, stabilizer, delay
model, staleness control, task, rollout engine), in the spirit of Gymnasium's ``register``/``make``.

A component is one module holding its pydantic config next to its implementation, registered once::

    class TISConfig(MethodConfig):
        name: Literal["tis"] = "tis"        # the discriminator users write in TOML
        ...

    @CORRECTIONS.register(TISConfig)
    class TIS(Correction):
        ...

Everything else is derived from the registry, never kept by hand: the discriminated union a scenario
validates against (:meth:`Registry.union`), the name lists of ``--list`` outputs and error messages
(:meth:`Registry.names`), ``__all__`` of the family's package, and construction from a validated config
(:meth:`Registry.build`). A family package calls :meth:`Registry.discover` at the end of its
``__init__`` so that adding a component is adding a file: every module of the package is imported,
in file-name order, and registers itself.

**Third-party components** (plugins): a package outside this repository registers components through
the entry-point group :data:`PLUGIN_GROUP` (``async_rl_sandbox.components``), one entry per module to
import, named ``<family>`` or ``<family>:<name>`` (family: ``objective``, ``correction``,
``stabilizer``, ``delay``, ``staleness``, ``task``, ``engine``), e.g. in its ``pyproject.toml``::

    [project.entry-points."async_rl_sandbox.components"]
    "staleness:my_control" = "my_package.my_control"

The module registers its component as a module of the family's package would
(``@CONTROLS.register(MyConfig)``). Order: a registry loads its family's plugins in
:meth:`Registry.union`, right before registration closes (the family package builds its union at the
end of its ``__init__``, after :meth:`Registry.discover`), so every plugin is in the scenario schema,
the reference, ``sandbox list`` and every command. A plugin that fails to import is skipped with a
warning naming it; ``SANDBOX_PLUGINS=0`` skips every plugin (``CONTRIBUTING.md#plugins``).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import warnings
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Generic, TypeVar, Union

from pydantic import BaseModel, Field

PLUGIN_GROUP = "async_rl_sandbox.components"
"""The entry-point group third-party components register through (module docstring)."""

C = TypeVar("C", bound=BaseModel)
T = TypeVar("T")


@dataclass(frozen=True)
class Entry:
    """One registered component: its TOML name, config model, implementation and defining module."""

    name: str
    config: type[BaseModel]
    impl: Any
    module: str

    @property
    def summary(self) -> str:
        """First sentence of the config's docstring, without markup, at most 120 characters (what
        ``sandbox list`` prints)."""
        doc = (self.config.__doc__ or self.impl.__doc__ or "").strip().split("\n\n")[0]
        text = re.sub(r"\s+", " ", doc.replace("``", "").replace("**", ""))
        text = re.sub(r"\s*\(docs/[^)\s]+\)|;\s*docs/[^);\s]+", "", text)  # the docs link has its own column
        m = re.search(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)\.(\s|$)", text)
        text = text[: m.start() + 1] if m else text
        return text if len(text) <= 120 else text[:119].rstrip() + "…"


class Registry(Generic[T]):
    """The components of one family, keyed by the value of their config's discriminator field.

    Args:
        family: what one component is called in messages ("objective", "delay model", ...).
        key: the config field whose ``Literal`` default is the component's name (``name`` or ``kind``).
        plugins: the family's prefix in :data:`PLUGIN_GROUP` entry names (``"staleness"``), or None:
            no plugins.
    """

    def __init__(self, family: str, key: str = "name", plugins: str | None = None):
        self.family = family
        self.key = key
        self.plugins = plugins
        self._entries: dict[str, Entry] = {}
        self._by_config: dict[type, Entry] = {}
        self._closed = False
        self._plugins_loaded = False

    # -------------------------------------------------------------------------------- registration
    def name_of(self, config: type[BaseModel]) -> str:
        field = config.model_fields.get(self.key)
        if field is None or not isinstance(field.default, str):
            raise TypeError(
                f"{config.__name__}: a {self.family} config needs a `{self.key}: Literal[...] = \"...\"` field "
                "holding its registered name"
            )
        return field.default

    def register(self, config: type[BaseModel], impl: Any = None) -> Callable[[T], T] | Any:
        """Register ``config`` with its implementation. Used as a class decorator
        (``@REG.register(Config)``) or called directly (``REG.register(Config, impl)``); the name is
        the config's ``key`` default. Registering a taken name raises ``ValueError``."""

        def add(target):
            name = self.name_of(config)
            if name in self._entries and self._entries[name].config is not config:
                raise ValueError(
                    f"{self.family} {name!r} is already registered by {self._entries[name].module}; choose another name"
                )
            if self._closed and name not in self._entries:
                raise RuntimeError(
                    f"{self.family} {name!r} registered after the scenario schema was built from this registry; "
                    f"register it before `sandbox.scenario` is imported (put the module in the family's package)"
                )
            entry = Entry(name, config, target, getattr(target, "__module__", config.__module__))
            self._entries[name] = entry
            self._by_config[config] = entry
            return target

        if impl is not None:
            return add(impl)
        return add

    def discover(self, package: str) -> None:
        """Import every module and subpackage of ``package`` (sorted by file name) so that each
        registers its component; modules starting with ``_`` are skipped."""
        pkg = importlib.import_module(package)
        for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
            if not info.name.startswith("_"):
                importlib.import_module(f"{package}.{info.name}")

    def plugin_entry_points(self) -> list:
        """This family's entry points of :data:`PLUGIN_GROUP` (named ``<plugins>`` or
        ``<plugins>:<name>``), sorted by name."""
        if self.plugins is None:
            return []
        from importlib.metadata import entry_points

        eps = [ep for ep in entry_points(group=PLUGIN_GROUP) if ep.name.partition(":")[0].strip() == self.plugins]
        return sorted(eps, key=lambda ep: (ep.name, ep.value))

    def load_plugins(self) -> list[str]:
        """Import every plugin module of this family (once; before the union closes registration).
        Returns the names it registered. A plugin that fails to import, or that does not register the
        ``<family>:<name>`` its entry names, is reported with a warning and skipped."""
        if self._plugins_loaded or os.environ.get("SANDBOX_PLUGINS", "1") == "0":
            return []
        self._plugins_loaded = True
        before = set(self._entries)
        for ep in self.plugin_entry_points():
            try:
                ep.load()
            except Exception as exc:  # noqa: BLE001 - a broken third-party package must not break the sandbox
                warnings.warn(f"{self.family} plugin {ep.name!r} = {ep.value!r} ({PLUGIN_GROUP}) failed to load and "
                              f"is skipped: {type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)
                continue
            named = ep.name.partition(":")[2].strip()
            if named and named not in self._entries:
                warnings.warn(f"{self.family} plugin {ep.name!r} = {ep.value!r} registered no {self.family} {named!r} "
                              f"(registered: {self.names()})", RuntimeWarning, stacklevel=2)
        return [n for n in self._entries if n not in before]

    # -------------------------------------------------------------------------------------- queries
    def names(self) -> list[str]:
        return list(self._entries)

    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def configs(self) -> list[type[BaseModel]]:
        return [e.config for e in self._entries.values()]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self):
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, name: str) -> Entry:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"unknown {self.family} {name!r}; expected one of {self.names()}") from None

    def entry_for(self, cfg: BaseModel) -> Entry:
        """The entry of a validated config instance."""
        try:
            return self._by_config[type(cfg)]
        except KeyError:
            raise TypeError(f"no {self.family} registered for {type(cfg).__name__}; registered: {self.names()}") from None

    def build(self, cfg: BaseModel, *args, **kwargs):
        """``impl(cfg, *args, **kwargs)`` for the config's registered implementation."""
        return self.entry_for(cfg).impl(cfg, *args, **kwargs)

    def union(self):
        """``Annotated[Union[...configs], Field(discriminator=key)]`` for pydantic models. The family's
        plugins are loaded first (:meth:`load_plugins`); registration closes once the union is built (a
        later component could not be validated by models already built from it)."""
        self.load_plugins()
        if not self._entries:
            raise RuntimeError(f"no {self.family} registered yet; discover the package first")
        self._closed = True
        return Annotated[Union[tuple(self.configs())], Field(discriminator=self.key)]  # type: ignore[valid-type]

    def describe(self) -> str:
        """``name1 | name2 | ...`` for field descriptions and messages."""
        return " | ".join(self.names())

    def export_configs(self, namespace: dict) -> list[str]:
        """Put every config class into ``namespace`` (a package's ``globals()``); returns their names for
        ``__all__``."""
        names = []
        for cfg in self.configs():
            namespace[cfg.__name__] = cfg
            names.append(cfg.__name__)
        return names


__all__ = ["PLUGIN_GROUP", "Entry", "Registry"]
