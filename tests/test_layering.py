"""The declared order of every module of ``sandbox`` and ``theory``, read from the source with ``ast``
(every import: module-level, inside functions, under ``TYPE_CHECKING``).

Each module belongs to one layer of :data:`LAYERS`; a module imports only from its own layer or the
layers below it (never against the order), the import graph has no cycle (function-level imports
included, so none of them can hide one), and each module that still imports inside functions says
why in :data:`FUNCTION_LEVEL` (load time and optional heavy dependencies, never a cycle).
Importing ``a.b.c`` runs the ``__init__`` of ``a.b`` too, so a package's ``__init__`` counts as
imported with its submodules (except the importer's own packages).

Measure (lines per package, modules per layer, cycles, imports against the order, function-level
imports): ``PYTHONPATH=. python tests/test_layering.py``.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The declared order, lowest first. A module's layer is that of its longest prefix here ("sandbox"
# names the package's own __init__ only). The same layer may import itself (without a cycle).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "base: errors, files, processes, progress, the registry mechanism",
        (
            "sandbox",
            "sandbox.base",
        ),
    ),
    ("theory: the closed forms", ("theory",)),
    (
        "core: the method library and the simulator's parts",
        (
            "sandbox.algorithms",
            "sandbox.models",
            "sandbox.system",
            "sandbox.tasks",
            "sandbox.engines",
            "sandbox.learner",
            "sandbox.components",
        ),
    ),
    ("scenario: the scenario model, its loading and reference, its budget", ("sandbox.scenario",)),
    ("analysis: pure functions of a run's records", ("sandbox.analysis",)),
    ("run: the runner, its replay, its metric writers and figures", ("sandbox.run",)),
    (
        "drivers: plan, preflight, sweeps, claims, checks, demos, export, import, the frameworks",
        (
            "sandbox.plan",
            "sandbox.preflight",
            "sandbox.sweep",
            "sandbox.claims",
            "sandbox.checks",
            "sandbox.demos",
            "sandbox.export",
            "sandbox.importers",
            "sandbox.frameworks",
            "sandbox.integrations",
        ),
    ),
    (
        "presentation: reports and the interactive explorer",
        (
            "sandbox.report",
            "sandbox.explore",
            "sandbox.plan.figures",
            "sandbox.preflight.figures",
        ),
    ),
    (
        "commands: the CLI app and each folder's command module",
        (
            "sandbox.cli",
            "sandbox.__main__",
            "sandbox.cli_support",
            "sandbox.checks.command",
            "sandbox.claims.command",
            "sandbox.demos.command",
            "sandbox.explore.command",
            "sandbox.export.command",
            "sandbox.importers.command",
            "sandbox.plan.command",
            "sandbox.preflight.command",
            "sandbox.report.command",
            "sandbox.run.command",
            "sandbox.scenario.command",
            "sandbox.sweep.command",
        ),
    ),
    ("tools over the cli: the component checker", ("sandbox.component_check",)),
)
LAYER: dict[str, int] = {prefix: i for i, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes}

# Imports against the order still to be removed: (importing module, imported module) -> why it is
# still there. Empty: keep it so (a new entry needs a reason and an issue).
KNOWN: dict[tuple[str, str], str] = {}

# Modules that still import sandbox modules inside functions, and why (each is along the order; the
# no-cycle test proves that none of them dodges a cycle).
FUNCTION_LEVEL: dict[str, str] = {
    "sandbox.plan.split": "late-bound: the runner is read at call time, as in sandbox.plan.capacity (its learning runs; tests patch sandbox.run.runner)",
    "sandbox.plan.capacity": "late-bound: the runner, budget and scenario are read at call time (tests patch "
    "sandbox.run.runner.run_scenario and sandbox.scenario.budget.available_memory)",
    "sandbox.scenario.budget": "the task registry (every task module, 0.6 s) loads only when a scenario is estimated, not "
    "when a command imports budget for its formatting helpers",
    "sandbox.importers.verl_defaults": "the wheel fetcher (sandbox.export.validate.wheels) loads only when the stored "
    "verl defaults are rewritten from the wheel (python -m sandbox.importers.verl_defaults)",
    "sandbox.component_check": "a test tool: the CLI, exporters, plots and the scenario reference load only when "
    "a check runs, and its monkeypatch of plots/plan_figures needs the modules at call time",
    "sandbox.export.source": "torch: reading a sweep directory loads the sweep package (the runner); exporting a "
    "scenario file does not",
    "sandbox.integrations.trl": "the TRL hooks work without the scenario model; only from_scenario reads a scenario file",
    "sandbox.report.figures": "sympy (theory.delayed_stability) and torch (the sweep package, the scenario model) "
    "load only for the figures that need them",
    "sandbox.explore.api": "torch and the runner (through .data) load only when a page is built, so `sandbox explore --help` answers at once",
    "sandbox.explore.data": "sympy: the theory overlays (theory.delayed_stability, theory.mismatch_ess) load once per page, not at import",
    "sandbox.report.html": "torch: `sandbox report` of a single run never loads the sweep package (the runner)",
    "sandbox.run.runner": "matplotlib (plots: tests patch sandbox.run.plots.default_figures) and scipy (drop bias) load "
    "only when the run draws figures or drops groups",
    "sandbox.sweep.execute": "torch (through the runner), the scenario model, tasks and budget load only when a sweep has runs to "
    "do; its progress import stays local because the local name `shown` is reused",
    "sandbox.tasks.lm.task": "torch: the builtin transformer's torch.nn modules (sandbox.models.transformer_nn) load "
    "when a task is built, not when its config is validated (a scenario loads without torch)",
    "sandbox.system.delays.lognormal": "sympy: theory.order_statistics loads only when a lognormal delay is built",
    "sandbox.run.writers": "the scenario model (dump_scenario, 0.8 s of pydantic models) loads only when a W&B run starts",
    "sandbox.checks.command": "startup: each command loads only what it runs (torch through the runner, scenario and tasks; matplotlib through plots and reports; the exporters), so --help and the light commands answer at once",
    "sandbox.claims.command": "startup: each command loads only what it runs (torch through the runner, scenario and tasks; matplotlib through plots and reports; the exporters), so --help and the light commands answer at once",
    "sandbox.demos.command": "startup: each command loads only what it runs (torch through the runner, scenario and tasks; matplotlib through plots and reports; the exporters), so --help and the light commands answer at once",
    "sandbox.explore.command": "startup: each command loads only what it runs (torch through the runner, scenario and tasks; matplotlib through plots and reports; the exporters), so --help and the light commands answer at once",
    "sandbox.export.command": "startup: each command loads only what it runs (torch through the runner, scenario and tasks; matplotlib through plots and reports; the exporters), so --help and the light commands answer at once",
    "sandbox.importers.command": "startup: each command loads only what it runs (torch through the runner, scenario and tasks; matplotlib through plots and reports; the exporters), so --help and the light commands answer at once",
    "sandbox.plan.command": "startup: each command loads only what it runs (torch through the runner, scenario and tasks; matplotlib through plots and reports; the exporters), so --help and the light commands answer at once",
    "sandbox.preflight.command": "startup: each command loads only what it runs (torch through the runner, scenario and tasks; matplotlib through plots and reports; the exporters), so --help and the light commands answer at once",
    "sandbox.report.command": "startup: each command loads only what it runs (torch through the runner, scenario and tasks; matplotlib through plots and reports; the exporters), so --help and the light commands answer at once",
    "sandbox.run.command": "startup: each command loads only what it runs (torch through the runner, scenario and tasks; matplotlib through plots and reports; the exporters), so --help and the light commands answer at once",
    "sandbox.scenario.command": "startup: each command loads only what it runs (torch through the runner, scenario and tasks; matplotlib through plots and reports; the exporters), so --help and the light commands answer at once",
    "sandbox.sweep.command": "startup: each command loads only what it runs (torch through the runner, scenario and tasks; matplotlib through plots and reports; the exporters), so --help and the light commands answer at once",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


FILES = {_module_name(f): f for f in sorted((ROOT / "sandbox").rglob("*.py")) + sorted((ROOT / "theory").rglob("*.py"))}


def _resolve(name: str) -> str | None:
    """The module ``name`` is or lies in (``a.b.c`` with ``c`` an attribute of ``a.b``: ``a.b``)."""
    while name and name not in FILES:
        name = name.rpartition(".")[0]
    return name or None


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for each internal module an import of ``path`` names
    (``from a import b`` names ``a.b`` when ``b`` is a module, else ``a``), relative ones resolved."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    module = ".".join(base + ([child.module] if child.module else []))
                else:
                    module = child.module or ""
                names = [f"{module}.{alias.name}" for alias in child.names]
            for n in names:
                target = _resolve(n)
                if target and target != name:
                    found.append((target, child.lineno, in_function))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


IMPORTS = {mod: _imports(path) for mod, path in FILES.items()}
MODULES: dict[str, set[str]] = {mod: {t for t, _, _ in found} for mod, found in IMPORTS.items()}


def _edges() -> set[tuple[str, str]]:
    """Every (importer, imported) pair, the imported module's packages included (their ``__init__`` runs)."""
    edges = set()
    for mod, targets in MODULES.items():
        own = set(_ancestors(mod))
        for t in targets:
            edges.add((mod, t))
            edges.update((mod, a) for a in _ancestors(t) if a in FILES and a not in own and a != mod)
    return edges


