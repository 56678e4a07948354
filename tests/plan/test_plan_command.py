"""`sandbox plan`: the command's files, its numbers against explicit system-only simulations, the
k-max mapping, validation of the options, and determinism (docs/plan.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from sandbox.base.errors import ScenarioError
from sandbox.cli import app
from sandbox.plan.capacity import (
    PlanEstimate,
    build_configurations,
    check_plan,
    learn_scenario,
    measure,
    parse_int_list,
    simulate,
    staleness_for,
    system_seed,
    worker_speeds_for,
)
from sandbox.scenario.api import load_scenario
from sandbox.system.config import SystemConfig
from sandbox.system.timing_only import simulate_timing

SMALL = """
title = "plan test"
[task]
name = "bitstring"
horizon = 4
threshold = 0.5
replicas = 1
[system]
num_workers = 2
generation_time = { kind = "exponential", mean = 1.0 }
train_time = { kind = "constant", value = 0.05 }
sync_delay = { kind = "constant", value = 0.01 }
staleness = { kind = "sync" }
[algorithm]
group_size = 2
groups_per_step = 4
optimizer = { name = "adam", lr = 0.05 }
[run]
steps = 30
eval_every = 5
"""

WORKERS, KS, SEEDS = (2, 4), (0, 2), 2


def invoke(*args):
    return CliRunner().invoke(app, ["plan", *map(str, args)])


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("scn") / "small.toml"
    path.write_text(SMALL)
    return path


@pytest.fixture(scope="module")
def planned(scenario, tmp_path_factory):
    """The command run twice with the same arguments into two directories."""
    outs = []
    for name in ("a", "b"):
        out = tmp_path_factory.mktemp("plan") / name
        res = invoke(
            scenario, "--workers", ",".join(map(str, WORKERS)), "--k-max", "2", "--seeds", SEEDS, "--out", out, "-q"
        )
        assert res.exit_code == 0, res.output
        outs.append((out, res.output))
    return outs


def test_the_command_writes_the_plan_and_its_figures(planned):
    out, output = planned[0]
    for name in ("plan.csv", "plan.json", "scenario.toml"):
        assert (out / name).is_file(), name
    for fig in ("throughput", "staleness", "utilisation"):
        assert (out / "figures" / f"{fig}.png").stat().st_size > 1000
        assert not (out / "figures" / f"{fig}.svg").exists()  # the scenario's run.figure_formats: PNG by default
    assert not (out / "figures" / "time_to_target.png").exists()  # no --learn
    df = pd.read_csv(out / "plan.csv")
    # k = 0 is planned although only --k-max 2 was asked: it is every row's baseline
    assert list(zip(df.workers, df.k_max)) == [(w, k) for w in WORKERS for k in KS]
    assert list(df.control) == ["sync", "max_lag k_max=2 (throttle)"] * 2  # sync has no bound: max_lag
    data = json.loads((out / "plan.json").read_text())
    assert data["k_max_sets"].startswith("system.staleness.k_max of max_lag")
    assert len(data["rows"]) == len(df) and set(data["columns"]) == set(df.columns)
    assert "k_max sets system.staleness.k_max" in " ".join(output.split())


def test_the_figures_follow_the_scenarios_figure_formats(scenario, tmp_path):
    out = tmp_path / "svg"
    res = invoke(
        scenario,
        "--workers",
        "2",
        "--k-max",
        "1",
        "--seeds",
        "1",
        "--out",
        out,
        "-q",
        "--set",
        'run.figure_formats=["png", "svg"]',
    )
    assert res.exit_code == 0, res.output
    for fig in ("throughput", "staleness", "utilisation"):
        for ext in ("png", "svg"):
            assert (out / "figures" / f"{fig}.{ext}").stat().st_size > 1000


def test_same_seeds_give_the_same_bytes(planned):
    (a, _), (b, _) = planned
    assert (a / "plan.csv").read_bytes() == (b / "plan.csv").read_bytes()
    assert (a / "plan.json").read_bytes() == (b / "plan.json").read_bytes()


def test_the_sync_row_is_an_explicit_sync_simulate_timing(planned, scenario):
    """Bitwise: the k = 0 rows are the documented formulas applied to simulate_timing(staleness=sync)."""
    df = pd.read_csv(planned[0][0] / "plan.csv")
    scn, _ = load_scenario(scenario)
    B, G, steps = scn.algorithm.groups_per_step, scn.algorithm.group_size, scn.run.steps
    for w in WORKERS:
        cfg = SystemConfig(**{**scn.system.model_dump(), "num_workers": w, "staleness": {"kind": "sync"}})
        results = [
            simulate_timing(cfg, steps, B, G, seed=system_seed(scn, s), record_events=False) for s in range(SEEDS)
        ]
        row = df[(df.workers == w) & (df.k_max == 0)].iloc[0]
        assert row.sim_time == float(np.mean([r.sim_time for r in results]))
        assert row.steps_per_s == float(np.mean([len(r.rows) / r.sim_time for r in results]))
        assert row.samples_per_s == float(np.mean([B * G * len(r.rows) / r.sim_time for r in results]))
        assert row.tokens_per_s == float(np.mean([B * G * len(r.rows) / r.sim_time * 4 for r in results]))  # horizon 4
        assert row.util_workers == float(np.mean([r.rows[-1]["util/workers"] for r in results]))
        assert row.speedup_vs_sync == 1.0 and row.lag_max == 0 and row.dropped_fraction == 0.0
    for w in WORKERS:  # the asynchronous row's speed-up: per-seed ratio of simulated times, then the mean
        sync_cfg = SystemConfig(**{**scn.system.model_dump(), "num_workers": w, "staleness": {"kind": "sync"}})
        async_cfg = SystemConfig(
            **{**scn.system.model_dump(), "num_workers": w, "staleness": {"kind": "max_lag", "k_max": 2}}
        )
        runs = [simulate_timing(async_cfg, steps, B, G, seed=system_seed(scn, s)) for s in range(SEEDS)]
        ratios = [
            simulate_timing(sync_cfg, steps, B, G, seed=system_seed(scn, s)).sim_time / r.sim_time
            for s, r in enumerate(runs)
        ]
        row = df[(df.workers == w) & (df.k_max == 2)].iloc[0]
        assert row.speedup_vs_sync == float(np.mean(ratios))
        assert row.lag_max <= 2 and row.speedup_vs_sync > 1
        lags = sorted(j.consume_step - j.head_version for r in runs for j in r.jobs if j.consume_step >= 0)
        assert row.lag_mean == pytest.approx(sum(lags) / len(lags), rel=1e-12)
        # p95: the smallest lag with at least 95 % of the consumed groups at or below it
        assert row.lag_p95 == next(x for x in lags if sum(v <= x for v in lags) >= 0.95 * len(lags))
        dropped = sum(r.dropped for r in runs)
        assert row.dropped_fraction == pytest.approx(dropped / (dropped + len(lags)), rel=1e-12)


def test_more_workers_give_no_less_throughput_when_generation_is_the_bottleneck(tmp_path):
    """Generation 1 s per group, training 0.01 s, 8 groups per step on 2-8 workers: throughput grows
    with the workers at every bound (and the asynchronous bounds beat sync)."""
    path = tmp_path / "gen_bound.toml"
    path.write_text(
        SMALL.replace("groups_per_step = 4", "groups_per_step = 8").replace("value = 0.05 }", "value = 0.01 }")
    )
    _, raw = load_scenario(path)
    from sandbox.plan.capacity import run_plan

    plan = run_plan(raw, str(path), [2, 4, 8], [0, 1, 4], seeds=2, steps=40)
    df = pd.DataFrame(plan.rows)
    for k, g in df.groupby("k_max"):
        tput = g.sort_values("workers").samples_per_s.to_numpy()
        assert (np.diff(tput) > 0).all(), (k, tput)
    assert (df[df.k_max > 0].speedup_vs_sync > 1).all()


@pytest.mark.parametrize(
    ("args", "option", "says"),
    [
        (["--workers", "0"], "--workers", "0 is below 1"),
        (["--workers", "8,x"], "--workers", "'x' is not an integer"),
        (["--workers", "4,,8"], "--workers", "comma-separated list"),
        (["--k-max", "-1"], "--k-max", "-1 is below 0"),
        (["--k-max", "1.5"], "--k-max", "'1.5' is not an integer"),
        (["--seeds", "0"], "--seeds", "greater than or equal to 1"),
    ],
)
def test_bad_lists_are_refused_naming_the_option(scenario, tmp_path, args, option, says):
    out = tmp_path / "out"
    res = invoke(scenario, *args, "--out", out)
    text = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert option in text and says in text, text
    assert "Traceback" not in res.output
    assert not out.exists()


def test_an_absurd_plan_is_refused_with_its_estimate(scenario, tmp_path):
    out = tmp_path / "out"
    res = invoke(scenario, "--workers", "100000,200000", "--steps", "100000", "--out", out)
    text = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert "would take about" in text and "--force" in text and "system-only simulations" in text
    assert not out.exists()


def test_check_plan_names_the_sizes_and_force_skips_it():
    big = PlanEstimate(
        seconds=4000.0, memory=10 * 2**30, terms=[("6 system-only simulations", 4000.0)], memory_what="x"
    )
    with pytest.raises(ScenarioError) as exc:
        check_plan(big, available=2**30)
    msg = str(exc.value)
    assert "--workers/--k-max/--seeds/--steps" in msg and "67 min" in msg and "10.0 GiB" in msg
    check_plan(big, force=True, available=2**30)
    check_plan(PlanEstimate(1.0, 1.0, [("s", 1.0)]), available=2**30)


def test_parse_int_list_sorts_and_removes_duplicates():
    assert parse_int_list("16, 8,8,32", "--workers", 1, "8") == [8, 16, 32]


def test_k_max_sets_the_bound_of_each_control():
    assert staleness_for({"kind": "max_lag", "k_max": 4, "enforcement": "drop", "queue_capacity": 16}, 2) == {
        "kind": "max_lag",
        "k_max": 2,
        "enforcement": "drop",
        "queue_capacity": 16,
    }
    assert staleness_for({"kind": "fixed_lag", "k": 8}, 3) == {"kind": "fixed_lag", "k": 3}
    assert staleness_for({"kind": "async_ratio", "alpha": 1.5}, 2) == {"kind": "async_ratio", "alpha": 2.0}
    assert staleness_for({"kind": "sync"}, 2) == {"kind": "max_lag", "k_max": 2}
    for kind in ({"kind": "max_lag", "k_max": 4}, {"kind": "fixed_lag", "k": 8}, {"kind": "async_ratio", "alpha": 1.0}):
        assert staleness_for(kind, 0) == {"kind": "sync"}


def test_worker_speeds_are_resampled_by_quantile():
    speeds = [1, 1, 1, 1, 0.5, 0.5, 0.25, 0.25]
    assert worker_speeds_for(speeds, 4) == [1, 1, 0.5, 0.25]
    assert worker_speeds_for(speeds, 16) == [s for s in speeds for _ in range(2)]
    assert worker_speeds_for(None, 4) is None


def test_shipped_controls_plan_with_their_bound(tmp_path):
    """max_lag with drop keeps its queue; partial rollouts are switched off for sync only; heterogeneous
    speeds follow the worker count; each configuration's lag respects its bound."""
    root = Path(__file__).resolve().parents[2] / "scenarios"
    _, raw = load_scenario(root / "max_lag_drop.toml")
    configs = build_configurations(raw, [6], [0, 1], "max_lag_drop")
    st = configs[1].scenario.system.staleness
    assert (st.kind, st.k_max, st.enforcement, st.queue_capacity) == ("max_lag", 1, "drop", 16)
    assert configs[1].scenario.system.worker_speeds == [1, 1, 1, 1, 0.5, 0.25]
    m = measure(simulate(configs[1].scenario, 30, 0))
    assert m.lags.max() <= 1 and m.dropped > 0
    _, raw = load_scenario(root / "partial_rollouts.toml")
    sync, bounded = build_configurations(raw, [4], [3], "partial_rollouts")
    assert not sync.scenario.system.partial_rollouts and bounded.scenario.system.partial_rollouts
    m = measure(simulate(bounded.scenario, 20, 0))
    assert 0 < m.lags.max() <= 3 and m.samples == 20 * 4 * 8


