"""The published setups: every scenario in scenarios/published loads with the variants the claim
published_speedups_engine needs and holds the engine and trainer of the one timing model that the claim runs
(no per-slot decode constant, no per-token training rule), AReaL's synchronous baseline is run as AReaL's code runs
it, the worker cap rests on a true bound, and the published numbers in docs/claims.md are the module's."""

import contextlib
import importlib.util
import io
import math
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest

from sandbox.claims.published import (
    ROOT,
    SETUPS,
    capped,
    capped_mean_length,
    docs_table,
    max_in_flight,
    setup_variants,
)
from sandbox.claims.published_engine import ENGINE_SETUPS, engine_runs, with_trainer
from sandbox.system.config import SystemConfig
from sandbox.system.timing_only import simulate_timing

REPO = Path(__file__).resolve().parents[2]
FILES = sorted(ROOT.glob("*.toml"))


def generation_tool():
    spec = importlib.util.spec_from_file_location("published_generation", REPO / "tools" / "published_generation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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


def test_every_setup_runs_on_the_one_timing_model():
    assert set(ENGINE_SETUPS) == {p.scenario for p in SETUPS}


@pytest.mark.parametrize("setup", SETUPS, ids=lambda p: p.scenario)
def test_scenario_holds_the_engine_and_trainer_the_claim_runs(setup):
    runs = setup_variants(setup.scenario)
    mapping = ENGINE_SETUPS[setup.scenario]
    held = runs["async"].system.generation_time
    assert held.kind == "continuous_batching" and held.hardware.gpu == mapping.gpu
    assert held == engine_runs(setup, mapping).mode.generation_time
    assert (held.length_median, held.length_sigma, held.max_tokens) == (
        setup.lengths.median,
        setup.lengths.sigma,
        setup.lengths.max_tokens,
    )
    if mapping.train_gpus is None:  # a consistency check: the source's measured seconds
        assert runs["async"].system.train_time.kind == "constant" and mapping.measured
        return
    trained = with_trainer(runs, setup, mapping)
    for name in ("async", setup.baseline):
        assert runs[name].system.train_time.kind == "hardware"
        assert runs[name].system.train_time == trained[name].system.train_time, name


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_no_unsourced_decode_or_training_constant_is_left(path):
    text = " ".join(path.read_text().split())
    for gone in ("0.03 s per token", "3.5e-4", "empirical", "published_speedups,", "section published_speedups)"):
        assert gone not in text, (path.stem, gone)


def test_generation_tool_writes_exactly_what_the_files_hold():
    tool = generation_tool()
    for setup in SETUPS:
        text = (ROOT / f"{setup.scenario}.toml").read_text()
        assert tool.rewrite(text, setup) == text, setup.scenario
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert tool.main(["roll_flash_rlvr"]) == 0
    assert out.getvalue().startswith('generation_time = { kind = "continuous_batching"')
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        tool.main(["nope"])


@pytest.mark.parametrize(
    "name, rollout, trainers, pool", [("areal_fully_async", 96, 32, 64), ("areal_fully_async_7b", 144, 48, 96)]
)
def test_areal_baseline_is_synchronous_areal_on_disjoint_pools(name, rollout, trainers, pool):
    """AReaL's Table 2 baseline as AReaL v0.3.0 runs it: half the GPUs generate, half train, in turn, without a
    log-prob recompute; asynchronous AReaL on 3/4 : 1/4 with its decoupled loss's one recompute pass."""
    setup = next(p for p in SETUPS if p.scenario == name)
    assert setup.baseline == "decoupled_sync"
    runs = with_trainer(setup_variants(name), setup, ENGINE_SETUPS[name])
    slots = 256 // setup.lengths.group_size
    base, asyn = runs["decoupled_sync"].system, runs["async"].system
    assert base.staleness.is_synchronous() and base.num_workers == pool * slots
    assert (base.train_time.gpus, base.train_time.recompute_passes) == (pool, 0)
    assert asyn.num_workers == rollout * slots and (asyn.train_time.gpus, asyn.train_time.recompute_passes) == (
        trainers,
        1,
    )
    # no recompute is a third less training work per token than one recompute pass: (6 + 0) / (6 + 2)
    assert base.train_time.expected() * pool / (asyn.train_time.expected() * trainers) == pytest.approx(6 / 8)


def test_capped_mean_length_by_hand_and_by_quadrature():
    # no cap in effect: the log-normal mean m · e^(s²/2); a cap far below the median: the cap itself
    assert capped_mean_length(100, 0.5, 1e12) == pytest.approx(100 * math.exp(0.125), rel=1e-12)
    assert capped_mean_length(100, 0.5, 1.0) == pytest.approx(1.0, rel=1e-9)
    assert capped_mean_length(100, 0.0, 80) == 80 and capped_mean_length(100, 0.0, 120) == 100
    # E[min(L, c)] = ∫_0^c P(L > x) dx
    m, s, c = 1000, 0.819, 2000
    xs = np.linspace(0, c, 200001)
    survival = [1 - NormalDist().cdf(math.log(x / m) / s) if x > 0 else 1.0 for x in xs]
    assert capped_mean_length(m, s, c) == pytest.approx(np.trapezoid(survival, xs), rel=1e-6)


@pytest.mark.parametrize(
    "staleness",
    [
        {"kind": "sync"},
        {"kind": "async_ratio", "alpha": 0.5},
        {"kind": "max_lag", "k_max": 2},
        {"kind": "fixed_lag", "k": 1},
    ],
    ids=lambda s: s["kind"],
)
def test_no_control_runs_more_groups_than_the_cap_assumes(staleness):
    B = 4
    cfg = SystemConfig(
        num_workers=64,
        generation_time={"kind": "lognormal", "median": 1.0, "sigma": 1.0},
        train_time={"kind": "constant", "value": 0.3},
        staleness=staleness,
    )
    res = simulate_timing(cfg, 30, B, seed=3)
    edges = sorted(
        [(j.dispatch_time, 1) for j in res.jobs]
        + [(j.finish_time, -1) for j in res.jobs if math.isfinite(j.finish_time)],
        key=lambda e: (e[0], e[1]),
    )
    peak = max(np.cumsum([d for _, d in edges]))
    assert peak <= max_in_flight(cfg, B)
    assert capped(cfg, B).num_workers == max_in_flight(cfg, B) < 64


def test_a_prediction_on_the_wrong_side_of_1_is_never_reproduced():
    """Issue 34: a slowdown predicted where a speed-up was published is not reproduced whatever the ratio's
    interval; a prediction whose interval contains 1 is at best inconclusive."""
    from sandbox.claims.base import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, Row
    from sandbox.claims.published import BAND, side_of_one

    slow = np.array([0.90, 0.91, 0.92])  # published 1.1x: ratio ≈ 0.83, inside the band
    cap, note = side_of_one(slow, 1.1)
    assert cap == NOT_REPRODUCED and "other side of 1" in note
    assert Row("x", "s", slow / 1.1, BAND, "within").verdict == REPRODUCED  # what the band alone would say
    assert Row("x", "s", slow / 1.1, BAND, "within", cap=cap).verdict == NOT_REPRODUCED
    straddle = np.array([0.95, 1.0, 1.05])
    cap, note = side_of_one(straddle, 1.1)
    assert cap == INCONCLUSIVE and "contains 1" in note
    assert Row("x", "s", straddle / 1.1, BAND, "within", cap=cap).verdict == INCONCLUSIVE
    assert side_of_one(np.array([1.2, 1.25, 1.3]), 1.1) == ("", "")
    # a published figure of exactly 1 has no side: no cap either way
    assert side_of_one(np.array([1.01, 1.02, 1.03]), 1.0) == ("", "")


def test_docs_table_is_the_module_constant():
    page = (REPO / "docs" / "claims.md").read_text()
    assert docs_table() in page
