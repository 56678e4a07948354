"""Drop bias (sandbox.analysis.drop_bias, the ``drop_bias`` claim): hand values, and the measurement
fails when drops do not select by length."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sandbox.analysis.drop_bias import drop_bias, ks_distance
from sandbox.claims import drop_bias as claim


def _jobs(consumed: list[int], dropped: list[int], buffered: list[int] = ()) -> pd.DataFrame:
    rows = [{"job": j, "consume_step": 0, "dropped_at": -1} for j in consumed]
    rows += [{"job": j, "consume_step": -1, "dropped_at": 3} for j in dropped]
    rows += [{"job": j, "consume_step": -1, "dropped_at": -1} for j in buffered]
    return pd.DataFrame(rows).sort_values("job").reset_index(drop=True)


def test_hand_values():
    # consumed groups 0, 1 (lengths 1,3 and 2,2), dropped group 2 (lengths 10, 6); group 3 still buffered
    lengths = {0: [1, 3], 1: [2, 2], 2: [10, 6], 3: [100, 100]}
    d = drop_bias(_jobs([0, 1], [2], [3]), lengths)
    assert d["groups_decided"] == 3 and d["groups_dropped"] == 1
    assert d["dropped_fraction"] == pytest.approx(1 / 3)
    # generated = 1,3,2,2,10,6: mean 4; consumed = 1,3,2,2: mean 2 -> bias 2/4 - 1 = -0.5
    assert d["length_generated_mean"] == 4.0 and d["length_consumed_mean"] == 2.0 and d["length_dropped_mean"] == 8.0
    assert d["length_bias"] == -0.5
    # longest per group 3, 2, 10: median 3; long (> 3) = {2}: dropped 1/1; short = {0, 1}: 0/2
    assert d["dropped_fraction_long"] == 1.0 and d["dropped_fraction_short"] == 0.0
    # inverted-CDF quantiles of 1,2,2,3,6,10: p50 = 2 (3rd of 6), p90 = 10, consumed p50 = 2
    assert d["length_generated_p50"] == 2.0 and d["length_generated_p90"] == 10.0 and d["length_consumed_p50"] == 2.0
    # F_consumed reaches 1 at 3 while F_generated(3) = 4/6: KS = 1/3
    assert d["length_ks"] == pytest.approx(1 / 3)


def test_no_drops_no_bias_and_missing_lengths_named():
    d = drop_bias(_jobs([0, 1], []), {0: [5, 7], 1: [1, 9]})
    assert d["length_bias"] == 0.0 and d["length_ks"] == 0.0 and d["dropped_fraction"] == 0.0
    assert math.isnan(d["length_dropped_mean"])
    with pytest.raises(ValueError, match=r"lengths: no response lengths for job\(s\) \[1\]"):
        drop_bias(_jobs([0, 1], []), {0: [5, 7]})


def test_ks_distance_hand_value():
    assert ks_distance(np.array([1.0, 2.0]), np.array([3.0, 4.0])) == 1.0
    assert ks_distance(np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 2.0, 3.0, 4.0])) == 0.0
    assert math.isnan(ks_distance(np.array([]), np.array([1.0])))


def test_engine_run_drops_long_groups_and_shuffled_lengths_show_no_bias():
    """A drop run on engines is biased toward short responses; the same drops with the lengths shuffled
    among the decided groups (drops that ignore length) are not: the claim's row fails there."""
    cfg, B, G = claim.system(2)
    from sandbox.system.timing_only import simulate_timing

    res = simulate_timing(cfg, 300, B, G, seed=0, record_events=False)
    jobs = res.jobs.to_frame()
    d = drop_bias(jobs, res.lengths)
    assert d["dropped_fraction"] > 0.1
    assert d["length_bias"] < claim.MATERIAL
    decided = jobs.loc[(jobs.consume_step >= 0) | (jobs.dropped_at >= 0), "job"].to_numpy()
    perm = np.random.default_rng(0).permutation(decided)
    shuffled = {int(a): res.lengths[int(b)] for a, b in zip(decided, perm)}
    s = drop_bias(jobs, shuffled)
    # sampling error of a mean over ~2400 log-normal(σ = 1) lengths: sd/mean ≈ 1.3/√2400 ≈ 0.027 on the
    # dropped ~30% vs the rest: |bias| below 0.05 is about 2 sd of the shuffled difference
    assert abs(s["length_bias"]) < abs(claim.MATERIAL)


def test_runner_summary_has_drop_bias_for_an_engine_drop_run():
    from sandbox.run.runner import run_scenario
    from sandbox.scenario.api import load_scenario
    from sandbox.scenario.shipped import shipped_root

    scn, _ = load_scenario(
        shipped_root() / "max_lag_drop.toml",
        overrides={
            "system.worker_speeds": None,
            "run.steps": 20,
            "system.generation_time": {
                "kind": "continuous_batching",
                "length_median": 50,
                "length_sigma": 1.0,
                "max_tokens": 400,
            },
            "system.staleness": {"kind": "max_lag", "k_max": 1, "enforcement": "drop"},
        },
    )
    result = run_scenario(scn)
    db = result.summary["drop_bias"]
    assert db["groups_decided"] == int(((result.jobs.consume_step >= 0) | (result.jobs.dropped_at >= 0)).sum())
    assert db["groups_dropped"] == result.summary["dropped"]


def test_by_prompt_hand_values():
    # prompts: job j answers prompt j % 3; prompt 2 is long and always dropped, prompt 0 short and never
    lengths = {0: [1, 1], 1: [5, 5], 2: [9, 9], 3: [1, 1], 4: [5, 5], 5: [9, 9]}
    d = drop_bias(_jobs([0, 1, 3], [2, 4, 5]), lengths, prompt_of=lambda j: j % 3)
    # per prompt: mean length 1, 5, 9; dropped fraction 0, 1/2, 1: ranks agree, Spearman 1
    assert d["prompt_spearman"] == pytest.approx(1.0)
    assert d["prompts_never_consumed"] == pytest.approx(1 / 3)  # prompt 2
    assert "prompt_spearman" not in drop_bias(_jobs([0, 1, 3], [2, 4, 5]), lengths)
