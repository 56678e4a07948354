"""The per-framework export tables (sandbox/frameworks/<framework>/tables.toml, sandbox/export/tables/common.toml): well-formed rows and templates, every id the
exporters name exists in the table they read, no dead entries, and ``Table.row`` writes what the row says."""

from __future__ import annotations

import re
import string
import tomllib
from pathlib import Path

import pytest

from sandbox.export.plan import ExportPlan
from sandbox.export.table import PARAMS, TEXT, Table

EXPORT = Path(__file__).resolve().parents[2] / "sandbox" / "export"
FRAMEWORKS = EXPORT.parent / "frameworks"
TABLES = {
    "common": tomllib.loads((EXPORT / "tables" / "common.toml").read_text(encoding="utf-8")),
    **{p.parent.name: tomllib.loads(p.read_text(encoding="utf-8")) for p in sorted(FRAMEWORKS.glob("*/tables.toml"))},
}


def _modules() -> dict[str, tuple[str, str]]:
    """Module name (a framework's exporter: its folder's name) -> (the table it reads, its source)."""
    out = {}
    paths = {p.stem: p for p in sorted(EXPORT.glob("*.py"))}
    paths.update({p.parent.name: p for p in sorted(FRAMEWORKS.glob("*/export.py"))})
    for name, path in sorted(paths.items()):
        src = path.read_text(encoding="utf-8")
        m = re.search(r'^T = Table\("(\w+)"\)$', src, re.M)
        if m:
            out[name] = (m.group(1), src)
    return out


MODULES = _modules()
REFS = {  # what a call names -> the table section it looks in
    "row": r'T\.row\(\s*\w+,\s*"([^"]+)"',
    "note": r'T\.note\(\s*"([^"]+)"',
    "template": r'T\.text\(\s*"([^"]+)"',
}


def _fields(template: str) -> list[str]:
    return [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]


def test_every_exporter_and_the_engine_read_a_table():
    assert set(TABLES) == {"common", "verl", "verl_vcpo", "trl", "openrlhf", "areal", "prime_rl"}
    assert {m: t for m, (t, _) in MODULES.items()} == {
        "areal": "areal",
        "common": "common",
        "engine": "common",
        "openrlhf": "openrlhf",
        "prime_rl": "prime_rl",
        "trl": "trl",
        "verl": "verl",
        "verl_vcpo": "verl_vcpo",
    }


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


def _rule_rows(cases):
    """Every row entry of a rule's cases, nested cases included."""
    for case in cases:
        for entry in case.get("rows", ()):
            yield from _rule_rows([entry]) if isinstance(entry, dict) else [entry]


def test_every_named_entry_exists_and_every_entry_is_named():
    used: dict[str, dict[str, set[str]]] = {t: {s: set() for s in REFS} for t in TABLES}
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
        for rule, cases in TABLES[table].get("rule", {}).items():  # rows and notes named by the table's rules
            assert re.search(rf'T\.(apply\(\s*[\w.]+,\s*|pick\(\s*)"{rule}"', src), (
                f"{table}.toml: rule {rule} is applied by no exporter"
            )
            named = [("row", e[0]) for e in _rule_rows(cases) if isinstance(e, list)]
            named += [("note", k) for case in cases for k in re.findall(r"note\('([^']+)'", repr(case))]
            for section, key in named:
                where = table if key in TABLES[table].get(section, {}) else "common"
                assert key in TABLES[where].get(section, {}), f"{table}.toml: rule {rule} names {section} {key!r}"
                used[where][section].add(key)
        for section in [s for s in TABLES[table] if s.startswith("metrics")]:  # notes named by Table.metrics entries
            assert re.search(rf'T\.metrics\(\s*("{section}")?', src), (
                f"{table}.toml: [{section}] is read by no exporter"
            )
            for key in re.findall(r"note\('([^']+)'", repr(TABLES[table][section])):
                where = table if key in TABLES[table].get("note", {}) else "common"
                assert key in TABLES[where].get("note", {}), f"{table}.toml: [{section}] names note {key!r}"
                used[where]["note"].add(key)
        for section in re.findall(r'T\.section\(\s*"([^"]+)"', src):
            assert section in TABLES[table], f"{module}.py reads table [{section}], absent from {table}.toml"
    for table, sections in used.items():
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


