"""Helpers of the component tests: the synthetic components of ``synthetic/`` (one per family) as a
third-party plugin, i.e. a package plus a ``*.dist-info`` folder with ``entry_points.txt`` in a folder
put on ``sys.path`` (``importlib.metadata`` finds it as if pip had installed it), and the command that
runs Python with it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC = Path(__file__).resolve().parent / "synthetic"
PACKAGE = "sandbox_synthetic_plugin"
GROUP = "async_rl_sandbox.components"

COMPONENTS = {  # family -> (name, module in synthetic/)
    "objective": ("synthetic_objective", "synthetic_objective"),
    "correction": ("synthetic_correction", "synthetic_correction"),
    "stabilizer": ("synthetic_stabilizer", "synthetic_stabilizer"),
    "delay": ("synthetic_delay", "synthetic_delay"),
    "staleness": ("synthetic_control", "synthetic_control"),
    "task": ("synthetic_task", "synthetic_task"),
    "engine": ("synthetic_engine", "synthetic_engine"),
}


def make_plugin_site(where: Path, extra_entries: str = "") -> Path:
    """Write the plugin package and its dist-info under ``where``; returns ``where``."""
    pkg = where / PACKAGE
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text('"""Synthetic sandbox components, installed as a plugin (tests)."""\n')
    for _, module in COMPONENTS.values():
        shutil.copy(SYNTHETIC / f"{module}.py", pkg / f"{module}.py")
    info = where / f"{PACKAGE}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 0.1\n")
    lines = [f"[{GROUP}]"] + [f"{fam}:{name} = {PACKAGE}.{module}" for fam, (name, module) in COMPONENTS.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n" + extra_entries)
    return where


def env_with(*paths: Path) -> dict:
    """The environment of a subprocess that imports the sandbox from this checkout plus ``paths``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in paths), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    env.pop("SANDBOX_PLUGINS", None)
    return env


def python(code: str, *paths: Path, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env_with(*paths),
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def sandbox_cli(
    args: list[str], *paths: Path, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``sandbox <args>`` as a user runs it (the console entry point, ``sandbox.cli:main``)."""
    code = "import sys; from sandbox.cli import app; app(args=sys.argv[1:], prog_name='sandbox')"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env_with(*paths),
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