EDGES = _edges()


def layer_of(module: str) -> int | None:
    keys = [k for k in LAYER if module == k or (k != "sandbox" and module.startswith(k + "."))]
    return LAYER[max(keys, key=len)] if keys else None


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def against_the_order() -> set[tuple[str, str]]:
    return {(a, b) for a, b in EDGES if (layer_of(a) or 0) < (layer_of(b) or 0)}


def cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, list[str]] = {m: [] for m in FILES}
    for a, b in EDGES:
        graph[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph[w])))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def function_level() -> list[tuple[str, str, int]]:
    return [(mod, t, line) for mod, found in IMPORTS.items() for t, line, inside in found if inside]


def test_the_parser_sees_the_modules_and_their_imports():
    assert {"sandbox.tasks.base", "sandbox.system.cluster", "sandbox.algorithms", "theory", "sandbox.cli"} <= set(FILES)
    assert "sandbox.tasks.rollouts" in MODULES["sandbox.tasks.base"]  # a relative import, resolved
    assert "sandbox.tasks.rollouts" in MODULES["sandbox.tasks"]  # from a package's __init__
    assert ("sandbox.cli", "sandbox.sweep") in EDGES  # one inside a function
    assert function_level()


def test_every_module_has_a_layer():
    missing = sorted(m for m in FILES if layer_of(m) is None)
    assert not missing, f"declare the layer of {missing} in LAYERS ({Path(__file__).name})"
    assert all(any(_within(m, p) for m in FILES) for p in LAYER), "a prefix in LAYERS names no module"


