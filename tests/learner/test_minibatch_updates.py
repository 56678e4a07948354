"""Mini-batch updates (``algorithm.minibatches`` = m, ``algorithm.epochs`` = E; docs/system.md#mini-batches):
the split and its order, the learner's version per optimizer step, the lag of every step, the
proximal policy at the start of the batch, the load-time errors and determinism."""

from __future__ import annotations

import pytest
import torch

from sandbox.base.errors import ScenarioError
from sandbox.learner.trainer import PolicyLearner
from sandbox.run.runner import prepare_run, run_scenario
from sandbox.scenario.api import validate_scenario


def bitstring(m=1, E=1, staleness=None, steps=None, proximal="behaviour", train_time=None, **algorithm):
    S = m * E
    return validate_scenario(
        {
            "task": {"name": "bitstring", "horizon": 4, "replicas": 2},
            "system": {
                "num_workers": 4,
                "generation_time": {"kind": "constant", "value": 1.0},
                "train_time": train_time or {"kind": "constant", "value": 0.25},
                "staleness": staleness or {"kind": "sync"},
            },
            "algorithm": {
                "group_size": 2,
                "groups_per_step": 4,
                "minibatches": m,
                "epochs": E,
                "proximal": proximal,
                **algorithm,
            },
            "run": {"steps": steps or 3 * S, "seed": 3, "figures": False, "eval_every": 1000},
        }
    )


class Recording(PolicyLearner):
    """Records each batch's job ids, each optimizer step's (version, job ids), the weights after
    every optimizer step, and the policy-loss inputs."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.batches, self.steps, self.inputs, self.rollouts = [], [], [], []
        self.history = [self.params["logits"].detach().clone()]  # history[v] = weights of version v
        loss = self.policy_loss

        def capture(inp):
            self.inputs.append(inp)
            return loss(inp)

        capture.needs_sequence_grad_norms = loss.needs_sequence_grad_norms
        capture.advantages = loss.advantages
        self.policy_loss = capture

    def train(self, step, jobs, now):
        self.batches.append([j.id for j in jobs])
        return super().train(step, jobs, now)

    def compute_loss(self, step, jobs, context=None):
        self.steps.append((step, [j.id for j in jobs]))
        out = super().compute_loss(step, jobs, context)
        self.rollouts.append(self.last_batch)  # rollouts[i] belongs to inputs[i]
        return out

    def _optimizer_step(self, step, loss, metrics):
        assert step == len(self.history) - 1  # the version is the number of optimizer steps taken
        row = super()._optimizer_step(step, loss, metrics)
        self.history.append(self.params["logits"].detach().clone())
        return row


def run_recording(scn):
    _, learner, cluster = prepare_run(scn, learner_cls=Recording)
    res = cluster.run(scn.run.steps)
    return learner, res


def test_split_and_order_hand_values():
    """4 groups [a, b, c, d], m = 2, E = 2: the steps train [a, b], [c, d], [a, b], [c, d] at
    versions 4b, 4b+1, 4b+2, 4b+3, in the order the control consumed the groups."""
    learner, res = run_recording(bitstring(m=2, E=2))
    assert len(learner.batches) == 3 and len(learner.steps) == 12
    for b, (a, bb, c, d) in enumerate(learner.batches):
        assert learner.steps[4 * b : 4 * b + 4] == [
            (4 * b, [a, bb]),
            (4 * b + 1, [c, d]),
            (4 * b + 2, [a, bb]),
            (4 * b + 3, [c, d]),
        ]
    rows = res.rows
    assert [r["step"] for r in rows] == list(range(12))
    assert [r["minibatch"] for r in rows] == [0, 1, 0, 1] * 3
    assert [r["epoch"] for r in rows] == [0, 0, 1, 1] * 3


def test_four_minibatches_one_epoch_split():
    learner, _ = run_recording(bitstring(m=4))
    for b, groups in enumerate(learner.batches):
        assert learner.steps[4 * b : 4 * b + 4] == [(4 * b + j, [g]) for j, g in enumerate(groups)]


@pytest.mark.parametrize("m, E", [(2, 1), (4, 1), (2, 2), (1, 3)])
def test_published_weights_are_those_after_the_last_step_of_the_batch(m, E):
    """Ground truth for the version count: every token's behaviour log-prob is the log-prob under
    the weights of learner version S·(published version), i.e. after the batch's last step."""
    S = m * E
    learner, _ = run_recording(bitstring(m=m, E=E, staleness={"kind": "fixed_lag", "k": 1}))
    assert len(learner.inputs) == len(learner.rollouts) == 3 * S
    seen = set()
    for inp, ro in zip(learner.inputs, learner.rollouts):
        valid = inp.mask > 0
        versions = inp.token_versions  # in learner versions (optimizer steps)
        assert bool((versions[valid] % S == 0).all())
        for v in versions[valid].unique().tolist():
            sel = (versions == v) & valid
            lp = learner.task.logprobs({"logits": learner.history[v]}, ro)
            assert torch.allclose(lp[sel], inp.behaviour_logp[sel], atol=1e-6), v
            if v > 0:  # a later version: the weights after S more steps, not after one
                assert not torch.allclose(
                    learner.task.logprobs({"logits": learner.history[v - 1]}, ro)[sel],
                    inp.behaviour_logp[sel],
                    atol=1e-6,
                )
            seen.add(v)
    assert seen == {0, S}  # fixed lag 1: batches 0 and 1 use version 0, batch 2 the first publication


