"""The ``minibatch_lag`` check (T11) rejects a simulator whose learner gets the version count wrong,
not only a perturbed prediction."""

from __future__ import annotations

import pytest

from sandbox.checks.api import CHECKS
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


@pytest.mark.parametrize("broken", [VersionPerBatch, CountsBatches])
def test_rejects_a_learner_with_a_wrong_version_count(broken):
    result = CHECKS["minibatch_lag"].run(quick=True, learner_cls=broken)
    assert not result.passed
    # the one-step-per-batch point does not involve the bug and still passes
    assert [p.ok for p in result.points if p.note.startswith("m = 1, E = 1")] == [True]