def test_no_import_against_the_order():
    bad = {
        edge: f"{LAYERS[layer_of(edge[0])][0].split(':')[0]} -> {LAYERS[layer_of(edge[1])][0].split(':')[0]}"
        for edge in against_the_order()
        if edge not in KNOWN
    }
    assert not bad, f"imports against the declared order: {sorted(bad.items())}"


def test_known_edges_still_exist():
    """A known edge that is gone must leave KNOWN, so that it cannot come back unnoticed."""
    gone = sorted(set(KNOWN) - against_the_order())
    assert not gone, f"remove {gone} from KNOWN in {Path(__file__).name}"


def test_no_import_cycle():
    assert not cycles()


def test_function_level_imports_say_why():
    modules = {mod for mod, _, _ in function_level()}
    assert not modules - set(FUNCTION_LEVEL), (
        f"say in FUNCTION_LEVEL why {sorted(modules - set(FUNCTION_LEVEL))} import inside functions"
    )
    assert not set(FUNCTION_LEVEL) - modules, (
        f"{sorted(set(FUNCTION_LEVEL) - modules)} import nothing inside functions now: remove them"
    )


@pytest.mark.parametrize(
    "lower", ["theory", "sandbox.algorithms", "sandbox.system", "sandbox.tasks", "sandbox.models", "sandbox.learner"]
)
def test_the_core_imports_nothing_that_drives_it(lower):
    upward = {(a, b) for a, b in EDGES if _within(a, lower) and layer_of(b) > LAYER["sandbox.components"]}
    assert not upward


def test_theory_imports_nothing_from_the_simulator():
    assert not {(a, b) for a, b in EDGES if _within(a, "theory") and _within(b, "sandbox")}


def test_tasks_and_scenario_form_no_loop():
    assert any(
        _within(a, "sandbox.scenario") and _within(b, "sandbox.tasks") for a, b in EDGES
    )  # the scenario validates task configs
    assert not any(_within(a, "sandbox.tasks") and _within(b, "sandbox.scenario") for a, b in EDGES)


def report() -> str:
    lines = []
    packages = Counter()
    for mod, path in FILES.items():
        parts = mod.split(".")
        nested = len(parts) > 2 or (len(parts) == 2 and path.name == "__init__.py")
        key = "theory" if parts[0] == "theory" else ".".join(parts[:2]) if nested else "sandbox (top-level modules)"
        packages[key] += len(path.read_text().splitlines())
    lines.append("lines per package: " + ", ".join(f"{k} {v}" for k, v in sorted(packages.items())))
    per_layer = Counter(layer_of(m) for m in FILES)
    lines.append(
        f"modules {len(FILES)}; per layer: "
        + ", ".join(f"{i} {LAYERS[i][0].split(':')[0]} {per_layer[i]}" for i in range(len(LAYERS)))
        + (f", undeclared {per_layer[None]}" if per_layer[None] else "")
    )
    statements = {(mod, line) for mod, found in IMPORTS.items() for _, line, _ in found}
    inside = {(mod, line) for mod, _, line in function_level()}
    lines.append(
        f"internal import statements {len(statements)}, inside functions {len(inside)} in {len({m for m, _ in inside})} modules"
    )
    lines.append(f"cycles: {cycles()}")
    against = sorted(against_the_order())
    lines.append(
        f"imports against the order: {len(against)} ({len([e for e in against if e not in KNOWN])} not in KNOWN)"
    )
    lines += [f"  {a} -> {b}" for a, b in against]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
