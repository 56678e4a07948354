"""The bandit's short sampling path (issue 32, benchmarks/README.md row 11) against the general one:
``sample_group`` is ``generate(new_group(...))`` to the bit, with the same draws from the stream; the
cached policy follows the weights; ``Rollouts.one_token`` is the empty group extended by one token;
the rewards are the formula of ``docs/tasks.md#bandit``. Each comparison fails if the short path
draws in another order, caches stale weights or builds a tensor of another dtype or value."""

from __future__ import annotations

import torch
from _same_rollouts import same_rollouts

from sandbox.tasks.bandit import BanditConfig, BanditTask
from sandbox.tasks.draws import RowGenerators
from sandbox.tasks.rollouts import Rollouts


def _same(a: Rollouts, b: Rollouts) -> None:
    same_rollouts(a, b, layout=False)


def _general(R: int, tokens: torch.Tensor, logp: torch.Tensor, version: int) -> Rollouts:
    N = tokens.shape[1]
    ones = torch.ones(R, N, dtype=torch.long)
    return Rollouts.empty(R, N).extend(tokens.unsqueeze(-1), logp.unsqueeze(-1), ones, ones.bool(), version)


def test_one_token_is_the_empty_group_extended_by_one_token():
    gen = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, 7, (3, 5), generator=gen)
    logp = -torch.rand(3, 5, generator=gen)
    one = Rollouts.one_token(tokens, logp, 4)
    _same(one, _general(3, tokens, logp, 4))
    one.lengths = torch.full((3, 5), 2)  # new lengths: the known longest no longer applies
    assert one.decode_steps == 2
    _same(Rollouts.one_token(tokens[:, :0], logp[:, :0], 1), _general(3, tokens[:, :0], logp[:, :0], 1))
    # what extend converts or copies takes its path: the same dtypes and values as the general group
    for t, lp in ((tokens.int(), logp), (tokens, logp.double()), (tokens.t().contiguous().t(), logp)):
        _same(Rollouts.one_token(t, lp, 2), _general(3, t, lp, 2))


def _after(gen) -> torch.Tensor:
    """The stream's next numbers: equal only if both paths drew the same count from it."""
    if isinstance(gen, RowGenerators):
        return torch.stack([torch.rand(4, generator=g) for g in gen.gens])
    return torch.rand(4, generator=gen)


def test_sample_group_draws_and_returns_what_generate_on_a_new_group_does():
    for replicas, rows in ((1, False), (3, False), (3, True)):
        task = BanditTask(BanditConfig(num_arms=6, replicas=replicas, init_logit_std=1.0))
        params = task.init_params(torch.Generator().manual_seed(1))

        def stream():
            if rows:
                return RowGenerators([torch.Generator().manual_seed(10 + r) for r in range(replicas)])
            return torch.Generator().manual_seed(10)

        fast, slow = stream(), stream()
        for version in range(3):  # the second and third groups reuse the cached policy of the same weights
            a = task.sample_group(params, 8, fast, version)
            b = task.generate(params, task.new_group(8, slow), slow, version)
            _same(a, b)
            assert torch.equal(task.rewards(a, fast), task.rewards(b, slow))
        assert torch.equal(_after(fast), _after(slow))


def test_cached_policy_follows_new_and_updated_weights():
    task = BanditTask(BanditConfig(num_arms=4))
    params = {"logits": torch.zeros(1, 4)}
    first = task.sample_group(params, 64, torch.Generator().manual_seed(0), 0)
    assert torch.allclose(first.behaviour_logp, torch.full_like(first.behaviour_logp, -torch.log(torch.tensor(4.0))))
    with torch.no_grad():
        params["logits"][0, 2] = 50.0  # in place: the same tensor object, a new version counter
    assert (task.sample_group(params, 64, torch.Generator().manual_seed(0), 1).tokens == 2).all()
    other = {"logits": torch.tensor([[50.0, 0.0, 0.0, 0.0]])}  # a new tensor
    assert (task.sample_group(other, 64, torch.Generator().manual_seed(0), 2).tokens == 0).all()


def test_bernoulli_rewards_are_uniforms_below_the_arm_means():
    task = BanditTask(BanditConfig(num_arms=5))
    tokens = torch.tensor([[[0], [4], [2], [2], [1], [3]]])
    ro = _general(1, tokens[..., 0], torch.zeros(1, 6), 0)
    u = torch.rand((1, 6), generator=torch.Generator().manual_seed(7))
    expected = (u < task.means[tokens[..., 0]]).to(torch.float32)
    got = task.rewards(ro, torch.Generator().manual_seed(7))
    assert got.dtype == torch.float32 and torch.equal(got, expected)
    assert expected.sum() not in (0, 6)  # the comparison decides: some responses pay, some do not


