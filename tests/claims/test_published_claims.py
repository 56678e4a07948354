"""The published_speedups claim: every scenario in scenarios/published loads with the variants the
claim needs, its generation_time is the exact group-time quantiles of its stated response lengths
(hand values for the formula), quick mode gives one finite row per setup, the worker cap rests on a
true bound, and the published numbers in docs/claims.md are the module's."""

import contextlib
import importlib.util
import io
import math
import tomllib
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest

from sandbox.claims.api import CLAIMS
from sandbox.claims.published import (
    ROOT,
    SETUPS,
    capped,
    capped_mean_length,
    docs_table,
    generation_quantiles,
    max_in_flight,
    setup_variants,
)
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


@pytest.mark.parametrize("setup", SETUPS, ids=lambda p: p.scenario)
def test_generation_time_is_the_exact_quantiles_of_the_stated_lengths(setup):
    scn = setup_variants(setup.scenario)["async"]
    n = setup.lengths
    assert scn.system.generation_time.kind == "empirical" and n.group_size == scn.algorithm.group_size
    expected = [
        round(float(v), 1)
        for v in generation_quantiles(n.median, n.sigma, n.max_tokens, n.group_size, n.seconds_per_token, n.quantiles)
    ]
    assert scn.system.generation_time.values == expected
    # the description states the model and the summary numbers computed from it
    text = " ".join(scn.description.split())
    for part in (
        f"median {n.median} tokens",
        f"sigma {n.sigma:.3f}",
        f"maximum response length {n.max_tokens}",
        f"{n.quantiles} equally likely values",
        f"median group {n.median_group_tokens():.0f} tokens",
        f"mean response {n.mean_response_tokens():.0f} tokens",
        f"{n.seconds_per_token} s per token",
    ):
        assert part in text, (setup.scenario, part)
    assert "Monte Carlo" not in text


def test_generation_tool_writes_exactly_what_the_files_hold():
    tool = generation_tool()
    for setup in SETUPS:
        held = tool.BLOCK.findall((ROOT / f"{setup.scenario}.toml").read_text())
        assert held == [tool.toml_line(setup)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert tool.main(["roll_flash_rlvr"]) == 0
    values = tomllib.loads(out.getvalue())["generation_time"]["values"]
    assert values == SETUPS[[p.scenario for p in SETUPS].index("roll_flash_rlvr")].lengths.rounded()
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        tool.main(["nope"])


def test_generation_quantiles_one_response_uncapped_is_the_lognormal_quantile():
    # q = 1/8, 3/8, 5/8, 7/8; t = 2 s/token · 100 · exp(0.5 · z_q)
    got = generation_quantiles(100, 0.5, 1e12, 1, 2.0, n=4)
    z = [NormalDist().inv_cdf(q) for q in (0.125, 0.375, 0.625, 0.875)]
    assert z[0] == pytest.approx(-1.1503494, abs=1e-7)
    np.testing.assert_allclose(got, [200 * math.exp(0.5 * zq) for zq in z], rtol=1e-12)
    assert got[0] == pytest.approx(112.5213, abs=1e-4) and got[1:3].prod() == pytest.approx(200.0**2)


def test_generation_quantiles_of_the_longest_of_two_with_a_binding_cap():
    # G = 2, n = 2: q = 1/4 -> q^(1/2) = 1/2 -> z = 0 -> the median 100; q = 3/4 -> 100 · e^(z(0.866)) = 303 > cap 150
    np.testing.assert_allclose(generation_quantiles(100, 1.0, 150, 2, 0.5, n=2), [50.0, 75.0], rtol=1e-12)
    # the longest of G is the single-response quantile at q^(1/G)
    np.testing.assert_allclose(
        generation_quantiles(100, 1.0, 1e12, 4, 1.0, n=2),
        [100 * math.exp(NormalDist().inv_cdf(q**0.25)) for q in (0.25, 0.75)],
        rtol=1e-12,
    )
    with pytest.raises(ValueError, match="group_size >= 1"):
        generation_quantiles(100, 1.0, 150, 0, 0.5)


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


def test_quick_claim_gives_one_finite_ratio_per_setup():
    result = CLAIMS["published_speedups"].run(quick=True, seeds=2)
    assert len(result.rows) == len(SETUPS)
    for row, setup in zip(result.rows, SETUPS):
        assert setup.system in row.label and setup.text() in row.label
        assert row.direction == "within" and tuple(row.threshold) == (0.8, 1.25)
        assert len(row.values) == 2 and all(math.isfinite(v) and v > 0 for v in row.values)
    notes = {s.scenario: r.note for s, r in zip(SETUPS, result.rows)}
    assert "wall time to a score" in notes["vcpo_multiturn"]


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


def test_docs_table_is_the_module_constant():
    page = (REPO / "docs" / "claims.md").read_text()
    assert docs_table() in page
