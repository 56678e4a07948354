"""Teaching demos: one command, a plain-language explanation, one figure, under a minute.

``sandbox demo`` lists them; ``sandbox demo NAME`` runs one. Each demo is a single readable module
with a ``Config`` dataclass and ``main(cfg) -> Path`` (the figure); ``examples/demo_NAME.py`` is a
symbolic link to it, so it can be read and run as a standalone script (``--tiny``, ``--out DIR``
and every scalar ``Config`` field are command-line options).
"""


def __getattr__(name: str):
    """The package's public names (``from sandbox.demos import ...``), read from :mod:`.api` on first use, so
    that importing a module of this folder (a command module) loads nothing heavy. A submodule's name and a
    dunder are left to the import system (``from sandbox.demos import <submodule>`` loads only that module)."""
    import importlib
    import importlib.util

    if name.startswith("__") or importlib.util.find_spec(f"{__name__}.{name}") is not None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return getattr(importlib.import_module(f"{__name__}.api"), name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
