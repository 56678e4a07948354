"""T10: the variance of the sandbox's importance-weighted REINFORCE estimator against the exact
identity V(b) = V(b*) + E_μ[W](b − b*)², with b* = E_μ[W R]/E_μ[W] (VCPO's OPOB).

Prediction (theory.optimal_baseline): exact enumeration on the 3-action softmax of docs/theory.md#t10
(π = (0.5, 0.3, 0.2), μ = (0.4, 0.4, 0.2), R = (1, 0, 0.5)). Measurement: M independent batches of
B actions from μ, each carried as one replica of a bandit policy; the sandbox's loss
(``reinforce`` with a constant baseline, untruncated sequence TIS) is differentiated by autograd,
giving one estimate ĝ per replica; B·tr Cov(ĝ) across replicas is compared with V(b). The SE of a
variance estimate comes from the per-replica squared deviations. Tolerance 4·SE. The x axis is b;
the last point uses b = b* itself (the OPOB value).
"""

from __future__ import annotations

import math

import torch

from theory.optimal_baseline import enumerate_softmax

from ..algorithms import build_policy_loss
from ..algorithms.api import PolicyLossInput
from ..algorithms import ReinforceConfig, TISConfig
from .base import CheckResult, Point, sweeps

PI, MU, REWARD = [0.5, 0.3, 0.2], [0.4, 0.4, 0.2], [1.0, 0.0, 0.5]
B_STAR = round(enumerate_softmax(PI, MU, REWARD).b_star, 5)  # the last point of the sweep


def estimator_variance(b: float, batch: int, replicas: int, seed: int) -> tuple[float, float]:
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
    loss = build_policy_loss(ReinforceConfig(baseline="constant", constant_baseline=b), TISConfig(level="sequence", C=1e12))
    out = loss(inp)
    (grad,) = torch.autograd.grad(out.loss.sum(), logits)
    g = -grad.detach().numpy()  # loss = −objective: the estimator is minus the loss gradient
    dev = ((g - g.mean(0)) ** 2).sum(1) * batch
    return float(dev.mean() * replicas / (replicas - 1)), float(dev.std(ddof=1) / math.sqrt(replicas))


@sweeps("b", labels={B_STAR: f"b = b* = {B_STAR:g} (OPOB)"})
def run(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    exact = enumerate_softmax(PI, MU, REWARD)
    baselines = [0.0, 0.3, 0.5, 0.6, 0.8, exact.b_star]
    batch, replicas = (16, 20_000) if quick else (16, 200_000)
    result = CheckResult(
        name="opob_variance",
        claim="B·trCov(ĝ_b) = V(b*) + E_μ[W](b − b*)², minimised at the OPOB b* = E[WR]/E[W]",
        x_label="constant baseline b (last point: b = b*)",
        y_label="B · tr Cov(ĝ)",
        justification=f"4·SE of the variance estimate over {replicas} independent batches of B = {batch}",
        log_y=True,
    )
    for i, b in enumerate(baselines):
        measured, se = estimator_variance(b, batch, replicas, seed=i)
        predicted = perturb * exact.variance(b)
        result.points.append(Point(round(b, 5), predicted, measured, se, 4 * se, abs(measured - predicted) <= 4 * se))
    return result
