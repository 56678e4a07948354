"""``Objective.reads_log_seq_rho = False`` lets the policy loss skip log ρ = log π_θ − log μ when nothing else
reads it (the identity correction, no recorder, no importance-sampling monitor: ``run.metrics = "lean"``).
Every objective that declares it computes the same advantages with ``log_seq_rho`` given and with None (so
the declaration is true), and REINFORCE at lean monitors gives the loss, gradient and metrics of the
loss that computes everything, to the bit."""

from __future__ import annotations

import pytest
import torch

from sandbox.algorithms.api import PolicyLossInput
from sandbox.algorithms.objectives import OBJECTIVES
from sandbox.algorithms.objectives.reinforce import ReinforceConfig
from sandbox.algorithms.policy_loss import build_policy_loss
from sandbox.learner.metric_levels import metric_set


def _batch(monitors=None) -> PolicyLossInput:
    gen = torch.Generator().manual_seed(0)
    logp = (-torch.rand(2, 8, 3, generator=gen)).requires_grad_(True)
    mu = logp.detach() - 0.1 * torch.rand(2, 8, 3, generator=gen)
    mask = torch.ones(2, 8, 3)
    mask[:, 1, 2] = 0.0
    return PolicyLossInput(
        logp=logp,
        behaviour_logp=mu,
        mask=mask,
        rewards=torch.rand(2, 8, generator=gen).round(),
        group_size=4,
        monitors=monitors,
    )


def _objectives_without_log_seq_rho():
    built = []
    for entry in OBJECTIVES.entries():
        baselines = ("none", "constant", "ema", "group_mean", "leave_one_out", "opob", "optimal")
        configs = [ReinforceConfig(baseline=b) for b in baselines] if entry.name == "reinforce" else [entry.config()]
        for cfg in configs:
            method = OBJECTIVES.build(cfg)
            if not method.reads_log_seq_rho:
                built.append((f"{entry.name}:{getattr(cfg, 'baseline', '')}", cfg))
    return built


def test_some_objective_declares_it():
    names = [n for n, _ in _objectives_without_log_seq_rho()]
    assert "reinforce:group_mean" in names, names


@pytest.mark.parametrize("name,cfg", _objectives_without_log_seq_rho())
def test_declared_objectives_do_not_read_log_seq_rho(name, cfg):
    inp = _batch()
    given = OBJECTIVES.build(cfg).advantages(inp, torch.randn(2, 8, generator=torch.Generator().manual_seed(2)))
    without = OBJECTIVES.build(cfg).advantages(inp, None)
    assert torch.equal(given[0], without[0]), name
    assert given[1].keys() == without[1].keys()
    for k in given[1]:
        assert torch.equal(given[1][k], without[1][k]), (name, k)


@pytest.mark.parametrize("baseline", ["group_mean", "leave_one_out", "none"])
def test_lean_reinforce_skips_log_rho_and_keeps_every_bit(baseline):
    objective = ReinforceConfig(baseline=baseline)
    lean, full = _batch(metric_set("lean")), _batch()
    skipping = build_policy_loss(objective)
    seen = []
    advantages = skipping.objective_impl.advantages
    skipping.objective_impl.advantages = lambda inp, lsr: (seen.append(lsr), advantages(inp, lsr))[1]
    out_lean = skipping(lean)
    assert seen == [None]  # log ρ was not computed
    out_full = build_policy_loss(objective)(full)
    assert torch.equal(out_lean.loss, out_full.loss)
    out_lean.loss.sum().backward()
    out_full.loss.sum().backward()
    assert torch.equal(lean.logp.grad, full.logp.grad) and lean.logp.grad.abs().sum() > 0
    assert set(out_lean.metrics) <= set(out_full.metrics)
    for k in out_lean.metrics:
        assert torch.equal(out_lean.metrics[k], out_full.metrics[k]), k


def test_a_recorder_or_an_is_monitor_still_gets_log_rho():
    objective = ReinforceConfig(baseline="group_mean")
    loss = build_policy_loss(objective)
    contexts = []
    loss.recorder = lambda context, result: contexts.append(context)
    loss(_batch(metric_set("lean")))
    assert len(contexts) == 1 and contexts[0].log_rho is not None
    out = build_policy_loss(objective)(_batch(metric_set("lean", figures=True)))  # the figures read is/ess_ratio
    assert "is/ess_ratio" in out.metrics
