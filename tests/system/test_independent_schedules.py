"""``run.schedules = "independent"``: R replicas, each under its own simulated cluster, trained in one
batched learner, are the R separate runs with master seeds ``run.seed + r``, to the bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sandbox.base.errors import ScenarioError
from sandbox.run.runner import prepare_independent, run_scenario
from sandbox.scenario.api import validate_scenario
from sandbox.system.schedule import DISPATCH, TAKE
from sandbox.tasks.draws import RowGenerators, multinomial, rand, randn
from sandbox.tasks.rollouts import Rollouts

SEED, REPLICAS = 11, 3


def scenario(
    replicas: int,
    seed: int,
    schedules: str,
    staleness: dict,
    task: str = "bandit",
    steps: int = 40,
    algorithm: dict | None = None,
    **system,
) -> dict:
    cfg = {"name": task, "replicas": replicas}
    cfg.update({"num_arms": 10} if task == "bandit" else {"horizon": 6})
    return {
        "task": cfg,
        "system": {
            "num_workers": 5,
            "generation_time": {"kind": "exponential", "mean": 1.0},
            "train_time": {"kind": "constant", "value": 0.3},
            "sync_delay": {"kind": "constant", "value": 0.05},
            "staleness": staleness,
            **system,
        },
        "algorithm": {
            "group_size": 4,
            "groups_per_step": 4,
            "objective": {"name": "grpo"},
            "optimizer": {"name": "adam", "lr": 0.1},
            **(algorithm or {}),
        },
        "run": {"steps": steps, "seed": seed, "figures": False, "eval_every": 1, "schedules": schedules},
    }


def assert_replicas_are_separate_runs(**kw) -> None:
    batched = run_scenario(validate_scenario(scenario(REPLICAS, SEED, "independent", **kw)), force=True)
    compared = 0
    for r in range(REPLICAS):
        alone = run_scenario(validate_scenario(scenario(1, SEED + r, "shared", **kw)), force=True)
        assert alone.status == "completed"
        assert len(alone.metrics) == batched.replica_metrics["time"].shape[0]
        for key, values in alone.replica_metrics.items():
            np.testing.assert_array_equal(
                batched.replica_metrics[key][:, r], values[:, 0], err_msg=f"replica {r}: {key}"
            )
            compared += 1
        for key in ("time", "system/step_time", "throughput/samples_per_s", "util/workers"):  # the replica's own clock
            np.testing.assert_array_equal(
                batched.replica_metrics[key][:, r], alone.metrics[key].to_numpy(), err_msg=key
            )
        assert batched.diverged_at[r] == alone.diverged_at[0]
    assert compared > 20
    # The schedules really differ: the replicas do not share a clock.
    clocks = batched.replica_metrics["time"][-1]
    assert len(set(clocks.tolist())) == REPLICAS
    np.testing.assert_allclose(batched.metrics["time"].to_numpy(), batched.replica_metrics["time"].mean(1))


@pytest.mark.parametrize(
    "staleness",
    [
        {"kind": "sync"},
        {"kind": "max_lag", "k_max": 2},
        {"kind": "max_lag", "k_max": 1, "enforcement": "drop"},
        {"kind": "fixed_lag", "k": 2},
        {"kind": "async_ratio", "alpha": 1.5},
    ],
    ids=lambda s: s["kind"] + ("_drop" if s.get("enforcement") == "drop" else ""),
)
@pytest.mark.parametrize("task", ["bandit", "bitstring"])
def test_each_replica_is_the_separate_run_with_its_seed(staleness, task):
    assert_replicas_are_separate_runs(staleness=staleness, task=task)


def test_minibatches_epochs_and_a_stabilizer_replay_exactly():
    assert_replicas_are_separate_runs(
        staleness={"kind": "max_lag", "k_max": 2},
        task="bitstring",
        steps=30,
        algorithm={
            "minibatches": 2,
            "epochs": 2,
            "proximal": "batch_start",
            "correction": {"name": "tis", "level": "sequence", "C": 4.0},
            "stabilizers": [{"name": "gac"}],
            "optimizer": {"name": "adam", "lr": 0.1, "grad_clip": 1.0},
        },
    )


def test_token_dependent_timing_replays_exactly():
    """Per-token generation and training costs read the (fixed) lengths the schedule assumed."""
    assert_replicas_are_separate_runs(
        staleness={"kind": "max_lag", "k_max": 2},
        task="bitstring",
        generation_time={"kind": "cost_model", "per_token": 0.05, "prefill": 0.1, "jitter": 0.3},
        train_time={"kind": "cost_model", "per_token": 0.001, "prefill": 0.05},
    )


def test_drops_happen_in_the_drop_scenario():
    """The drop case above is only a test of dropped work if work is dropped."""
    res = run_scenario(
        validate_scenario(
            scenario(REPLICAS, SEED, "independent", {"kind": "max_lag", "k_max": 1, "enforcement": "drop"})
        ),
        force=True,
    )
    assert (res.replica_metrics["system/dropped"][-1] > 0).all()


def test_a_wrong_version_would_be_caught():
    """A replay that samples with the weights of a wrong version changes the numbers the tests compare."""
    import sandbox.run.replay as replay

    data = scenario(
        REPLICAS, SEED, "independent", {"kind": "max_lag", "k_max": 3}, train_time={"kind": "constant", "value": 0.8}
    )
    good = run_scenario(validate_scenario(data), force=True)
    original = replay._ring_sizes
    deep = []

    def too_shallow(schedules):
        depth, ahead = original(schedules)
        for s in schedules:  # consumed groups sampled at the deepest lag: their version is overwritten
            trained = np.cumsum(s.ops == TAKE) - (s.ops == TAKE)
            d = np.flatnonzero(s.ops == DISPATCH)
            at_depth = d[trained[d] - s.job_version[s.args[d]] == depth - 1]
            deep.append(int((s.job_batch[s.args[at_depth]] >= 0).sum()))
        return depth - 1, ahead

    replay._ring_sizes = too_shallow
    try:
        bad = run_scenario(validate_scenario(data), force=True)
    finally:
        replay._ring_sizes = original
    assert sum(deep) > 0
    assert not np.array_equal(good.replica_metrics["loss"], bad.replica_metrics["loss"])


@pytest.mark.parametrize(
    "change, field",
    [
        ({"task": {"name": "quadratic"}}, "run.schedules"),
        (
            {
                "system": {
                    "partial_rollouts": True,
                    "generation_time": {"kind": "cost_model", "per_token": 0.1},
                    "staleness": {"kind": "max_lag", "k_max": 1},
                }
            },
            "partial_rollouts",
        ),
        ({"run": {"system_seed": 3}}, "run.system_seed"),
        ({"run": {"seed": 2**63 - 2}}, "run.seed"),
    ],
)
def test_refused_at_load_time_naming_the_field(change, field):
    data = scenario(REPLICAS, SEED, "independent", {"kind": "max_lag", "k_max": 1})
    for section, values in change.items():
        data[section] = {**data[section], **values} if section != "task" else values
    with pytest.raises(ValueError, match=field):
        validate_scenario(data)


def test_refused_at_run_time_when_validation_was_bypassed():
    scn = validate_scenario(scenario(REPLICAS, SEED, "independent", {"kind": "sync"}))
    scn.run.system_seed = 5  # models are not re-validated on assignment
    with pytest.raises(ScenarioError, match="run.system_seed"):
        prepare_independent(scn)


def test_row_generators_draw_what_one_replica_runs_draw():
    probs = torch.softmax(torch.randn(3, 5, generator=torch.Generator().manual_seed(0)), -1)
    for draw in (
        lambda p, g: multinomial(p, 7, g),
        lambda p, g: rand((p.shape[0], 20), g),
        lambda p, g: randn((p.shape[0], 20), g, torch.float64),
    ):
        rows = draw(probs, RowGenerators([torch.Generator().manual_seed(s) for s in range(3)]))
        for s in range(3):
            torch.testing.assert_close(
                rows[s : s + 1], draw(probs[s : s + 1], torch.Generator().manual_seed(s)), rtol=0, atol=0
            )
    with pytest.raises(ValueError, match="2 rows with 3 row generators"):
        rand((2, 4), RowGenerators([torch.Generator() for _ in range(3)]))


def test_rollouts_extend_stamps_a_version_per_replica():
    group = Rollouts.empty(2, 3)
    ones = torch.ones(2, 3, dtype=torch.long)
    out = group.extend(
        torch.zeros(2, 3, 1, dtype=torch.long), torch.zeros(2, 3, 1), ones, ones.bool(), torch.tensor([4, 7])
    )
    assert out.token_versions[:, :, 0].tolist() == [[4, 4, 4], [7, 7, 7]]


def test_time_to_target_reads_each_replicas_own_clock():
    """Under independent schedules a replica reaches the target at its own simulated time: the time
    its separate run reports, not a time read off the replicas' mean clock."""
    data = scenario(REPLICAS, SEED, "independent", {"kind": "max_lag", "k_max": 2}, task="bitstring", steps=60)
    data["run"]["target"] = {"reward": 0.5}
    batched = run_scenario(validate_scenario(data), force=True)
    times = batched.summary["time_to_target_replicas"]
    assert all(t is not None for t in times)
    for r in range(REPLICAS):
        alone_data = scenario(1, SEED + r, "shared", {"kind": "max_lag", "k_max": 2}, task="bitstring", steps=60)
        alone_data["run"]["target"] = {"reward": 0.5}
        alone = run_scenario(validate_scenario(alone_data), force=True)
        assert times[r] == alone.summary["time_to_target_replicas"][0]
    # The mean clock would have given other times: the test can tell the two apart.
    assert batched.replica_metrics["time"].std(1).max() > 0.1


