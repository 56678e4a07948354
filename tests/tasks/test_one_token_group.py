"""A one-token group as drawn (``Rollouts.one_token_drawn``, ``OneTokenGroup``) is the group the general path
builds: its sizes and mask before its fields are made, every field once they are (on the first read or
assignment, after which it is a plain ``Rollouts``), its concatenations (one log-policy, several, mixed with other
groups), its copies, the bandit's rewards and log-probs (values and gradients) and whole runs, to the bit. A run
whose sampling is the generic ``generate(new_group(...))`` is the run of the drawn groups; a bug planted in a
function the drawn groups' path calls changes the run."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import numpy as np
import pytest
import torch
from _same_rollouts import FIELDS, same_rollouts

from sandbox.run.runner import _result, prepare_run
from sandbox.scenario.api import validate_scenario
from sandbox.tasks import draws
from sandbox.tasks.bandit import BanditConfig, BanditTask
from sandbox.tasks.base import PolicyTask
from sandbox.tasks.rollouts import OneTokenGroup, Rollouts


def _same(a: Rollouts, b: Rollouts) -> None:
    same_rollouts(a, b, layout=True)


def _general(tokens: torch.Tensor, logp: torch.Tensor, version: int) -> Rollouts:
    R, N = tokens.shape
    ones = torch.ones(R, N, dtype=torch.long)
    return Rollouts.empty(R, N).extend(tokens.unsqueeze(-1), logp.unsqueeze(-1), ones, ones.bool(), version)


def _draw(gen: torch.Generator, R: int, N: int, K: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens (R, N), log-policy (R, K))``."""
    table = torch.log_softmax(torch.randn(R, K, generator=gen), -1)
    return torch.randint(0, K, (R, N), generator=gen), table


@pytest.mark.parametrize("R, N", [(1, 5), (3, 4), (2, 0)])
def test_a_drawn_group_is_the_general_group(R, N):
    tokens, table = _draw(torch.Generator().manual_seed(R * 10 + N), R, N)
    group = Rollouts.one_token_drawn(tokens, table, 3)
    assert type(group) is OneTokenGroup
    general = _general(tokens, table.gather(-1, tokens), 3)
    # known from the draw, no field made
    assert (group.num_replicas, group.num_responses, group.width) == (R, N, 1)
    assert (group.decode_steps, group.token_count, group.full, group.padded) == (1 if N else 0, R * N, True, False)
    assert torch.equal(group.mask, general.mask) and group.mask.dtype == torch.float32
    assert torch.equal(group.drawn_tokens, general.tokens[..., 0])
    assert group.info == {} and type(group) is OneTokenGroup  # its own dict, not a field made from the draw
    _same(group, general)
    assert type(group) is Rollouts and group.full  # the fields made: a plain group
    gathered = Rollouts.one_token(tokens, table.gather(-1, tokens), 3)  # log-probs given, not gathered
    assert type(gathered) is OneTokenGroup
    _same(gathered, general)


def test_inputs_the_general_path_would_convert_are_not_held():
    tokens, table = _draw(torch.Generator().manual_seed(1), 2, 4)
    for t, lp in ((tokens.int(), table), (tokens, table.double()), (tokens.t().contiguous().t(), table)):
        group = Rollouts.one_token_drawn(t, lp, 2)
        assert type(group) is Rollouts
        _same(group, _general(t, lp.gather(-1, t.long()), 2))


@pytest.mark.parametrize("name", ["tokens", "behaviour_logp", "token_versions", "lengths", "ended"])
def test_assigning_a_field_makes_the_others_first(name):
    tokens, table = _draw(torch.Generator().manual_seed(2), 2, 3)
    group = Rollouts.one_token_drawn(tokens, table, 4)
    general = _general(tokens, table.gather(-1, tokens), 4)
    new = getattr(general, name).clone()
    new.view(-1)[0] = 2 if new.dtype != torch.bool else False
    setattr(group, name, new)
    setattr(general, name, new)
    assert type(group) is Rollouts
    _same(group, general)
    merged = Rollouts.cat([group, Rollouts.one_token_drawn(tokens, table, 4)])
    _same(merged, Rollouts.cat([general, _general(tokens, table.gather(-1, tokens), 4)]))


