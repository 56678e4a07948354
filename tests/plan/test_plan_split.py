"""``sandbox plan --gpus N`` (sandbox.plan.split, docs/plan.md#gpu-split): configurations,
hand values, errors naming the option, determinism, the command's outputs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from sandbox.base.errors import ScenarioError
from sandbox.cli import app
from sandbox.plan.split import (
    LEARN_COLUMNS,
    SplitOptions,
    SplitTrainer,
    best_learned,
    best_split,
    kv_capacity,
    run_split,
    split_configurations,
)
from sandbox.scenario.api import load_scenario
from sandbox.scenario.shipped import shipped_root

SCENARIO = shipped_root() / "max_lag.toml"  # B = 8 groups of G = 8, max_lag k_max = 4 (throttle)


def _raw():
    return load_scenario(SCENARIO)[1]


def test_kv_capacity_hand_value():
    # H100: 0.9 * 80e9 = 72e9 bytes; Qwen2.5-7B weights 2 * 7.61e9 = 15.22e9; KV 2*28*4*128*2 = 57344 B/token
    assert kv_capacity("H100", "qwen2.5-7b", 1) == math.floor((72e9 - 15.22e9) / 57344) == 990164
    assert kv_capacity("A100", "llama3.1-70b", 1) < 1  # 141 GB of weights on one 80 GB GPU


def test_configurations_split_the_gpus_and_spread_groups_over_engines():
    configs = split_configurations(_raw(), "max_lag", SplitOptions(gpus=4, concurrency=[64, 256], k_max=2))
    assert [(c.trainer_gpus, c.engines, c.concurrency) for c in configs] == [
        (1, 3, 64),
        (1, 3, 256),
        (2, 2, 64),
        (2, 2, 256),
        (3, 1, 64),
        (3, 1, 256),
    ]
    by = {c.label: c.scenario.system for c in configs}
    s = by["t=2,c=64"]
    assert s.train_time.kind == "hardware" and s.train_time.gpus == 2
    assert s.generation_time.kind == "continuous_batching" and s.generation_time.max_sequences == 64
    assert s.staleness.kind == "max_lag" and s.staleness.k_max == 2
    # 64 // 8 = 8 slots per engine: 2 engines x 8 = 16 workers, below the (2 + 1) * 8 = 24 admitted groups
    assert s.generation_time.workers_per_engine == 8 and s.num_workers == 16
    # 256 // 8 = 32 slots, but at most 24 groups run at once: ceil(24 / 3) = 8 per engine on 3 engines
    t1 = by["t=1,c=256"]
    assert t1.generation_time.workers_per_engine == 8 and t1.num_workers == 24
    # default lengths (the scenario has no engine length model)
    assert (s.generation_time.length_median, s.generation_time.length_sigma, s.generation_time.max_tokens) == (
        1000.0,
        1.0,
        8192,
    )


@pytest.mark.parametrize(
    "opts, option",
    [
        (SplitOptions(gpus=1), "--gpus"),
        (SplitOptions(gpus=4, concurrency=[4]), "--concurrency"),
        (SplitOptions(gpus=4, trainer_gpus=[4]), "--trainer-gpus"),
        (SplitOptions(gpus=4, gpu="H100", model="llama3.1-70b"), "--model"),
        (SplitOptions(gpus=4, gpu="B200"), "--gpu"),
    ],
)
def test_bad_options_name_the_option(opts, option):
    with pytest.raises(ScenarioError, match=f"- {option}: ") as exc:
        split_configurations(_raw(), "max_lag", opts)
    assert option in str(exc.value)


def test_trainer_charges_prompt_and_response_tokens():
    class J:
        def __init__(self, i):
            self.id = i

    tr = SplitTrainer(prompt_tokens=10, passes=2)
    tr.lengths = {0: [5, 7], 1: [1, 1]}
    res = tr.train(0, [J(0), J(1)], 0.0)
    assert (res.weights, res.tokens, res.passes, tr.response_tokens) == (1, 14 + 10 * 4, 2, 14)


def test_run_is_deterministic_and_more_trainer_gpus_help_a_trainer_bound_split():
    opts = SplitOptions(gpus=4, concurrency=[64], k_max=2, trainer_gpus=[1, 2])
    a = run_split(_raw(), "max_lag", opts, seeds=2, steps=15)
    b = run_split(_raw(), "max_lag", opts, seeds=2, steps=15)
    assert a.rows == b.rows and a.per_seed == b.per_seed
    one, two = a.rows
    # train step time halves with twice the GPUs (FLOPs / (gpus * peak * MFU)), up to the tokens drawn
    assert one["train_step_s"] / two["train_step_s"] == pytest.approx(2.0, rel=0.15)
    assert a.best["trainer_gpus"] in (1, 2) and "margin" in a.best


def test_best_split_paired_margin_hand_values():
    rows = [
        {
            "trainer_gpus": 1,
            "concurrency": 64,
            "samples_per_s": 2.0,
            "samples_per_s_low": 1.0,
            "samples_per_s_high": 3.0,
        },
        {
            "trainer_gpus": 1,
            "concurrency": 128,
            "samples_per_s": 2.0,
            "samples_per_s_low": 1.0,
            "samples_per_s_high": 3.0,
        },
        {
            "trainer_gpus": 2,
            "concurrency": 64,
            "samples_per_s": 1.0,
            "samples_per_s_low": 0.5,
            "samples_per_s_high": 1.5,
        },
    ]
    per_seed = {"t=1,c=64": [2.0, 2.2, 1.8], "t=1,c=128": [2.0, 2.2, 1.8], "t=2,c=64": [1.0, 1.1, 0.9]}
    b = best_split(rows, per_seed)
    # a tie goes to the smaller concurrency; the runner-up has another trainer GPU count
    assert (b["trainer_gpus"], b["concurrency"], b["runner_up_trainer_gpus"]) == (1, 64, 2)
    assert b["margin"] == pytest.approx(1.0) and b["distinguishable"]


def test_command_writes_the_split(tmp_path: Path):
    out = tmp_path / "split"
    r = CliRunner().invoke(
        app,
        [
            "plan",
            str(SCENARIO),
            "--gpus",
            "3",
            "--concurrency",
            "64",
            "--k-max",
            "2",
            "--seeds",
            "2",
            "--steps",
            "12",
            "--out",
            str(out),
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "best split:" in r.output
    frame = pd.read_csv(out / "split.csv")
    assert list(frame.trainer_gpus) == [1, 2]
    data = json.loads((out / "split.json").read_text())
    assert data["gpus"] == 3 and data["best"]["trainer_gpus"] in (1, 2)
    assert (out / "figures" / "split.png").stat().st_size > 0


@pytest.mark.parametrize("extra, option", [(["--k-max", "1,2"], "--k-max"), (["--workers", "8"], "--workers")])
def test_command_refuses_what_the_split_cannot_do(tmp_path, extra, option):
    r = CliRunner().invoke(app, ["plan", str(SCENARIO), "--gpus", "3", "--out", str(tmp_path / "x"), "-q", *extra])
    assert r.exit_code == 2 and option in r.output


def test_split_keeps_the_scenarios_structured_lengths():
    raw = load_scenario(
        SCENARIO,
        {
            "system.worker_speeds": None,
            "system.generation_time": {
                "kind": "continuous_batching",
                "length_median": 300,
                "length_sigma": 0.5,
                "max_tokens": 2000,
                "prompts": 50,
                "prompt_sigma": 0.6,
                "length_trend": 0.01,
                "tail_alpha": 1.5,
            },
        },
    )[1]
    (c,) = split_configurations(raw, "max_lag", SplitOptions(gpus=2, concurrency=[64], length_sigma=0.3))
    g = c.scenario.system.generation_time
    assert (g.length_median, g.length_sigma, g.max_tokens) == (300, 0.3, 2000)  # the option overrides sigma
    assert (g.prompts, g.prompt_sigma, g.length_trend, g.tail_alpha) == (50, 0.6, 0.01, 1.5)


def test_best_learned_by_hand():
    row = lambda t, c, m, lo, hi: {
        "trainer_gpus": t,
        "concurrency": c,
        "time_to_target": m,  # noqa: E731
        "time_to_target_ci_low": lo,
        "time_to_target_ci_high": hi,
    }
    rows = [
        row(1, 64, 100.0, 90.0, 110.0),
        row(1, 128, None, None, None),
        row(2, 64, 105.0, 95.0, 115.0),
        row(3, 64, 200.0, 190.0, 210.0),
    ]
    b = best_learned(rows)
    assert (b["trainer_gpus"], b["concurrency"], b["time_to_target"]) == (1, 64, 100.0)
    assert (b["runner_up_trainer_gpus"], b["runner_up_time_to_target"]) == (2, 105.0)
    assert not b["distinguishable"]  # [90, 110] and [95, 115] overlap
    rows[2] = row(2, 64, 150.0, 140.0, 160.0)
    assert best_learned(rows)["distinguishable"]  # 110 < 140
    assert best_learned([row(1, 64, None, None, None)]) == {}  # no configuration reached the target


def test_command_learns_the_split(tmp_path: Path):
    out = tmp_path / "split"
    args = [
        "plan",
        str(SCENARIO),
        "--gpus",
        "3",
        "--concurrency",
        "64",
        "--k-max",
        "2",
        "--seeds",
        "2",
        "--steps",
        "12",
        "--learn",
        "--learn-seeds",
        "2",
        "--learn-steps",
        "40",
        "--out",
        str(out),
        "-q",
    ]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "best split by time to target:" in r.output
    frame = pd.read_csv(out / "split.csv")
    assert set(LEARN_COLUMNS) <= set(frame.columns) and list(frame.reached_units) == ["2/2", "2/2"]
    assert frame.target_level.nunique() == 1  # one target level for every split
    data = json.loads((out / "split.json").read_text())
    best = data["best_by_time_to_target"]
    fastest = frame.loc[frame.time_to_target.idxmin()]
    assert (best["trainer_gpus"], best["time_to_target"]) == (
        fastest.trainer_gpus,
        pytest.approx(fastest.time_to_target),
    )
    assert best["time_to_target_ci_low"] <= best["time_to_target"] <= best["time_to_target_ci_high"]
    again = CliRunner().invoke(app, [*args[:-3], "--out", str(tmp_path / "again"), "-q"])
    assert again.exit_code == 0 and pd.read_csv(tmp_path / "again" / "split.csv").equals(frame)  # deterministic
