"""Gymnasium tasks: episodes as action-token trajectories (masking, on-policy log-probs, replay of
partial episodes, determinism) and a few simulator steps end to end."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from sandbox.tasks.gym_tasks import GymConfig, GymTask
from sandbox.tasks.rollouts import Rollouts


@pytest.fixture(autouse=True)
def _threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def _task(**kw):
    task = GymTask(GymConfig(**kw))
    return task, task.init_params(torch.Generator().manual_seed(0))


@pytest.mark.component("task", "gym")
@pytest.mark.parametrize("env", ["CartPole-v1", "FrozenLake-v1"])
def test_episodes_masking_rewards_and_onpolicy_logprobs(env):
    task, params = _task(env=env, max_episode_steps=40, replicas=2)
    gen = torch.Generator().manual_seed(1)
    groups = [task.generate(params, task.new_group(4, gen), gen, version=2) for _ in range(3)]
    ro = Rollouts.cat(groups)
    assert ro.tokens.shape[:2] == (2, 12) and bool(ro.ended.all())
    m = ro.mask.bool()
    assert (ro.token_versions[m] == 2).all() and (ro.token_versions[~m] == -1).all()
    assert (ro.behaviour_logp[~m] == 0).all() and (ro.tokens[~m] == 0).all()
    assert (ro.tokens[m] < task.n_actions).all()
    r = task.rewards(ro, gen)
    assert r.shape == (2, 12) and bool(((r >= 0) & (r <= 1)).all())
    if env == "CartPole-v1":  # +1 per step: return / limit
        assert torch.allclose(r, ro.lengths.float() / 40)
    lp = task.logprobs(params, ro)
    assert torch.allclose(lp, ro.behaviour_logp, atol=1e-5)
    # a group shares its initial state: same reset seed for every episode
    assert (groups[0].prompts[..., 0] == groups[0].prompts[0, 0, 0]).all()


def test_stored_observations_match_the_environment():
    task, params = _task(env="CartPole-v1", max_episode_steps=30)
    gen = torch.Generator().manual_seed(3)
    ro = task.generate(params, task.new_group(2, gen), gen, 0)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=int(ro.prompts[0, 0, 0]))
    stored = ro.prompts[0, 0, 2:].view(30, 4)
    for t in range(int(ro.lengths[0, 0])):
        assert torch.allclose(stored[t], torch.tensor(obs, dtype=torch.float64), atol=1e-6)
        obs, *_ = env.step(int(ro.tokens[0, 0, t]))


@pytest.mark.component("task", "gym")
def test_partial_episode_replay_and_versions():
    task, params = _task(env="CartPole-v1", max_episode_steps=50)
    params2 = {k: v + 0.3 * torch.randn_like(v) for k, v in params.items()}
    gen = torch.Generator().manual_seed(5)
    full = task.generate(params, task.new_group(4, gen), gen, 0)
    cut = full.truncate(6)
    cont = task.generate(params2, cut, gen, 1)
    assert bool(cont.ended.all())
    m = cont.mask.bool()
    assert (cont.token_versions[..., :6][m[..., :6]] == 0).all()
    assert (cont.token_versions[..., 6:][m[..., 6:]] == 1).all()
    assert torch.equal(cont.tokens[..., :6], cut.tokens)
    tail = m.clone()
    tail[..., :6] = False
    assert torch.allclose(task.logprobs(params2, cont)[tail], cont.behaviour_logp[tail], atol=1e-5)
    # the return was recomputed from the replayed prefix: CartPole's return equals the length
    assert torch.allclose(task.rewards(cont, gen), cont.lengths.float() / 50)


def test_deterministic_and_sequence_logprob():
    task, params = _task(env="FrozenLake-v1", is_slippery=True)
    a = task.generate(params, task.new_group(4, torch.Generator().manual_seed(7)), torch.Generator().manual_seed(8), 0)
    b = task.generate(params, task.new_group(4, torch.Generator().manual_seed(7)), torch.Generator().manual_seed(8), 0)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.prompts, b.prompts)
    single = {k: v[0] for k, v in params.items()}
    tokens, mask, prompts = task.sequence_inputs(a)
    per = torch.stack([task.sequence_logprob(single, (tokens[0, i], mask[0, i], prompts[0, i])) for i in range(4)])
    assert torch.allclose(per, task.logprobs(params, a)[0].sum(-1), atol=1e-5)
    ev = task.evaluate(params)
    assert ev["eval/return"].shape == (1,)


@pytest.mark.component("task", "gym")
@pytest.mark.parametrize("action, reward, length", [(2, 1.0, 6), (0, 0.0, 7)])
def test_frozen_lake_episode_reward_by_hand(action, reward, length):
    """4x4 map SFFF/FHFH/FFFH/HFFG, no slipping: down, down, right, right, down reaches (3, 2); a policy
    that always goes right then steps onto the goal (return 1), one that always goes left walks to
    (3, 1) and into the hole at (3, 0) (return 0)."""
    task, params = _task(env="FrozenLake-v1")
    params = {**params, "w2": torch.zeros_like(params["w2"]), "b2": torch.zeros_like(params["b2"])}
    params["b2"][:, action] = 50.0  # a deterministic policy
    gen = torch.Generator().manual_seed(0)
    prefix = torch.tensor([[[1, 1, 2, 2, 1]]])
    group = task.new_group(1, gen).extend(prefix, torch.zeros(1, 1, 5), torch.tensor([[5]]), torch.tensor([[False]]), 0)
    done = task.generate(params, group, gen, version=1)
    assert bool(done.ended.all()) and int(done.lengths[0, 0]) == length
    assert done.tokens[0, 0, 5:length].tolist() == [action] * (length - 5)
    assert task.rewards(done, gen).tolist() == [[reward]]


@pytest.mark.parametrize("env", ["CartPole-v1", "FrozenLake-v1"])
def test_simulator_end_to_end(env):
    from sandbox.run.runner import run_scenario
    from sandbox.scenario.model import Scenario

    scn = Scenario.model_validate(
        dict(
            task=dict(name="gym", env=env, max_episode_steps=40, replicas=2, eval_episodes=2),
            system=dict(
                num_workers=3,
                generation_time=dict(kind="cost_model", prefill=0.01, per_token=0.02),
                staleness=dict(kind="max_lag", k_max=2),
                partial_rollouts=True,
            ),
            algorithm=dict(
                group_size=4,
                groups_per_step=2,
                objective=dict(name="grpo", baseline="opob"),
                correction=dict(name="tis", level="sequence"),
                stabilizers=[dict(name="vcpo_lr")],
                optimizer=dict(name="adam", lr=0.01),
            ),
            run=dict(steps=4, eval_every=2, figures=False),
        )
    )
    r = run_scenario(scn)
    assert r.status == "completed" and len(r.metrics) == 4
    assert r.metrics["eval/return"].notna().any()
    assert r.replica_metrics["reward/mean"].shape == (4, 2)