@pytest.mark.parametrize(
    "m, E, k, expected",
    [
        (4, 1, 0, [0, 1, 2, 3] * 3),  # sync: even on-policy data is off policy from step 2
        (2, 2, 0, [0, 1, 2, 3] * 3),
        (2, 2, 1, [0, 1, 2, 3] + [4, 5, 6, 7] * 2),  # fixed lag 1 batch: batch 0 reuses version 0
        (1, 2, 2, [0, 1, 2, 3, 4, 5]),  # batches 0-2 all consume version 0
    ],
)
def test_lag_of_every_step(m, E, k, expected):
    staleness = {"kind": "sync"} if k == 0 else {"kind": "fixed_lag", "k": k}
    res = run_scenario(bitstring(m=m, E=E, staleness=staleness))
    assert res.metrics["staleness/token_mean"].tolist() == expected
    assert res.metrics["staleness/max"].tolist() == expected
    # the jobs table counts published versions (one per batch)
    consumed = res.jobs[res.jobs.consume_step >= 0]
    assert set(consumed.consume_step) == {0, 1, 2} and len(consumed) == 12


def test_clip_ratio_is_anchored_at_the_start_of_the_batch():
    """proximal = 'batch_start': r = π_θ/π_prox is exactly 1 on the batch's first mini-batch and
    moves on the second; the correction's weight π_prox/μ stays that of the rollout policy."""
    learner, res = run_recording(bitstring(m=2, proximal="batch_start", optimizer={"name": "adam", "lr": 0.5}))
    first, second = learner.inputs[0], learner.inputs[1]
    assert torch.equal(first.logp.detach(), first.prox_logp)
    assert (second.logp.detach() - second.prox_logp).abs().max() > 1e-3
    # π_prox of the second mini-batch is the weights at the start of the batch (version 0), not μ's update
    assert torch.equal(second.prox_logp, learner.task.logprobs({"logits": learner.history[0]}, learner.rollouts[1]))
    assert res.rows[0]["ppo/kl"] == 0.0 and res.rows[1]["ppo/kl"] != 0.0
    assert max(r["clip/frac"] for r in res.rows) > 0  # PPO clipping becomes active within a batch


def test_behaviour_anchor_moves_within_a_synchronous_batch():
    """proximal = 'behaviour' (bypass): the ratio is π_θ/μ; synchronous data has ratio 1 on the first
    mini-batch only."""
    learner, _ = run_recording(bitstring(m=2, optimizer={"name": "adam", "lr": 0.5}))
    first, second = learner.inputs[0], learner.inputs[1]
    assert first.prox_logp is None and second.prox_logp is None
    assert torch.allclose(first.logp.detach(), first.behaviour_logp, atol=1e-6)
    assert (second.logp.detach() - second.behaviour_logp).abs().max() > 1e-3


