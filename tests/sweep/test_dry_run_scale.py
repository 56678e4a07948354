"""A dry run is fast at any size (issue 28: a 90,000-run ``--dry-run`` did not finish in 15
minutes). Checked by counting the work, not by timing: each configuration (axis point) is validated
once whatever the number of seeds, no run deep-copies the base scenario, and a listing longer than
``PLAN_TABLE_ROWS`` is written as plain columns rather than a rich table (about 300 rows a second)."""

from __future__ import annotations

import copy
from pathlib import Path

from typer.testing import CliRunner

import sandbox.cli as cli
import sandbox.scenario.load as load_mod
import sandbox.sweep.command as sweep_command
import sandbox.sweep.spec as spec_mod
from sandbox.sweep.api import load_sweep
from sandbox.sweep.spec import overlay

ROOT = Path(__file__).resolve().parents[2]


def _sweep(tmp_path: Path, lrs: int, steps: int, seeds: int) -> Path:
    p = tmp_path / "big.toml"
    p.write_text(
        f'base = "{ROOT / "scenarios" / "fixed_lag.toml"}"\n'
        f"seeds = [{', '.join(str(i) for i in range(seeds))}]\n"
        "[grid]\n"
        f'"algorithm.optimizer.lr" = [{", ".join(f"{0.001 * (i + 1):.4f}" for i in range(lrs))}]\n'
        f'"run.eval_every" = [{", ".join(str(i + 1) for i in range(steps))}]\n'
    )
    return p


def test_a_90000_run_sweep_validates_each_configuration_once_and_copies_no_base(tmp_path, monkeypatch):
    calls = {"validate": 0, "apply_overrides": 0}
    validate = spec_mod.validate_scenario

    def counting_validate(*a, **k):
        calls["validate"] += 1
        return validate(*a, **k)

    def no_apply(*a, **k):  # the whole-base deep copy per run
        calls["apply_overrides"] += 1
        raise AssertionError("apply_overrides (a deep copy of the base) called per run")

    monkeypatch.setattr(spec_mod, "validate_scenario", counting_validate)
    monkeypatch.setattr(load_mod, "apply_overrides", no_apply)
    spec = load_sweep(_sweep(tmp_path, 300, 30, 10))
    assert len(spec.runs) == 90_000
    assert calls == {"validate": 9_000, "apply_overrides": 0}
    assert len({r.id for r in spec.runs}) == 90_000


def test_overlay_equals_apply_overrides_and_leaves_the_base_alone():
    from sandbox.scenario.load import apply_overrides, read_toml

    base = read_toml(ROOT / "scenarios" / "quickstart.toml")
    before = copy.deepcopy(base)
    ov = {
        "system.staleness": {"kind": "sync"},
        "system.staleness.k": 3,
        "algorithm.optimizer.lr": 0.1,
        "new.section.key": [1, {"a": 2}],
        "run.seed": 4,
    }
    out = overlay(base, ov)
    assert out == apply_overrides(base, ov) and base == before
    out["new"]["section"]["key"][1]["a"] = 9  # the override values are copies
    assert ov["new.section.key"][1]["a"] == 2


def test_a_long_dry_run_is_listed_as_plain_columns(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_command, "PLAN_TABLE_ROWS", 10)
    monkeypatch.setattr(sweep_command, "Table", None)  # a rich table would fail here
    res = CliRunner().invoke(
        cli.app, ["sweep", str(_sweep(tmp_path, 4, 3, 2)), "--dry-run", "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].endswith(f"24 runs -> {tmp_path / 'o'}") and lines[1].split() == [
        "id",
        "algorithm.optimizer.lr",
        "run.eval_every",
        "seed",
        "state",
    ]
    assert len(lines) == 3 + 24 and all(line.split()[-1] == "pending" for line in lines[3:])