def test_one_token_groups_share_their_lengths_until_one_is_written_to():
    gen = torch.Generator().manual_seed(5)
    tokens = torch.randint(0, 7, (2, 4), generator=gen)
    logp = -torch.rand(2, 4, generator=gen)
    a, b = Rollouts.one_token(tokens, logp, 0), Rollouts.one_token(tokens, logp, 1)
    assert a.lengths is b.lengths and a.ended is b.ended  # one (R, N) pair of ones
    a.lengths.add_(1)  # a writer: the next group gets new ones, this one keeps what was written
    c = Rollouts.one_token(tokens, logp, 2)
    assert c.lengths is not a.lengths and torch.equal(c.lengths, torch.ones(2, 4, dtype=torch.long))
    assert torch.equal(c.ended, torch.ones(2, 4, dtype=torch.bool))
    _same(c, _general(2, tokens, logp, 2))


def test_one_token_groups_of_one_version_share_their_token_versions_until_one_is_written_to():
    """The groups of one shape sampled by one version share ``full((R, N, 1), version)``; another version, or a
    write to the shared tensor, makes a new one; every group holds the values the general path gives."""
    gen = torch.Generator().manual_seed(6)
    tokens = torch.randint(0, 7, (2, 4), generator=gen)
    logp = -torch.rand(2, 4, generator=gen)
    a, b = Rollouts.one_token(tokens, logp, 3), Rollouts.one_token(tokens, logp, 3)
    assert a.token_versions is b.token_versions
    c = Rollouts.one_token(tokens, logp, 4)
    assert c.token_versions is not a.token_versions
    _same(a, _general(2, tokens, logp, 3))
    _same(c, _general(2, tokens, logp, 4))
    c.token_versions.add_(1)  # a writer: the next group of version 4 gets a new tensor of fours
    d = Rollouts.one_token(tokens, logp, 4)
    assert d.token_versions is not c.token_versions
    _same(d, _general(2, tokens, logp, 4))
    _same(a, _general(2, tokens, logp, 3))  # the earlier groups keep their own


def test_cat_of_one_version_groups_shares_the_batch_token_versions():
    """Groups of one version (the shared token versions, unchanged) concatenate to the shared
    ``full((R, n, 1), version)`` of the batch's shape: the general concatenation's values; groups whose token
    versions were written to, or are not all the one shared tensor, take the concatenation."""
    gen = torch.Generator().manual_seed(7)
    parts, general = [], []
    for _ in range(3):
        tokens = torch.randint(0, 7, (2, 4), generator=gen)
        logp = -torch.rand(2, 4, generator=gen)
        parts.append(Rollouts.one_token(tokens, logp, 5))
        general.append(_general(2, tokens, logp, 5))
    fast, slow = Rollouts.cat(parts), Rollouts.cat(general)
    _same(fast, slow)
    assert Rollouts.cat(parts).token_versions is fast.token_versions  # shared per shape and version
    fast.token_versions.add_(1)  # a writer of the batch's: the next batch gets a new one
    again = Rollouts.cat(parts)
    assert again.token_versions is not fast.token_versions
    _same(again, slow)
    own = Rollouts.one_token(parts[0].tokens[..., 0], parts[0].behaviour_logp[..., 0], 6)  # another version
    mixed = Rollouts.cat([parts[0], own])
    assert torch.equal(mixed.token_versions[:, :4], torch.full((2, 4, 1), 5))
    assert torch.equal(mixed.token_versions[:, 4:], torch.full((2, 4, 1), 6))
    parts[1].token_versions.add_(1)  # a writer of a group's (now sixes): the concatenation of what they hold
    written = Rollouts.cat(parts[1:])
    assert torch.equal(parts[1].token_versions, torch.full((2, 4, 1), 6))
    assert torch.equal(written.token_versions, torch.cat([p.token_versions for p in parts[1:]], 1))


def test_cat_of_one_token_groups_is_the_general_cat():
    """The concatenation of complete one-token groups shares ones for its lengths, end flags and mask: the
    values, dtypes and shapes of the general concatenation; a write to the shared lengths makes new ones."""
    gen = torch.Generator().manual_seed(5)
    parts, general = [], []
    for v in range(3):
        tokens = torch.randint(0, 7, (2, 4), generator=gen)
        logp = -torch.rand(2, 4, generator=gen)
        parts.append(Rollouts.one_token(tokens, logp, v))
        general.append(_general(2, tokens, logp, v))
    for p, g in zip(parts, general):
        p.rewards = g.rewards = torch.rand(2, 4, generator=gen)
    fast, slow = Rollouts.cat(parts), Rollouts.cat(general)
    _same(fast, slow)
    assert fast.mask.dtype == slow.mask.dtype and fast.mask.shape == slow.mask.shape
    again = Rollouts.cat(parts)
    assert again.lengths is fast.lengths and again.mask is fast.mask  # shared per shape
    fast.lengths[0, 0] = 0  # a write: the next batch of this shape gets new ones
    later = Rollouts.cat(parts)
    assert later.lengths is not fast.lengths and int(later.lengths.min()) == 1
    assert later.token_count == 2 * 12
    mixed = Rollouts.cat([parts[0], general[1]])  # a group of another kind: the general path
    _same(mixed, Rollouts.cat([general[0], general[1]]))
