"""Engines draw from the sampling stream only: a run is bitwise reproducible, and under independent
schedules replica r is the separate run with seed run.seed + r, engine noise included."""

from __future__ import annotations

import numpy as np
import pytest

from sandbox.run.runner import run_scenario
from sandbox.scenario.api import validate_scenario


def scenario(replicas: int, seed: int, schedules: str, task: str, engine: dict) -> dict:
    cfg = {"name": task, "replicas": replicas}
    cfg.update({"num_arms": 6} if task == "bandit" else {"horizon": 5})
    return {
        "task": cfg,
        "engine": engine,
        "system": {
            "num_workers": 3,
            "generation_time": {"kind": "exponential", "mean": 1.0},
            "staleness": {"kind": "max_lag", "k_max": 2},
        },
        "algorithm": {"group_size": 4, "groups_per_step": 2, "optimizer": {"name": "adam", "lr": 0.1}},
        "run": {"steps": 12, "seed": seed, "figures": False, "eval_every": 3, "schedules": schedules},
    }


@pytest.mark.parametrize(
    "task,engine",
    [
        ("bandit", {"name": "logit_noise", "scale": 0.3, "tail": "student_t", "drift": 0.01}),
        ("bitstring", {"name": "processed_logprobs", "temperature": 1.3, "top_k": 1}),
        ("bitstring", {"name": "logit_noise", "scale": 0.3, "position_slope": 0.2}),
    ],
)
def test_independent_replicas_are_separate_runs_with_an_engine(task, engine):
    batched = run_scenario(validate_scenario(scenario(2, 5, "independent", task, engine)), force=True)
    assert "mismatch/kl_k3" in batched.replica_metrics
    for r in range(2):
        alone = run_scenario(validate_scenario(scenario(1, 5 + r, "shared", task, engine)), force=True)
        for key, values in alone.replica_metrics.items():
            np.testing.assert_array_equal(
                batched.replica_metrics[key][:, r], values[:, 0], err_msg=f"replica {r}: {key}"
            )
    again = run_scenario(validate_scenario(scenario(2, 5, "independent", task, engine)), force=True)
    for key, values in batched.replica_metrics.items():
        np.testing.assert_array_equal(values, again.replica_metrics[key], err_msg=key)
