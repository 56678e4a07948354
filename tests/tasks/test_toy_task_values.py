"""The toy tasks by hand: exact expected rewards, rewards of given responses, log-probs, the
quadratic's loss and gradients (``docs/tasks.md``), and the registry every task is found through."""

from __future__ import annotations

import math

import pytest
import torch

from sandbox.tasks import TASKS, OracleTask, PolicyTask, TaskConfig, make_task
from sandbox.tasks.bandit import BanditConfig, BanditTask, softmax_second_moment
from sandbox.tasks.bitstring import BitStringConfig, BitStringTask
from sandbox.tasks.quadratic import QuadraticConfig, QuadraticTask
from sandbox.tasks.rollouts import Rollouts


def _responses(tokens: list[list[int]]) -> Rollouts:
    """One replica, one complete response per row of ``tokens`` (all of the same length)."""
    t = torch.tensor([tokens])
    R, N, T = t.shape
    return Rollouts.empty(R, N).extend(
        t, torch.zeros(R, N, T), torch.full((R, N), T), torch.ones(R, N, dtype=torch.bool), 0
    )


@pytest.mark.component("task", "bandit")
def test_bandit_expected_reward_rewards_and_logprobs_by_hand():
    task = BanditTask(BanditConfig(num_arms=2))  # default means: linspace(0.1, 0.9) = [0.1, 0.9]
    params = {"logits": torch.tensor([[0.0, math.log(3.0)]])}  # π = [1/4, 3/4]
    ev = task.evaluate(params)
    assert float(ev["eval/expected_reward"]) == pytest.approx(0.25 * 0.1 + 0.75 * 0.9)
    assert float(ev["eval/best_arm_prob"]) == pytest.approx(0.75)
    ro = _responses([[0], [1]])
    assert task.logprobs(params, ro)[0, :, 0].tolist() == pytest.approx([math.log(0.25), math.log(0.75)])
    # Bernoulli arms with means 0 and 1 pay exactly their mean
    sure = BanditTask(BanditConfig(num_arms=2, arm_means=[0.0, 1.0]))
    assert sure.rewards(ro, torch.Generator().manual_seed(0)).tolist() == [[0.0, 1.0]]
    # E_q[(p/q)²] with p = [1/4, 3/4], q = [1/2, 1/2]: ½(½)² + ½(3/2)² = 5/4
    assert float(softmax_second_moment(params["logits"][0], torch.zeros(2))) == pytest.approx(1.25)


@pytest.mark.component("task", "bitstring")
def test_bitstring_expected_reward_rewards_and_logprobs_by_hand():
    task = BitStringTask(BitStringConfig(horizon=3, threshold=0.6))  # reward when at least 2 of 3 bits are 1
    assert task.needed == 2
    params = {"logits": torch.tensor([[0.0, 0.0, math.log(0.25)]])}  # P(bit = 1) = [1/2, 1/2, 1/5]
    ev = task.evaluate(params)
    # P(≥ 2 ones) = P(110) + P(101) + P(011) + P(111) = .2 + .05 + .05 + .05
    assert float(ev["eval/expected_reward"]) == pytest.approx(0.35)
    assert float(ev["eval/mean_bit"]) == pytest.approx(1.2 / 3)
    ro = _responses([[1, 1, 0], [1, 0, 0], [0, 1, 1]])
    assert task.rewards(ro, None).tolist() == [[1.0, 0.0, 1.0]]
    seq = task.logprobs(params, ro).sum(-1)[0]
    assert seq.tolist() == pytest.approx(
        [math.log(0.5 * 0.5 * 0.8), math.log(0.5 * 0.5 * 0.8), math.log(0.5 * 0.5 * 0.2)]
    )


@pytest.mark.component("task", "quadratic")
def test_quadratic_loss_gradient_and_noise_by_hand():
    cfg = QuadraticConfig(dim=2, eigenvalues=[1.0, 4.0], x0=1.0, noise_std=0.0, replicas=2, replica_scales=[1.0, 2.0])
    task = QuadraticTask(cfg)
    params = task.init_params(torch.Generator().manual_seed(0))
    assert task.loss(params).tolist() == [2.5, 5.0]  # ½ Σ s·λ_i x_i² at x = 1
    sample = task.gradient(params, 3, torch.Generator().manual_seed(0), version=7)
    assert sample.grad.shape == (2, 3, 2) and sample.version == 7
    assert torch.equal(
        sample.grad, torch.tensor([[1.0, 4.0], [2.0, 8.0]], dtype=torch.float64).unsqueeze(1).expand(2, 3, 2)
    )
    assert task.evaluate(params)["eval/grad_sq_norm"].tolist() == [17.0, 68.0]
    # the surrogate's autograd gradient is the mean of the given gradients
    x = {"x": params["x"].clone().requires_grad_(True)}
    grads = torch.randn(2, 4, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    task.surrogate(x, grads).sum().backward()
    assert torch.allclose(x["x"].grad, grads.mean(1))
    # gradient noise: σ per coordinate
    noisy = QuadraticTask(cfg.model_copy(update={"noise_std": 0.5}))
    g = noisy.gradient(params, 20_000, torch.Generator().manual_seed(2), 0).grad - sample.grad[:, :1]
    assert float(g.std()) == pytest.approx(0.5, rel=0.02)
    assert QuadraticConfig(dim=3, eig_min=0.01, eig_max=1.0).hessian_diagonal().tolist() == pytest.approx(
        [0.01, 0.1, 1.0]
    )


def test_every_task_is_registered_with_its_kind_and_built_from_its_config():
    assert set(TASKS.names()) == {"bandit", "bitstring", "quadratic", "lm", "gym"}
    assert issubclass(TASKS["quadratic"].impl, OracleTask)
    assert all(issubclass(TASKS[n].impl, PolicyTask) for n in ("bandit", "bitstring", "lm", "gym"))
    from pydantic import TypeAdapter

    cfg = TypeAdapter(TaskConfig).validate_python({"name": "bandit", "num_arms": 3})
    assert isinstance(make_task(cfg), BanditTask)
    assert {n for n in TASKS if TASKS[n].impl.default_threads == 1} == {"bandit", "bitstring", "quadratic"}
