"""What the export tests and the per-framework tests (``tests/export/``, ``tests/frameworks/<framework>/``) share:
the shipped scenario variants, the pinned framework wheels (fetched with ``pip download --no-deps``; a missing
wheel fails the test under CI and skips it elsewhere; :func:`wheel_getter`, the root conftest's ``wheel``
fixture) and the golden files (``tests/export/golden/``, read by the import round trip too;
``SANDBOX_UPDATE_GOLDEN=1`` rewrites them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox.scenario.api import load_scenario, variant_scenarios

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
GOLDEN = ROOT / "tests" / "export" / "golden"


def shipped_variants():
    """(id, Scenario) for every variant of every shipped scenario with a policy task."""
    out = []
    for path in sorted(SCENARIOS.glob("*.toml")):
        scn, raw = load_scenario(path)
        if scn.task.name == "quadratic":
            continue
        for name, v in variant_scenarios(scn, raw).items():
            out.append((f"{path.stem}:{name or 'base'}", v))
    return out


SHIPPED = shipped_variants()

# the sandbox concepts an exporter's ``expresses`` list names (the PROMOTION.md coverage table's rows)
CONCEPTS = (
    "max lag",
    "fixed lag",
    "async ratio",
    "partial rollouts",
    "batch geometry",
    "learning rate",
    "clip range",
    "dual clip",
    "KL penalty",
    "loss aggregation",
    "advantage",
    "token TIS",
    "sequence TIS",
    "masked IS / IcePop",
    "M2PO",
    "decoupled PPO",
    "VCPO",
    "GAC",
)


def wheel_getter():
    """What the ``wheel`` fixture (tests/conftest.py) gives: ``wheel("verl")`` -> directory of the unzipped pinned
    wheel."""
    from sandbox.export.validate.wheels import WheelUnavailable, import_from_wheel, unpacked_wheel
    from sandbox.frameworks.verl.validation import VERL_POST_LOAD_MODULES

    def get(name: str, version: str | None = None) -> Path:
        try:
            where = unpacked_wheel(name, version)
            if name == "verl":  # the verl validator runs verl's own post-load code, imported from the wheel
                import_from_wheel("verl", *VERL_POST_LOAD_MODULES)
            return where
        except WheelUnavailable as exc:
            if os.environ.get("CI"):
                pytest.fail(f"CI must be able to fetch the {name} wheel: {exc}")
            pytest.skip(f"{name} wheel unavailable here: {exc}")

    return get


def check_golden(framework: str, case: str, files: dict[str, str]) -> None:
    """Compare ``files`` with ``golden/<framework>/<case>/``; rewrite them when SANDBOX_UPDATE_GOLDEN=1."""
    where = GOLDEN / framework / case
    if os.environ.get("SANDBOX_UPDATE_GOLDEN"):
        where.mkdir(parents=True, exist_ok=True)
        for old in where.iterdir():
            old.unlink()
        for name, text in files.items():
            (where / name).write_text(text)
        return
    assert where.is_dir(), f"no golden files for {framework}/{case}; create them with SANDBOX_UPDATE_GOLDEN=1"
    expected = {p.name: p.read_text() for p in where.iterdir()}
    assert sorted(expected) == sorted(files), f"{framework}/{case}: files {sorted(files)} != golden {sorted(expected)}"
    for name, text in files.items():
        assert text == expected[name], (
            f"{framework}/{case}/{name} differs from the golden file; review the mapping change and "
            "regenerate with SANDBOX_UPDATE_GOLDEN=1"
        )


def pairs(objective: dict, correction: dict) -> bool:
    """Whether the scenario accepts this objective with this correction (sandbox.algorithms.policy_loss.pairing_problem)."""
    from sandbox.algorithms.corrections.base import CORRECTIONS
    from sandbox.algorithms.objectives.base import OBJECTIVES
    from sandbox.algorithms.policy_loss import pairing_problem

    obj = OBJECTIVES[objective["name"]].config(**objective)
    return pairing_problem(obj, CORRECTIONS[correction["name"]].config(**correction)) is None
