"""``sandbox explore``: an interactive, self-contained HTML page of precomputed staleness runs.

:mod:`.grid` says which runs (and refuses a grid over its time budget), :mod:`.data` runs them and
reduces each to the arrays the page draws, :mod:`.page` writes the page (:mod:`.texts` holds its
words, ``explorer.js`` its drawing code).
"""


def __getattr__(name: str):
    """The package's public names (``from sandbox.explore import ...``), read from :mod:`.api` on first use, so
    that importing a module of this folder (a command module) loads nothing heavy. A submodule's name and a
    dunder are left to the import system (``from sandbox.explore import <submodule>`` loads only that module)."""
    import importlib
    import importlib.util

    if name.startswith("__") or importlib.util.find_spec(f"{__name__}.{name}") is not None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return getattr(importlib.import_module(f"{__name__}.api"), name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
