"""The rollout mask is computed once per lengths and width, and never served stale."""

from __future__ import annotations

import torch

from sandbox.tasks.rollouts import Rollouts


def _group(lengths: list[list[int]], width: int) -> Rollouts:
    ro = Rollouts.empty(len(lengths), len(lengths[0]))
    n = torch.tensor(lengths)
    tokens = torch.ones(*n.shape, width, dtype=torch.long)
    return ro.extend(tokens, torch.full(tokens.shape, -0.5), n, n == width, 3)


def _expected(ro: Rollouts) -> torch.Tensor:
    return (torch.arange(ro.width) < ro.lengths.unsqueeze(-1)).float()


def test_mask_is_shared_and_recomputed_when_its_inputs_change():
    ro = _group([[2, 4], [1, 3]], 4)
    first = ro.mask
    assert ro.mask is first  # computed once
    torch.testing.assert_close(first, _expected(ro), rtol=0, atol=0)
    ro.lengths[0, 0] = 4  # in place: the version counter moves
    torch.testing.assert_close(ro.mask, _expected(ro), rtol=0, atol=0)
    ro.mask[1, 1, 0] = 0.0  # a reader that wrote into the shared mask: the next read recomputes
    torch.testing.assert_close(ro.mask, _expected(ro), rtol=0, atol=0)
    cut = ro.truncate(2)  # a new object: its own mask
    torch.testing.assert_close(cut.mask, _expected(cut), rtol=0, atol=0)


def test_padding_is_cleared_unless_every_response_fills_the_width():
    ro = _group([[2, 4], [1, 3]], 4)
    pad = _expected(ro) == 0
    assert (ro.tokens[pad] == 0).all() and (ro.token_versions[pad] == -1).all() and (ro.behaviour_logp[pad] == 0).all()
    full = _group([[4, 4], [4, 4]], 4)
    assert (full.tokens == 1).all() and (full.token_versions == 3).all()
