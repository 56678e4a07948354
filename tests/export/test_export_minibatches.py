"""algorithm.minibatches / epochs / proximal in every exporter (docs/system.md#mini-batches): the keys
each framework gets, the gaps where it has none, and the written files accepted by the real wheels."""

from __future__ import annotations

import pytest
from export_cases import SCENARIOS

import sandbox.frameworks.areal.export  # noqa: F401  (each import registers its exporter)
import sandbox.frameworks.openrlhf.export  # noqa: F401
import sandbox.frameworks.prime_rl.export  # noqa: F401
import sandbox.frameworks.trl.export  # noqa: F401
import sandbox.frameworks.verl.export  # noqa: F401
import sandbox.frameworks.verl_vcpo.export  # noqa: F401
from sandbox.export.api import export_scenario
from sandbox.scenario.api import load_scenario

A = "actor_rollout_ref.actor"
ASYNC = {"kind": "max_lag", "k_max": 2, "enforcement": "throttle"}


def quickstart(m=1, E=1, staleness=None, **dotted):
    """Quickstart (8 groups of 8, GRPO, 120 steps) with m mini-batches and E epochs."""
    over = {"algorithm.minibatches": m, "algorithm.epochs": E, **{k.replace("__", "."): v for k, v in dotted.items()}}
    if staleness:
        over["system.staleness"] = staleness
    return load_scenario(SCENARIOS / "quickstart.toml", over)[0]


def export(scn, fw):
    return export_scenario(scn, fw, allow_partial=True)


def gaps(scn, fw):
    return {r.source for r in export(scn, fw).plan.gaps()}


def rows(scn, fw, source):
    return [r for r in export(scn, fw).plan.rows if r.source == source]


# --------------------------------------------------------------------------------------------- verl


def test_verl_sync_minibatches_and_epochs():
    exp = export(quickstart(2, 2), "verl")
    s = exp.plan.settings
    assert (s["data.train_batch_size"], s[f"{A}.ppo_mini_batch_size"], s[f"{A}.ppo_epochs"]) == (8, 4, 2)
    assert not {g for g in gaps(quickstart(2, 2), "verl") if g.startswith("algorithm.")}


def test_verl_separate_async_pushes_weights_after_the_batch():
    s = export(quickstart(4, staleness=ASYNC), "verl").plan.settings
    sync_step = s["trainer.v1.separate_async.parameter_sync_step"]
    assert (sync_step, s[f"{A}.ppo_mini_batch_size"]) == (4, 2)
    assert s["data.train_batch_size"] == sync_step * s[f"{A}.ppo_mini_batch_size"]  # verl's assert
    assert s["trainer.v1.sampler.max_off_policy_threshold"] == 3  # k_max counts batches in both


def test_verl_warmup_counts_scheduler_steps():
    s = export(
        quickstart(2, 2, algorithm__optimizer={"name": "adam", "lr": 0.05, "warmup_steps": 8}), "verl"
    ).plan.settings
    assert s[f"{A}.optim.lr_warmup_steps"] == 2  # verl steps its scheduler once per batch of 4 optimizer steps


def test_verl_reinforce_route_and_batch_start_anchor_are_gaps():
    reinforce = {"name": "reinforce", "baseline": "group_mean", "aggregation": "seq_mean_token_mean"}
    assert "algorithm.minibatches + algorithm.epochs" in gaps(quickstart(2, algorithm__objective=reinforce), "verl")
    assert "algorithm.minibatches + algorithm.epochs" not in gaps(quickstart(algorithm__objective=reinforce), "verl")
    assert "algorithm.proximal" in gaps(quickstart(algorithm__proximal="batch_start"), "verl")  # bypass mode written
    assert "algorithm.proximal" not in gaps(quickstart(2), "verl")


@pytest.mark.parametrize(
    "scn",
    [quickstart(2, 2), quickstart(4, staleness=ASYNC), quickstart(1, 3)],
    ids=["sync-2x2", "async-4x1", "sync-1x3"],
)
def test_verl_accepts_the_written_files(scn, wheel):
    from sandbox.frameworks.verl.validation import validate

    assert validate(export(scn, "verl").files, wheel("verl")) == []


def test_verl_vcpo_fork_maps_epochs_not_minibatches():
    s = export(quickstart(1, 2, staleness=ASYNC), "verl-vcpo").plan.settings
    assert s[f"{A}.ppo_epochs"] == 2
    assert "algorithm.minibatches" in gaps(quickstart(2, staleness=ASYNC), "verl-vcpo")


