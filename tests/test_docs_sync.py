"""The README's lists and tables that name registered or shipped things stay equal to them (they
drifted before: a check missing from the table, scenarios missing from the list, a stale theory
range in docs/index.md)."""

from __future__ import annotations

import re
from pathlib import Path

from sandbox.checks import CHECKS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _section(text: str, heading: str) -> str:
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def test_readme_check_table_lists_every_registered_check_once():
    table = [line for line in _section(README, "Theory checks").splitlines() if line.startswith("| `")]
    names = [re.match(r"\| `([a-z0-9_]+)` \|", line).group(1) for line in table]
    assert sorted(names) == sorted(CHECKS) and len(names) == len(set(names))


def test_readme_scenario_list_names_every_shipped_scenario():
    para = README[README.index("Shipped scenarios:"):]
    para = para[:para.index("\n\n")]
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
