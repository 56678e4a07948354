"""The head version of a response: the smallest non-negative token version, or NO_TOKEN."""

from __future__ import annotations

import torch

from sandbox.learner.trainer import response_lags
from sandbox.tasks.rollouts import NO_TOKEN, oldest_versions


def _reference(versions: torch.Tensor) -> torch.Tensor:
    return versions.masked_fill(versions < 0, NO_TOKEN).amin(-1)


def test_matches_masked_amin_on_random_versions_with_padding():
    gen = torch.Generator().manual_seed(0)
    versions = torch.randint(0, 1000, (5, 7, 9), generator=gen)
    pad = torch.rand(versions.shape, generator=gen) < 0.4
    versions[pad] = -1
    versions[0, 0] = -1  # a response with no token
    versions[1, 2, ::2] = torch.randint(-(2**62), -1, (5,), generator=gen)  # other negative values are padding too
    versions[2, 3] = -(2**63)
    versions[3, 4, 0] = 2**62  # huge real versions still count
    out = oldest_versions(versions)
    assert out.dtype == torch.int64
    torch.testing.assert_close(out, _reference(versions), rtol=0, atol=0)
    assert out[0, 0] == NO_TOKEN and out[2, 3] == NO_TOKEN


def test_leaves_its_input_alone_and_gives_response_lags():
    versions = torch.tensor([[[3, 1, 2, -1], [-1, -1, -1, -1], [0, 5, -1, -1]]])
    before = versions.clone()
    assert oldest_versions(versions).tolist() == [[1, NO_TOKEN, 0]]
    assert torch.equal(versions, before)
    assert response_lags(7, versions).tolist() == [[6, 7 - NO_TOKEN, 7]]