def test_a_write_to_a_made_field_is_what_its_readers_and_the_cat_see():
    tokens, table = _draw(torch.Generator().manual_seed(3), 1, 4)
    group = Rollouts.one_token_drawn(tokens, table, 0)
    group.tokens[0, 1, 0] = 6
    group.behaviour_logp[0, 2, 0] = -9.0
    assert int(group.tokens[0, 1, 0]) == 6 and float(Rollouts.cat([group]).behaviour_logp[0, 2, 0]) == -9.0


def test_a_log_policy_written_to_before_it_is_gathered_is_an_error():
    tokens, table = _draw(torch.Generator().manual_seed(4), 1, 4)
    group = Rollouts.one_token_drawn(tokens, table, 0)
    table.add_(1.0)
    with pytest.raises(RuntimeError, match="written to in place"):
        group.behaviour_logp
    with pytest.raises(RuntimeError, match="written to in place"):
        Rollouts.cat([Rollouts.one_token_drawn(tokens, torch.log_softmax(table, -1), 0), group])


def _groups(gen, R, versions, tables=None, kinds=None):
    """Drawn groups of ``versions`` (one per group), their general twins, rewards on both."""
    fast, slow = [], []
    for i, v in enumerate(versions):
        tokens, table = _draw(gen, R, 4)
        if tables is not None:
            table = tables[i]
            tokens = torch.randint(0, table.shape[-1], (R, 4), generator=gen)
        kind = "drawn" if kinds is None else kinds[i]
        logp = table.gather(-1, tokens)
        group = {
            "drawn": lambda: Rollouts.one_token_drawn(tokens, table, v),
            "given": lambda: Rollouts.one_token(tokens, logp, v),
            "plain": lambda: _general(tokens, logp, v),
        }[kind]()
        general = _general(tokens, logp, v)
        group.rewards = general.rewards = torch.rand(R, 4, generator=gen)
        fast.append(group)
        slow.append(general)
    return fast, slow


def test_cat_of_drawn_groups_is_the_general_cat():
    gen = torch.Generator().manual_seed(5)
    shared = torch.log_softmax(torch.randn(2, 7, generator=gen), -1)
    cases = {
        "one log-policy, one version": dict(versions=[3, 3, 3], tables=[shared] * 3),
        "log-policies of several versions": dict(versions=[1, 2, 2]),
        "given and drawn log-probs": dict(versions=[4, 4], tables=[shared] * 2, kinds=["given", "drawn"]),
        "with a plain group": dict(versions=[4, 4], tables=[shared] * 2, kinds=["drawn", "plain"]),
    }
    for name, kw in cases.items():
        fast, slow = _groups(gen, 2, **kw)
        merged = Rollouts.cat(fast)
        if "plain" in kw.get("kinds", []):
            assert type(merged) is Rollouts, name
        else:  # concatenated as drawn: no group made its fields
            assert type(merged) is OneTokenGroup and all(type(p) is OneTokenGroup for p in fast), name
        _same(merged, Rollouts.cat(slow))
    # a concatenation of concatenations of several versions
    a, a_slow = _groups(gen, 2, [1, 2])
    b, b_slow = _groups(gen, 2, [2, 2], tables=[shared] * 2)
    twice = Rollouts.cat([Rollouts.cat(a), Rollouts.cat(b)])
    assert type(twice) is OneTokenGroup
    _same(twice, Rollouts.cat([Rollouts.cat(a_slow), Rollouts.cat(b_slow)]))
    # without rewards on one: none on the batch, as in the general cat
    c, c_slow = _groups(gen, 2, [0, 0])
    c[1].rewards = c_slow[1].rewards = None
    _same(Rollouts.cat(c), Rollouts.cat(c_slow))


