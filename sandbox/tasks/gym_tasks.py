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

Any registered environment id with discrete actions and a Discrete or Box observation works
(``task.env``), checked when the scenario is validated as gymnasium's ``check_env`` checks an
environment (spaces, reset/step signatures, seeded determinism, which the replay of partial episodes
relies on; :func:`env_facts`). Rewards are episode returns scaled into [0, 1]: CartPole-v1 return / step
limit (500), FrozenLake-v1's return (1 at the goal), any other environment's through its
``task.return_range`` [lo, hi]. ``evaluate`` runs greedy episodes from fixed
evaluation seeds and reports the scaled mean return (``eval/return``).

Replicas ``R >= 1`` are supported (one MLP per replica, ``R·G`` environments per group).
Task page: ``docs/tasks.md#gym``.
"""

from __future__ import annotations

import difflib
import functools
import warnings
from typing import TYPE_CHECKING, Any, Literal

import gymnasium as gym
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sandbox.base.lazy_torch import lazy_import, no_grad
from sandbox.tasks.base import TASKS, BudgetShape, Params, PolicyTask
from sandbox.tasks.rollouts import Rollouts

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())

RETURN_RANGES = {"CartPole-v1": None, "FrozenLake-v1": (0.0, 1.0)}
"""The episode-return range [lo, hi] scaled to [0, 1] of the environments that need none given
(``None``: CartPole's +1 per step, [0, step limit]); any other environment id names its own in
``task.return_range``."""


@functools.cache
def env_facts(env_id: str, kwargs: tuple) -> tuple[int, int, bool, int | None]:
    """``(observation size, actions, discrete observation, registered step limit)`` of a registered
    gymnasium environment, after the checks gymnasium's ``check_env`` makes (spaces, reset/step signatures,
    seeded determinism, observations inside the space) and the task's own: discrete actions and a flat
    Discrete or Box observation. A ``ValueError`` naming ``task.env`` otherwise (cached per id and kwargs)."""
    from gymnasium.utils.env_checker import check_env

    try:
        env = gym.make(env_id, **dict(kwargs))
    except Exception as exc:  # noqa: BLE001 - gymnasium raises its own error types (DeprecatedEnv, missing extras, ...)
        raise ValueError(f"cannot make {env_id!r} with {dict(kwargs)}: {exc}") from None
    try:
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise ValueError(
                f"{env_id!r} has {env.action_space} actions; the task needs discrete actions (gymnasium.spaces.Discrete)"
            )
        space = env.observation_space
        if not isinstance(space, (gym.spaces.Discrete, gym.spaces.Box)):
            raise ValueError(f"{env_id!r} observes {space}; the task needs a Discrete or Box observation")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # check_env's advice (e.g. an unbounded Box) is not an error
            try:
                check_env(env.unwrapped, skip_render_check=True, skip_close_check=True)
            except Exception as exc:  # noqa: BLE001 - AssertionError / gymnasium errors from the checker
                raise ValueError(f"{env_id!r} fails gymnasium's check_env: {exc}") from None
        discrete = isinstance(space, gym.spaces.Discrete)
        obs = int(space.n) if discrete else int(np.prod(space.shape))
        return obs, int(env.action_space.n), discrete, env.spec.max_episode_steps if env.spec else None
    finally:
        env.close()


class GymConfig(BaseModel):
    """A gymnasium environment with discrete actions and a small MLP softmax policy."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: Literal["gym"] = "gym"
    env: str = Field(
        "CartPole-v1",
        description="Any registered gymnasium environment id with discrete actions and a Discrete or Box "
        "observation, checked as gymnasium's check_env does (e.g. CartPole-v1, FrozenLake-v1, Acrobot-v1, "
        "CliffWalking-v1); other than CartPole-v1 and FrozenLake-v1 it needs return_range.",
    )
    env_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments of gymnasium.make (besides "
        "max_episode_steps; FrozenLake's is_slippery and map_name have their own fields).",
    )
    return_range: list[float] | None = Field(
        None,
        min_length=2,
        max_length=2,
        description="Episode return [lo, hi] mapped to the reward [0, 1] (clipped); None = CartPole-v1's [0, step "
        "limit] or FrozenLake-v1's [0, 1]; required for any other environment.",
    )
    hidden: int = Field(32, ge=1, description="Hidden width of the one-hidden-layer tanh MLP.")
    max_episode_steps: int | None = Field(
        None,
        ge=1,
        description="Step limit L (the trajectory's max length); None = the env's registered one (CartPole 500, FrozenLake 100).",
    )
    is_slippery: bool = Field(
        False,
        description="FrozenLake: slippery ice (stochastic moves). False makes the 4x4 map learnable in tens of steps.",
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

    @field_validator("env")
    @classmethod
    def _registered(cls, env: str) -> str:
        if env not in gym.registry:
            close = difflib.get_close_matches(env, list(gym.registry), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(
                f"{env!r} is not a registered gymnasium environment; {hint}e.g. CartPole-v1, FrozenLake-v1, "
                "Acrobot-v1 (gymnasium.registry lists them)"
            )
        return env

    @property
    def make_kwargs(self) -> dict[str, Any]:
        """``gymnasium.make``'s keyword arguments besides the step limit."""
        kw = dict(self.env_kwargs)
        if self.env.startswith("FrozenLake"):
            kw.update(is_slippery=self.is_slippery, map_name=self.map_name)
        return kw

    @model_validator(mode="after")
    def _checked(self):
        if self.env.startswith("FrozenLake") and ({"is_slippery", "map_name"} & set(self.env_kwargs)):
            raise ValueError("env_kwargs: set is_slippery and map_name with their own fields")
        if "max_episode_steps" in self.env_kwargs:
            raise ValueError("env_kwargs: set the step limit with max_episode_steps")
        try:
            kwargs = tuple(sorted(self.make_kwargs.items()))
            hash(kwargs)
        except TypeError:
            raise ValueError("env_kwargs: values must be numbers, strings or booleans") from None
        try:
            limit = env_facts(self.env, kwargs)[3]
        except ValueError as exc:
            raise ValueError(f"env: {exc}") from None
        if self.max_episode_steps is None and limit is None:
            raise ValueError(f"max_episode_steps: {self.env!r} registers no step limit; give one")
        if self.return_range is None and self.env not in RETURN_RANGES:
            raise ValueError(
                f"return_range: required for {self.env!r} (its episode return [min, max], scaled to the reward [0, 1])"
            )
        if self.return_range is not None and not self.return_range[0] < self.return_range[1]:
            raise ValueError(f"return_range: expected [lo, hi] with lo < hi, got {list(self.return_range)}")
        return self

    def facts(self) -> tuple[int, int, bool, int]:
        """``(observation size, actions, discrete observation, step limit L)``."""
        obs, actions, discrete, limit = env_facts(self.env, tuple(sorted(self.make_kwargs.items())))
        return obs, actions, discrete, self.max_episode_steps or limit


@TASKS.register(GymConfig)
class GymTask(PolicyTask):
    @classmethod
    def response_length_hint(cls, cfg):
        return "episodes of up to the environment's step limit"

    @classmethod
    def budget_shape(cls, cfg):
        obs, actions, discrete, L = cfg.facts()
        h = cfg.hidden
        params = obs * h + h + h * actions + actions
        # every episode of a Box-observation env is charged the step limit (an upper bound), one of a
        # Discrete-state env (FrozenLake) twice the number of states (episodes end at a hole or the goal)
        episode = min(L, 2 * obs) if discrete else L
        return BudgetShape(
            "environment",
            L,
            "task.max_episode_steps",
            params,
            4,
            prompt_bytes=(2 + L * obs) * 8,
            act_per_slot=(obs + 3 * h + 3 * actions) * 4,
            exact_length=False,
            details={"obs": obs, "episode_len": episode, "eval_episodes": cfg.eval_episodes},
        )

    def __init__(self, cfg: GymConfig):
        self.cfg = cfg
        self.replicas = cfg.replicas
        if cfg.threads is not None:
            torch.set_num_threads(cfg.threads)
        self.max_len = cfg.facts()[3]
        probe = self._make_env()
        self.n_actions = int(probe.action_space.n)
        space = probe.observation_space
        self.discrete_obs = isinstance(space, gym.spaces.Discrete)
        self.obs_dim = int(space.n) if self.discrete_obs else int(np.prod(space.shape))
        lo, hi = cfg.return_range or RETURN_RANGES[cfg.env] or (0.0, float(self.max_len))
        # reward = (return - lo) * scale, clipped to [0, 1]; CartPole: return / L, FrozenLake: the return itself
        self.reward_offset = float(lo)
        self.reward_scale = (
            1.0 / self.max_len if cfg.return_range is None and cfg.env == "CartPole-v1" else 1.0 / (hi - lo)
        )
        self._pool: list[gym.Env] = [probe]

    # -- environments ------------------------------------------------------------------------------
    def _make_env(self) -> gym.Env:
        return gym.make(self.cfg.env, max_episode_steps=self.max_len, **self.cfg.make_kwargs)

    def _envs(self, n: int) -> list[gym.Env]:
        while len(self._pool) < n:
            self._pool.append(self._make_env())
        return self._pool[:n]

    def _scaled(self, ret):
        """Episode return to reward: ``(return - lo) * scale`` (the subtraction skipped when lo = 0, so CartPole's
        and FrozenLake's rewards are bitwise those of ``return * scale``)."""
        return (ret - self.reward_offset if self.reward_offset else ret) * self.reward_scale

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

    @no_grad
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
        return self._scaled(group.prompts[..., 1]).to(torch.float32).clamp(0.0, 1.0)

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

    @no_grad
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
        scaled = np.clip(self._scaled(ret), 0, 1).mean(1)
        return {"eval/return": torch.tensor(scaled, dtype=torch.float32)}
