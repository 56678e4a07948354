"""``Objective.reads_ratio = False`` lets the policy loss skip the ratio π_θ/π_anchor (issue 32, row 11).
For every registered objective that declares it, the surrogate is the same tensor with the ratio given
and with None (so the declaration is true), and REINFORCE under the identity correction gives the same
loss, gradient and metrics as the same loss made to compute the ratio (``reads_ratio`` set on that one
instance)."""

from __future__ import annotations

import torch

from sandbox.algorithms.api import PolicyLossInput
from sandbox.algorithms.objectives import OBJECTIVES
from sandbox.algorithms.objectives.base import SurrogateInput
from sandbox.algorithms.policy_loss import build_policy_loss


def _batch(requires_grad: bool = True) -> PolicyLossInput:
    gen = torch.Generator().manual_seed(0)
    logp = (-torch.rand(2, 8, 3, generator=gen)).requires_grad_(requires_grad)
    mu = logp.detach() - 0.1 * torch.rand(2, 8, 3, generator=gen)
    mask = torch.ones(2, 8, 3)
    mask[:, 1, 2] = 0.0
    return PolicyLossInput(
        logp=logp, behaviour_logp=mu, mask=mask, rewards=torch.rand(2, 8, generator=gen).round(), group_size=4
    )


def test_objectives_that_declare_no_ratio_do_not_read_it():
    declared = [e for e in OBJECTIVES.entries() if not e.impl.reads_ratio]
    assert declared, "no objective declares reads_ratio = False"
    inp = _batch()
    for entry in declared:
        method = OBJECTIVES.build(entry.config())
        adv = torch.rand(2, 8, generator=torch.Generator().manual_seed(1)).unsqueeze(-1).expand_as(inp.logp)
        common = dict(logp=inp.logp, anchor_logp=inp.behaviour_logp, adv=adv, fmask=inp.fmask)
        with_ratio = method.surrogate(SurrogateInput(ratio=torch.exp(inp.logp - inp.behaviour_logp), **common))
        without = method.surrogate(SurrogateInput(ratio=None, **common))
        assert torch.equal(with_ratio.per_token, without.per_token), entry.name


def test_reinforce_loss_is_the_same_with_and_without_the_ratio():
    from sandbox.algorithms.objectives.reinforce import ReinforceConfig

    objective = ReinforceConfig(baseline="group_mean")
    skipped = build_policy_loss(objective)
    assert not skipped.objective_impl.reads_ratio and skipped.correction.is_identity
    a, b = _batch(), _batch()
    out_a = skipped(a)
    computed = build_policy_loss(objective)
    computed.objective_impl.reads_ratio = True  # this instance only: the ratio is computed, and unused
    out_b = computed(b)
    assert torch.equal(out_a.loss, out_b.loss)
    out_a.loss.sum().backward()
    out_b.loss.sum().backward()
    assert torch.equal(a.logp.grad, b.logp.grad) and a.logp.grad.abs().sum() > 0
    assert out_a.metrics.keys() == out_b.metrics.keys()
    for k in out_a.metrics:
        assert torch.equal(torch.as_tensor(out_a.metrics[k]), torch.as_tensor(out_b.metrics[k])), k
