"""``sandbox preflight`` Q3/Q4/Q7 (sandbox/preflight/system.py): cluster facts from each framework's keys
(hand values), the trainer grid, the verdict thresholds, and a TRL config end to end (--quick, 2 seeds)
through the CLI: the three outputs, Q3/Q4/Q7 with numbers that agree with their own rows, and the page
in headless Chromium."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from sandbox.importers.api import import_config
from sandbox.preflight import questions as P
from sandbox.preflight.system import (
    SystemPlanError,
    bias_verdict,
    cluster_facts,
    mean_length,
    model_from_name,
    trainer_grid,
)

DATA = Path(__file__).resolve().parents[1] / "importers" / "data"
TRL = DATA / "trl_async_grpo.json"


@pytest.mark.parametrize(
    "name, key",
    [
        ("Qwen/Qwen2.5-3B-Instruct", "qwen2.5-3b"),
        ("Qwen/Qwen2.5-Math-7B", "qwen2.5-7b"),
        ("Qwen/Qwen2.5-32B", "qwen2.5-32b"),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama3.1-8b"),
        ("OpenRLHF/Llama-3-8b-sft-mixture", None),  # Llama 3, not 3.1: not guessed
        ("PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT", None),
    ],
)
def test_model_from_name(name, key):
    assert model_from_name(name) == key


def test_trainer_grid_leaves_no_gpu_idle():
    assert trainer_grid(8, 2, 4) == [2, 4, 6]  # 8 - 2e
    assert trainer_grid(8, 1, 7) == [1, 2, 3, 4, 5, 6, 7]
    assert trainer_grid(64, 1, 7) == [1, 2, 4, 8, 16, 32, 63]
    assert trainer_grid(8, 1, 4, include=5) == [1, 2, 4, 5, 7]


@pytest.mark.parametrize(
    "config, fw, expect",
    [
        (
            "verl_gsm8k_async.yaml",
            "verl",
            {"gpus": 8, "tp": 2, "model": "qwen2.5-3b", "max_tokens": 1024, "trainer_gpus": None},
        ),
        (
            "openrlhf_async_reinforce.sh",
            "openrlhf",
            {"gpus": 16, "tp": 2, "model": None, "max_tokens": 1024, "trainer_gpus": 8},
        ),
        (
            "areal_gsm8k_grpo.yaml",
            "areal",
            {"gpus": 8, "tp": 1, "model": "qwen2.5-1.5b", "max_tokens": 1024, "trainer_gpus": 4},
        ),
        (
            "trl_async_grpo.json",
            "trl",
            {"gpus": None, "tp": 1, "model": None, "max_tokens": 4096, "trainer_gpus": None},
        ),
    ],
)
def test_cluster_facts_from_the_config(config, fw, expect):
    imp = import_config(DATA / config, fw)
    f = cluster_facts(imp.rows, fw, {})
    assert {k: getattr(f, k) for k in expect} == expect
    assert f.gpu == "H100" and "assumed" in f.source["gpu"]
    if expect["gpus"] is None:
        assert any("--gpus" in m for m in f.missing)
    if expect["model"] is None:
        assert any("--model" in m for m in f.missing)


def test_flags_win_and_bad_flags_are_named():
    imp = import_config(DATA / "verl_gsm8k_async.yaml", "verl")
    f = cluster_facts(imp.rows, "verl", {"gpus": 16, "model": "qwen2.5-7b", "gpu": "H200"})
    assert (f.gpus, f.model, f.gpu, f.source["gpus"]) == (16, "qwen2.5-7b", "H200", "--gpus")
    with pytest.raises(SystemPlanError, match="--gpu"):
        cluster_facts(imp.rows, "verl", {"gpu": "B200"})
    with pytest.raises(SystemPlanError, match="--model"):
        cluster_facts(imp.rows, "verl", {"model": "gpt-5"})
    with pytest.raises(SystemPlanError, match="--gpus"):
        cluster_facts(imp.rows, "verl", {"gpus": 2})  # tp 2 from the config leaves no trainer GPU


def test_missing_facts_leave_q3_q4_q7_unanswered_naming_the_flag():
    imp = import_config(TRL, "trl")
    f = cluster_facts(imp.rows, "trl", {})
    plan = P.make_plan(imp.data, quick=True, framework="trl", facts=f)
    assert plan.system is None
    ans = P.system_answers(plan, None)
    assert all(
        ans[q]["verdict"] == "not answered" and "--gpus" in ans[q]["why"] and "--model" in ans[q]["why"]
        for q in ("Q3", "Q4", "Q7")
    )


def test_bias_verdict_thresholds():
    assert bias_verdict([-0.12, -0.15, -0.09]) == "biased toward short responses"
    assert bias_verdict([0.0, 0.0, 0.0]) == "negligible"
    assert bias_verdict([-0.01, -0.03, 0.02]) == "negligible"
    assert bias_verdict([-0.06, -0.2, 0.05]).startswith("inconclusive")  # mean past the threshold, interval reaches 0
    assert bias_verdict([-0.03, -0.07, 0.01]).startswith("inconclusive")  # interval reaches past -0.05
    assert bias_verdict(None) == "not measured"


def _lengths(**kw):
    from types import SimpleNamespace

    from sandbox.system.delays.continuous_batching import ContinuousBatchingDelay

    gen = ContinuousBatchingDelay(**kw)
    return SimpleNamespace(scenario=SimpleNamespace(system=SimpleNamespace(generation_time=gen)))


def test_no_tail_rerun_keeps_the_mean_length():
    """Q4's "no tail" rerun gives every response the mean length of the cut log-normal, not its median
    (which would also cut the work to generate). Hand values: E[min(m·e^{σZ}, M)] =
    m·e^{σ²/2}·Φ((ln(M/m) − σ²)/σ) + M·(1 − Φ(ln(M/m)/σ)); 400,000 draws give it within 0.5%
    (relative standard error ≤ 0.2%)."""
    phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    assert mean_length(_lengths(length_median=300.0)) == 300.0
    for m, sigma, cut in ((1000.0, 1.0, 4096), (256.0, 1.0, 8192), (500.0, 0.5, 600)):
        u = math.log(cut / m)
        exact = m * math.exp(sigma**2 / 2) * phi((u - sigma**2) / sigma) + cut * (1 - phi(u / sigma))
        got = mean_length(_lengths(length_median=m, length_sigma=sigma, max_tokens=cut))
        assert abs(got / exact - 1) < 0.005, (m, sigma, cut, got, exact)
    assert mean_length(_lengths(length_median=1000.0, length_sigma=1.0, max_tokens=4096)) > 1400  # not the median


@pytest.fixture(scope="module")
def trl_run(tmp_path_factory):
    from typer.testing import CliRunner

    from sandbox.cli import app

    out = tmp_path_factory.mktemp("pf") / "trl"
    res = CliRunner().invoke(
        app,
        [
            "preflight",
            str(TRL),
            "-f",
            "trl",
            "--quick",
            "--seeds",
            "2",
            "--gpus",
            "8",
            "--model",
            "qwen2.5-7b",
            "--out",
            str(out),
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    return out, res.output


def test_trl_end_to_end_answers_q3_q4_q7(trl_run):
    out, console = trl_run
    body = json.loads((out / "preflight.json").read_text())
    q3, q4, q7 = body["Q3"], body["Q4"], body["Q7"]
    # Q3: the best split is the row with the most samples/s, a split of the 8 GPUs
    best = max(q3["rows"], key=lambda r: r["samples_per_s"])
    assert (q3["best"]["trainer_gpus"], q3["best"]["concurrency"]) == (best["trainer_gpus"], best["concurrency"])
    assert all(1 <= r["trainer_gpus"] <= 7 and r["trainer_gpus"] + r["engines"] == 8 for r in q3["rows"])
    # Q4: the speed-up is the mean of the per-seed ratios, and the ratio of the two best rows' means within
    # the spread of the per-seed ratios (mean of ratios vs ratio of means)
    ratios = q4["per_seed"]
    assert len(ratios) == q3["seeds"] and math.isclose(q4["speedup"][0], sum(ratios) / len(ratios), rel_tol=1e-12)
    sync_best = max(q3["rows_synchronous"], key=lambda r: r["samples_per_s"])
    assert min(ratios) - 1e-9 <= best["samples_per_s"] / sync_best["samples_per_s"] <= max(ratios) + 1e-9
    assert q4["speedup"][1] <= q4["speedup"][0] <= q4["speedup"][2]
    for key in ("speedup_no_tail", "speedup_no_sync_cost"):
        assert math.isfinite(q4[key][0]) and q4[key][0] > 0
    # Q7: a verdict from the measured length bias at the user's bound and policy
    assert q7["bound"] == 2 and q7["enforcement"] == "drop"
    assert q7["verdict"] == bias_verdict(q7["summary"]["length_bias"])
    assert "length_bias" in q7["most_dropping"]["summary"] and "prompt_spearman" in q7["problems"]
    md = (out / "preflight.md").read_text()
    for head in ("## Q3: trainer/rollout split", "## Q4: expected end-to-end speed-up", "## Q7: does dropping"):
        assert head in md
    assert f"×{q4['speedup'][0]:.3g}" in md and "--model" in md and "Sources:" in md
    assert "Q3:" in console and "Q4: ×" in console and "Q7:" in console


def test_trl_page_in_chromium(trl_run):
    out, _ = trl_run
    for name in ("q1_stability.png", "q2_ess.png", "q5_gap.png", "q3_split.png"):
        assert (out / name).stat().st_size > 0
    chromium = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    res = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", (out / "preflight.html").as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    dom = res.stdout
    assert dom.count("<img") == 4, dom.count("<img")
    for head in ("Q3: trainer/rollout split", "Q4: expected end-to-end speed-up", "Q7: does dropping"):
        assert head in dom


def test_qwen25_3b_hand_values():
    from sandbox.system.hardware import MODELS

    m = MODELS["qwen2.5-3b"]  # Qwen/Qwen2.5-3B config.json: 36 layers, 2 KV heads, head dim 2048 / 16 = 128
    assert m.kv_bytes_per_token() == 2 * 36 * 2 * 128 * 2 == 36864
    assert m.weight_bytes() == 6.18e9


def test_split_run_drop_bias_matches_its_own_counts():
    from sandbox.plan.split import SplitOptions, simulate_split, split_configurations

    imp = import_config(DATA / "verl_gsm8k_async.yaml", "verl")
    cfg = split_configurations(
        imp.data,
        "t",
        SplitOptions(
            gpus=8, model="qwen2.5-3b", tp=2, trainer_gpus=[2], concurrency=[256], length_median=256, max_tokens=1024
        ),
    )[0]
    m = simulate_split(cfg, 6, 0, with_drop_bias=True)
    assert m.drop_bias["groups_dropped"] == m.dropped > 0
    assert m.drop_bias["groups_decided"] == m.dropped + m.consumed
    assert simulate_split(cfg, 6, 0).drop_bias is None