def test_advantages_are_computed_once_per_batch():
    """The EMA baseline advances once per batch (its value is the same on every step of the batch)
    and each mini-batch trains on its slice of the whole batch's advantages."""
    res = run_scenario(bitstring(m=2, E=2, objective={"name": "reinforce", "baseline": "ema"}))
    base = res.metrics["adv/baseline_mean"].to_numpy().reshape(3, 4)
    assert (base == base[:, :1]).all() and len(set(base[:, 0])) == 3


def test_train_time_is_charged_per_pass():
    """cost_model train time = per_token · tokens · epochs; a batch holds 64 tokens here (2 replicas ×
    4 groups × 2 responses × 4 tokens), counted once in the throughput."""
    cost = {"kind": "cost_model", "prefill": 0.0, "per_token": 0.01}
    one = run_scenario(bitstring(m=2, train_time=cost))
    two = run_scenario(bitstring(m=2, E=2, train_time=cost))
    assert one.metrics["system/step_time"].iloc[-1] == pytest.approx(1.0 + 0.64)
    assert two.metrics["system/step_time"].iloc[-1] == pytest.approx(1.0 + 1.28)
    assert two.metrics["throughput/tokens_per_s"].iloc[-1] == pytest.approx(3 * 64 / two.metrics["time"].iloc[-1])


def test_oracle_learner_counts_optimizer_steps_too():
    scn = validate_scenario(
        {
            "task": {"name": "quadratic", "dim": 4},
            "system": {
                "num_workers": 2,
                "generation_time": {"kind": "constant", "value": 1.0},
                "staleness": {"kind": "fixed_lag", "k": 1},
            },
            "algorithm": {
                "group_size": 1,
                "groups_per_step": 2,
                "minibatches": 2,
                "optimizer": {"name": "sgd", "lr": 0.1},
            },
            "run": {"steps": 8, "figures": False},
        }
    )
    res = run_scenario(scn)
    assert res.metrics["staleness/mean"].tolist() == [0, 1, 2, 3, 2, 3, 2, 3]


def test_default_is_one_step_per_batch_without_new_columns():
    res = run_scenario(bitstring())
    assert "minibatch" not in res.metrics and "epoch" not in res.metrics
    assert res.metrics["step"].tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    "over, field",
    [
        ({"algorithm": {"groups_per_step": 4, "minibatches": 3}}, "algorithm.minibatches"),
        ({"algorithm": {"minibatches": 0}}, "algorithm.minibatches"),
        ({"algorithm": {"epochs": 0}}, "algorithm.epochs"),
        ({"algorithm": {"proximal": "latest"}}, "algorithm.proximal"),
        (
            {"task": {"name": "quadratic"}, "algorithm": {"group_size": 1, "proximal": "batch_start"}},
            "algorithm.proximal",
        ),
    ],
)
def test_load_time_errors_name_the_field(over, field):
    data = {"run": {"steps": 12}}
    for k, v in over.items():
        data.setdefault(k, {}).update(v)
    with pytest.raises(ScenarioError) as err:
        validate_scenario(data)
    assert field in str(err.value)


def test_run_stops_after_run_steps_inside_the_last_batch():
    """run.steps = 10 with S = 4: three batches, the last cut after its second step."""
    res = run_scenario(bitstring(m=2, E=2, steps=10))
    assert res.metrics["step"].tolist() == list(range(10))
    assert res.metrics["minibatch"].tolist()[-2:] == [0, 1] and res.metrics["epoch"].tolist()[-2:] == [0, 0]
    assert (res.jobs.consume_step >= 0).sum() == 12  # the third batch was consumed whole


def test_non_divisible_error_message():
    with pytest.raises(
        ScenarioError, match=r"algorithm\.minibatches: 3 does not divide algorithm\.groups_per_step = 4"
    ):
        validate_scenario({"algorithm": {"groups_per_step": 4, "minibatches": 3}})


def test_deterministic():
    scn = bitstring(m=2, E=2, staleness={"kind": "max_lag", "k_max": 2}, proximal="batch_start")
    a, b = run_scenario(scn), run_scenario(scn)
    assert a.metrics.equals(b.metrics) and a.jobs.equals(b.jobs)
