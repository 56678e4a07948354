"""Sweep files: grid, zip, seeds, labels, variants, validation errors, stable run ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.scenario.api import ScenarioError
from sandbox.sweep.api import load_sweep, parse_sweep

ROOT = Path(__file__).resolve().parents[2]


def test_grid_times_seeds(tiny_raw):
    spec = parse_sweep(tiny_raw)
    assert len(spec.runs) == 2 * 2 * 2
    combos = {(r.params["system.staleness.k"], r.params["algorithm.optimizer.lr"], r.seed) for r in spec.runs}
    assert combos == {(k, lr, s) for k in (0, 2) for lr in (0.1, 0.5) for s in (0, 1)}
    for r in spec.runs:
        scn = r.scenario()
        assert scn.system.staleness.k == r.params["system.staleness.k"]
        assert scn.algorithm.optimizer.lr == r.params["algorithm.optimizer.lr"]
        assert scn.run.seed == r.seed
    assert len({r.id for r in spec.runs}) == len(spec.runs)


def test_zip_varies_together_and_label_axis(tiny_raw):
    tiny_raw["zip"] = [
        {
            "method": ["slow", "fast"],
            "system.num_workers": [2, 5],
            "system.generation_time": [{"kind": "constant", "value": 2.0}, {"kind": "constant", "value": 0.5}],
        }
    ]
    del tiny_raw["grid"]["algorithm.optimizer.lr"]
    spec = parse_sweep(tiny_raw)
    assert len(spec.runs) == 2 * 2 * 2  # k (2) x zip group (2) x seeds (2)
    pairs = {
        (r.params["method"], r.scenario().system.num_workers, r.scenario().system.generation_time.value)
        for r in spec.runs
    }
    assert pairs == {("slow", 2, 2.0), ("fast", 5, 0.5)}
    assert spec.label_keys == ["method"]
    assert "method" not in spec.runs[0].data  # a label is not applied to the scenario


def test_no_seeds_uses_base_seed_and_set(tiny_raw):
    del tiny_raw["seeds"]
    tiny_raw["base"]["run"]["seed"] = 7
    tiny_raw["set"] = {"run.steps": 11}
    spec = parse_sweep(tiny_raw)
    assert len(spec.runs) == 4
    assert all(r.seed == 7 and r.scenario().run.steps == 11 for r in spec.runs)


def test_run_ids_do_not_depend_on_axis_order(tiny_raw):
    a = parse_sweep(tiny_raw)
    tiny_raw["grid"] = dict(reversed(list(tiny_raw["grid"].items())))
    tiny_raw["seeds"] = [1, 0]
    b = parse_sweep(tiny_raw)
    assert {r.id for r in a.runs} == {r.id for r in b.runs}
    tiny_raw["grid"]["algorithm.optimizer.lr"].append(0.3)  # adding a value keeps the old ids
    c = parse_sweep(tiny_raw)
    assert {r.id for r in a.runs} < {r.id for r in c.runs}
    tiny_raw["set"] = {"run.steps": 21}  # changing the base changes every id
    d = parse_sweep(tiny_raw)
    assert not ({r.id for r in a.runs} & {r.id for r in d.runs})


def test_variants_of_the_base_become_an_axis():
    # the quickstart's 4 replicas on independent schedules are seeds s .. s + 3: seeds 4 apart
    raw = {"base": str(ROOT / "scenarios" / "quickstart.toml"), "seeds": [0, 4], "set": {"run.steps": 3}}
    spec = parse_sweep(raw)
    assert spec.axes[-1] == ["variant"]
    assert len(spec.runs) == 3 * 2
    by_variant = {r.params["variant"]: r.scenario() for r in spec.runs if r.seed == 0}
    assert by_variant["sync"].system.staleness.kind == "sync"
    assert by_variant["async+tis"].algorithm.correction.name == "tis"


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda r: r["grid"].update({"system.num_wrkers": [1, 2]}), "system.num_wrkers"),
        (
            lambda r: r["grid"].update({"algorithm.optimizer.lr": 0.1}),
            "grid.algorithm.optimizer.lr: expected a non-empty list",
        ),
        (lambda r: r["grid"].update({"algorithm.optimizer.lr": [-1.0, 0.1]}), "algorithm.optimizer.lr"),
        (lambda r: r.update({"zip": [{"system.num_workers": [1, 2], "run.steps": [3]}]}), "equal length"),
        (lambda r: r.update({"zip": [{"system.staleness.k": [1, 2]}]}), "zip[0].system.staleness.k: already varied"),
        (lambda r: r.update({"seeds": [0, -1]}), "seeds"),
        (lambda r: r.update({"sweep": {"name": "x", "wokers": 2}}), "sweep.wokers"),
        (lambda r: r.update({"sweep": {"backend": "slurm"}}), "sweep.backend"),
        (lambda r: r.update({"sweep": {"retries": -1}}), "sweep.retries: expected an integer from 0 to 100"),
        (lambda r: r.update({"sweep": {"retries": "2"}}), "sweep.retries"),
        (lambda r: r.update({"sweep": {"retries": True}}), "sweep.retries"),
        (lambda r: r.update({"sweep": {"retries": 10**6}}), "sweep.retries"),
        (lambda r: r.update({"axes": {}}), "axes: unknown key"),
        (lambda r: r.pop("base"), "base: missing"),
        (lambda r: r.update({"base": "does/not/exist.toml"}), "file not found"),
        (lambda r: r.update({"set": {"system.staleness.k": 3}}), "also fixed in [set]"),
    ],
)
def test_errors_name_the_key(tiny_raw, edit, needle):
    edit(tiny_raw)
    with pytest.raises(ScenarioError) as exc:
        parse_sweep(tiny_raw)
    assert needle in str(exc.value)


def test_retries_default_and_value(tiny_raw):
    assert parse_sweep(tiny_raw).retries == 2
    tiny_raw["sweep"]["retries"] = 0
    assert parse_sweep(tiny_raw).retries == 0


def test_shipped_sweeps_expand():
    files = sorted((ROOT / "scenarios" / "sweeps").glob("*.toml"))
    assert files, "no shipped sweeps"
    for f in files:
        spec = load_sweep(f)
        assert spec.runs, f
        assert spec.name


def test_relative_base_path(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "base.toml").write_text('[task]\nname = "bandit"\n[run]\nsteps = 3\n')
    (tmp_path / "sub" / "s.toml").write_text('base = "../base.toml"\nseeds = [1]\n[grid]\n"run.steps" = [2, 3]\n')
    spec = load_sweep(tmp_path / "sub" / "s.toml", ["run.eval_every=2"])
    assert spec.name == "s" and len(spec.runs) == 2
    assert all(r.scenario().run.eval_every == 2 for r in spec.runs)


def test_independent_replicas_of_two_seeds_must_not_overlap(tiny_raw):
    """Seed s with R independent replicas runs seeds s .. s + R − 1: seeds 0 and 1 would repeat
    R − 1 runs and count them twice; seeds R apart are refused nowhere."""
    tiny_raw["base"]["task"] = {"name": "bandit", "num_arms": 4}
    tiny_raw["base"]["algorithm"]["group_size"] = 2
    tiny_raw["set"] = {"task.replicas": 4, "run.schedules": "independent"}
    with pytest.raises(ScenarioError, match=r"seeds: 0 and 1 overlap.*space the seeds at least 4 apart"):
        parse_sweep(tiny_raw)
    tiny_raw["seeds"] = [0, 4]
    spec = parse_sweep(tiny_raw)
    assert sorted({r.seed for r in spec.runs}) == [0, 4]