def test_a_rule_applies_its_first_matching_case_and_refuses_what_is_outside_its_language(monkeypatch):
    from sandbox.export import table as table_mod

    rules = {
        "rule": {
            "r": [
                {"when": "c.name == 'a'", "rows": [["objective.eps_low", "c.x * 2"], "see(c.x)"]},
                {"rows": [["objective.eps_high", "max(c.x, 0.3)", {"note": "'ignored'"}]]},
            ],
            "bad": [{"when": "c.__class__"}],
            "call": [{"when": "c.model_dump()"}],
            "pick": [{"when": "c.x > 1", "value": "'big'"}, {"value": "f'{c.name}: {c.x:g}'"}],
        }
    }
    real = table_mod._load
    monkeypatch.setattr(table_mod, "_load", lambda name: {**real("verl"), **rules} if name == "t" else real(name))

    class C:
        def __init__(self, name, x):
            self.name, self.x = name, x

    plan, seen, t = ExportPlan(framework="verl", version="0.9", release="0.9.1", target="t"), [], Table("t")
    assert t.apply(plan, "r", c=C("a", 0.1), see=seen.append) and seen == [0.1]
    assert t.apply(plan, "r", c=C("b", 0.2), see=seen.append) and seen == [0.1]
    assert [(r.target, r.value) for r in plan.rows] == [
        ("actor_rollout_ref.actor.clip_ratio_low", 0.2),
        ("actor_rollout_ref.actor.clip_ratio_high", 0.3),
    ]
    assert (t.pick("pick", c=C("a", 2)), t.pick("pick", c=C("a", 0.5))) == ("big", "a: 0.5")
    with pytest.raises(ValueError, match=r"export table t: rule bad case 1: .*outside the rule language"):
        t.apply(plan, "bad", c=C("a", 0))
    with pytest.raises(ValueError, match=r"rule call case 1: .*uses Call"):
        t.apply(plan, "call", c=C("a", 0))


def test_a_metric_table_keeps_texts_and_evaluates_its_entries(monkeypatch):
    from sandbox.export import table as table_mod

    metrics = {
        "metrics": {
            "a": "`a` (as it stands, {braces} kept)",
            "b": {"value": "'x' if on else note('corr', name='y')"},
            "c": {"when": "on", "value": "f'{n:g}'"},
            "d": {"when": "n.__class__", "value": "1"},
        }
    }
    real = table_mod._load
    monkeypatch.setattr(table_mod, "_load", lambda name: {**real("verl"), **metrics} if name == "t" else real(name))
    t = Table("t")
    with pytest.raises(ValueError, match=r"export table t: \[metrics\] d: .*outside the rule language"):
        t.metrics(on=True, n=0.5)
    del metrics["metrics"]["d"]
    assert t.metrics(on=True, n=0.5) == {"a": "`a` (as it stands, {braces} kept)", "b": "x", "c": "0.5"}
    assert t.metrics(on=False, n=0.5) == {
        "a": "`a` (as it stands, {braces} kept)",
        "b": "not logged in bypass mode (`y` needs bypass_mode = false)",
    }


def test_the_validators_shared_driver_by_hand(tmp_path):
    from sandbox.export.validate.common import flat, readback, rule_problems, same, source_strings

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
    assert rule_problems("verl", sel=sel.get, is_int=lambda x: isinstance(x, int)) == []
    sel["data.train_batch_size"] = 6
    assert rule_problems("verl", sel=sel.get, is_int=lambda x: isinstance(x, int)) == [
        "separate_async needs data.train_batch_size == parameter_sync_step * actor.ppo_mini_batch_size"
    ]
