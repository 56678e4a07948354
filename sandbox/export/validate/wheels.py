"""Fetch a framework's released wheel without its dependencies and unpack it, so that an exported
configuration can be checked against the framework's own files (Hydra YAML, dataclasses, argparse
set-up) with no GPU and no CUDA packages.

``pip download --no-deps NAME==VERSION`` into a cache directory (``$SANDBOX_WHEEL_CACHE``, default
``$XDG_CACHE_HOME/async-rl-sandbox/wheels``, i.e. ``~/.cache/async-rl-sandbox/wheels`` on Linux), then unzip once into ``<cache>/<name>-<version>/``. Nothing
is installed and nothing is imported from the wheel unless a validator says so.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# Pinned releases the validators were written against (frameworks' packaging facts, 2026-11).
PINNED = {
    "verl": "0.9.1",
    "areal": "1.0.4",
    "openrlhf": "0.11.2",
    "trl": "1.16.0",
}


class WheelUnavailable(RuntimeError):
    """The wheel could not be downloaded (no registry access) or unpacked."""


def cache_dir() -> Path:
    """``$SANDBOX_WHEEL_CACHE``, else ``wheels/`` in the platform's user cache directory (``platformdirs``;
    ``$XDG_CACHE_HOME/async-rl-sandbox/wheels``, by default ``~/.cache/async-rl-sandbox/wheels`` on Linux)."""
    env = os.environ.get("SANDBOX_WHEEL_CACHE")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_path

    return user_cache_path("async-rl-sandbox", appauthor=False) / "wheels"


def unpacked_wheel(name: str, version: str | None = None) -> Path:
    """Directory holding the unzipped wheel ``name==version`` (downloaded on first use)."""
    version = version or PINNED[name]
    root = cache_dir()
    target = root / f"{name}-{version}"
    if (target / ".complete").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    # One fetcher at a time per wheel (parallel test workers, two commands at once): a second process
    # waits, then finds the finished directory instead of replacing it under the first one's readers.
    with FileLock(str(root / f".{name}-{version}.lock")):
        if (target / ".complete").exists():
            return target
        _fetch(name, version, root, target)
    return target


def _fetch(name: str, version: str, root: Path, target: Path) -> None:
    """Download ``name==version`` into a temporary directory under ``root``, unzip it and move it to ``target``
    (the caller holds the wheel's lock)."""
    with tempfile.TemporaryDirectory(dir=root, prefix=f".{name}-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
            "-d",
            tmp,
            f"{name}=={version}",
        ]
        if name == "openrlhf":  # CPython-specific wheels: ask for the 3.11 build whatever runs this
            cmd += ["--python-version", "3.11", "--only-binary=:all:"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise WheelUnavailable(f"pip download {name}=={version} failed: {proc.stderr.strip()[-500:]}")
        staging = Path(tmp) / "unpacked"
        with zipfile.ZipFile(wheels[0]) as zf:
            zf.extractall(staging)
        (staging / ".complete").write_text(wheels[0].name + "\n")
        if target.exists():  # an unfinished directory (no .complete) left by an interrupted fetch
            shutil.rmtree(target)
        os.replace(staging, target)


def import_from_wheel(name: str, *modules: str) -> list:
    """Import ``modules`` (dotted names) from the unpacked pinned wheel of ``name``, whose directory is
    put first on ``sys.path``. Raises :class:`WheelUnavailable` saying why (no wheel, or a dependency
    of the framework's module missing here: the wheel is unpacked without its dependencies)."""
    root = str(unpacked_wheel(name))
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        return [importlib.import_module(m) for m in modules]
    except ImportError as exc:
        raise WheelUnavailable(
            f"importing {', '.join(modules)} from the {name} wheel: {exc} (install the framework's light import "
            "dependencies with the constraints file; for verl: tensordict, pyvers<0.2, orjson, codetiming)"
        ) from None


def main(argv: list[str] | None = None) -> int:
    """``python -m sandbox.export.validate.wheels``: fetch every pinned wheel (used by CI)."""
    names = (argv if argv is not None else sys.argv[1:]) or [n for n in PINNED if n != "trl"]
    for name in names:
        try:
            print(f"{name}=={PINNED[name]}: {unpacked_wheel(name)}")
        except WheelUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
