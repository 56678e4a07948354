"""Any registered gymnasium environment with discrete actions (task.env), checked as gymnasium's
check_env checks one: a Box-observation env (Acrobot-v1) and a Discrete-state one (CliffWalking-v1) run
end to end with their returns scaled by task.return_range; an unregistered id, continuous actions, a
missing return range and an env that fails check_env (unseeded reset) are refused naming the field."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from sandbox.scenario.api import ScenarioError, validate_scenario
from sandbox.tasks.gym_tasks import GymConfig, GymTask


@pytest.fixture(autouse=True)
def _threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def scenario(task: dict) -> dict:
    return dict(
        task={"name": "gym", "replicas": 1, "eval_episodes": 2, **task},
        system={
            "num_workers": 2,
            "staleness": {"kind": "max_lag", "k_max": 1},
            "partial_rollouts": True,
            "generation_time": {"kind": "cost_model", "prefill": 0.01, "per_token": 0.02},
        },
        algorithm={"group_size": 4, "groups_per_step": 2, "optimizer": {"name": "adam", "lr": 0.01}},
        run={"steps": 3, "eval_every": 3, "figures": False},
    )


@pytest.mark.parametrize(
    "task, obs, actions",
    [
        ({"env": "Acrobot-v1", "return_range": [-30, 0], "max_episode_steps": 30}, 6, 3),
        ({"env": "CliffWalking-v1", "return_range": [-3000, 0], "max_episode_steps": 30}, 48, 4),
    ],
)
def test_a_registered_discrete_action_env_runs_end_to_end(task, obs, actions):
    from sandbox.run.runner import run_scenario

    scn = validate_scenario(scenario(task))
    t = GymTask(scn.task)
    assert (t.obs_dim, t.n_actions, t.max_len) == (obs, actions, 30)
    gen = torch.Generator().manual_seed(0)
    params = t.init_params(gen)
    ro = t.generate(params, t.new_group(4, gen), gen, version=0)
    lo, hi = task["return_range"]
    returns = ro.prompts[..., 1].double()
    expected = ((returns - lo) / (hi - lo)).clamp(0, 1).float()
    assert torch.allclose(t.rewards(ro, gen), expected, atol=1e-6)  # (return - lo) / (hi - lo), clipped
    r = run_scenario(scn)
    assert r.status == "completed" and len(r.metrics) == 3 and r.metrics["eval/return"].notna().any()


def test_cartpole_and_frozenlake_keep_their_scales():
    assert GymTask(GymConfig(env="CartPole-v1", max_episode_steps=40)).reward_scale == 1.0 / 40
    lake = GymTask(GymConfig(env="FrozenLake-v1"))
    assert (lake.reward_scale, lake.reward_offset, lake.max_len) == (1.0, 0.0, 100)


@pytest.mark.parametrize(
    "task, field, words",
    [
        ({"env": "CartPol-v1"}, "task.env", "did you mean 'CartPole-v1'?"),
        ({"env": "Pendulum-v1", "return_range": [-1, 0]}, "task", "the task needs discrete actions"),
        ({"env": "Acrobot-v1"}, "task", "return_range: required for 'Acrobot-v1'"),
        ({"env": "Acrobot-v1", "return_range": [0, -1]}, "task", "lo < hi"),
        ({"env": "Acrobot-v1", "return_range": [0]}, "task.return_range", ""),
    ],
)
def test_refusals_name_the_field(task, field, words):
    with pytest.raises(ScenarioError) as err:
        validate_scenario(scenario(task))
    text = str(err.value)
    assert f"{field}:" in text and words in text, text


class UnseededEnv(gym.Env):
    """Discrete actions, but reset ignores its seed: gymnasium's check_env refuses it (and the sandbox's
    replay of partial episodes, which resets with the stored seed, would be wrong)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.random.default_rng().uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, True, False, {}


def test_an_env_failing_check_env_is_refused():
    gym.register(id="SandboxTestUnseeded-v0", entry_point=UnseededEnv, max_episode_steps=5)
    try:
        with pytest.raises(ScenarioError, match="fails gymnasium's check_env"):
            validate_scenario(scenario({"env": "SandboxTestUnseeded-v0", "return_range": [0, 1]}))
    finally:
        del gym.registry["SandboxTestUnseeded-v0"]