def test_cat_of_drawn_groups_with_prompts_or_engine_logp_is_the_general_cat():
    gen = torch.Generator().manual_seed(6)
    for name in ("prompts", "version_logp"):
        fast, slow = _groups(gen, 1, [0, 0])
        for f, s in zip(fast, slow):
            value = torch.randint(0, 5, (1, 4, 2), generator=gen) if name == "prompts" else -torch.rand(1, 4, 1)
            setattr(f, name, value)
            setattr(s, name, value)
        assert all(type(f) is OneTokenGroup for f in fast)  # neither is a field made from the draw
        _same(Rollouts.cat(fast), Rollouts.cat(slow))


def test_cat_of_drawn_groups_of_other_group_sizes_is_an_error():
    tokens, table = _draw(torch.Generator().manual_seed(7), 1, 4)
    short = Rollouts.one_token_drawn(tokens[:, :2], table, 0)
    with pytest.raises(ValueError, match="different group sizes"):
        Rollouts.cat([Rollouts.one_token_drawn(tokens, table, 0), short])


def test_copies_of_a_drawn_group_are_the_group():
    tokens, table = _draw(torch.Generator().manual_seed(8), 2, 3)
    general = _general(tokens, table.gather(-1, tokens), 5)
    general.rewards = torch.rand(2, 3)
    for make in (copy.deepcopy, copy.copy, lambda g: pickle.loads(pickle.dumps(g))):
        group = Rollouts.one_token_drawn(tokens, table, 5)
        group.rewards = general.rewards
        copied = make(group)
        assert type(copied) is Rollouts and type(group) is Rollouts  # the fields made, then copied
        _same(copied, general)
    group = Rollouts.one_token_drawn(tokens, table, 5)
    group.rewards = general.rewards
    replaced = dataclasses.replace(group, rewards=general.rewards * 2)
    assert type(replaced) is Rollouts
    _same(replaced, dataclasses.replace(general, rewards=general.rewards * 2))
    assert type(OneTokenGroup(**{f: getattr(general, f) for f in FIELDS}, group_size=3)) is Rollouts


def test_bandit_rewards_and_logprobs_of_drawn_groups_are_those_of_general_groups():
    for replicas in (1, 3):
        task = BanditTask(BanditConfig(num_arms=6, replicas=replicas, init_logit_std=1.0))
        params = task.init_params(torch.Generator().manual_seed(1))
        fast_gen, slow_gen = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
        fast, slow = [], []
        for version in range(3):
            group = task.sample_group(params, 8, fast_gen, version)
            general = task.generate(params, task.new_group(8, slow_gen), slow_gen, version)
            assert type(group) is OneTokenGroup and type(general) is Rollouts
            group.rewards = task.rewards(group, fast_gen)
            general.rewards = task.rewards(general, slow_gen)
            assert type(group) is OneTokenGroup  # the rewards read the drawn tokens
            assert torch.equal(group.rewards, general.rewards)
            fast.append(group)
            slow.append(general)
        assert torch.equal(torch.rand(4, generator=fast_gen), torch.rand(4, generator=slow_gen))
        batch, general_batch = Rollouts.cat(fast), Rollouts.cat(slow)
        assert type(batch) is OneTokenGroup
        weights = {"logits": (params["logits"] * 1.5).requires_grad_(True)}
        lp = task.logprobs(weights, batch)
        (grad,) = torch.autograd.grad((lp * torch.arange(24.0).view(1, 24, 1)).sum(), [weights["logits"]])
        lp_general = task.logprobs(weights, general_batch)
        (grad_general,) = torch.autograd.grad(
            (lp_general * torch.arange(24.0).view(1, 24, 1)).sum(), [weights["logits"]]
        )
        assert lp.shape == lp_general.shape and torch.equal(lp, lp_general)
        assert torch.equal(grad, grad_general)
        _same(batch, general_batch)


