"""``PolicyLoss.recorder`` only observes: with it the loss, its gradient and its metrics are bitwise those
without it, and it receives the learner's own ratio and the correction's mask (what the learner checks of
``sandbox check`` read)."""

from __future__ import annotations

import torch

from sandbox.algorithms.api import PolicyLossInput
from sandbox.algorithms.corrections.icepop import IcePopConfig
from sandbox.algorithms.objectives.grpo import GRPOConfig
from sandbox.algorithms.policy_loss import build_policy_loss


def _input():
    g = torch.Generator().manual_seed(0)
    logp = (-torch.rand(2, 8, 5, generator=g, dtype=torch.float64)).requires_grad_(True)
    mu = logp.detach() + 0.3 * torch.randn(2, 8, 5, generator=g, dtype=torch.float64)
    mask = torch.ones(2, 8, 5, dtype=torch.float64)
    mask[:, :, 4] = 0.0
    rewards = torch.randint(0, 2, (2, 8), generator=g).double()
    return logp, PolicyLossInput(logp=logp, behaviour_logp=mu, mask=mask, rewards=rewards, group_size=4)


def test_recorder_sees_the_learner_ratio_and_changes_nothing():
    plain = build_policy_loss(GRPOConfig(), IcePopConfig(alpha=0.8, beta=1.25))
    logp_a, inp_a = _input()
    out_a = plain(inp_a)
    out_a.loss.sum().backward()

    seen = []
    recorded = build_policy_loss(GRPOConfig(), IcePopConfig(alpha=0.8, beta=1.25))
    recorded.recorder = lambda ctx, corr: seen.append((ctx.log_rho.clone(), corr.mask.clone()))
    logp_b, inp_b = _input()
    out_b = recorded(inp_b)
    out_b.loss.sum().backward()

    assert torch.equal(out_a.loss, out_b.loss) and torch.equal(logp_a.grad, logp_b.grad)
    assert out_a.metrics.keys() == out_b.metrics.keys()
    assert all(torch.equal(torch.as_tensor(out_a.metrics[k]), torch.as_tensor(out_b.metrics[k])) for k in out_a.metrics)
    ((log_rho, mask),) = seen
    expected = (inp_b.logp.detach() - inp_b.behaviour_logp) * inp_b.mask
    assert torch.equal(log_rho, expected)
    w = expected.exp()
    assert torch.equal(mask[..., :4], ((w >= 0.8) & (w <= 1.25)).double()[..., :4])
