"""The docs' lists and tables that name registered or shipped things stay equal to them (they
drifted before: a check missing from the table, scenarios missing from the list, a stale theory
range in docs/index.md). The check table lives in docs/checks.md and the scenario list in
docs/scenarios.md (moved from the README, issue 49); the README's table of uses links to both."""

from __future__ import annotations

import re
from pathlib import Path

from sandbox.checks.api import CHECKS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CHECKS_PAGE = (ROOT / "docs" / "checks.md").read_text()
SCENARIOS_PAGE = (ROOT / "docs" / "scenarios.md").read_text()


def test_check_table_lists_every_registered_check_once():
    table = [line for line in CHECKS_PAGE.splitlines() if line.startswith("| `")]
    names = [re.match(r"\| `([a-z0-9_]+)` \|", line).group(1) for line in table]
    assert sorted(names) == sorted(CHECKS) and len(names) == len(set(names))


def test_scenario_list_names_every_shipped_scenario():
    para = SCENARIOS_PAGE[SCENARIOS_PAGE.index("Shipped scenarios:") :]
    para = para.split("\n\n")[0]
    named = set(re.findall(r"`([a-z0-9_]+/?)`", para))
    root = ROOT / "scenarios"
    shipped = {p.stem for p in root.glob("*.toml")} | {f"{d.name}/" for d in root.iterdir() if d.is_dir()}
    shipped |= {p.stem for p in (root / "published").glob("*.toml")}
    assert shipped <= named, sorted(shipped - named)
    assert {n for n in named if not n.endswith("/")} <= {p.stem for p in root.rglob("*.toml")}


def test_docs_index_names_the_whole_theory_range():
    theory = (ROOT / "docs/theory.md").read_text()
    last = max(int(n) for n in re.findall(r"^## t(\d+)$", theory, flags=re.M))
    index = (ROOT / "docs" / "index.md").read_text()
    page = "theory" + ".md"  # docs/index.md links it relative to docs/
    assert f"[T1]({page}#t1) to [T{last}]({page}#t{last})" in index


# ------------------------------------------------------------------------------ the README's first screen

TWO_COMMANDS = (
    'python3 -m venv .venv && . .venv/bin/activate && pip install -c constraints-cpu.txt -e ".[test]" && sandbox run',
    'python3 -m venv .venv && . .venv/bin/activate && pip install -c constraints-cpu.txt -e ".[test,export-check,ray,hf,trl]" '
    "&& python -m pytest -q -n 2",
)


def test_readme_is_short_and_keeps_the_two_commands():
    assert len(README.splitlines()) <= 200
    for command in TWO_COMMANDS:
        assert f"```bash\n{command}\n```" in README


def test_readme_first_screen_names_every_use_with_a_command_that_exists():
    """The table of uses ends within the first 60 lines; each row's command is a real subcommand (or an
    example script that exists) and links a page that exists."""
    from typer.main import get_command

    from sandbox.cli import app

    commands = set(get_command(app).commands)
    lines = README.splitlines()
    rows = [
        (i, ln)
        for i, ln in enumerate(lines, 1)
        if ln.startswith("| ") and ("`sandbox " in ln or "`python examples/" in ln)
    ]
    assert len(rows) >= 12 and max(i for i, _ in rows) <= 60
    used = set()
    for _, row in rows:
        command = re.search(r"`((?:sandbox|python) [^`]+)`", row).group(1).split()
        if command[0] == "sandbox":
            assert command[1] in commands, row
            used.add(command[1])
        else:
            assert (ROOT / command[1]).is_file(), row
        for link in re.findall(r"\]\(([^)#]+)", row):
            assert (ROOT / link).exists(), row
    assert {
        "run",
        "sweep",
        "mission",
        "preflight",
        "import",
        "export",
        "plan",
        "claims",
        "check",
        "explore",
        "demo",
    } <= used


def test_readme_scenario_example_is_valid():
    import tomllib

    from sandbox.scenario.api import validate_scenario, variant_scenarios

    block = re.search(r"```toml\n(.*?)```", README, re.S).group(1)
    data = tomllib.loads(block)
    scn = validate_scenario(data)
    assert set(variant_scenarios(scn, data)) == {"sync"}


def test_readme_picture_is_committed():
    for path in re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", README):
        assert (ROOT / path).is_file(), path
