"""``sandbox claims``: each paper's claim as an experiment with a verdict over seeds (docs/claims.md).

A claim runs its scenario once per seed, reduces each run to a statistic, and gives the mean with a
95% t-interval and a verdict against the claim's threshold (:mod:`.base`)."""


def __getattr__(name: str):
    """The package's public names (``from sandbox.claims import ...``), read from :mod:`.api` on first use, so
    that importing a module of this folder (a command module) loads nothing heavy. A submodule's name and a
    dunder are left to the import system (``from sandbox.claims import <submodule>`` loads only that module)."""
    import importlib
    import importlib.util

    if name.startswith("__") or importlib.util.find_spec(f"{__name__}.{name}") is not None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return getattr(importlib.import_module(f"{__name__}.api"), name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
