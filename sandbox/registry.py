"""Registries of pluggable components: one per family (objective, correction, stabilizer, delay
model, staleness control, task), in the spirit of Gymnasium's ``register``/``make``.

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
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Generic, TypeVar, Union

from pydantic import BaseModel, Field

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
    """

    def __init__(self, family: str, key: str = "name"):
        self.family = family
        self.key = key
        self._entries: dict[str, Entry] = {}
        self._by_config: dict[type, Entry] = {}
        self._closed = False

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
        """``Annotated[Union[...configs], Field(discriminator=key)]`` for pydantic models. Registration
        closes once the union is built (a later component could not be validated by models already
        built from it)."""
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


__all__ = ["Entry", "Registry"]
