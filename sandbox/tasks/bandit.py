"""Softmax multi-armed bandit: π_θ(a) = softmax(θ)_a over K arms, one token per response.

Exact policy quantities are available for checks: the expected reward Σ_a π_a m_a, and between two
parameter vectors the importance-weight second moment
E_q[(p/q)²] = exp(LSE(2θ − θ') − 2 LSE(θ) + LSE(θ'))  (exponential family identity,
``docs/theory.md#t8``). Task page: ``docs/tasks.md#bandit``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sandbox.base.lazy_torch import lazy_import
from sandbox.tasks import draws
from sandbox.tasks.base import TASKS, BudgetShape, PolicyTask
from sandbox.tasks.rollouts import OneTokenGroup, Rollouts, one_token_mask

torch = lazy_import("torch", globals())
Tensor = lazy_import("torch:Tensor", globals())


class BanditConfig(BaseModel):
    """A K-armed bandit with Bernoulli or Gaussian rewards."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: Literal["bandit"] = "bandit"
    num_arms: int = Field(10, ge=2, description="Number of arms K (>= 2).")
    reward: Literal["bernoulli", "gaussian"] = Field("bernoulli", description="Reward distribution per arm.")
    arm_means: list[float] | None = Field(
        None, description="Mean reward per arm; default: evenly spaced in [0.1, 0.9] (best arm last)."
    )
    reward_std: float = Field(1.0, gt=0, description="Standard deviation of Gaussian rewards.")
    init_logit_std: float = Field(
        0.0,
        ge=0,
        le=50,
        description="Std of the initial logits (0 = uniform policy; at "
        "most 50: beyond, the float32 softmax is one-hot and the policy cannot learn).",
    )
    replicas: int = Field(1, ge=1, description="Independent learners R carried in one batched tensor.")

    @model_validator(mode="after")
    def _check_means(self):
        if self.arm_means is not None:
            if len(self.arm_means) != self.num_arms:
                raise ValueError(f"arm_means has {len(self.arm_means)} entries, expected num_arms={self.num_arms}")
            if self.reward == "bernoulli" and not all(0 <= m <= 1 for m in self.arm_means):
                raise ValueError("arm_means must lie in [0, 1] for Bernoulli rewards")
        return self

    def means(self) -> Tensor:
        if self.arm_means is not None:
            return torch.tensor(self.arm_means, dtype=torch.float32)
        return torch.linspace(0.1, 0.9, self.num_arms)


