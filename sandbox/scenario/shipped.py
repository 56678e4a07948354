"""The scenarios shipped with the package, read with :mod:`importlib.resources`.

One copy: the top-level ``scenarios/`` folder of the repository. ``sandbox/scenarios`` is a
symbolic link to it, and the package data of ``sandbox`` includes every ``.toml`` / ``.csv`` /
``.jsonl`` / ``.md`` file under it (``pyproject.toml``), so a wheel carries real copies of the same
files; an editable install or a source checkout reads the folder itself.

How a scenario argument is found (``sandbox run``, ``scenario``, ``plan``, ``export``, ``sweep``;
:func:`resolve_scenario_path`):

* no argument: the shipped ``quickstart.toml`` (:data:`DEFAULT_SCENARIO`);
* a path that exists, relative to the current directory or absolute: that file, as given;
* otherwise a shipped scenario by name, with or without the ``scenarios/`` prefix and the
  ``.toml`` suffix: ``max_lag``, ``max_lag.toml``, ``scenarios/max_lag.toml``,
  ``published/verl_fully_async``, ``sweeps/lag_lr_quadratic.toml``. So the README's commands work
  from any directory, and a local file of the same name always wins.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
from importlib.resources import as_file, files
from pathlib import Path, PurePosixPath

FOLDER = "scenarios"
"""The folder name, in the repository and inside the ``sandbox`` package."""

PACKAGE_DATA_SUFFIXES = (".toml", ".csv", ".jsonl", ".md")
"""What the package data carries from the folder (pyproject.toml lists the same patterns;
tests/test_packaging.py holds the two together)."""


@functools.cache
def shipped_root() -> Path:
    """The shipped scenarios folder as a real directory (site-packages, or the source checkout)."""
    root = files("sandbox").joinpath(FOLDER)
    if isinstance(root, Path):
        return root
    # a zipped install: extracted once for the life of the process
    stack = contextlib.ExitStack()
    atexit.register(stack.close)
    return Path(stack.enter_context(as_file(root)))


def shipped_scenarios() -> list[str]:
    """Every shipped scenario or sweep file, as a path relative to the folder (``published/x.toml``)."""
    root = shipped_root()
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.toml") if p.is_file())


def find_shipped(name: str | Path) -> Path | None:
    """The shipped file that ``name`` names (``max_lag``, ``scenarios/max_lag.toml``, ...), or None."""
    text = str(name).replace("\\", "/")
    rel = PurePosixPath(text)
    if not text or rel.is_absolute() or ".." in rel.parts:
        return None
    parts = rel.parts[1:] if rel.parts[:1] == (FOLDER,) else rel.parts
    if not parts:
        return None
    rel = PurePosixPath(*parts)
    if rel.suffix != ".toml":
        rel = rel.with_name(rel.name + ".toml")
    path = shipped_root().joinpath(*rel.parts)
    return path if path.is_file() else None


def resolve_scenario_path(path: str | Path) -> Path:
    """``path`` if it exists, else the shipped scenario it names, else ``path`` unchanged (the caller
    reports it missing; :func:`not_found_hint` says what exists)."""
    path = Path(path)
    if path.exists():
        return path
    return find_shipped(path) or path


def display_name(path: str | Path) -> str:
    """``scenarios/<name>.toml (shipped)`` for a file of the shipped folder reached through it
    (:func:`find_shipped`, :data:`DEFAULT_SCENARIO`), else ``path`` as given."""
    root = shipped_root()
    try:
        rel = Path(path).relative_to(root)
    except ValueError:
        return str(path)
    return f"{FOLDER}/{rel.as_posix()} (shipped)"


def not_found_hint(given: str | Path | None = None) -> str:
    """The shipped names, for a 'file not found' message; with ``given``, the closest shipped name first
    (difflib, on the name without folder and suffix too: ``quikstart`` -> ``quickstart``)."""
    import difflib

    names = [n.removesuffix(".toml") for n in shipped_scenarios()]
    hint = ""
    if given is not None:
        text = str(given).replace("\\", "/").removesuffix(".toml")
        text = text.removeprefix(FOLDER + "/")
        stems = {n.rsplit("/", 1)[-1]: n for n in names}
        close = difflib.get_close_matches(text, names, n=1, cutoff=0.6) or [
            stems[c] for c in difflib.get_close_matches(text.rsplit("/", 1)[-1], list(stems), n=1, cutoff=0.6)
        ]
        hint = f"did you mean {close[0]!r}? " if close else ""
    return hint + "nor a shipped scenario; shipped: " + ", ".join(names)


DEFAULT_SCENARIO = shipped_root() / "quickstart.toml"
"""What ``sandbox run`` (``scenario``, ``plan``) runs with no argument."""
