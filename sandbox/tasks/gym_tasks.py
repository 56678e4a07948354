"""Policies over gymnasium environments: an episode is a trajectory of action "tokens".

A small MLP maps the observation to action logits (softmax policy). An episode is stored like an LM
response: ``tokens`` are the actions, ``behaviour_logp`` the per-step log-probabilities of the
sampling policy, ``token_versions`` the weight version that chose each action, ``lengths`` the
episode length and ``ended`` whether it terminated or hit the step limit. Sequence- and token-level
corrections therefore apply unchanged (the sequence ratio is the product of per-step ratios).

Observations live in ``Rollouts.prompts`` (float64) with layout
``[env_seed, return_so_far, obs_0 (obs_dim), obs_1, ..., obs_{L-1}]`` of fixed width
``2 + L·obs_dim`` (L = the step limit), so batches concatenate without a new Rollouts field.
A GRPO group is ``G`` episodes from the SAME initial state (one reset seed drawn with the sampling
generator). Partial rollouts work: a continuation resets the env with the stored seed and replays
the recorded actions (environments are deterministic given the seed and the actions, including
FrozenLake's slippery transitions, which use the env's seeded generator), then continues sampling
with the new weights.

Rewards are episode returns scaled into [0, 1]: CartPole-v1 return / step limit (500), FrozenLake-v1
and the other toy-text goals return 1 at the goal. ``evaluate`` runs greedy episodes from fixed
evaluation seeds and reports the scaled mean return (``eval/return``).

Replicas ``R >= 1`` are supported (one MLP per replica, ``R·G`` environments per group).
Task page: ``docs/tasks.md#gym``.
"""

from __future__ import annotations

from typing import Literal

import gymnasium as gym
import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from .base import TASKS, BudgetShape, Params, PolicyTask
from .rollouts import Rollouts

DEFAULT_STEP_LIMITS = {"CartPole-v1": 500, "FrozenLake-v1": 100}  # each environment's own episode step limit
_OBS_ACTIONS = {"CartPole-v1": (4, 2), "FrozenLake-v1": (None, 4)}  # observation size (None: one-hot state), actions
_LAKE_STATES = {"4x4": 16, "8x8": 64}