@TASKS.register(BanditConfig)
class BanditTask(PolicyTask):
    @classmethod
    def engine_features(cls, cfg):
        return frozenset({"logits"})  # sampling goes through the engine's draw (docs/engines.md)

    max_len = 1
    fixed_length = True
    default_threads = 1

    @classmethod
    def budget_shape(cls, cfg):
        return BudgetShape("toy", 1, None, cfg.num_arms, 4)

    @classmethod
    def response_length_hint(cls, cfg):
        # a subclass that changes the response length gets the generic hint
        return (
            "one token (a bandit arm)" if cls.response_length(cfg) == (1, True) else super().response_length_hint(cfg)
        )

    def __init__(self, cfg: BanditConfig):
        self.cfg = cfg
        self.replicas = cfg.replicas
        self.means = cfg.means()
        self._best_arm = int(self.means.argmax())
        self._policy: tuple | None = None  # (logits, their version counter, log π, π) of the last weights sampled

    def _log_policy(self, logits: Tensor) -> tuple[Tensor, Tensor]:
        """``(log_softmax(logits), its exp)``, computed once per weights: the workers that sample with the
        same published weights share them (the same operations on the same tensor: the same numbers).
        Keyed on the tensor itself (held, so its identity is not reused) and its in-place version counter."""
        cached = self._policy
        if cached is None or cached[0] is not logits or cached[1] != logits._version:
            logp_all = torch.log_softmax(logits.detach(), -1)  # (R, K)
            cached = self._policy = (logits, logits._version, logp_all, logp_all.exp())
        return cached[2], cached[3]

    def init_params(self, gen):
        logits = torch.randn(self.replicas, self.cfg.num_arms, generator=gen) * self.cfg.init_logit_std
        return {"logits": logits}

    def new_group(self, group_size, gen):
        return Rollouts.empty(self.replicas, group_size)

    def generate(self, params, group, gen, version):
        if bool(group.ended.all()):
            return group
        R, G = group.lengths.shape
        engine = self.sampling_engine()
        if engine is not None:  # the rollout engine's distribution and reported log-probs (docs/engines.md)
            z = params["logits"].detach().unsqueeze(1).expand(R, G, self.cfg.num_arms)
            d = engine.draw(z, gen, version, 0)
            ones = torch.ones(R, G, dtype=torch.long)
            return group.extend(
                d.tokens.unsqueeze(-1),
                d.reported_logp.unsqueeze(-1),
                ones,
                ones.bool(),
                version,
                d.version_logp.unsqueeze(-1),
            )
        logp_all, probs = self._log_policy(params["logits"])
        actions = draws.multinomial(probs, G, gen)  # (R, G)
        logp = logp_all.gather(-1, actions)
        ones = torch.ones(R, G, dtype=torch.long)
        return group.extend(actions.unsqueeze(-1), logp.unsqueeze(-1), ones, ones.bool(), version)

    def sample_group(self, params, group_size, gen, version):
        """:meth:`generate` on a new group without the empty group: the same draws, the same tensors
        (:meth:`Rollouts.one_token_drawn`: the behaviour log-probs gathered from the log-policy when first read).
        An engine that is not exact, or per-replica versions, take the general path."""
        if self.sampling_engine() is not None or isinstance(version, Tensor):
            return super().sample_group(params, group_size, gen, version)
        logp_all, probs = self._log_policy(params["logits"])
        return Rollouts.one_token_drawn(draws.multinomial(probs, group_size, gen), logp_all, version)

    def rewards(self, group, gen):
        # ``take`` gathers the same means as ``self.means[tokens]`` in one call without advanced indexing, from the
        # ``(R, N)`` tokens as drawn (a group not yet made into fields) or the view ``tokens[..., 0]``.
        tokens = group.drawn_tokens if type(group) is OneTokenGroup else group.tokens.select(-1, 0)
        m = self.means.take(tokens)
        if self.cfg.reward == "bernoulli":
            # the comparison writes 1.0 / 0.0 itself: the values of ``(u < m).to(float32)`` without the bool tensor,
            # over the float32 uniforms themselves (read once, element by element) or into a new float32 tensor
            u = draws.rand(m.shape, gen)
            if u.dtype == torch.float32:
                return u.lt_(m)
            return torch.lt(u, m, out=torch.empty(m.shape, dtype=torch.float32))
        return m + self.cfg.reward_std * draws.randn(m.shape, gen)

    def logprobs(self, params, rollouts):
        logp_all = torch.log_softmax(params["logits"], -1)  # (R, K)
        if type(rollouts) is OneTokenGroup:  # complete one-token groups as drawn: a mask of ones, as below
            return logp_all.gather(-1, rollouts.drawn_tokens).unsqueeze(-1)
        R, N, T = rollouts.tokens.shape
        lp = logp_all.gather(-1, rollouts.tokens.reshape(R, N * T)).reshape(R, N, T)
        if rollouts.mask is one_token_mask(R, N) and T == 1:
            return lp  # complete one-token groups: a mask of ones, whose product changes no value and no gradient
        return lp * rollouts.mask

    @staticmethod
    def sequence_logprob(params, trajectory):
        """log π_θ(a) for ONE response (``torch.func`` friendly: per-replica logits ``(K,)``,
        ``trajectory = (tokens (1,), mask (1,))``)."""
        tokens, mask = trajectory
        return (torch.log_softmax(params["logits"], -1)[tokens] * mask).sum()

    def evaluate(self, params):
        pi = torch.softmax(params["logits"].detach(), -1)
        return {
            # An element-wise product summed per row, not ``pi @ means``: a matrix-vector product sums in
            # an order that depends on the number of rows, so a replica would differ from its separate run.
            "eval/expected_reward": (pi * self.means).sum(-1),
            "eval/best_arm_prob": pi[:, self._best_arm],
        }


def softmax_second_moment(target_logits: Tensor, behaviour_logits: Tensor) -> Tensor:
    """E_{a∼q}[(p_a/q_a)²] for p = softmax(θ), q = softmax(θ') (``docs/theory.md#t8``)."""
    lse = torch.logsumexp
    return torch.exp(
        lse(2 * target_logits - behaviour_logits, -1) - 2 * lse(target_logits, -1) + lse(behaviour_logits, -1)
    )
