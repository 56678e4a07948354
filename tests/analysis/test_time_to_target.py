"""Time-to-target and the end-to-end speed-up (docs/time_to_target.md): hand-worked smoothing and
crossings, the null-with-reason cases, the speed-up and its bootstrap interval on synthetic
reaches, and the fields a real run, a `sandbox run` with variants and a sweep write."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import tomli_w
from typer.testing import CliRunner

from sandbox.analysis.time_to_target import (
    Arm,
    Curves,
    Reach,
    TargetConfig,
    bootstrap_ratio,
    compare,
    describe,
    first_crossing,
    is_synchronous,
    replica_reaches,
    run_fields,
    smooth,
    speedup,
    target_level,
)
from sandbox.scenario.api import ScenarioError, validate_scenario


def curves(
    values, *, step_time=2.0, samples_per_step=10.0, final=1.0, sync=False, window=1, seed=0, higher=True, time=None
) -> Curves:
    """Hand-made curves: one row per learner step, step s ends at step_time * (s + 1)."""
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    n = len(values)
    step = np.arange(n, dtype=float)
    t = step_time * (step + 1) if time is None else np.asarray(time, dtype=float)
    counts = {
        "samples": samples_per_step * (step + 1),
        "generated": samples_per_step * (step + 1),
        "tokens": np.zeros(n),
    }
    return Curves(
        "eval/expected_reward" if higher else "eval/loss",
        higher,
        step,
        t,
        counts,
        values,
        final,
        sync,
        TargetConfig(window=window),
        seed,
    )


def reach(t, samples=None, end=None):
    return Reach(t, None, samples if samples is not None else t, None, None, 0.0, t if end is None else end)


def miss(end):
    return Reach(None, None, None, None, None, 0.0, end, "never")


# ------------------------------------------------------------------------------------------------
# smoothing and crossing, by hand
# ------------------------------------------------------------------------------------------------


def test_centred_running_mean_by_hand():
    # window 10: points within ±5 steps. z0 = (0 + .2)/2, z1 = (0 + .2 + .4)/3, z2 = (.2 + .4 + .6)/3, z3 = (.4 + .6)/2
    z = smooth(np.array([0, 5, 10, 15]), np.array([0.0, 0.2, 0.4, 0.6]), 10)
    np.testing.assert_allclose(z, [0.1, 0.2, 0.4, 0.5])
    # window 1 on whole steps: no smoothing
    np.testing.assert_allclose(smooth(np.arange(4), np.array([3.0, 1.0, 4.0, 1.0]), 1), [3, 1, 4, 1])


def test_first_crossing_interpolates_between_points():
    z = np.array([0.1, 0.2, 0.4, 0.5])
    assert first_crossing(z, 0.3) == (2, pytest.approx(0.5))  # (0.3 - 0.2) / (0.4 - 0.2)
    assert first_crossing(z, 0.4) == (2, pytest.approx(1.0))  # meets it exactly at point 2
    assert first_crossing(z, 0.05) == (0, 1.0)  # already there at the first point
    assert first_crossing(z, 0.6) is None
    assert first_crossing(np.array([4.0, 2.0, 1.0]), 1.5, higher_is_better=False) == (2, pytest.approx(0.5))


def test_replica_reach_interpolates_time_steps_and_samples():
    # replica 0 crosses 0.5 half-way between step 2 (0.4, t = 6 s, 30 samples) and step 3 (0.6, t = 8 s, 40 samples)
    c = curves(np.array([[0.0, 0.1], [0.2, 0.1], [0.4, 0.1], [0.6, 0.1], [0.8, 0.1]]))
    r0, r1 = replica_reaches(c, 0.5)
    assert (r0.time, r0.steps, r0.samples) == (pytest.approx(7.0), pytest.approx(3.5), pytest.approx(35.0))
    assert r0.tokens is None  # no tokens trained on (all-zero counter): samples are the unit
    assert not r1.reached and "never within 5 steps" in r1.reason and "0.1" in r1.reason


def test_a_noisy_spike_does_not_count_once_smoothed():
    # one measurement above the target at step 2, then back down: raw it "reaches" 0.5, smoothed over ±1 step it does not
    c = curves([0.1, 0.1, 0.7, 0.1, 0.1, 0.6, 0.6, 0.6], window=2)
    raw = replica_reaches(c, 0.5, window=1)[0]
    assert raw.time == pytest.approx(2.0 * 2 + 2.0 * (0.4 / 0.6))  # between step 1 (0.1) and step 2 (0.7)
    smoothed = replica_reaches(c, 0.5)[0]  # z = [.1, .3, .3, .3, .2667, .4333, .6, .6]
    assert smoothed.time == pytest.approx(12.0 + 2.0 * (0.5 - 13 / 30) / (0.6 - 13 / 30))


def test_diverged_replica_is_cut_and_reaches_nothing():
    c = curves(np.array([[0.1], [0.2], [0.9], [0.9]]))
    build = lambda at: Curves.build(  # noqa: E731
        pd.DataFrame({"step": c.step, "time": c.time, "eval/expected_reward": c.values[:, 0]}),
        {"eval/expected_reward": c.values},
        {"final_expected_reward": 0.9},
        [at],
        False,
        TargetConfig(window=1),
        0,
    )
    assert replica_reaches(c, 0.5)[0].reached
    r = replica_reaches(build(2), 0.5)[0]
    assert not r.reached and r.diverged and "diverged at step 2" in r.reason
    # it crossed 0.15 at step 1, before diverging at step 3: a diverged replica reaches no target all the same
    r = replica_reaches(build(3), 0.15)[0]
    assert not r.reached and "diverged at step 3" in r.reason


def test_run_fields_null_with_reason_when_a_replica_never_reaches():
    c = curves(np.array([[0.0, 0.1], [0.2, 0.1], [0.4, 0.1], [0.6, 0.1], [0.8, 0.1]]))
    f = run_fields(c, 0.5, "≥ 0.5")
    assert f["time_to_target"] is None and f["steps_to_target"] is None
    assert f["target_reached_replicas"] == 1
    assert f["time_to_target_replicas"] == [pytest.approx(7.0), None]
    assert f["time_to_target_reason"].startswith("1 of 2 replicas never reached 0.5")
    ok = run_fields(curves([0.0, 0.2, 0.4, 0.6]), 0.5, "≥ 0.5")
    assert ok["time_to_target"] == pytest.approx(7.0) and ok["samples_to_target"] == pytest.approx(35.0)
    assert ok["time_to_target_reason"] == ""
    json.dumps(f)  # summary.json can hold it


def test_target_levels():
    assert target_level(TargetConfig(reward=0.8), True, 0.3, "x")[0] == 0.8
    level, rule = target_level(TargetConfig(), True, 0.8, "the synchronous variant 'sync'")
    assert level == pytest.approx(0.72) and "0.9 × 0.8" in rule and "'sync'" in rule
    assert target_level(TargetConfig(fraction_of_sync=0.5), False, 2.0, "x")[0] == pytest.approx(
        4.0
    )  # a loss: final / f
    level, why = target_level(TargetConfig(), True, -1.0, "x")
    assert level is None and "run.target.reward" in why
    assert target_level(TargetConfig(), True, float("nan"), "x")[0] is None


def test_target_config_is_validated_with_the_dotted_field():
    with pytest.raises(ScenarioError, match=r"run\.target.*either reward"):
        validate_scenario({"run": {"target": {"reward": 0.5, "fraction_of_sync": 0.9}}})
    with pytest.raises(ScenarioError, match=r"run\.target\.fraction_of_sync"):
        validate_scenario({"run": {"target": {"fraction_of_sync": 0.0}}})
    with pytest.raises(ScenarioError, match=r"run\.target\.window"):
        validate_scenario({"run": {"target": {"window": 0}}})
    assert validate_scenario({}).run.target.fraction == 0.9


def test_synchronous_staleness():
    assert is_synchronous({"kind": "sync"}) and is_synchronous({"kind": "fixed_lag", "k": 0})
    assert not is_synchronous({"kind": "fixed_lag", "k": 2}) and not is_synchronous({"kind": "max_lag", "k_max": 0})


# ------------------------------------------------------------------------------------------------
# speed-up and interval on synthetic reaches
# ------------------------------------------------------------------------------------------------


def test_speedup_is_throughput_gain_times_sample_efficiency():
    # sync: 10 s and 100 samples per unit; variant: 5 s and 150 samples -> S = 2, G = (150/5)/(100/10) = 3, E = 2/3
    sp = speedup({0: [reach(10, 100), reach(10, 100)]}, {0: [reach(5, 150), reach(5, 150)]})
    assert sp.value == pytest.approx(2.0)
    assert sp.throughput_gain == pytest.approx(3.0) and sp.sample_efficiency == pytest.approx(2 / 3)
    assert sp.ci_low == pytest.approx(2.0) and sp.ci_high == pytest.approx(2.0)  # identical units: no spread


def test_bootstrap_interval_paired_unpaired_and_reproducible():
    sync = {0: [reach(10)], 1: [reach(20)]}
    # paired seeds, every seed twice as fast: each draw is exactly 2
    lo, hi, how = bootstrap_ratio(sync, {0: [reach(5)], 1: [reach(10)]})
    assert (lo, hi) == (pytest.approx(2.0), pytest.approx(2.0)) and "paired" in how and "seeds" in how
    # other seeds: unpaired; the ratio of two-seed means ranges over [10/10, 20/5]
    unpaired = {2: [reach(5)], 3: [reach(10)]}
    lo, hi, how = bootstrap_ratio(sync, unpaired)
    assert 1.0 <= lo < 2.0 < hi <= 4.0 and "paired" not in how
    assert bootstrap_ratio(sync, unpaired) == (lo, hi, how)  # fixed seed: the same interval every time
    # an independent re-statement with the documented generator and draw order
    rng = np.random.default_rng(0)
    ds, dv = rng.integers(0, 2, (2000, 2)), rng.integers(0, 2, (2000, 2))
    ratio = np.array([10.0, 20.0])[ds].mean(1) / np.array([5.0, 10.0])[dv].mean(1)
    np.testing.assert_allclose((lo, hi), np.quantile(ratio, [0.025, 0.975]))
    # one seed and one replica per arm: no interval
    assert bootstrap_ratio({0: [reach(10)]}, {0: [reach(5)]})[:2] == (None, None)


def test_speedup_null_with_reason_and_no_bound_when_a_unit_never_reaches():
    sp = speedup({0: [reach(10), reach(10)]}, {0: [reach(20), miss(end=30)]})
    assert sp.value is None and "1 of 2 replicas never reached" in sp.reason
    assert sp.time_sync == pytest.approx(10) and "most" not in sp.fields()["speedup_reason"]  # no vacuous bound
    sp = speedup({0: [miss(end=40)]}, {0: [reach(10)]})
    assert sp.value is None and "synchronous baseline" in sp.reason and "least" not in sp.fields()["speedup_reason"]


def test_compare_targets_the_synchronous_final_and_describes_it():
    sync = Arm("sync", [curves([0.0, 0.5, 1.0, 1.0], step_time=4.0, final=1.0, sync=True)])
    fast = Arm("async", [curves([0.0, 0.3, 0.6, 0.9, 1.0, 1.0], step_time=1.0, samples_per_step=20.0, final=1.0)])
    comp = compare([sync, fast], {"sync": "sync", "async": "sync"}, kind="variant")
    assert comp.levels["async"][0] == pytest.approx(0.9) and "variant 'sync'" in comp.levels["async"][1]
    # sync crosses 0.9 at 80 % of the way from step 1 (t = 8) to step 2 (t = 12): 11.2 s; async at step 3: 4 s
    sp = comp.speedups["async"]
    assert sp.time_sync == pytest.approx(11.2) and sp.time_variant == pytest.approx(4.0)
    assert sp.value == pytest.approx(2.8)
    # samples: sync 10/step x 2.8 steps = 28, async 20 x 4 = 80 -> E = 0.35, G = 8
    assert sp.sample_efficiency == pytest.approx(0.35) and sp.throughput_gain == pytest.approx(8.0)
    text = describe(comp, "async")
    assert text.startswith("async reaches 0.9 in 4 s vs 11.2 s synchronous: 2.80× faster end to end")
    assert "although it trains on 8× more samples per second: it needs 2.86× as many samples" in text
    assert describe(comp, "sync") == "sync (the synchronous baseline) reaches 0.9 in 11.2 s"
    row = comp.config_fields("async")
    assert row["speedup_vs_sync"] == pytest.approx(2.8) and row["baseline"] == "sync"


def test_compare_without_a_synchronous_run_uses_the_best_final():
    a = Arm("a", [curves([0.0, 0.5, 0.8], final=0.8)])
    b = Arm("b", [curves([0.0, 0.2, 0.4], final=0.4)])
    comp = compare([a, b], {"a": None, "b": None})
    assert comp.levels["b"][0] == pytest.approx(0.72) and "best configuration 'a'" in comp.levels["b"][1]
    assert comp.speedups["a"].value is None and "no synchronous baseline" in comp.speedups["a"].reason
    assert "does not reach 0.72" in describe(comp, "b")


def test_slower_variant_reads_as_slower_although_it_has_more_throughput():
    sync = Arm("sync", [curves(np.array([[0.0, 0.0], [0.5, 0.5], [1.0, 1.0]]), step_time=10.0, final=1.0, sync=True)])
    # sync: both replicas at 0.9 after 28 s (2.8 steps); the variant's replicas at 36 s and 44 s (9 and 11 steps)
    done = np.arange(1, 13)  # steps completed at rows 0..11, 4 s each
    slow = Arm(
        "none", [curves(np.stack([0.1 * done, 0.9 * done / 11], 1), step_time=4.0, samples_per_step=10.0, final=1.0)]
    )
    comp = compare([sync, slow], {"sync": "sync", "none": "sync"})
    sp = comp.speedups["none"]
    assert sp.time_variant == pytest.approx(40.0) and sp.value == pytest.approx(0.7)
    # two replicas, paired: resampling (1,1), (2,2) or (1,2) gives 28/36, 28/44 or 28/40
    assert (sp.ci_low, sp.ci_high) == (pytest.approx(28 / 44), pytest.approx(28 / 36))
    text = describe(comp, "none", throughput_ratio=2.4)
    assert text == (
        "none reaches 0.9 in 40 s vs 28 s synchronous: 1.43× slower end to end (95% CI 1.29–1.57× over "
        "replicas of one timing schedule), although it trains on 2.4× more samples per second: it needs "
        "3.57× as many samples to get there"
    )
    # replicas under independent schedules (each its own clock): the interval covers the timing, no note
    for arm in (sync, slow):
        for c in arm.runs:
            c.replica_time = np.repeat(c.time[:, None], c.replicas, 1)
            c.replica_counts = {k: np.repeat(v[:, None], c.replicas, 1) for k, v in c.counts.items()}
    assert "(95% CI 1.29–1.57×)," in describe(compare([sync, slow], {"sync": "sync", "none": "sync"}), "none", 2.4)


# ------------------------------------------------------------------------------------------------
# real runs: summary.json, `sandbox run` with variants, a sweep
# ------------------------------------------------------------------------------------------------

TINY = {
    "title": "tiny bitstring",
    "task": {"name": "bitstring", "horizon": 4, "threshold": 0.5, "replicas": 2},
    "system": {
        "num_workers": 4,
        "generation_time": {"kind": "constant", "value": 1.0},
        "train_time": {"kind": "constant", "value": 0.2},
        "staleness": {"kind": "sync"},
    },
    "algorithm": {"group_size": 4, "groups_per_step": 2, "optimizer": {"name": "adam", "lr": 0.3}},
    "run": {"steps": 20, "figures": False, "eval_every": 2},
}


def test_summary_json_holds_the_time_to_target_fields(tmp_path):
    from sandbox.run.runner import run_scenario

    res = run_scenario(validate_scenario(TINY), tmp_path / "run", force=True)
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    for key in (
        "target_metric",
        "target_level",
        "target_rule",
        "time_to_target",
        "steps_to_target",
        "samples_to_target",
        "tokens_to_target",
        "time_to_target_replicas",
        "time_to_target_reason",
    ):
        assert key in s, key
    # 0.9 x the worst replica's final value (the mean of its last 10 % of evaluations)
    with np.load(tmp_path / "run" / "replicas.npz") as npz:
        y = npz["eval__expected_reward"]
    finals = [v[np.isfinite(v)][-max(1, int(np.isfinite(v).sum() * 0.1)) :].mean() for v in y.T]
    assert s["target_level"] == pytest.approx(0.9 * min(finals))
    assert s["target_level"] <= 0.9 * s["final_expected_reward"] + 1e-12  # the worst replica is at most the mean
    assert "this synchronous run, its worst of 2 replicas" in s["target_rule"]
    assert s["time_to_target"] is not None and s["time_to_target_reason"] == ""
    assert s["time_to_target"] <= s["sim_time"] and s["tokens_to_target"] > 0  # bit strings train on tokens
    # an unreachable absolute target: null with a reason
    res = run_scenario(validate_scenario(dict(TINY, run=dict(TINY["run"], target={"reward": 1.5}))), force=True)
    assert res.summary["time_to_target"] is None
    assert "2 of 2 replicas never reached 1.5" in res.summary["time_to_target_reason"]


def test_sandbox_run_prints_the_end_to_end_sentence(tmp_path):
    from sandbox.cli import app

    data = dict(
        TINY,
        variants={
            "sync": {"system.staleness": {"kind": "sync"}},
            "async": {"system.staleness": {"kind": "max_lag", "k_max": 2}},
        },
    )
    path = tmp_path / "tiny.toml"
    path.write_text(tomli_w.dumps(data))
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["run", str(path), "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "target: eval/expected_reward ≥ 0.9 ×" in text and "synchronous variant 'sync'" in text
    assert "async reaches" in text and "s synchronous:" in text and "end to end" in text
    sync = json.loads((out / "sync" / "summary.json").read_text())
    asyn = json.loads((out / "async" / "summary.json").read_text())
    assert sync["speedup_vs_sync"] == pytest.approx(1.0) and asyn["speedup_baseline"] == "sync"
    assert asyn["target_level"] == pytest.approx(sync["target_level"])
    assert asyn["speedup_vs_sync"] == pytest.approx(sync["time_to_target"] / asyn["time_to_target"])


def test_sweep_results_match_each_configuration_to_its_synchronous_baseline(tmp_path):
    from sandbox.sweep.api import load_results, load_time_to_target, parse_sweep, run_sweep
    from sandbox.sweep.results import run_dir

    raw = {
        "base": TINY,
        "seeds": [0, 1],
        "sweep": {"name": "ttt"},
        "grid": {
            "system.staleness": [{"kind": "sync"}, {"kind": "fixed_lag", "k": 2}],
            "algorithm.optimizer.lr": [0.1, 0.3],
        },
    }
    run_sweep(parse_sweep(raw), tmp_path / "sw", workers=1, progress=False)
    df = load_results(tmp_path / "sw")
    for col in (
        "time_to_target",
        "speedup_vs_sync",
        "speedup_ci_low",
        "speedup_ci_high",
        "throughput_gain_vs_sync",
        "sample_efficiency_vs_sync",
        "speedup_reason",
        "speedup_baseline",
    ):
        assert col in df.columns, col
    table = load_time_to_target(tmp_path / "sw")
    by = table.set_index("configuration")
    assert list(by.index) == [
        "staleness=sync, lr=0.1",
        "staleness=sync, lr=0.3",
        "staleness={kind=fixed_lag, k=2}, lr=0.1",
        "staleness={kind=fixed_lag, k=2}, lr=0.3",
    ]
    for lr in ("0.1", "0.3"):
        c, b = f"staleness={{kind=fixed_lag, k=2}}, lr={lr}", f"staleness=sync, lr={lr}"
        assert by.loc[c, "baseline"] == b and by.loc[b, "baseline"] == b  # same learning rate, not the other one
        assert by.loc[b, "synchronous"] and not by.loc[c, "synchronous"]
        base_runs = [
            Curves.from_run_dir(run_dir(tmp_path / "sw", i))
            for i in df[df["system.staleness"] == "sync"].loc[lambda d: d["algorithm.optimizer.lr"] == float(lr), "id"]
        ]
        assert by.loc[c, "target_level"] == pytest.approx(0.9 * min(x.reference() for x in base_runs))  # worst unit
        assert by.loc[b, "reached_units"] == "4/4"  # the baseline reaches its own target
        assert by.loc[c, "speedup_vs_sync"] == pytest.approx(by.loc[b, "time_to_target"] / by.loc[c, "time_to_target"])
        assert by.loc[c, "speedup_ci_low"] <= by.loc[c, "speedup_vs_sync"] <= by.loc[c, "speedup_ci_high"]
        assert by.loc[b, "speedup_vs_sync"] == pytest.approx(1.0)
        # per run: the configuration's speed-up on every seed, its own time-to-target against the common target
        runs = df[(df["algorithm.optimizer.lr"] == float(lr)) & (df["system.staleness"] != "sync")]
        assert len(runs) == 2 and (runs.speedup_vs_sync == by.loc[c, "speedup_vs_sync"]).all()
        assert runs.time_to_target.mean() == pytest.approx(by.loc[c, "time_to_target"])  # 2 replicas per seed


def test_sandbox_sweep_prints_time_to_target_and_the_sentence(tmp_path):
    from sandbox.cli import app
    from sandbox.sweep.api import load_time_to_target

    raw = {
        "base": TINY,
        "seeds": [0, 1],
        "sweep": {"name": "ttt_cli"},
        "grid": {"system.staleness": [{"kind": "sync"}, {"kind": "fixed_lag", "k": 2}]},
    }
    path = tmp_path / "sweep.toml"
    path.write_text(tomli_w.dumps(raw))
    res = CliRunner().invoke(app, ["sweep", str(path), "--out", str(tmp_path / "sw"), "-q"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "to target (s)" in text and "end to end vs sync" in text
    by = load_time_to_target(tmp_path / "sw").set_index("configuration")
    c = "{kind=fixed_lag, k=2}"  # one swept key: the configuration is named by its value alone
    assert f"{by.loc[c, 'speedup_vs_sync']:.2f}x" in text  # the table shows the configuration's speed-up
    assert f"{c} reaches" in text and "synchronous:" in text and "end to end" in text
