"""Extending a group: the first continuation is kept without a copy only when nothing can differ."""

from __future__ import annotations

import torch

from sandbox.tasks.bitstring import BitStringConfig, BitStringTask
from sandbox.tasks.rollouts import Rollouts


def _continuation(R: int, G: int, S: int):
    tokens = torch.arange(R * G * S).reshape(R, G, S) % 2
    logp = -torch.rand(R, G, S, generator=torch.Generator().manual_seed(0))
    return tokens, logp, torch.full((R, G), S), torch.ones(R, G, dtype=torch.bool)


def test_first_continuation_is_kept_and_later_ones_are_appended():
    tokens, logp, lengths, ended = _continuation(2, 3, 4)
    first = Rollouts.empty(2, 3).extend(tokens, logp, lengths, ended & False, 5)
    assert first.tokens is tokens and first.behaviour_logp is logp
    assert first.token_versions.tolist() == torch.full((2, 3, 4), 5).tolist()
    more = first.extend(
        tokens[..., :2], logp[..., :2], torch.tensor([[2, 2, 2], [1, 2, 2]]), ended, torch.tensor([6, 7])
    )
    assert more.width == 6 and more.tokens.data_ptr() != tokens.data_ptr()
    assert more.token_versions[1, 0].tolist() == [5, 5, 5, 5, 7, -1]  # padding cleared
    padded = Rollouts.empty(2, 3).extend(tokens, logp, lengths - 1, ended, 5)  # padding to clear: new tensors
    assert padded.tokens.data_ptr() != tokens.data_ptr() and (padded.tokens[..., -1] == 0).all()


def test_first_continuation_is_copied_when_the_copy_would_differ():
    tokens, logp, lengths, ended = _continuation(2, 3, 4)
    cases = {
        "strided": (tokens[..., ::2], logp[..., ::2]),
        "other dtypes": (tokens.int(), logp.double()),
    }
    for name, (t, lp) in cases.items():
        out = Rollouts.empty(2, 3).extend(t, lp, torch.full((2, 3), t.shape[-1]), ended, 1)
        assert out.tokens.dtype == torch.long and out.behaviour_logp.dtype == lp.dtype, name
        assert out.tokens.is_contiguous() and out.tokens.data_ptr() != t.data_ptr(), name
        assert torch.equal(out.tokens, t.long()), name


def test_bitstring_rewards_count_only_valid_tokens():
    task = BitStringTask(BitStringConfig(horizon=4, threshold=0.5, replicas=2))
    tokens = torch.ones(2, 3, 4, dtype=torch.long)
    full = Rollouts.empty(2, 3).extend(
        tokens, torch.zeros(2, 3, 4), torch.full((2, 3), 4), torch.ones(2, 3, dtype=torch.bool), 0
    )
    assert not full.padded and task.rewards(full, None).tolist() == [[1.0] * 3] * 2
    cut = Rollouts.empty(2, 3).extend(tokens, torch.zeros(2, 3, 4), torch.tensor([[4, 1, 2]] * 2), full.ended, 0)
    assert cut.padded and task.rewards(cut, None).tolist() == [[1.0, 0.0, 1.0]] * 2  # padding cleared to 0
    short = Rollouts(
        tokens=torch.ones(2, 3, 4, dtype=torch.long),
        behaviour_logp=torch.zeros(2, 3, 4),
        token_versions=torch.zeros(2, 3, 4, dtype=torch.long),
        lengths=torch.tensor([[4, 1, 2]] * 2),
        ended=torch.ones(2, 3, dtype=torch.bool),
        group_size=3,
    )  # ones left on the padding
    assert task.rewards(short, None).tolist() == [[1.0, 0.0, 1.0]] * 2