def test_a_bad_configuration_names_it_and_the_field():
    _, raw = load_scenario(Path(__file__).resolve().parents[2] / "scenarios" / "async_ratio.toml")
    with pytest.raises(ScenarioError) as exc:
        build_configurations(raw, [4], [2, 2_000_000], "async_ratio")
    text = str(exc.value)
    assert "plan configuration workers=4, k_max=2000000" in text and "system.staleness" in text and "alpha" in text


def test_learning_runs_add_time_to_target_and_share_the_schedule(scenario, tmp_path):
    scn, raw = load_scenario(scenario)
    config = build_configurations(raw, [2], [2], str(scenario))[1]
    # the timing stream of a learning run with run.seed = s is the plan's (delays do not depend on tokens)
    from sandbox.run.runner import run_scenario

    res = run_scenario(learn_scenario(config.scenario, 1, 20), None, force=True)
    sim = simulate(config.scenario, 20, 1)
    planned = np.array([(j.dispatch_time, j.finish_time, j.consume_step, j.head_version) for j in sim.jobs])
    np.testing.assert_array_equal(
        planned, res.jobs[["dispatch_time", "finish_time", "consume_step", "head_version"]].to_numpy(float)
    )
    out = tmp_path / "learn"
    cli = invoke(
        scenario,
        "--workers",
        "2",
        "--k-max",
        "2",
        "--seeds",
        "1",
        "--learn",
        "--learn-seeds",
        "2",
        "--learn-steps",
        "30",
        "--set",
        "run.target.reward=0.3",
        "--out",
        out,
        "-q",
    )
    assert cli.exit_code == 0, cli.output
    df = pd.read_csv(out / "plan.csv")
    assert {"time_to_target", "speedup_end_to_end", "reached_units"} <= set(df.columns)
    sync, lagged = df.iloc[0], df.iloc[1]
    assert sync.speedup_end_to_end == 1.0 and sync.reached_units == "2/2"
    if not math.isnan(lagged.speedup_end_to_end):
        assert lagged.speedup_end_to_end == pytest.approx(sync.time_to_target / lagged.time_to_target)
    assert (out / "figures" / "time_to_target.png").is_file()
    assert "end to end vs sync" in cli.output


def test_a_directory_that_is_not_a_plan_is_refused(scenario, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    res = invoke(scenario, "--workers", "2", "--k-max", "1", "--seeds", "1", "--out", out)
    assert res.exit_code == 2 and "--out" in res.output
    assert (out / "notes.txt").read_text() == "keep me" and not (out / "plan.csv").exists()
