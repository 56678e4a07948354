"""``sandbox import CONFIG --framework F``: a GPU framework's config read back as a scenario (the inverse
of :mod:`sandbox.export`), with IMPORT.md listing key by key what was mapped, converted, cannot be
represented or is unknown. One module per framework (a reader and a mapper), the engine in
:mod:`.common`, the scenario and IMPORT.md in :mod:`.build`. Guide: ``docs/import.md``.

>>> from sandbox.importers import import_config                      # doctest: +SKIP
>>> imp = import_config("overrides.txt", "verl")                     # doctest: +SKIP
>>> imp.scenario.system.staleness.k_max                              # doctest: +SKIP
"""


def __getattr__(name: str):
    """The package's public names (``from sandbox.importers import ...``), read from :mod:`.api` on first use, so
    that importing a module of this folder (a command module) loads nothing heavy. A submodule's name and a
    dunder are left to the import system (``from sandbox.importers import <submodule>`` loads only that module)."""
    import importlib
    import importlib.util

    if name.startswith("__") or importlib.util.find_spec(f"{__name__}.{name}") is not None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return getattr(importlib.import_module(f"{__name__}.api"), name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
