"""T10 through the sandbox's own loss: the variance of the importance-weighted REINFORCE estimator
against the exact identity V(b) = V(b*) + E_μ[W](b − b*)², b* = E_μ[W R]/E_μ[W] (VCPO's OPOB).

This was the ``opob_variance`` check of ``sandbox check`` until issue 34: it never runs the simulator
(no cluster, no timing, no lag), so it cannot catch a simulator bug; it tests the loss implementation
against exact enumeration, which is a unit test's job (docs/theory.md#t10).

Exact enumeration on the 3-action softmax of docs/theory.md#t10 (π = (0.5, 0.3, 0.2), μ = (0.4, 0.4, 0.2),
R = (1, 0, 0.5)). Measurement: M independent batches of B actions from μ, each carried as one replica
of a bandit policy; the sandbox's loss (``reinforce`` with a constant baseline, untruncated sequence TIS)
is differentiated by autograd, one estimate ĝ per replica; B·tr Cov(ĝ) across replicas against V(b).
The SE of a variance estimate comes from the per-replica squared deviations. Tolerance 4·SE; a 10%
distortion of V(b) must be rejected at some b."""

from __future__ import annotations

import math

import torch

from sandbox.algorithms import ReinforceConfig, TISConfig, build_policy_loss
from sandbox.algorithms.api import PolicyLossInput
from theory.optimal_baseline import enumerate_softmax

PI, MU, REWARD = [0.5, 0.3, 0.2], [0.4, 0.4, 0.2], [1.0, 0.0, 0.5]


def estimator_variance(b: float, batch: int, replicas: int, seed: int) -> tuple[float, float]:
    """``(B·tr Cov(ĝ), its SE)`` over ``replicas`` independent batches of ``batch`` actions from μ."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.log(torch.tensor(PI, dtype=torch.float64)).repeat(replicas, 1).requires_grad_(True)
    mu = torch.tensor(MU, dtype=torch.float64)
    actions = torch.multinomial(mu.expand(replicas, -1), batch, replacement=True, generator=gen)  # (M, B)
    logp = torch.log_softmax(logits, -1).gather(-1, actions).unsqueeze(-1)
    inp = PolicyLossInput(
        logp=logp,
        behaviour_logp=torch.log(mu)[actions].unsqueeze(-1),
        mask=torch.ones_like(logp),
        rewards=torch.tensor(REWARD, dtype=torch.float64)[actions],
        group_size=batch,
    )
    loss = build_policy_loss(
        ReinforceConfig(baseline="constant", constant_baseline=b), TISConfig(level="sequence", C=1e12)
    )
    (grad,) = torch.autograd.grad(loss(inp).loss.sum(), logits)
    g = -grad.detach().numpy()  # loss = −objective: the estimator is minus the loss gradient
    dev = ((g - g.mean(0)) ** 2).sum(1) * batch
    return float(dev.mean() * replicas / (replicas - 1)), float(dev.std(ddof=1) / math.sqrt(replicas))


def test_estimator_variance_is_the_opob_identity():
    exact = enumerate_softmax(PI, MU, REWARD)
    distorted = []
    for i, b in enumerate([0.0, 0.3, 0.5, 0.6, 0.8, exact.b_star]):
        measured, se = estimator_variance(b, 16, 20_000, seed=i)
        assert abs(measured - exact.variance(b)) <= 4 * se, (b, measured, exact.variance(b), se)
        distorted.append(abs(measured - 1.1 * exact.variance(b)) > 4 * se)
    assert any(distorted)  # the comparison can fail
    # the minimum over the sweep is at b* (OPOB)
    assert exact.variance(exact.b_star) <= min(exact.variance(b) for b in (0.0, 0.3, 0.5, 0.6, 0.8))