def _bandit(metrics: str, staleness: dict | None = None) -> dict:
    """Under ``max_lag`` (the default here) a batch holds groups of several versions, drawn from several
    log-policies; under ``sync`` all of one."""
    return {
        "task": {"name": "bandit", "num_arms": 6, "replicas": 2},
        "system": {"num_workers": 4, "staleness": staleness or {"kind": "max_lag", "k_max": 2}},
        "algorithm": {
            "group_size": 4,
            "groups_per_step": 3,
            "objective": {"name": "reinforce", "baseline": "group_mean"},
        },
        "run": {"steps": 10, "seed": 5, "figures": False, "eval_every": 3, "metrics": metrics},
    }


def _simulate(data: dict):
    scn = validate_scenario(data)
    _, learner, cluster = prepare_run(scn)
    return _result(scn, cluster.run(scn.run.steps), learner)


def _tables_equal(a, b) -> bool:
    if list(a.metrics.columns) != list(b.metrics.columns):
        return False
    for name in a.metrics.columns:
        x, y = a.metrics[name].to_numpy(), b.metrics[name].to_numpy()
        if x.dtype != y.dtype or not np.array_equal(x.view(np.uint8), y.view(np.uint8)):
            return False
    return True


@pytest.mark.parametrize("metrics, staleness", [("lean", {"kind": "sync"}), ("standard", None)])
def test_a_run_of_drawn_groups_is_the_run_of_general_groups(monkeypatch, metrics, staleness):
    made = {"drawn": [], "generic": []}

    def recorded(body, kind):
        def sample_group(self, params, group_size, gen, version):
            group = body(self, params, group_size, gen, version)
            made[kind].append(type(group))
            return group

        return sample_group

    monkeypatch.setattr(BanditTask, "sample_group", recorded(BanditTask.sample_group, "drawn"))
    drawn = _simulate(_bandit(metrics, staleness))
    monkeypatch.setattr(BanditTask, "sample_group", recorded(PolicyTask.sample_group, "generic"))
    general = _simulate(_bandit(metrics, staleness))
    assert made["drawn"] and set(made["drawn"]) == {OneTokenGroup}  # the drawn groups' path was taken
    assert made["generic"] and set(made["generic"]) == {Rollouts}  # and then the generic one
    assert _tables_equal(drawn, general)


def _shifted_log_policy(self, logits):
    logp, probs = _LOG_POLICY(self, logits)
    return logp - 0.5, probs


def _rewards_flipped(self, group, gen):
    return 1.0 - _REWARDS(self, group, gen)


def _logprobs_scaled(self, params, rollouts):
    return 0.5 * _LOGPROBS(self, params, rollouts)


def _multinomial_reversed(probs, samples, gen, replacement=True):
    return _MULTINOMIAL(probs.flip(-1).contiguous(), samples, gen, replacement)


_LOG_POLICY, _REWARDS, _LOGPROBS = BanditTask._log_policy, BanditTask.rewards, BanditTask.logprobs
_MULTINOMIAL = draws.multinomial


@pytest.mark.parametrize(
    "owner, name, bug",
    [
        (BanditTask, "_log_policy", _shifted_log_policy),
        (BanditTask, "rewards", _rewards_flipped),
        (BanditTask, "logprobs", _logprobs_scaled),
        (draws, "multinomial", _multinomial_reversed),
    ],
)
def test_a_bug_in_what_the_drawn_path_calls_changes_the_run(monkeypatch, owner, name, bug):
    """At the standard metrics (the importance-sampling monitors read the behaviour log-probs)."""
    clean = _simulate(_bandit("standard"))
    monkeypatch.setattr(owner, name, bug)
    assert not _tables_equal(_simulate(_bandit("standard")), clean)
    monkeypatch.undo()
    assert _tables_equal(_simulate(_bandit("standard")), clean)
