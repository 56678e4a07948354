"""The per-framework export tables (sandbox/frameworks/<fw>/tables.toml, sandbox/export/tables/common.toml): data
only (no expressions), well-formed rows and templates, every id the exporters and their rules name exists in the table
they read, no dead entries, and ``Table.row`` writes what the row says."""

from __future__ import annotations

import re
import string
import tomllib
from pathlib import Path

import pytest

from sandbox.export.plan import ExportPlan
from sandbox.export.table import PARAMS, TEXT, Table

PKG = Path(__file__).resolve().parents[2] / "sandbox"
EXPORT, FRAMEWORKS = PKG / "export", PKG / "frameworks"
TABLES = {
    "common": tomllib.loads((EXPORT / "tables" / "common.toml").read_text(encoding="utf-8")),
    **{p.parent.name: tomllib.loads(p.read_text(encoding="utf-8")) for p in sorted(FRAMEWORKS.glob("*/tables.toml"))},
}


def _modules() -> dict[str, tuple[str, str]]:
    """Module name (``export.common``, ``areal.rules``, ...) -> (the table it reads, its source)."""
    out = {}
    for path in sorted([*EXPORT.glob("*.py"), *FRAMEWORKS.glob("*/*.py")]):
        src = path.read_text(encoding="utf-8")
        m = re.search(r'^T = Table\("(\w+)"\)$', src, re.M)
        if m:
            out[f"{path.parent.name}.{path.stem}"] = (m.group(1), src)
    return out


MODULES = _modules()
REFS = {  # what a call names -> the table section it looks in
    "row": r'T\.row\(\s*\w+,\s*"([^"]+)"',
    "note": r'T\.note\(\s*"([^"]+)"',
    "template": r'T\.text\(\s*"([^"]+)"',
}


def _fields(template: str) -> list[str]:
    return [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]


def test_every_exporter_its_rules_and_the_engine_read_a_table():
    frameworks = {"verl", "verl_vcpo", "trl", "openrlhf", "areal", "prime_rl"}
    assert set(TABLES) == {"common", *frameworks}
    assert {m: t for m, (t, _) in MODULES.items()} == {
        "export.common": "common",
        "export.engine": "common",
        **{f"{fw}.{part}": fw for fw in frameworks for part in ("export", "rules")},
    }


