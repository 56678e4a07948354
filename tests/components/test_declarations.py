"""What each family's base class lets a component declare, and the defaults a component that declares
nothing gets (``CONTRIBUTING.md#what-a-component-declares``): hand values for the shipped controls
(the formulas budget.py, plan.py, time_to_target.py and the claims used to hold by name), the
conservative defaults, the task's budget shape, the delay's CDF and the correction context."""

from __future__ import annotations

import math
from typing import Literal

import pytest
import torch

from sandbox.algorithms.api import PolicyLossInput
from sandbox.algorithms.corrections import CorrectionResult
from sandbox.algorithms.objectives import GRPOConfig
from sandbox.algorithms.policy_loss import build_policy_loss
from sandbox.analysis.time_to_target import is_synchronous
from sandbox.system.delays import DELAYS
from sandbox.system.staleness import (
    AsyncRatioControlConfig,
    ControlConfig,
    FixedLagControlConfig,
    MaxLagControlConfig,
    SyncControlConfig,
)
from sandbox.tasks.bandit import BanditConfig, BanditTask
from sandbox.tasks.base import BudgetShape, Task


def test_shipped_controls_declare_their_formulas():
    B, W = 8, 16
    assert SyncControlConfig().ahead_groups(B, W) == (8, "the groups of the next step")
    assert FixedLagControlConfig(k=3).ahead_groups(B, W) == (32, "groups queued ahead")
    assert MaxLagControlConfig(k_max=2).ahead_groups(B, W) == (24, "groups queued ahead")
    assert MaxLagControlConfig(k_max=2, enforcement="drop", queue_capacity=10).ahead_groups(B, W) == (10, "the queue")
    assert AsyncRatioControlConfig(alpha=1.5).ahead_groups(B, W) == (24, "groups queued ahead")  # (ceil 1.5 + 1)·8
    assert [c.kept_versions() for c in (SyncControlConfig(), FixedLagControlConfig(k=3))] == [2, 5]
    assert [
        c.drops_stale()
        for c in (
            SyncControlConfig(),
            FixedLagControlConfig(),
            MaxLagControlConfig(),
            MaxLagControlConfig(enforcement="drop"),
            AsyncRatioControlConfig(),
        )
    ] == [False, False, False, True, True]
    assert [
        c.max_in_flight(B)
        for c in (
            SyncControlConfig(),
            FixedLagControlConfig(k=1),
            MaxLagControlConfig(k_max=2),
            AsyncRatioControlConfig(alpha=0.5),
        )
    ] == [8, 16, 24, 12]
    assert [
        c.bound_field for c in (SyncControlConfig, FixedLagControlConfig, MaxLagControlConfig, AsyncRatioControlConfig)
    ] == [None, "k", "k_max", "alpha"]
    assert AsyncRatioControlConfig.with_bound({"kind": "async_ratio", "alpha": 1.0}, 4) == {
        "kind": "async_ratio",
        "alpha": 4.0,
    }
    assert (
        MaxLagControlConfig.describe_bound({"kind": "max_lag", "k_max": 4, "enforcement": "drop"})
        == "max_lag k_max=4 (drop)"
    )
    assert [
        is_synchronous(c)
        for c in (
            SyncControlConfig(),
            FixedLagControlConfig(k=0),
            FixedLagControlConfig(k=1),
            AsyncRatioControlConfig(alpha=0.0),
        )
    ] == [True, True, False, False]
    assert is_synchronous({"kind": "fixed_lag", "k": 0}) and not is_synchronous({"kind": "nope"})
    assert (
        SyncControlConfig().fixed_lag(),
        FixedLagControlConfig(k=3).fixed_lag(),
        MaxLagControlConfig().fixed_lag(),
    ) == (0, 3, None)
    assert "queue_capacity" in MaxLagControlConfig(enforcement="drop", queue_capacity=4).batch_problem(8)
    assert MaxLagControlConfig(enforcement="drop", queue_capacity=8).batch_problem(8) is None


class _Silent(ControlConfig):  # declares nothing (not registered: the methods are asked directly)
    kind: Literal["silent"] = "silent"


def test_a_control_that_declares_nothing_gets_conservative_answers():
    c = _Silent()
    groups, what = c.ahead_groups(8, 16)
    assert groups == 24 and "unknown" in what and "conservatively" in what
    assert c.kept_versions() == 2 and c.drops_stale() is True
    assert c.max_in_flight(8) is None and c.is_synchronous() is False and c.fixed_lag() is None
    assert c.batch_problem(8) is None and _Silent.with_bound({"kind": "silent"}, 3) is None
    assert _Silent.describe_bound({"kind": "silent"}) == "silent"


class _Unsized(BanditTask):  # a task that declares no budget shape: measured by building it
    budget_shape = classmethod(Task.budget_shape.__func__)


def test_a_task_that_declares_no_shape_is_measured_and_says_so():
    shape = _Unsized.budget_shape(BanditConfig(num_arms=7))
    assert (shape.model, shape.T, shape.params) == ("toy", 1, 7) and "conservatively" in shape.note


def test_shipped_tasks_declare_their_shape():
    assert BanditTask.budget_shape(BanditConfig(num_arms=7)) == BudgetShape("toy", 1, None, 7, 4)


def test_delays_declare_cdf_and_fixed_value():
    exp = DELAYS["exponential"].config(mean=2.0)
    assert exp.cdf()(2.0) == pytest.approx(1 - math.exp(-1))
    assert DELAYS["constant"].config(value=3.0).fixed_value() == 3.0 and exp.fixed_value() is None
    assert DELAYS["empirical"].config(values=[1.0]).cdf() is None  # no closed form declared


def test_the_correction_context_carries_the_loss_inputs():
    """A correction reads token versions, the learner version, the group size and the extras from its
    context: a new staleness-aware correction needs no edit of corrections/base.py or policy_loss.py."""
    loss = build_policy_loss(GRPOConfig())
    seen = {}

    def record(ctx):
        seen.update(versions=ctx.token_versions, learner=ctx.learner_version, G=ctx.group_size, extras=ctx.extras)
        return CorrectionResult()

    loss.correction = record
    versions = torch.tensor([[1, 2], [0, 2]])
    logp = torch.zeros(2, 2, requires_grad=True)
    loss(
        PolicyLossInput(
            logp=logp,
            behaviour_logp=torch.zeros(2, 2),
            mask=torch.ones(2, 2),
            rewards=torch.tensor([0.0, 1.0]),
            group_size=2,
            token_versions=versions,
            learner_version=3,
            extras={"x": 1},
        )
    )
    assert seen["versions"] is versions and seen["learner"] == 3 and seen["G"] == 2 and seen["extras"] == {"x": 1}


def test_sweep_preloads_once_per_distinct_task(monkeypatch):
    from sandbox.sweep.execute import warm_start
    from sandbox.tasks.lm import LMTask, LMTaskConfig

    calls = []
    monkeypatch.setattr(LMTask, "preload", classmethod(lambda cls, cfg: calls.append(cfg)))

    class Run:
        def __init__(self, task):
            self._task = task

        def scenario(self):
            return type("S", (), {"task": self._task})()

    on, off = LMTaskConfig(), LMTaskConfig(warmstart={"enabled": False})
    assert LMTask.needs_preload(on) and not LMTask.needs_preload(off) and not BanditTask.needs_preload(BanditConfig())
    assert warm_start([Run(on), Run(on), Run(off), Run(BanditConfig())]) == 1 and calls == [on]