class GymConfig(BaseModel):
    """A gymnasium environment with a small MLP softmax policy."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: Literal["gym"] = "gym"
    env: Literal["CartPole-v1", "FrozenLake-v1"] = Field(
        "CartPole-v1", description="Environment id: CartPole-v1 (classic control) or FrozenLake-v1 (toy text)."
    )
    hidden: int = Field(32, ge=1, description="Hidden width of the one-hidden-layer tanh MLP.")
    max_episode_steps: int | None = Field(
        None, ge=1, description="Step limit L (the trajectory's max length); None = the env's own (CartPole 500, FrozenLake 100)."
    )
    is_slippery: bool = Field(
        False, description="FrozenLake: slippery ice (stochastic moves). False makes the 4x4 map learnable in tens of steps."
    )
    map_name: Literal["4x4", "8x8"] = Field("4x4", description="FrozenLake map.")
    init_scale: float = Field(
        0.01, ge=0, description="Scale of the output layer's init (small: the initial policy is near uniform)."
    )
    eval_episodes: int = Field(8, ge=1, description="Greedy episodes per evaluation (fixed seeds).")
    eval_seed: int = Field(10_000, ge=0, le=2**63 - 1, description="First reset seed of the evaluation episodes.")
    replicas: int = Field(1, ge=1, description="Independent learners R carried in one batched tensor.")
    threads: int | None = Field(
        1,
        ge=1,
        le=256,
        description="torch intra-op CPU threads set process-wide (tiny matrices run fastest on one; at most 256); None = leave.",
    )


@TASKS.register(GymConfig)
class GymTask(PolicyTask):
    @classmethod
    def response_length_hint(cls, cfg):
        return "episodes of up to the environment's step limit"

    @classmethod
    def budget_shape(cls, cfg):
        obs, actions = _OBS_ACTIONS[cfg.env]
        if obs is None:
            obs = _LAKE_STATES[cfg.map_name]
        L = cfg.max_episode_steps or DEFAULT_STEP_LIMITS[cfg.env]
        h = cfg.hidden
        params = obs * h + h + h * actions + actions
        # every CartPole episode is charged the step limit (an upper bound), a FrozenLake one twice the
        # number of states (episodes end at a hole or the goal)
        episode = min(L, 2 * obs) if cfg.env == "FrozenLake-v1" else L
        return BudgetShape(
            "environment", L, "task.max_episode_steps", params, 4, prompt_bytes=(2 + L * obs) * 8,
            act_per_slot=(obs + 3 * h + 3 * actions) * 4, exact_length=False,
            details={"obs": obs, "episode_len": episode, "eval_episodes": cfg.eval_episodes},
        )

    def __init__(self, cfg: GymConfig):
        self.cfg = cfg
        self.replicas = cfg.replicas
        if cfg.threads is not None:
            torch.set_num_threads(cfg.threads)
        self.max_len = cfg.max_episode_steps or DEFAULT_STEP_LIMITS[cfg.env]
        probe = self._make_env()
        self.n_actions = int(probe.action_space.n)
        space = probe.observation_space
        self.discrete_obs = isinstance(space, gym.spaces.Discrete)
        self.obs_dim = int(space.n) if self.discrete_obs else int(np.prod(space.shape))
        self.reward_scale = 1.0 / self.max_len if cfg.env == "CartPole-v1" else 1.0
        self._pool: list[gym.Env] = [probe]

    # -- environments ------------------------------------------------------------------------------
    def _make_env(self) -> gym.Env:
        kw = {"max_episode_steps": self.max_len}
        if self.cfg.env == "FrozenLake-v1":
            kw.update(is_slippery=self.cfg.is_slippery, map_name=self.cfg.map_name)
        return gym.make(self.cfg.env, **kw)

    def _envs(self, n: int) -> list[gym.Env]:
        while len(self._pool) < n:
            self._pool.append(self._make_env())
        return self._pool[:n]

    def _encode(self, obs) -> np.ndarray:
        if self.discrete_obs:
            v = np.zeros(self.obs_dim)
            v[int(obs)] = 1.0
            return v
        return np.asarray(obs, dtype=np.float64).reshape(-1)

    # -- policy ------------------------------------------------------------------------------------
    def init_params(self, gen):
        R, D, H, A = self.replicas, self.obs_dim, self.cfg.hidden, self.n_actions
        return {
            "w1": torch.randn(R, D, H, generator=gen) / D**0.5,
            "b1": torch.zeros(R, H),
            "w2": torch.randn(R, H, A, generator=gen) * (self.cfg.init_scale / H**0.5),
            "b2": torch.zeros(R, A),
        }

    @staticmethod
    def _logits(p: Params, obs: Tensor) -> Tensor:
        """``obs (R, ..., D)`` → ``(R, ..., A)`` with per-replica weights ``(R, ...)``."""
        R = obs.shape[0]
        x = obs.reshape(R, -1, obs.shape[-1])
        h = torch.tanh(torch.baddbmm(p["b1"].unsqueeze(1), x, p["w1"]))
        out = torch.baddbmm(p["b2"].unsqueeze(1), h, p["w2"])
        return out.reshape(*obs.shape[:-1], -1)

    def _obs(self, rollouts: Rollouts, T: int) -> Tensor:
        R, N, _ = rollouts.prompts.shape
        return rollouts.prompts[..., 2:].reshape(R, N, self.max_len, self.obs_dim)[:, :, :T].to(torch.float32)

    # -- PolicyTask --------------------------------------------------------------------------------
    def new_group(self, group_size, gen):
        R = self.replicas
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))
        prompts = torch.zeros(R, group_size, 2 + self.max_len * self.obs_dim, dtype=torch.float64)
        prompts[..., 0] = seed
        return Rollouts.empty(R, group_size, prompts)

    @torch.no_grad()
    def generate(self, params, group, gen, version):
        R, N = group.lengths.shape
        W, L, D = group.width, self.max_len, self.obs_dim
        if bool(group.ended.all()):
            return group
        prompts = group.prompts.clone()
        obs_buf = prompts[..., 2:].view(R, N, L, D)
        live = [(r, n) for r in range(R) for n in range(N) if not bool(group.ended[r, n])]
        envs = dict(zip(live, self._envs(len(live))))
        cur = {}
        for (r, n), env in envs.items():
            if int(group.lengths[r, n]) != W:
                raise ValueError("unfinished episodes of a group must all sit at the group's width")
            obs, _ = env.reset(seed=int(prompts[r, n, 0]))
            ret = 0.0
            for t in range(W):  # replay the recorded prefix (deterministic given seed + actions)
                obs, rew, term, trunc, _ = env.step(int(group.tokens[r, n, t]))
                ret += float(rew)
                if term or trunc:
                    raise RuntimeError("replayed episode ended before its recorded length")
            prompts[r, n, 1] = ret
            cur[(r, n)] = self._encode(obs)
        S = L - W
        new_t = torch.zeros(R, N, S, dtype=torch.long)
        new_lp = torch.zeros(R, N, S)
        new_len = torch.zeros(R, N, dtype=torch.long)
        new_end = torch.zeros(R, N, dtype=torch.bool)
        active = set(live)
        p = {k: v.detach() for k, v in params.items()}
        s = 0
        while active and s < S:
            t = W + s
            rows = sorted(active)
            for r in {r for r, _ in rows}:
                ns = [n for rr, n in rows if rr == r]
                x = torch.tensor(np.stack([cur[(r, n)] for n in ns]), dtype=torch.float32)
                obs_buf[r, ns, t] = x.double()
                logits = self._logits({k: v[r : r + 1] for k, v in p.items()}, x.unsqueeze(0))[0]
                logp = torch.log_softmax(logits, -1)
                a = torch.multinomial(logp.exp(), 1, generator=gen).squeeze(-1)
                lp = logp.gather(-1, a.unsqueeze(-1)).squeeze(-1)
                for j, n in enumerate(ns):
                    obs, rew, term, trunc, _ = envs[(r, n)].step(int(a[j]))
                    new_t[r, n, s] = a[j]
                    new_lp[r, n, s] = lp[j]
                    new_len[r, n] += 1
                    prompts[r, n, 1] += float(rew)
                    cur[(r, n)] = self._encode(obs)
                    if term or trunc or t + 1 >= L:
                        new_end[r, n] = True
                        active.discard((r, n))
            s += 1
        S_used = max(s, 1)
        out = group.extend(new_t[..., :S_used], new_lp[..., :S_used], new_len, new_end, version)
        out.prompts = prompts
        return out

    def rewards(self, group, gen):
        return (group.prompts[..., 1] * self.reward_scale).to(torch.float32).clamp(0.0, 1.0)

    def logprobs(self, params, rollouts):
        T = rollouts.width
        logits = self._logits(params, self._obs(rollouts, T))  # (R, N, T, A)
        lp = torch.log_softmax(logits, -1).gather(-1, rollouts.tokens.unsqueeze(-1)).squeeze(-1)
        return lp * rollouts.mask

    def sequence_inputs(self, rollouts: Rollouts):
        """Actions, mask and the prompt rows holding each episode's observations."""
        return (rollouts.tokens, rollouts.mask, rollouts.prompts)

    def sequence_logprob(self, params, trajectory):
        """log π(episode) for ONE trajectory under ONE replica's weights (``torch.func`` friendly;
        ``trajectory = (actions (T,), mask (T,), prompt row (2 + L·D,))``)."""
        tokens, mask, prompt = trajectory
        T = tokens.shape[-1]
        obs = prompt[2:].reshape(self.max_len, self.obs_dim)[:T].to(torch.float32)
        h = torch.tanh(obs @ params["w1"] + params["b1"])
        logits = h @ params["w2"] + params["b2"]
        lp = torch.log_softmax(logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        return (lp * mask).sum()

    @torch.no_grad()
    def evaluate(self, params):
        """Greedy episodes from fixed seeds: mean scaled return per replica (``eval/return``)."""
        R, E = self.replicas, self.cfg.eval_episodes
        envs = self._envs(R * E)
        p = {k: v.detach() for k, v in params.items()}
        cur = np.zeros((R, E, self.obs_dim))
        ret = np.zeros((R, E))
        done = np.zeros((R, E), dtype=bool)
        for r in range(R):
            for e in range(E):
                obs, _ = envs[r * E + e].reset(seed=self.cfg.eval_seed + e)
                cur[r, e] = self._encode(obs)
        for _ in range(self.max_len):
            if done.all():
                break
            acts = torch.argmax(self._logits(p, torch.tensor(cur, dtype=torch.float32)), -1)
            for r in range(R):
                for e in range(E):
                    if done[r, e]:
                        continue
                    obs, rew, term, trunc, _ = envs[r * E + e].step(int(acts[r, e]))
                    ret[r, e] += rew
                    cur[r, e] = self._encode(obs)
                    done[r, e] = term or trunc
        scaled = np.clip(ret * self.reward_scale, 0, 1).mean(1)
        return {"eval/return": torch.tensor(scaled, dtype=torch.float32)}
