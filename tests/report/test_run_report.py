"""The report of a `sandbox run` output: baseline first, spread over replicas, captions, About and a
summary generated from the measurements (fastest end to end, divergence, ESS alerts)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from sandbox.report.api import write_report


def _run(d, label, speedup=None, diverged=0, ess_min=0.95, reward=0.9):
    d.mkdir(parents=True)
    steps = 20
    ess = np.full(steps, 0.97)
    ess[3:6] = ess_min
    pd.DataFrame({"step": np.arange(steps), "time": np.arange(steps) * 1.0, "is/ess_ratio": ess}).to_parquet(
        d / "metrics.parquet"
    )
    rewards = np.tile(np.linspace(0, reward, steps)[:, None], (1, 4)) + np.array([0.0, 0.01, 0.02, 0.03])
    np.savez(d / "replicas.npz", eval__expected_reward=rewards)
    (d / "scenario.toml").write_text('title = "t"\ndescription = "A hand-made run for the report test."\n')
    summary = {
        "title": "hand-made",
        "status": "diverged" if diverged else "completed",
        "replicas": 4,
        "diverged_replicas": diverged,
        "diverged_at": [7] * diverged + [-1] * (4 - diverged),
        "final_reward": reward,
        "final_expected_reward": reward,
        "throughput_samples_per_s": 10.0,
        "staleness_mean": 1.0,
        "staleness_max": 2,
        "ess_ratio_mean": float(ess.mean()),
        "grad_cos_mean": 0.1,
        "target_metric": "eval/expected_reward",
        "target_level": 0.5,
        "target_rule": "≥ 0.5",
        "time_to_target": 10.0 / (speedup or 1.0),
        "time_to_target_replicas": [10.0 / (speedup or 1.0)] * 4,
        "speedup_vs_sync": speedup,
        "speedup_ci_low": speedup and speedup * 0.9,
        "speedup_ci_high": speedup and speedup * 1.1,
        "throughput_gain_vs_sync": speedup and 3.0,
        "speedup_baseline": "sync",
    }
    (d / "summary.json").write_text(json.dumps(summary))


def test_run_report_puts_the_baseline_first_and_writes_what_the_numbers_show(tmp_path):
    _run(tmp_path / "async", "async", speedup=2.0)
    _run(tmp_path / "sync", "sync", speedup=1.0)
    _run(tmp_path / "unstable", "unstable", speedup=0.5, diverged=1, ess_min=0.3)
    page = write_report(tmp_path).read_text()
    body = page.split('id="summary"')[1]
    assert body.index(">sync<") < body.index(">async<") < body.index(">unstable<")
    assert "A hand-made run for the report test." in page  # About
    assert "Generated from the measurements" in page
    assert "<b>async</b>, 2× faster end to end than <b>sync</b>" in page
    assert "<b>unstable</b> diverged in 1 of 4 replicas (first at step 7)" in page
    assert "<b>unstable</b>: ESS / N fell below 0.5 at step 3 (minimum 0.3; 3 of 20 steps below)" in page
    assert "<b>async</b>: ESS / N fell below" not in page
    # the final reward is the mean ± std over the 4 replicas of the last 10% of steps
    last = np.linspace(0, 0.9, 20)[-2:].mean() + np.array([0.0, 0.01, 0.02, 0.03])
    assert f"{last.mean():.4g} ± {last.std(ddof=1):.2g}" in page
    assert "2× [1.8, 2.2]" in page
