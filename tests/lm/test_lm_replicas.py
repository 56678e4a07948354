"""LM replicas: R tiny transformers in one task and one learner, replica r bitwise the one-replica
learner started from replica r's seeds (weights, every per-replica metric, the sampled groups).

Both are driven the same way (the simulator's order for a synchronous schedule: per batch, each group
is a new prompt, its sampling and its rewards; then one learner step), each replica drawing from its
own generator (:class:`sandbox.tasks.draws.RowGenerators`, as the independent-schedules replay does).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sandbox.engines import make_engine
from sandbox.errors import ScenarioError
from sandbox.runner import _stack_replica_rows, build_learner, run_scenario
from sandbox.scenario import validate_scenario
from sandbox.system.cluster import Job
from sandbox.tasks import make_task
from sandbox.tasks.draws import RowGenerators

SEED, R, STEPS = 5, 3, 3
WARM = {"max_steps": 200, "target_accuracy": None, "eval_every": 30, "dev_size": 16, "batch_size": 32}
"""A base model that answers some prompts (a random init earns no reward: zero gradients). Every
replica starts from it; they differ by their sampling streams."""


@pytest.fixture(autouse=True)
def _threads(tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOX_CACHE_DIR", str(tmp_path / "cache"))
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def scenario(replicas: int, engine: dict | None = None, experts: int = 0, algorithm: dict | None = None,
             steps: int = STEPS) -> dict:
    model = {"d_model": 16, "n_layers": 1, "n_heads": 2, **({"experts": experts} if experts else {})}
    raw = {
        "task": {"name": "lm", "replicas": replicas, "problem": {"kind": "sort", "min_len": 2, "max_len": 3},
                 "model": model, "warmstart": WARM, "train_size": 32, "eval_size": 4,
                 "eval_samples": 1},
        "system": {"num_workers": 1},
        "algorithm": {"group_size": 4, "groups_per_step": 2, "objective": {"name": "grpo"},
                      "optimizer": {"name": "adam", "lr": 0.01, "grad_clip": 1.0}, **(algorithm or {})},
        "run": {"steps": steps, "seed": SEED, "figures": False, "eval_every": 1},
    }
    if engine is not None:
        raw["engine"] = engine
    return raw


def drive(raw: dict, seeds: list[int]):
    """Train ``len(seeds)`` replicas for ``run.steps`` batches; replica r starts from and samples with
    the streams of master seed ``seeds[r]``. Returns (final weights, per-replica metrics, batches)."""
    scn = validate_scenario(raw)
    task = make_task(scn.task)
    task.engine = make_engine(scn.engine)
    one = make_task(scn.task.model_copy(update={"replicas": 1}))
    streams = [scn.run.model_copy(update={"seed": s}).seeds() for s in seeds]
    inits = [one.init_params(torch.Generator().manual_seed(s["init"])) for s in streams]
    learner = build_learner(scn, task, {k: torch.cat([p[k] for p in inits]) for k in inits[0]})
    gens = RowGenerators([torch.Generator().manual_seed(s["sampling"]) for s in streams])
    weights, batches = learner.initial_weights(), []
    G, B = scn.algorithm.group_size, scn.algorithm.groups_per_step
    updates = scn.algorithm.updates_per_batch
    for b in range(-(-scn.run.steps // updates)):
        jobs = []
        for _ in range(B):
            ro = task.generate(weights, task.new_group(G, gens), gens, b * updates)
            ro.rewards = task.rewards(ro, gens)
            jobs.append(Job(id=-1, worker=-1, head_version=-1, dispatch_time=math.nan, payload=ro))
        batches.append([j.payload for j in jobs])
        result = learner.train(b, jobs, math.nan)
        weights = result.weights
        if result.stop:
            break
    metrics = _stack_replica_rows(learner.replica_rows, learner.R)
    return {k: v.detach().clone() for k, v in learner.params.items()}, metrics, batches


def assert_replicas_are_separate(raw_many: dict, raw_one: dict) -> None:
    w, m, batches = drive(raw_many, [SEED + r for r in range(R)])
    assert m["loss"].shape[1] == R
    compared = 0
    for r in range(R):
        w1, m1, batches1 = drive(raw_one, [SEED + r])
        for k, v in w1.items():
            assert torch.equal(w[k][r], v[0]), f"replica {r}: weight {k}"
        assert m.keys() == m1.keys()
        for k, v in m1.items():
            np.testing.assert_array_equal(m[k][:, r], v[:, 0], err_msg=f"replica {r}: {k}")
            compared += 1
        for b, (many, alone) in enumerate(zip(batches, batches1)):
            for g, (ro, ro1) in enumerate(zip(many, alone)):
                width = ro1.tokens.shape[-1]
                assert torch.equal(ro.tokens[r, :, :width], ro1.tokens[0]), (r, b, g)
                assert not ro.tokens[r, :, width:].any()
                assert torch.equal(ro.behaviour_logp[r, :, :width], ro1.behaviour_logp[0]), (r, b, g)
                assert torch.equal(ro.rewards[r], ro1.rewards[0]), (r, b, g)
    assert compared > 10
    # the replicas learn (some groups have signal) and really differ (their own draws)
    assert (m["grad/norm"] > 0).any()
    assert not torch.equal(w["tok.weight"][0], w["tok.weight"][1])
    assert not np.array_equal(m["grad/norm"][:, 0], m["grad/norm"][:, 1])


def test_lm_replicas_are_bitwise_separate_learners():
    assert_replicas_are_separate(scenario(R), scenario(1))


@pytest.mark.parametrize("engine, experts", [
    ({"name": "precision", "dtype": "bfloat16"}, 0),
    ({"name": "routing", "flip_prob": 0.3}, 4),
    ({"name": "logit_noise", "scale": 0.5}, 0),
], ids=["precision", "routing", "logit_noise"])
def test_lm_replicas_with_an_engine_are_separate_learners(engine, experts):
    assert_replicas_are_separate(scenario(R, engine, experts), scenario(1, engine, experts))


def test_lm_replicas_run_under_the_shared_schedule():
    """``sandbox run`` with replicas = 2: one clock, every replica's metrics, replica 0 from the run's
    init seed (the replicas draw in turn from the one sampling stream)."""
    res = run_scenario(validate_scenario(scenario(2)), force=True)
    assert res.status == "completed"
    assert res.replica_metrics["loss"].shape == (STEPS, 2)
    assert res.replica_metrics["eval/accuracy"].shape == (STEPS, 2)
    np.testing.assert_allclose(res.metrics["loss"].to_numpy(), res.replica_metrics["loss"].mean(1))


def test_hf_backend_refuses_replicas_at_load_time():
    raw = scenario(2)
    raw["task"]["model"] = {"backend": "hf", "config": {"model_type": "llama", "hidden_size": 16,
                                                         "num_hidden_layers": 1, "num_attention_heads": 2,
                                                         "intermediate_size": 32}}
    with pytest.raises(ScenarioError, match="task.replicas"):
        validate_scenario(raw)


@pytest.mark.parametrize("algorithm", [
    {"minibatches": 2, "epochs": 2, "proximal": "batch_start"},
    {"objective": {"name": "reinforce", "baseline": "opob", "normalize_std": True, "aggregation": "seq_mean_token_mean"},
     "correction": {"name": "tis", "level": "sequence", "C": 8.0},
     "stabilizers": [{"name": "gac"}, {"name": "vcpo_lr"}]},
], ids=["minibatches-epochs", "opob-tis-gac-vcpo"])
def test_lm_replicas_with_other_algorithms_are_separate_learners(algorithm):
    """Mini-batches (whole-batch advantages, the batch-start proximal policy) and OPOB's per-sequence
    gradient norms with GAC and VCPO's LR rule: per replica too."""
    steps = 8 if "minibatches" in algorithm else STEPS  # two batches of four optimizer steps
    assert_replicas_are_separate(scenario(R, algorithm=algorithm, steps=steps), scenario(1, algorithm=algorithm, steps=steps))