# ---------------------------------------------------------------------------------------------- TRL


def test_trl_sync_generation_batch_serves_m_times_e_steps():
    s = export(quickstart(2, 3), "trl").plan.settings
    assert (s["gradient_accumulation_steps"], s["steps_per_generation"], s["num_iterations"]) == (4, 8, 3)
    assert s["per_device_train_batch_size"] == 8
    # TRL's lag bound num_iterations·steps_per_generation/gradient_accumulation_steps − 1 = m·E − 1
    assert s["num_iterations"] * s["steps_per_generation"] // s["gradient_accumulation_steps"] - 1 == 5
    assert "algorithm.proximal" in gaps(quickstart(2), "trl")  # TRL anchors at π_old once a batch has 2 steps
    assert "algorithm.proximal" not in gaps(quickstart(2, algorithm__proximal="batch_start"), "trl")


def test_trl_async_syncs_weights_every_m_steps_and_has_no_epochs():
    s = export(quickstart(2, staleness=ASYNC), "trl").plan.settings
    assert (s["weight_sync_steps"], s["per_device_train_batch_size"], s["max_staleness"]) == (2, 32, 2)
    assert "algorithm.epochs" in gaps(quickstart(1, 2, staleness=ASYNC), "trl")


@pytest.mark.parametrize(
    "scn", [quickstart(2, 3, algorithm__proximal="batch_start"), quickstart(2, staleness=ASYNC)], ids=["sync", "async"]
)
def test_trl_accepts_the_written_config(scn):
    pytest.importorskip("trl")
    from sandbox.frameworks.trl.validation import validate

    assert validate(export(scn, "trl").files, None) == []


# ----------------------------------------------------------------------------------- OpenRLHF, AReaL


def test_openrlhf_train_batch_and_epochs():
    scn = quickstart(2, 2, algorithm__proximal="batch_start")
    s = export(scn, "openrlhf").plan.settings
    assert (s["--rollout.batch_size"], s["--train.batch_size"], s["--train.max_epochs"]) == (8, 32, 2)
    assert not {g for g in gaps(scn, "openrlhf") if g.startswith("algorithm.")}
    assert "algorithm.proximal" in gaps(quickstart(2), "openrlhf")  # OpenRLHF recomputes π_old per batch
    reinforce = {"name": "reinforce", "baseline": "group_mean", "aggregation": "seq_mean_token_mean"}
    assert "algorithm.minibatches + algorithm.epochs" in gaps(
        quickstart(2, algorithm__objective=reinforce, algorithm__proximal="batch_start"), "openrlhf"
    )


def test_openrlhf_clip_against_the_batch_start_is_exact_on_stale_data():
    scn = quickstart(2, staleness=ASYNC, algorithm__proximal="batch_start")
    assert "algorithm.objective.eps_low + algorithm.objective.eps_high" not in gaps(scn, "openrlhf")
    assert "algorithm.objective.eps_low + algorithm.objective.eps_high" in gaps(
        quickstart(2, staleness=ASYNC), "openrlhf"
    )


def test_openrlhf_accepts_the_written_flags(wheel):
    from sandbox.frameworks.openrlhf.validation import validate

    assert (
        validate(export(quickstart(2, 2, algorithm__proximal="batch_start"), "openrlhf").files, wheel("openrlhf")) == []
    )


def test_areal_minibatches_and_no_epochs(wheel):
    from sandbox.frameworks.areal.validation import validate

    exp = export(quickstart(4, staleness=ASYNC), "areal")
    assert exp.plan.settings["actor.ppo_n_minibatches"] == 4
    assert exp.plan.settings["rollout.max_head_offpolicyness"] == 2
    assert not {"algorithm.minibatches", "algorithm.epochs", "algorithm.proximal"} & gaps(
        quickstart(4, staleness=ASYNC), "areal"
    )
    assert "algorithm.epochs" in gaps(quickstart(1, 2), "areal")
    assert validate(exp.files, wheel("areal")) == []


def test_prime_rl_has_no_minibatch_key():
    assert {"algorithm.minibatches", "algorithm.epochs"} <= gaps(quickstart(2, 2), "prime-rl")
    assert [r.kind for r in rows(quickstart(), "prime-rl", "algorithm.minibatches")] == ["implicit"]
