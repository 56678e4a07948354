"""The layering of the packages, read from the source with ``ast`` (every import, lazy ones included).

The method library and the simulator's parts (``theory``, ``sandbox.algorithms``, ``system``,
``tasks``, ``models``, ``learner``, ``workload``) are below what drives them (the scenario, the
runner, sweeps, the CLI, reports, exports, checks, demos): they import nothing from there, so each
can be used and tested alone and no import cycle runs through an experiment driver.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LOWER = ("theory", "sandbox.algorithms", "sandbox.system", "sandbox.tasks", "sandbox.models", "sandbox.learner", "sandbox.workload")
UPPER = (
    "sandbox.scenario",
    "sandbox.runner",
    "sandbox.sweep",
    "sandbox.cli",
    "sandbox.report",
    "sandbox.export",
    "sandbox.checks",
    "sandbox.claims",
    "sandbox.demos",
    "sandbox.integrations",
    "sandbox.analysis",
)

# Known upward edges, to be removed: (importing module, imported module or package). Empty: keep it so.
KNOWN_EDGES: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every module an import statement of ``path`` names (``from a import b`` names ``a`` and
    ``a.b``, since ``b`` may be a submodule)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _modules() -> dict[str, set[str]]:
    files = sorted((ROOT / "sandbox").rglob("*.py")) + sorted((ROOT / "theory").rglob("*.py"))
    return {_module_name(f): _imports(f) for f in files}


MODULES = _modules()


def _edges(importers: tuple[str, ...], targets: tuple[str, ...]) -> set[tuple[str, str]]:
    return {
        (mod, imp)
        for mod, imports in MODULES.items()
        if _within(mod, importers)
        for imp in imports
        if _within(imp, targets)
    }


def _unknown(edges: set[tuple[str, str]]) -> set[tuple[str, str]]:
    return {(mod, imp) for mod, imp in edges if not any(mod == k and _within(imp, (t,)) for k, t in KNOWN_EDGES)}


def test_the_parser_sees_the_lower_layers_and_their_imports():
    assert {"sandbox.tasks.base", "sandbox.system.cluster", "sandbox.algorithms", "theory"} <= set(MODULES)
    assert "sandbox.tasks.rollouts" in MODULES["sandbox.tasks.base"]  # a relative import, resolved
    assert "sandbox.tasks.rollouts" in MODULES["sandbox.tasks"]  # from a package's __init__


@pytest.mark.parametrize("layer", LOWER)
def test_lower_layers_import_nothing_that_drives_them(layer):
    upward = _unknown(_edges((layer,), UPPER))
    assert not upward, f"{layer} imports upward: {sorted(upward)}"


def test_known_upward_edges_still_exist():
    """A known edge that is gone must leave KNOWN_EDGES, so that it cannot come back unnoticed."""
    gone = {edge for edge in KNOWN_EDGES if edge[1] not in MODULES.get(edge[0], set())}
    assert not gone, f"remove {sorted(gone)} from KNOWN_EDGES in {Path(__file__).name}"


def test_theory_imports_nothing_from_the_simulator():
    assert not _edges(("theory",), ("sandbox",))


def test_tasks_and_scenario_form_no_loop():
    assert _edges(("sandbox.scenario",), ("sandbox.tasks",))  # the scenario validates task configs
    assert not _edges(("sandbox.tasks",), ("sandbox.scenario",))