def test_figures_drawn_from_the_jobs_table_say_whose_schedule_it_is():
    from sandbox.run.plots import _replica_zero

    kw = dict(staleness={"kind": "sync"}, steps=5)
    independent = run_scenario(validate_scenario(scenario(REPLICAS, SEED, "independent", **kw)), force=True)
    shared = run_scenario(validate_scenario(scenario(REPLICAS, SEED, "shared", **kw)), force=True)
    assert _replica_zero(independent) == f"; replica 0's schedule of {REPLICAS}"
    assert _replica_zero(shared) == ""


def test_schedules_simulated_in_worker_processes_give_the_same_run():
    """``run.processes`` only spreads the schedules over processes: every number stays the same."""
    data = scenario(REPLICAS, SEED, "independent", {"kind": "max_lag", "k_max": 2}, steps=20)
    alone = run_scenario(validate_scenario(data), force=True)
    data["run"]["processes"] = 2
    spread = run_scenario(validate_scenario(data), force=True)
    assert alone.replica_metrics.keys() == spread.replica_metrics.keys()
    for key, values in alone.replica_metrics.items():
        np.testing.assert_array_equal(spread.replica_metrics[key], values, err_msg=key)
    assert alone.jobs.equals(spread.jobs) and alone.events.equals(spread.events)


ENGINE = {
    "kind": "continuous_batching",
    "step_base": 0.05,
    "step_per_sequence": 0.01,
    "workers_per_engine": 5,
    "length_median": 10,
    "length_sigma": 0.5,
    "sync_time": 0.1,
}


def test_replicas_on_a_draining_engine_are_separate_runs():
    assert_replicas_are_separate_runs(staleness={"kind": "max_lag", "k_max": 1}, generation_time=ENGINE)


def test_an_engine_that_aborts_or_resumes_is_refused_naming_the_field():
    for sync in ("abort", "partial"):
        data = scenario(
            REPLICAS, SEED, "independent", {"kind": "max_lag", "k_max": 1}, generation_time={**ENGINE, "sync": sync}
        )
        with pytest.raises(ValueError, match="generation_time.sync"):
            validate_scenario(data)
