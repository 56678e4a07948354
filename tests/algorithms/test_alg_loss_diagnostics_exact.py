"""The policy loss's diagnostics take the same values as their plain formulas, to the bit."""

from __future__ import annotations

import torch

from sandbox.algorithms._tensor import as_float, masked_frac, token_mean
from sandbox.algorithms.policy_loss import token_lag_metrics


def _lag_reference(version: int, token_versions: torch.Tensor, fmask: torch.Tensor) -> dict[str, torch.Tensor]:
    lag = (version - token_versions.to(fmask.dtype)).expand_as(fmask)
    return {
        "staleness/mean": token_mean(lag, fmask),
        "staleness/max": torch.where(fmask > 0, lag, torch.full_like(lag, -1e9)).amax((-2, -1)),
    }


def _masks(gen: torch.Generator, shape: tuple[int, ...]) -> list[torch.Tensor]:
    binary = (torch.rand(shape, generator=gen) < 0.7).float()
    binary[0] = 0.0  # a replica with no valid token
    odd = torch.rand(shape, generator=gen) * 2 - 0.5  # fractions and negatives
    odd[1, 0, 0] = float("nan")
    return [binary, odd, binary.double()]


def test_token_lag_metrics_match_the_plain_formulas():
    gen = torch.Generator().manual_seed(3)
    shape = (4, 6, 5)
    for version in (0, 7, 2**25 + 1):  # the last is not a float32
        for fmask in _masks(gen, shape):
            for versions in (torch.randint(-1, 9, shape, generator=gen), torch.randint(-1, 9, shape[1:], generator=gen)):
                before = versions.clone()
                got, want = token_lag_metrics(version, versions, fmask), _lag_reference(version, versions, fmask)
                assert list(got) == list(want)
                for key in want:
                    torch.testing.assert_close(got[key], want[key], rtol=0, atol=0, equal_nan=True)
                assert torch.equal(versions, before)


def test_bool_flags_become_the_same_floats():
    gen = torch.Generator().manual_seed(4)
    flag = torch.rand(3, 4, 5, generator=gen) < 0.5
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        assert torch.equal(as_float(flag, dtype), flag.to(dtype))
    fmask = (torch.rand(3, 4, 5, generator=gen) < 0.8).float()
    torch.testing.assert_close(masked_frac(flag, fmask), token_mean(flag.float(), fmask), rtol=0, atol=0)
    assert torch.equal(as_float(flag.long(), torch.float32), flag.float())  # non-bool flags convert as before
