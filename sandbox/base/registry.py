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
(``@CONTROLS.register(MyConfig)``). Order is free: a registry resolves its family's entry points when
the family is first used (any query: names, entries, build, the scenario schema), not when its package is
imported, so a plugin module may be imported first (what its own tests do) and may import any part of the
sandbox. :meth:`Registry.union` is a placeholder that pydantic resolves when the first model using it is
built (the models holding a union defer their build to their first use): registration closes then, so
every plugin is in the scenario schema, the reference, ``sandbox list`` and every command. A plugin that
fails to import is skipped with a warning naming it; ``SANDBOX_PLUGINS=0`` skips every plugin
(``CONTRIBUTING.md#plugins``).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar, Union

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
        self._package: str | None = None

    # -------------------------------------------------------------------------------- registration
    def name_of(self, config: type[BaseModel]) -> str:
        field = config.model_fields.get(self.key)
        if field is None or not isinstance(field.default, str):
            raise TypeError(
                f'{config.__name__}: a {self.family} config needs a `{self.key}: Literal[...] = "..."` field '
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
            module = getattr(target, "__module__", config.__module__)
            if self._closed and name not in self._entries:
                where = (
                    f"put the module in {self._package}"
                    if module.startswith("sandbox.")
                    else f'declare {module} as an entry point "{self.plugins}:{name}" of the group {PLUGIN_GROUP!r} '
                    f"(loaded when the family is first used), or import it before any scenario is validated"
                )
                raise RuntimeError(
                    f"{self.family} {name!r} ({module}) registered after the scenario schema was built from this "
                    f"registry (the first scenario validation closes it); {where}"
                )
            entry = Entry(name, config, target, module)
            self._entries[name] = entry
            self._by_config[config] = entry
            return target

        if impl is not None:
            return add(impl)
        return add

    def discover(self, package: str) -> None:
        """Import every module and subpackage of ``package`` (sorted by file name) so that each
        registers its component; modules starting with ``_`` are skipped. Plugins load only once
        ``package`` has finished importing (:meth:`load_plugins`)."""
        self._package = package
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
        """Import every plugin module of this family (once, at the family's first use; before the union
        closes registration). Returns the names it registered. Nothing loads while the family's package
        is still being imported (its ``__init__`` lists the built-in members); a plugin module that is
        being imported right now (it imported the sandbox first) is not waited for: it registers itself
        when its import finishes. A plugin that fails to import, or that does not register the
        ``<family>:<name>`` its entry names, is reported with a warning and skipped."""
        if self._plugins_loaded or os.environ.get("SANDBOX_PLUGINS", "1") == "0" or _importing(self._package):
            return []
        self._plugins_loaded = True
        before = set(self._entries)
        for ep in self.plugin_entry_points():
            if _importing(ep.value.partition(":")[0].strip()):
                continue
            try:
                ep.load()
            except Exception as exc:  # noqa: BLE001 - a broken third-party package must not break the sandbox
                warnings.warn(
                    f"{self.family} plugin {ep.name!r} = {ep.value!r} ({PLUGIN_GROUP}) failed to load and "
                    f"is skipped: {type(exc).__name__}: {exc}",
                    RuntimeWarning,
                    stacklevel=2,
                )
                continue
            named = ep.name.partition(":")[2].strip()
            if named and named not in self._entries:
                warnings.warn(
                    f"{self.family} plugin {ep.name!r} = {ep.value!r} registered no {self.family} {named!r} "
                    f"(registered: {self.names()})",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return [n for n in self._entries if n not in before]

    # -------------------------------------------------------------------------------------- queries
    # Every query is a use of the family: it loads the family's plugins first.
    def names(self) -> list[str]:
        self.load_plugins()
        return list(self._entries)

    def entries(self) -> list[Entry]:
        self.load_plugins()
        return list(self._entries.values())

    def configs(self) -> list[type[BaseModel]]:
        return [e.config for e in self.entries()]

    def __contains__(self, name: object) -> bool:
        self.load_plugins()
        return name in self._entries

    def __iter__(self):
        self.load_plugins()
        return iter(self._entries)

    def __len__(self) -> int:
        self.load_plugins()
        return len(self._entries)

    def __getitem__(self, name: str) -> Entry:
        self.load_plugins()
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"unknown {self.family} {name!r}; expected one of {self.names()}") from None

    def entry_for(self, cfg: BaseModel) -> Entry:
        """The entry of a validated config instance."""
        self.load_plugins()
        try:
            return self._by_config[type(cfg)]
        except KeyError:
            raise TypeError(
                f"no {self.family} registered for {type(cfg).__name__}; registered: {self.names()}"
            ) from None

    def build(self, cfg: BaseModel, *args, **kwargs):
        """``impl(cfg, *args, **kwargs)`` for the config's registered implementation."""
        return self.entry_for(cfg).impl(cfg, *args, **kwargs)

    def union(self):
        """The type of a field holding any member, for pydantic models: ``Annotated[Any, LazyUnion]``,
        which pydantic resolves to :meth:`closed_union` when it builds the first model using it (such a
        model sets ``defer_build=True`` so that this is its first use, not its class statement)."""
        return Annotated[Any, LazyUnion(self)]

    def closed_union(self):
        """``Annotated[Union[...configs], Field(discriminator=key)]``, the plugins loaded first; registration
        closes (a later component could not be validated by the models built from this union)."""
        self.load_plugins()
        if not self._entries:
            raise RuntimeError(f"no {self.family} registered yet; discover the package first")
        self._closed = True
        return Annotated[Union[tuple(self.configs())], Field(discriminator=self.key)]  # type: ignore[valid-type]  # noqa: UP007

    def describe(self) -> str:
        """``name1 | name2 | ...`` for field descriptions and messages."""
        return " | ".join(self.names())

    def export_configs(self, namespace: dict) -> list[str]:
        """Put every config class into ``namespace`` (a package's ``globals()``); returns their names for
        ``__all__``."""
        names = []
        for cfg in (e.config for e in self._entries.values()):
            namespace[cfg.__name__] = cfg
            names.append(cfg.__name__)
        return names


def _importing(module: str | None) -> bool:
    """Whether ``module`` is being imported right now (in ``sys.modules``, its body not finished)."""
    spec = getattr(sys.modules.get(module or ""), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


class LazyUnion:
    """pydantic metadata standing for a registry's discriminated union until a model is built from it
    (:meth:`Registry.union`); :meth:`resolve` gives the union itself (the scenario walkers use it)."""

    def __init__(self, registry: Registry):
        self.registry = registry

    def resolve(self):
        return self.registry.closed_union()

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        return handler.generate_schema(self.resolve())

    def __repr__(self) -> str:
        return f"LazyUnion({self.registry.family})"


__all__ = ["PLUGIN_GROUP", "Entry", "LazyUnion", "Registry"]
