"""A mask known to be all ones (``PolicyLossInput.full_mask``): the aggregation skips its product by the mask,
and the loss, its gradient and its metrics are those of the product to the bit."""

from __future__ import annotations

import pytest
import torch

from sandbox.algorithms import build_policy_loss
from sandbox.algorithms._tensor import aggregate
from sandbox.algorithms.api import PolicyLossInput
from sandbox.algorithms.objectives import ReinforceConfig
from sandbox.learner.metric_levels import metric_set
from sandbox.tasks.rollouts import Rollouts

MODES = ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"]


@pytest.mark.parametrize("mode", MODES)
def test_aggregate_without_a_mask_is_the_product_by_ones(mode):
    gen = torch.Generator().manual_seed(3)
    values = []
    for mask in (torch.ones(2, 6, 3), None):
        x = torch.randn(2, 6, 3, generator=torch.Generator().manual_seed(3), requires_grad=True)
        out = aggregate(x * 1.7, mask, mode, 5)
        out.sum().backward()
        values.append((out.detach(), x.grad))
    assert torch.equal(values[0][0], values[1][0]) and torch.equal(values[0][1], values[1][1])
    x = torch.randn(2, 6, 3, generator=gen)
    mask = (torch.rand(2, 6, 3, generator=gen) < 0.5).float()
    assert not torch.equal(aggregate(x, mask, mode, 5), aggregate(x, None, mode, 5))  # the comparison can fail


def _loss(full: bool, monitors, shift: float = 0.0):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(1, 5, generator=gen, requires_grad=True)
    tokens = torch.randint(0, 5, (1, 8, 1), generator=gen)
    logp = torch.log_softmax(logits, -1).gather(-1, tokens.reshape(1, 8)).reshape(1, 8, 1)
    inp = PolicyLossInput(
        logp=logp,
        behaviour_logp=logp.detach() + shift,
        mask=torch.ones(1, 8, 1),
        rewards=torch.rand(1, 8, generator=gen),
        group_size=4,
        full_mask=full,
        monitors=monitors,
    )
    out = build_policy_loss(ReinforceConfig(baseline="group_mean"))(inp)
    out.loss.sum().backward()
    return out, logits.grad


@pytest.mark.parametrize("shift", [0.0, 0.25])
@pytest.mark.parametrize("level", ["lean", "standard"])
def test_policy_loss_with_a_full_mask_is_the_masked_one(level, shift):
    """At ``standard`` with on-policy data (``shift = 0``: log ρ = 0) the IS monitors come from the shared
    on-policy values, otherwise they are measured: both are the measured ones to the bit."""
    monitors = metric_set(level)
    (a, ga), (b, gb) = _loss(True, monitors, shift), _loss(False, monitors, shift)
    assert torch.equal(a.loss, b.loss) and torch.equal(ga, gb)
    assert a.metrics.keys() == b.metrics.keys()
    for k in a.metrics:
        assert torch.equal(torch.as_tensor(a.metrics[k]), torch.as_tensor(b.metrics[k])), k


def test_rollouts_know_a_full_mask_only_for_complete_one_token_groups():
    groups = [Rollouts.one_token(torch.tensor([[1, 2, 0]]), torch.zeros(1, 3), v) for v in (0, 1)]
    assert all(g.full for g in groups) and Rollouts.cat(groups).full
    assert torch.equal(Rollouts.cat(groups).mask, torch.ones(1, 6, 1))
    empty = Rollouts.empty(1, 3)
    two = empty.extend(torch.ones(1, 3, 2, dtype=torch.long), torch.zeros(1, 3, 2), torch.tensor([[2, 1, 2]]),
                       torch.ones(1, 3, dtype=torch.bool), 0)  # fmt: skip
    assert not two.full and not Rollouts.cat([two, two]).full  # padded: a 0 in the mask
    lengths = groups[0].lengths
    lengths.add_(0)  # a write to the shared lengths: no longer known
    assert not groups[0].full


def test_on_policy_is_monitors_are_measured_ones_and_stand_down():
    from sandbox.algorithms.diagnostics import masked_is_metrics
    from sandbox.algorithms.policy_loss import _is_monitors

    ones, cache = torch.ones(2, 6, 1), {}
    for _ in range(2):  # computed, then shared
        shared = _is_monitors(torch.zeros(2, 6, 1), ones, True, cache)
        measured = masked_is_metrics(torch.zeros(2, 6, 1), ones)
        assert shared.keys() == measured.keys()
        assert all(torch.equal(shared[k], measured[k]) for k in measured)
    shared["is/ess"].add_(1.0)  # a write to a shared value: new ones are made
    assert torch.equal(_is_monitors(torch.zeros(2, 6, 1), ones, True, cache)["is/ess"], measured["is/ess"])
    x = torch.zeros(2, 6, 1)
    x[1, 2, 0] = 0.5  # off-policy: measured
    got = _is_monitors(x.clone(), ones, True, cache)
    assert torch.equal(got["is/log_ratio_mean"], masked_is_metrics(x.clone(), ones)["is/log_ratio_mean"])
    assert not torch.equal(got["is/log_ratio_mean"], measured["is/log_ratio_mean"])  # the comparison can fail
