"""End-to-end runs: real learning through the event schedule, divergence recorded as a result."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from sandbox.run.runner import run_scenario
from sandbox.scenario.api import validate_scenario


def quadratic(lr: float, k: int, steps: int = 400, replicas: int = 2, **run):
    return validate_scenario(
        {
            "task": {
                "name": "quadratic",
                "dim": 50,
                "eig_min": 0.1,
                "eig_max": 1.0,
                "noise_std": 0.0,
                "replicas": replicas,
            },
            "system": {
                "num_workers": k + 1,
                "generation_time": {"kind": "constant", "value": 1.0},
                "train_time": {"kind": "constant", "value": 0.0},
                "staleness": {"kind": "fixed_lag", "k": k},
            },
            "algorithm": {"group_size": 1, "groups_per_step": 1, "optimizer": {"name": "sgd", "lr": lr}},
            "run": {"steps": steps, "figures": False, "max_loss": 1e6, **run},
        }
    )


def test_delayed_sgd_through_the_simulator_follows_the_levin_may_threshold():
    """x_{t+1} = x_t − η ∇f(x_{t−k}) with λ_max = 1 and k = 4: a*(4) = 2 sin(π/18) = 0.3473.
    At 0.9·a* the loss decays, at 1.1·a* the run diverges (recorded, not raised)."""
    a_star = 2 * math.sin(math.pi / 18)
    stable = run_scenario(quadratic(0.9 * a_star, 4, steps=1200))
    unstable = run_scenario(quadratic(1.1 * a_star, 4, steps=1200))
    assert stable.status == "completed"
    assert stable.metrics["eval/loss"].iloc[-1] < 1e-3 * stable.metrics["eval/loss"].iloc[0]
    assert unstable.status == "diverged"
    assert (unstable.diverged_at >= 0).all()
    # the recorded staleness is the configured lag, produced by the timing
    assert unstable.metrics["staleness/mean"].iloc[10:].eq(4).all()


def test_diverged_run_keeps_results_and_writes_its_directory(tmp_path):
    res = run_scenario(quadratic(0.5, 4, steps=600), tmp_path / "run")
    assert res.status == "diverged"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "diverged"
    step = summary["diverged_at"][0]
    assert 0 < step < 600
    assert summary["steps_done"] == max(summary["diverged_at"]) + 1  # stopped when the last replica diverged
    assert len(res.metrics) == summary["steps_done"]


def test_one_diverging_replica_does_not_stop_the_others():
    """Replicas differ only in their initial point. With the weight-norm bound set between the
    replicas' norms after the first step, exactly the replicas above it are marked diverged at
    step 0 and the others keep learning to the end."""
    base = quadratic(0.1, 0, steps=40, replicas=4)
    first_norms = run_scenario(base).replica_metrics["param/norm"][0]
    bound = float(np.median(first_norms))
    scn = base.model_copy(update={"run": base.run.model_copy(update={"max_param_norm": bound})})
    res = run_scenario(scn)
    above = first_norms > bound
    assert 0 < above.sum() < 4
    assert res.status == "completed" and len(res.metrics) == 40
    np.testing.assert_array_equal(res.diverged_at >= 0, above)
    assert (res.diverged_at[above] == 0).all()
    assert res.metrics["replicas/alive"].iloc[-1] == pytest.approx(1 - above.mean())


@pytest.mark.parametrize(
    "task", [{"name": "bandit", "num_arms": 5}, {"name": "bitstring", "horizon": 8, "threshold": 0.75}]
)
def test_sync_grpo_learns_toy_tasks(task):
    scn = validate_scenario(
        {
            "task": {**task, "replicas": 4},
            "system": {"num_workers": 4, "staleness": {"kind": "sync"}},
            "algorithm": {"group_size": 8, "groups_per_step": 4, "optimizer": {"lr": 0.1}},
            "run": {"steps": 60, "figures": False, "eval_every": 59},
        }
    )
    res = run_scenario(scn)
    start = res.replica_metrics["eval/expected_reward"][0]
    end = res.replica_metrics["eval/expected_reward"][-1]
    assert (end > start + 0.2).all(), (start, end)


def test_on_policy_data_has_unit_importance_weights():
    scn = validate_scenario(
        {
            "task": {"name": "bitstring", "horizon": 12},
            "system": {"staleness": {"kind": "sync"}},
            "run": {"steps": 5, "figures": False},
        }
    )
    m = run_scenario(scn).metrics
    np.testing.assert_allclose(m["is/ess_ratio"], 1.0, atol=1e-6)
    np.testing.assert_allclose(m["is/kl_k3"], 0.0, atol=1e-6)
    assert (m["staleness/max"] == 0).all()
