"""A component checker in the spirit of Gymnasium's ``check_env``: does a registered component work in
every command, from its own file? (``CONTRIBUTING.md#the-component-checker``)

:func:`check_component` puts the component into a tiny scenario (the bit-string task, GRPO, no
correction, ``sync``; the component in its slot with its defaults, plus its ``check_settings``) and
runs, in this process, what a user would:

1. the scenario validates and the **budget estimate** is finite and positive;
2. a short ``sandbox run`` (2 optimizer steps);
3. ``sandbox plan`` (2 workers x k in {0, 1}, one seed, 2 steps);
4. ``sandbox export`` to every framework with ``--allow-partial``: mapped, or written as a "no
   equivalent" row, or refused as bad input with a message; never an exception;
5. ``sandbox scenario --reference`` names the component;
6. a hand-value test marked ``@pytest.mark.component(family, name)`` exists (when ``tests`` is given;
   a plugin keeps its tests in its own package).

It returns the problems found, each a sentence naming the step (empty: the component passes). A
component may declare ``check_settings``, a class attribute of its config: its own fields (or dotted
scenario keys) and values that make the check valid, small and fast (the LM task's tiny model), and
``check_files`` (file name -> text, written next to the check's scenario; ``{workdir}`` in a setting
names that folder: the trace delay's trace); nothing else is needed.

The registries are process-global, and a component registers before the scenario schema is built:
to check a component that is not in the package, register it as a plugin (``sandbox.base.registry``) and
run the check in a fresh process.
"""

from __future__ import annotations

import ast
import math
import tempfile
import traceback
from contextlib import contextmanager, nullcontext
from functools import cache
from pathlib import Path
from typing import Any

FRAMEWORKS_ALL = None  # sentinel: every framework of sandbox.export.api.EXPORTERS

BASE: dict[str, Any] = {
    "title": "component check",
    "task": {"name": "bitstring", "horizon": 4, "replicas": 1},
    "system": {
        "num_workers": 2,
        "generation_time": {"kind": "constant", "value": 1.0},
        "train_time": {"kind": "constant", "value": 0.1},
        "sync_delay": {"kind": "constant", "value": 0.0},
        "staleness": {"kind": "sync"},
    },
    "algorithm": {
        "group_size": 4,
        "groups_per_step": 2,
        "objective": {"name": "grpo"},
        "correction": {"name": "none"},
        "optimizer": {"name": "adam", "lr": 0.05},
    },
    "run": {"steps": 2, "seed": 0, "eval_every": 1},
}
"""The scenario every component is put into (tiny: a check takes well under a second per command)."""

SLOTS = {
    "objective": ("algorithm", "objective", "name"),
    "correction": ("algorithm", "correction", "name"),
    "stabilizer": ("algorithm", "stabilizers", "name"),
    "delay": ("system", "generation_time", "kind"),
    "staleness": ("system", "staleness", "kind"),
    "task": (None, "task", "name"),
    "engine": (None, "engine", "name"),
}
"""Where a component of each family goes in :data:`BASE` (section, field, discriminator key)."""


def component_scenario(family: str, name: str, workdir: Path | str = ".") -> dict[str, Any]:
    """The raw scenario (a dict) :func:`check_component` runs for ``family``/``name``; ``{workdir}`` in a
    string of the config's ``check_settings`` is replaced by ``workdir``, where the config's
    ``check_files`` (file name -> text) are written."""
    import copy

    from sandbox.components import FAMILIES
    from sandbox.scenario.load import set_dotted

    entry = FAMILIES[family].registry[name]
    raw = copy.deepcopy(BASE)
    section, fld, key = SLOTS[family]
    table = {key: name}
    if family == "stabilizer":
        raw["algorithm"]["stabilizers"] = [table]
    elif section is None:
        raw[fld] = table
    else:
        raw[section][fld] = table
    prefix = {
        "objective": "algorithm.objective",
        "correction": "algorithm.correction",
        "stabilizer": None,
        "delay": "system.generation_time",
        "staleness": "system.staleness",
        "task": "task",
        "engine": "engine",
    }[family]
    for fname, text in dict(getattr(entry.config, "check_files", {}) or {}).items():
        Path(workdir, fname).write_text(text)
    for dotted, value in dict(getattr(entry.config, "check_settings", {}) or {}).items():
        if isinstance(value, str):
            value = value.replace("{workdir}", str(Path(workdir).resolve()))
        if prefix is None:  # a stabilizer: its table in the list
            table[dotted] = value
        elif dotted in ("task", "system", "algorithm", "run"):  # a whole section (an engine's task)
            raw[dotted] = copy.deepcopy(value)
        elif dotted.startswith(("task.", "system.", "algorithm.", "run.")):
            set_dotted(raw, dotted, value)
        else:
            set_dotted(raw, f"{prefix}.{dotted}", value)
    return raw


@cache
def _reference() -> str:
    from sandbox.scenario.reference import reference_markdown

    return reference_markdown()


@cache
def marked_components(tests: Path) -> frozenset[tuple[str, str]]:
    """``(family, name)`` of every ``pytest.mark.component(family, *names)`` decorator under ``tests``."""
    found = set()
    for path in Path(tests).rglob("*.py"):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "component"
            ):
                continue
            args = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if len(args) >= 2:
                found |= {(args[0], n) for n in args[1:]}
    return frozenset(found)


