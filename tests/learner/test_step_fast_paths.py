"""The learner step's shortcuts chosen per run (benchmarks/README.md, the lean bandit row) against the paths
they replace: the one-replica divergence test on Python floats decides as the tensor test does, the weights
a diverging replica is restored from are the published snapshot only while neither it nor the weights
changed, and a one-replica run's every number is that of the general paths. Each comparison fails if a
shortcut decides at another step, restores other weights or changes a bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sandbox.learner.trainer import PolicyLearner
from sandbox.run.runner import prepare_run, run_scenario
from sandbox.scenario.api import validate_scenario


def quadratic(lr: float, steps: int, **run):
    return validate_scenario(
        {
            "task": {"name": "quadratic", "dim": 20, "eig_min": 0.1, "eig_max": 1.0, "noise_std": 0.0, "replicas": 1},
            "system": {
                "num_workers": 3,
                "generation_time": {"kind": "constant", "value": 1.0},
                "train_time": {"kind": "constant", "value": 0.0},
                "staleness": {"kind": "fixed_lag", "k": 2},
            },
            "algorithm": {"group_size": 1, "groups_per_step": 1, "optimizer": {"name": "sgd", "lr": lr}},
            "run": {"steps": steps, "figures": False, **run},
        }
    )


def _general_learner(cls):
    """``cls`` with the one-replica shortcuts off: the tensor divergence test and a fresh pre-step copy."""

    class General(cls):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self._bounds_f32 = False

        def _weights_before_step(self):
            return [p.detach().clone() for p in self.plist]

    return General


def _same_results(a, b) -> None:
    assert a.status == b.status
    np.testing.assert_array_equal(a.diverged_at, b.diverged_at)
    assert list(a.metrics.columns) == list(b.metrics.columns)
    for col in a.metrics.columns:
        assert a.metrics[col].to_numpy().tobytes() == b.metrics[col].to_numpy().tobytes(), col
    assert list(a.replica_metrics) == list(b.replica_metrics)
    for k in a.replica_metrics:
        assert np.asarray(a.replica_metrics[k]).tobytes() == np.asarray(b.replica_metrics[k]).tobytes(), k


@pytest.mark.parametrize(
    "run",
    [
        {"max_loss": 1e6},  # the loss bound is crossed (a float32 value: the Python test decides)
        {"max_param_norm": 8.0},  # the weight-norm bound
        {"max_param_norm": 8.1},  # not a float32 value: the tensor test decides
        {},  # the default bounds: the weights overflow to inf and NaN first
    ],
)
def test_one_replica_divergence_is_decided_as_by_the_tensor_test(run):
    scn = quadratic(2.5, 120, **run)  # lr far above 2/λ_max: the iterates grow geometrically
    from sandbox.learner.trainer import OracleLearner

    fast, general = run_scenario(scn), run_scenario(scn, learner_cls=_general_learner(OracleLearner))
    assert fast.status == "diverged" and 0 < fast.diverged_at[0] < 120
    _same_results(fast, general)


def test_a_learning_one_replica_run_is_the_general_paths_run():
    scn = validate_scenario(
        {
            "task": {"name": "bandit", "num_arms": 6, "replicas": 1},
            "system": {"num_workers": 3, "staleness": {"kind": "max_lag", "k_max": 2}},
            "algorithm": {
                "group_size": 4,
                "groups_per_step": 2,
                "objective": {"name": "reinforce", "baseline": "group_mean"},
            },
            "run": {"steps": 30, "seed": 4, "figures": False, "metrics": "lean", "eval_every": 5},
        }
    )
    _same_results(run_scenario(scn), run_scenario(scn, learner_cls=_general_learner(PolicyLearner)))


def test_the_pre_step_weights_are_the_snapshot_only_while_both_are_unchanged():
    scn = quadratic(0.1, 4)
    _, learner, _ = prepare_run(scn)
    published = learner.snapshot()
    before = learner._weights_before_step()
    assert all(b is published[k] for b, k in zip(before, learner.names))
    with torch.no_grad():
        learner.plist[0].add_(1.0)  # the weights moved since the snapshot: new copies of the current weights
    before = learner._weights_before_step()
    assert before[0] is not published[learner.names[0]] and torch.equal(before[0], learner.plist[0])
    published = learner.snapshot()
    published[learner.names[0]].mul_(2.0)  # the snapshot was written to: new copies
    before = learner._weights_before_step()
    assert before[0] is not published[learner.names[0]] and torch.equal(before[0], learner.plist[0])


def test_oracle_sample_lags_are_the_repeated_versions():
    """The oracle learner's per-sample versions, built as one list of ints, are ``repeat_interleave`` of the
    groups' versions by their sizes (groups of different sizes and versions)."""
    from sandbox.learner.trainer import OracleLearner
    from sandbox.system.cluster import Job
    from sandbox.tasks.base import GradientSample

    _, learner, _ = prepare_run(quadratic(0.1, 4))
    assert isinstance(learner, OracleLearner)
    sizes, versions = (1, 3, 2), (5, 2, 4)
    jobs = [
        Job(id=i, worker=i, head_version=v, dispatch_time=0.0, payload=GradientSample(torch.zeros(1, n, 20), v, None))
        for i, (n, v) in enumerate(zip(sizes, versions))
    ]
    learner.compute_loss(7, jobs)
    expected = 7 - torch.tensor(versions).repeat_interleave(torch.tensor(sizes)).view(1, -1)
    assert torch.equal(learner._sample_lag, expected.double())


def test_scalar_backward_is_backward():
    """The engine call of a scalar's backward accumulates the gradients ``Tensor.backward`` does, to the bit,
    into gradients already there too; a tensor it does not cover takes ``backward`` and its error."""
    from sandbox.learner.trainer import _scalar_backward

    for dtype in (torch.float32, torch.float64):
        grads = []
        for fast in (True, False):
            w = torch.linspace(-2.0, 3.0, 7, dtype=dtype).reshape(1, 7).requires_grad_(True)
            for k in range(2):  # the second call accumulates
                loss = (torch.log_softmax(w * (k + 1.5), -1) * torch.arange(7.0, dtype=dtype)).sum()
                _scalar_backward(loss) if fast else loss.backward()
            grads.append(w.grad)
        assert torch.equal(grads[0], grads[1]), dtype
        assert not torch.equal(grads[0], 2 * grads[1])  # the comparison can fail
    with pytest.raises(RuntimeError, match="scalar"):
        _scalar_backward(torch.ones(2, requires_grad=True) * 2)


def test_one_replica_loss_backward_is_the_sums():
    """A one-replica loss ``(1,)`` starts the backward itself with the gradient 1.0 that ``loss.sum()``'s
    backward hands it: the same gradients to the bit, accumulated too, and no sum in the graph."""
    from sandbox.learner.trainer import _scalar_backward

    grads = []
    for fast in (True, False):
        w = torch.linspace(-2.0, 3.0, 7).reshape(1, 7).requires_grad_(True)
        for k in range(2):
            loss = (torch.log_softmax(w * (k + 1.5), -1) * torch.arange(7.0)).sum(-1) / 3.0  # (1,)
            _scalar_backward(loss) if fast else loss.sum().backward()
        grads.append(w.grad)
    assert torch.equal(grads[0], grads[1])
    assert not torch.equal(grads[0], 2 * grads[1])  # the comparison can fail
