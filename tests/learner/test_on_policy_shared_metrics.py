"""The staleness and IS monitors of a batch of complete one-token groups sampled at the learner's own version
(every synchronous step: lag 0, log ρ = 0) come from values computed once per shape and run and shared: a run's
tables are those of the run that measures them at every step, to the bit; the shortcut stands down for older
tokens, for another mask and after a write to a shared value; a bug planted in the functions it computes with
changes the run's numbers, and does not outlive its run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sandbox.algorithms.policy_loss as policy_loss
import sandbox.learner.trainer as trainer
from sandbox.learner.trainer import _fresh_staleness, response_lags, staleness_metrics
from sandbox.run.runner import _result, prepare_run
from sandbox.scenario.api import validate_scenario


def bandit(staleness: dict) -> dict:
    return {
        "task": {"name": "bandit", "num_arms": 6, "replicas": 2},
        "system": {"num_workers": 4, "staleness": staleness},
        "algorithm": {
            "group_size": 4,
            "groups_per_step": 2,
            "objective": {"name": "reinforce", "baseline": "group_mean"},
        },
        "run": {"steps": 12, "seed": 5, "figures": False, "eval_every": 3},
    }


def simulate(data: dict):
    scn = validate_scenario(data)
    _, learner, cluster = prepare_run(scn)
    return _result(scn, cluster.run(scn.run.steps), learner)


@pytest.mark.parametrize("staleness", [{"kind": "sync"}, {"kind": "max_lag", "k_max": 2}])
def test_a_run_with_the_shared_values_is_the_measuring_run(monkeypatch, staleness):
    shared = simulate(bandit(staleness))
    calls = {"staleness": 0, "is": 0}

    def fresh_never(step, versions, mask, cache):
        calls["staleness"] += 1
        return None, None

    def measured(masked_twice, fmask, full_mask, cache):
        calls["is"] += 1
        return policy_loss.masked_is_metrics(masked_twice, fmask)

    monkeypatch.setattr(trainer, "_fresh_staleness", fresh_never)
    monkeypatch.setattr(policy_loss, "_is_monitors", measured)
    each = simulate(bandit(staleness))
    assert calls["staleness"] == calls["is"] == 12  # both shortcuts were in the path at every step
    assert list(shared.metrics.columns) == list(each.metrics.columns)
    assert {"staleness/mean", "is/ess_ratio"} <= set(shared.metrics.columns)
    for name in shared.metrics.columns:
        a, b = shared.metrics[name].to_numpy(), each.metrics[name].to_numpy()
        assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8)), name
    for name, values in shared.replica_metrics.items():
        assert np.array_equal(values.view(np.uint8), each.replica_metrics[name].view(np.uint8)), name


def test_fresh_staleness_is_the_measured_one_and_stands_down():
    mask, cache = torch.ones(2, 8, 1), {}
    versions = torch.full((2, 8, 1), 7, dtype=torch.long)
    for _ in range(2):  # computed, then shared
        head, got = _fresh_staleness(7, versions, mask, cache)
        want_head = response_lags(7, versions).double()
        want = staleness_metrics(7, versions, mask, want_head)
        assert torch.equal(head, want_head) and got.keys() == want.keys()
        assert all(torch.equal(got[k], want[k]) and got[k].dtype == want[k].dtype for k in want)
    got["staleness/mean"].add_(1.0)  # a write to a shared value: new ones are made
    assert torch.equal(_fresh_staleness(7, versions, mask, cache)[1]["staleness/mean"], want["staleness/mean"])
    older = versions.clone()
    older[1, 3, 0] = 5
    assert _fresh_staleness(7, older, mask, cache) == (None, None)
    assert not torch.equal(staleness_metrics(7, older, mask)["staleness/max"], want["staleness/max"])


def _column(result, name):
    return result.metrics[name].to_numpy()


@pytest.mark.parametrize(
    "module, function, column",
    [(trainer, "staleness_metrics", "staleness/mean"), (policy_loss, "masked_is_metrics", "is/ess_ratio")],
)
def test_a_bug_in_what_the_shortcut_computes_with_changes_the_run(monkeypatch, module, function, column):
    clean = simulate(bandit({"kind": "sync"}))
    real = getattr(module, function)

    def off_by_one(*args):
        out = real(*args)
        return {**out, column: out[column] + 1.0}

    monkeypatch.setattr(module, function, off_by_one)
    planted = simulate(bandit({"kind": "sync"}))
    assert np.array_equal(_column(planted, column), _column(clean, column) + 1.0)
    monkeypatch.undo()
    again = simulate(bandit({"kind": "sync"}))  # the planted values stayed with their run
    assert np.array_equal(_column(again, column), _column(clean, column))
