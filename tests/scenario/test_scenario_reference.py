"""docs/scenario-reference.md is generated from the models and up to date; it documents every key
of every table, with one section per member of each discriminated union."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.scenario.api import Scenario
from sandbox.scenario.reference import REGENERATE, reference_markdown
from sandbox.scenario.schema import Choice, ListOf, Model, field_shape

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "scenario-reference.md"


def test_committed_reference_is_up_to_date():
    assert COMMITTED.read_text() == reference_markdown(), (
        f"docs/scenario-reference.md is out of date with the scenario models; regenerate it with `{REGENERATE}` "
        "(from the repository root, with this checkout importable) and commit the result"
    )


def test_cli_prints_the_reference():
    res = CliRunner().invoke(app, ["scenario", "--reference"])
    assert res.exit_code == 0 and res.output == reference_markdown()


def _sections(text: str) -> dict[str, str]:
    """anchor -> the section's text."""
    parts = re.split(r'<a id="([^"]+)"></a>', text)
    return dict(zip(parts[1::2], parts[2::2]))


def _rows(section: str) -> dict[str, list[str]]:
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `([^`]+)` \| (.*) \|$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in re.split(r"(?<!\\)\|", m.group(2))]
    return rows


def test_every_key_of_every_table_is_documented():
    sections = _sections(reference_markdown())
    seen: set[type] = set()

    def walk(cls):
        if cls in seen:
            return
        seen.add(cls)
        documented = [rows for rows in map(_rows, sections.values()) if list(rows) == list(cls.model_fields)]
        assert documented, f"no section lists exactly the keys of {cls.__name__}"
        for info in cls.model_fields.values():
            node = field_shape(info).node
            node = node.item if isinstance(node, ListOf) else node
            members = node.members.values() if isinstance(node, Choice) else [node]
            for m in members:
                if isinstance(m, Model):
                    walk(m.cls)

    walk(Scenario)
    assert len(seen) > 40  # tasks, delay models, staleness controls, objectives, corrections, stabilizers, ...


def test_rows_carry_type_default_allowed_and_description():
    sections = _sections(reference_markdown())
    max_lag = _rows(sections["system-staleness-max_lag"])
    typ, default, allowed, desc = max_lag["enforcement"]
    assert typ == "str" and default.startswith('"') and '"throttle"' in allowed and '"drop"' in allowed and desc
    assert _rows(sections["system-staleness-max_lag"])["k_max"][2] == "≥ 0"
    run = _rows(sections["run"])
    assert run["steps"][:3] == ["int", "200", "≥ 1"]
    assert run["seed"][2] == "≥ 0; ≤ 2^63 − 1"
    assert run["writers"][1] == '["files"]' and '"tensorboard"' in run["writers"][2]
    # a union field links each member's section and gives its default member
    top = _rows(sections["top-level"])
    assert "[lm](#task-lm)" in top["task"][0] and top["task"][1] == '{name = "bitstring"}'
    # a member selected by several values, and a union selected by a callable discriminator
    assert "task-problem-sort" in sections and '(kind = "sort" or "reverse")' in sections["task-problem-sort"]
    assert "task-model-hf" in sections and 'inside task.name = "lm"' in sections["task-model-hf"]
    # one section for the delay models shared by three fields, naming all three
    constant = sections["system-generation_time-constant"]
    assert "`system.train_time`" in constant and "`system.sync_delay`" in constant


def test_readme_and_docs_index_link_the_reference():
    assert "docs/scenario-reference.md" in (ROOT / "README.md").read_text()
    assert "(scenario-reference.md)" in (ROOT / "docs" / "index.md").read_text()
