"""The ``minibatch_lag`` check (T11) rejects a simulator whose learner gets the version count wrong,
not only a perturbed prediction."""

from __future__ import annotations

import pytest
import torch

from sandbox.checks import CHECKS
from sandbox.learner.trainer import PolicyLearner


class VersionPerBatch(PolicyLearner):
    """Bug: the version does not advance within a batch (every step of batch b at version S·b)."""

    def optimizer_version(self, batch, epoch, minibatch):
        return batch * self.updates_per_batch


class CountsBatches(PolicyLearner):
    """Bug: versions count batches, not optimizer steps (AReaL's counter), so no in-batch lag."""

    def optimizer_version(self, batch, epoch, minibatch):
        return batch

    def behaviour_versions(self, versions):
        return versions


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_passes_as_stated_and_rejects_the_perturbed_prediction():
    check = CHECKS["minibatch_lag"]
    good = check.run(quick=True)
    assert good.passed and len(good.points) >= 2
    assert not check.run(quick=True, perturb=check.perturbation).passed


@pytest.mark.parametrize("broken", [VersionPerBatch, CountsBatches])
def test_rejects_a_learner_with_a_wrong_version_count(broken):
    result = CHECKS["minibatch_lag"].run(quick=True, learner_cls=broken)
    assert not result.passed
    # the one-step-per-batch point does not involve the bug and still passes
    assert [p.ok for p in result.points if p.note.startswith("m = 1, E = 1")] == [True]