def _expressions(value, where):
    """Where a table value still holds code: an inline table with a ``when`` or ``value`` expression."""
    if isinstance(value, dict):
        if {"when", "value"} & set(value) and all(isinstance(v, str) for v in value.values()):
            yield where
        for key, item in value.items():
            yield from _expressions(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _expressions(item, f"{where}[{i}]")


@pytest.mark.parametrize("table", sorted(TABLES))
def test_tables_are_data_without_expressions(table):
    """Which row applies is Python (the framework's rules.py); a table holds keys and words only."""
    assert "rule" not in TABLES[table], f"{table}: [[rule.*]] sections belong in rules.py"
    assert not list(_expressions(TABLES[table], table)), f"{table}: expressions left in the table"
    for section in [s for s in TABLES[table] if s.startswith("metrics")]:
        assert all(isinstance(v, str) for v in TABLES[table][section].values()), f"{table}: [{section}] holds texts"


@pytest.mark.parametrize("table", sorted(TABLES))
def test_rows_are_well_formed(table):
    for rid, row in TABLES[table].get("row", {}).items():
        kind = row.get("kind")
        assert kind in PARAMS, f"{table}: row {rid}: kind {kind!r} is not one of {sorted(PARAMS)}"
        texts = set(row) - {"kind"}
        assert texts <= TEXT & set(PARAMS[kind]), f"{table}: row {rid}: fields {sorted(texts)} for a {kind} row"
        if kind != "pinned":
            assert "source" in row, f"{table}: row {rid}: a {kind} row names its scenario field"
        for field in texts:
            for name in _fields(row[field]):  # raises ValueError on a malformed template
                assert re.fullmatch(r"[A-Za-z_]\w*(![rsa])?", name.split(":")[0]), f"{table}: row {rid}: field {name!r}"


@pytest.mark.parametrize("table", sorted(TABLES))
def test_notes_and_templates_parse(table):
    for section in ("note", "template"):
        for key, text in TABLES[table].get(section, {}).items():
            assert isinstance(text, str) and text, f"{table}: {section} {key} is empty"
            for name in _fields(text):
                assert re.fullmatch(r"[A-Za-z_]\w*", name), f"{table}: {section} {key}: field {name!r}"


def test_every_named_entry_exists_and_every_entry_is_named():
    used: dict[str, dict[str, set[str]]] = {t: {s: set() for s in REFS} for t in TABLES}
    read_metrics: set[tuple[str, str]] = set()
    for module, (table, src) in MODULES.items():
        for section, pattern in REFS.items():
            for key in re.findall(pattern, src):
                where = table if key in TABLES[table].get(section, {}) else "common"
                assert key in TABLES[where].get(section, {}), (
                    f"{module}.py names {section} {key!r}, absent from {table}.toml"
                )
                used[where][section].add(key)
        for key in TABLES[table].get("template", {}):  # a launch script's optional parts, named in a tuple
            if f'"{key}"' in src:
                used[table]["template"].add(key)
        for section in re.findall(
            r'T\.section\(\s*"(metrics\w*)"', src
        ):  # the metric texts (rules.metrics or as they stand)
            read_metrics.add((table, section))
        for section in re.findall(r'T\.section\(\s*"([^"]+)"', src):
            assert section in TABLES[table], f"{module}.py reads table [{section}], absent from {table}.toml"
    for table, sections in used.items():
        for section in [s for s in TABLES[table] if s.startswith("metrics")]:
            assert (table, section) in read_metrics, f"{table}.toml: [{section}] is read by no exporter"
        for section in REFS:
            dead = sorted(set(TABLES[table].get(section, {})) - sections[section])
            assert not dead, f"{table}.toml: {section} entries no exporter names: {dead}"


def test_a_row_writes_what_it_says():
    plan = ExportPlan(framework="verl", version="0.9", release="0.9.1", target="t")
    Table("verl").row(plan, "objective.eps_low", 0.2)
    assert plan.settings == {"actor_rollout_ref.actor.clip_ratio_low": 0.2}
    row = plan.rows[0]
    assert (row.kind, row.source, row.value, row.target, row.target_value, row.note) == (
        "as_is",
        "algorithm.objective.eps_low",
        0.2,
        "actor_rollout_ref.actor.clip_ratio_low",
        0.2,
        "ratio floor 1 − eps_low",
    )
    # a converted row: scenario value, then written value; the note's fields filled in
    Table("verl").row(plan, "staleness.k_max.converted.t_counts_versions", 3, 4)
    assert plan.settings["trainer.v1.sampler.max_off_policy_threshold"] == 4
    assert plan.rows[1].value == 3 and plan.rows[1].source == "system.staleness.k_max"


def test_templates_fill_named_fields_and_unknown_ids_name_the_table():
    plan = ExportPlan(framework="verl", version="0.9", release="0.9.1", target="t")
    Table("verl").row(plan, "staleness.fixed_lag_gap", "{kind = fixed_lag, k = 3}", k=3, extra=". For k = 1, ...")
    note = plan.rows[0].note  # common.toml's row, filled: literal braces stay single, {k} three times
    assert plan.rows[0].kind == "no_equivalent" and not plan.settings
    assert 'system.staleness = {kind = "max_lag", k_max = 3} (lag at most 3)' in note and note.endswith(
        "k_max=3}'). For k = 1, ..."
    )
    with pytest.raises(KeyError, match="export table verl: no note 'no such note'"):
        Table("verl").note("no such note")
    with pytest.raises(KeyError, match="k"):
        Table("verl").row(plan, "staleness.fixed_lag_gap", "x", extra="")  # a field the template needs is missing


def test_the_validators_shared_driver_by_hand(tmp_path):
    from sandbox.export.validate.common import flat, readback, same, source_strings
    from sandbox.frameworks.verl.validation import startup_problems

    assert flat({"a": {"b": 1, "c": {}}, "d": [1]}) == {"a.b": 1, "a.c": {}, "d": [1]}
    assert same(1, 1.0) and same([1, {"x": 2.0}], (1, {"x": 2})) and same(0.1 + 0.2, 0.3)
    assert not same(True, 1) and not same(None, 0) and not same({"x": 1}, {"y": 1}) and not same(1.0, 1.001)
    assert readback({"k": 1, "m": True}, {"k": 1.0, "m": 1}.get, lambda k, v, g: f"{k}: {v!r} != {g!r}") == [
        "m: True != 1"
    ]
    (tmp_path / "m.py").write_text(
        "from enum import Enum\nMODES = ['a', 'b']\nclass E(str, Enum):\n    X = 'x'\n    Y = 'y'\n"
        "@register('p')\ndef f(kind):\n    if kind == 'q' or kind in ('r', 's'):\n        pass\n"
    )
    assert source_strings(tmp_path, ["assigned", "m.py", "MODES"]) == ["a", "b"]
    assert source_strings(tmp_path, ["enum", "*.py", "E"]) == ["x", "y"]
    assert source_strings(tmp_path, ["decorated", "m.py", "register"]) == ["p"]
    assert source_strings(tmp_path, ["compared", "m.py", "f", "kind"]) == ["q", "r", "s"]
    # verl's separate_async rule: reported only when it is violated
    sel = {
        "trainer.v1.trainer_mode": "separate_async",
        "data.train_batch_size": 8,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 4,
        "trainer.v1.separate_async.parameter_sync_step": 2,
        "actor_rollout_ref.actor.clip_ratio_c": 3.0,
        "actor_rollout_ref.rollout.checkpoint_engine.backend": "nccl",
    }
    assert startup_problems(sel=sel.get, is_int=lambda x: isinstance(x, int)) == []
    sel["data.train_batch_size"] = 6
    assert startup_problems(sel=sel.get, is_int=lambda x: isinstance(x, int)) == [
        "separate_async needs data.train_batch_size == parameter_sync_step * actor.ppo_mini_batch_size"
    ]