def _cli(args: list[str]) -> tuple[int, str, BaseException | None]:
    """Run ``sandbox <args>`` in this process: exit code, output, and the exception if it crashed."""
    from typer.testing import CliRunner

    from sandbox.cli import app

    res = CliRunner().invoke(app, args)
    crash = res.exception if res.exception is not None and not isinstance(res.exception, SystemExit) else None
    return res.exit_code, res.output, crash


def _crash_text(exc: BaseException) -> str:
    """The exception and where it was raised: the innermost frame inside the sandbox package (else the
    innermost frame), e.g. ``KeyError: 'x' at sandbox/frameworks/areal/export.py:789``."""
    here = Path(__file__).resolve().parent
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if Path(f.filename).resolve().is_relative_to(here)]
    if ours:
        where = f" at {Path(ours[-1].filename).resolve().relative_to(here.parent)}:{ours[-1].lineno}"
    else:
        where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


@contextmanager
def _without_figures():
    """Run and plan write no figures (they draw the standard metrics only, whatever the component; most
    of a short run's time)."""
    from sandbox.plan import figures as plan_figures
    from sandbox.run import plots

    saved = plots.default_figures, plan_figures.plan_figures
    plots.default_figures = lambda *a, **k: []
    plan_figures.plan_figures = lambda *a, **k: []
    try:
        yield
    finally:
        plots.default_figures, plan_figures.plan_figures = saved


def check_component(
    family: str,
    name: str,
    tests: Path | str | None = None,
    frameworks: list[str] | None = FRAMEWORKS_ALL,
    workdir: Path | str | None = None,
    figures: bool = False,
) -> list[str]:
    """The problems of component ``name`` of ``family`` (a key of :data:`sandbox.components.FAMILIES`)
    in every command; empty when it passes. ``tests``: the folder searched for its hand-value test
    (None: not checked); ``frameworks``: the exporters to try (default: all); ``workdir``: where the
    runs, plans and exports are written (default: a temporary folder, removed); ``figures``: also draw
    the run's and the plan's figures (slow; they read only the standard metrics)."""
    from sandbox.components import FAMILIES

    if family not in FAMILIES:
        return [f"unknown family {family!r}; expected one of {sorted(FAMILIES)}"]
    if name not in FAMILIES[family].registry:
        return [f"{family} {name!r} is not registered (registered: {FAMILIES[family].registry.names()})"]
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="component-check-") as tmp:
            return check_component(family, name, tests, frameworks, tmp, figures)

    import tomli_w

    from sandbox.export.api import EXPORTERS
    from sandbox.scenario.api import validate_scenario
    from sandbox.scenario.budget import estimate

    problems: list[str] = []
    work = Path(workdir) / f"{family}-{name}"
    work.mkdir(parents=True, exist_ok=True)
    raw = component_scenario(family, name, work)
    toml = work / "scenario.toml"
    toml.write_text(tomli_w.dumps(raw))
    try:
        scn = validate_scenario(raw, "component check")
    except Exception as exc:  # noqa: BLE001 - reported, and nothing else can run
        return [
            f"scenario: the check scenario does not validate ({_crash_text(exc)}); give the config "
            "check_settings that make it valid"
        ]

    try:  # 1. budget
        b = estimate(scn)
        if not (math.isfinite(b.memory) and b.memory > 0 and math.isfinite(b.seconds) and b.seconds > 0):
            problems.append(f"budget: the estimate is not finite and positive ({b.memory} B, {b.seconds} s)")
    except Exception as exc:  # noqa: BLE001
        problems.append(f"budget: the estimate crashed: {_crash_text(exc)}")

    steps = [
        ("run", ["run", str(toml), "--out", str(work / "run"), "-q", "--force"], (0,)),
        (
            "plan",
            [
                "plan",
                str(toml),
                "--workers",
                "2",
                "--k-max",
                "0,1",
                "--seeds",
                "1",
                "--steps",
                "2",
                "--out",
                str(work / "plan"),
                "-q",
                "--force",
            ],
            (0,),
        ),
    ]
    for fw in list(EXPORTERS) if frameworks is None else frameworks:
        steps.append(
            (
                f"export -f {fw}",
                ["export", str(toml), "-f", fw, "--allow-partial", "--out", str(work / f"export-{fw}")],
                (0, 2),
            )
        )
    for what, args, ok in steps:
        with nullcontext() if figures else _without_figures():
            code, output, crash = _cli(args)
        if crash is not None:
            problems.append(f"sandbox {what}: crashed: {_crash_text(crash)}")
        elif code not in ok:
            problems.append(f"sandbox {what}: exit status {code}: {output.strip()[-400:]}")

    ref = _reference()  # 5. the reference names the component (a name is a Literal value of its union)
    if f"`{name}`" not in ref and f"'{name}'" not in ref and f'"{name}"' not in ref:
        problems.append(
            f"sandbox scenario --reference: does not name {family} {name!r}; regenerate docs/scenario-reference.md"
        )

    if tests is not None and (family, name) not in marked_components(Path(tests)):  # 6. hand-value test
        problems.append(f"tests: no test is marked @pytest.mark.component({family!r}, {name!r})")
    return problems


__all__ = ["BASE", "SLOTS", "check_component", "component_scenario", "marked_components"]
