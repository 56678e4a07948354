"""Every registered component is documented and has a hand-value test; every docstring reference
resolves inside the repository.

The component families are the registries of :mod:`sandbox.base.registry`. A component's hand-value tests
are the tests marked ``@pytest.mark.component(family, name, ...)`` (found by parsing the test files, so
this holds whichever tests are selected); its docs entry is a ``## <name>`` heading on its family's page.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sandbox.component_check import marked_components
from sandbox.components import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
COMPONENTS = [(family, name) for family, fam in FAMILIES.items() for name in fam.registry.names()]


def _marked_components() -> set[tuple[str, str]]:
    """``(family, name)`` of every ``pytest.mark.component(family, *names)`` decorator under tests/ (the
    component checker's own search, :func:`sandbox.component_check.marked_components`)."""
    return set(marked_components(ROOT / "tests"))


def _anchors(page: Path) -> set[str]:
    """GitHub-style anchors of a Markdown page's headings."""
    out = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if m:
            text = re.sub(r"[`*]", "", m.group(1)).strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return out


MARKED = _marked_components()


@pytest.mark.parametrize("family,name", COMPONENTS, ids=[f"{f}:{n}" for f, n in COMPONENTS])
def test_component_has_hand_value_test(family, name):
    assert (family, name) in MARKED, (
        f"{family} {name!r} is registered but no test is marked @pytest.mark.component({family!r}, {name!r}); "
        "add a test that checks a hand-computed value (see CONTRIBUTING.md)"
    )


@pytest.mark.parametrize("family,name", COMPONENTS, ids=[f"{f}:{n}" for f, n in COMPONENTS])
def test_component_has_docs_entry(family, name):
    page = FAMILIES[family].docs
    assert name in _anchors(ROOT / page), f"{family} {name!r} has no '## {name}' section in {page}"


def test_markers_name_registered_components():
    """A marker naming a component that does not exist (a typo, a renamed method) is an error too."""
    unknown = sorted(m for m in MARKED if m not in set(COMPONENTS))
    assert not unknown, f"tests marked with unregistered components: {unknown}"


def test_registries_found_every_module():
    """Each family package's modules each register exactly one component (one method = one file)."""
    for family, fam in FAMILIES.items():
        modules = [e.module for e in fam.registry.entries()]
        assert len(modules) == len(set(modules)), f"{family}: a module registers two components: {modules}"


OUTSIDE = re.compile(r"shared/reference|(?<![\w/])(?:algorithms|frameworks|DESIGN)\.md|(?<!docs/)(?<![\w/])theory\.md")
DOC_REF = re.compile(r"(?<![\w/:.-])docs/([\w/\-.]+\.md)(?:#([\w\-]+))?")
SOURCES = [
    p for d in ("sandbox", "theory", "examples", "benchmarks", "tools", "tests") for p in (ROOT / d).rglob("*.py")
]


def test_no_reference_outside_the_repository():
    bad = []
    for path in SOURCES:
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if OUTSIDE.search(line) and path.name != "test_registry.py":
                bad.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()[:100]}")
    assert not bad, "references to documents outside the repository:\n" + "\n".join(bad)


def test_docs_references_resolve():
    bad = []
    for path in SOURCES + list((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]:
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for page, anchor in DOC_REF.findall(line):
                target = ROOT / "docs" / page
                if not target.exists():
                    bad.append(f"{path.relative_to(ROOT)}:{i}: docs/{page} does not exist")
                elif anchor and anchor not in _anchors(target):
                    bad.append(f"{path.relative_to(ROOT)}:{i}: docs/{page} has no heading #{anchor}")
    assert not bad, "\n".join(bad)


def test_sandbox_list_prints_every_component_and_refuses_an_unknown_family():
    from typer.testing import CliRunner

    from sandbox.cli import app

    runner = CliRunner()
    out = runner.invoke(app, ["list"], env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    for family, name in COMPONENTS:
        assert f"{FAMILIES[family].docs}#{name}" in out.output
    bad = runner.invoke(app, ["list", "nope"])
    assert bad.exit_code == 2 and "expected one of objective, correction" in bad.output
