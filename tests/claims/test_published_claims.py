"""The published_speedups claim: every scenario in scenarios/published loads with the variants the
claim needs, quick mode gives one finite row per setup, the worker cap rests on a true bound, and the
published numbers in docs/claims.md are the module's."""

import math
from pathlib import Path

import numpy as np
import pytest

from sandbox.claims import CLAIMS
from sandbox.claims.published import ROOT, SETUPS, capped, docs_table, max_in_flight, setup_variants
from sandbox.system.config import SystemConfig
from sandbox.system.timing_only import simulate_timing

REPO = Path(__file__).resolve().parents[2]
FILES = sorted(ROOT.glob("*.toml"))


def test_every_published_scenario_is_a_claim_setup():
    assert {f.stem for f in FILES} == {p.scenario for p in SETUPS}
    assert len(FILES) >= 6


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_published_scenario_loads_with_the_variants_the_claim_reads(path):
    runs = setup_variants(path.stem)
    setup = next(p for p in SETUPS if p.scenario == path.stem)
    assert {"async", "sync", setup.baseline} <= set(runs)
    assert runs["async"].system.staleness.kind != "sync"
    assert runs["sync"].system.staleness.kind == "sync" and runs[setup.baseline].system.staleness.kind == "sync"
    scn = runs["async"]
    assert scn.description.count("Assumed") >= 1 and "Published" in scn.description


@pytest.mark.parametrize(
    "staleness",
    [{"kind": "sync"}, {"kind": "async_ratio", "alpha": 0.5}, {"kind": "max_lag", "k_max": 2}, {"kind": "fixed_lag", "k": 1}],
    ids=lambda s: s["kind"],
)
def test_no_control_runs_more_groups_than_the_cap_assumes(staleness):
    B = 4
    cfg = SystemConfig(num_workers=64, generation_time={"kind": "lognormal", "median": 1.0, "sigma": 1.0},
                       train_time={"kind": "constant", "value": 0.3}, staleness=staleness)
    res = simulate_timing(cfg, 30, B, seed=3)
    edges = sorted([(j.dispatch_time, 1) for j in res.jobs] + [(j.finish_time, -1) for j in res.jobs if math.isfinite(j.finish_time)],
                   key=lambda e: (e[0], e[1]))
    peak = max(np.cumsum([d for _, d in edges]))
    assert peak <= max_in_flight(cfg, B)
    assert capped(cfg, B).num_workers == max_in_flight(cfg, B) < 64


def test_quick_claim_gives_one_finite_ratio_per_setup():
    result = CLAIMS["published_speedups"].run(quick=True, seeds=2)
    assert len(result.rows) == len(SETUPS)
    for row, setup in zip(result.rows, SETUPS):
        assert setup.system in row.label and setup.text() in row.label
        assert row.direction == "within" and tuple(row.threshold) == (0.67, 1.5)
        assert len(row.values) == 2 and all(math.isfinite(v) and v > 0 for v in row.values)
    notes = {s.scenario: r.note for s, r in zip(SETUPS, result.rows)}
    assert "wall time to a score" in notes["vcpo_multiturn"]


def test_docs_table_is_the_module_constant():
    page = (REPO / "docs" / "claims.md").read_text()
    assert docs_table() in page
