"""Bit-string sequence task: H independent per-position Bernoulli logits, reward when at least a
fraction f of the bits are 1.

π_θ(y) = Π_t σ(θ_t)^{y_t} (1 − σ(θ_t))^{1 − y_t}. Because the sequence ratio is the product of H
token ratios, sequence- and token-level importance corrections differ here
(``docs/methods/corrections.md``), and the sequence weight's variance grows with H
(``docs/theory.md#t8``). The expected reward is exact: the number of ones is Poisson-binomial,
computed by dynamic programming. Task page: ``docs/tasks.md#bitstring``.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sandbox.base.lazy_torch import lazy_import
from sandbox.tasks import draws
from sandbox.tasks.base import TASKS, BudgetShape, PolicyTask
from sandbox.tasks.rollouts import Rollouts

torch = lazy_import("torch", globals())
F = lazy_import("torch.nn.functional", globals())


class BitStringConfig(BaseModel):
    """Sequences of H bits; reward 1 when mean(bits) >= threshold."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: Literal["bitstring"] = "bitstring"
    horizon: int = Field(16, ge=1, le=4096, description="Sequence length H.")
    threshold: float = Field(0.75, gt=0, le=1, description="Fraction f of ones needed for reward 1 (0 < f <= 1).")
    init_logit: float = Field(
        0.0,
        ge=-50,
        le=50,
        description="Initial logit of every position (0 = fair coins; negative makes reward rarer). Within ±50: "
        "beyond, the float32 sigmoid is exactly 0 or 1 and the policy cannot learn.",
    )
    init_logit_std: float = Field(
        0.0, ge=0, le=50, description="Std of random perturbations of the initial logits (at most 50, as init_logit)."
    )
    replicas: int = Field(1, ge=1, description="Independent learners R carried in one batched tensor.")


@TASKS.register(BitStringConfig)
class BitStringTask(PolicyTask):
    @classmethod
    def engine_features(cls, cfg):
        return frozenset({"logits"})  # sampling goes through the engine's draw (docs/engines.md)

    default_threads = 1
    fixed_length = True

    @classmethod
    def response_length_hint(cls, cfg):
        return f"{cfg.horizon} tokens (bit-string horizon)"

    @classmethod
    def budget_shape(cls, cfg):
        return BudgetShape("toy", cfg.horizon, "task.horizon", cfg.horizon, 4, exact_evaluation=True)

    def __init__(self, cfg: BitStringConfig):
        self.cfg = cfg
        self.replicas = cfg.replicas
        self.max_len = cfg.horizon
        self.needed = math.ceil(cfg.threshold * cfg.horizon - 1e-9)

    def init_params(self, gen):
        H = self.cfg.horizon
        base = torch.full((self.replicas, H), float(self.cfg.init_logit))
        return {"logits": base + self.cfg.init_logit_std * torch.randn(self.replicas, H, generator=gen)}

    def new_group(self, group_size, gen):
        return Rollouts.empty(self.replicas, group_size)

    def generate(self, params, group, gen, version):
        start = group.width
        H = self.cfg.horizon
        if start >= H or bool(group.ended.all()):
            return group
        R, G = group.lengths.shape
        theta = params["logits"].detach()[:, start:]  # (R, S)
        shape = (R, G, H - start)
        engine = self.sampling_engine()
        if engine is not None:  # each bit is a two-entry softmax over the logits (0, θ_t) (docs/engines.md)
            z = torch.stack([torch.zeros_like(theta), theta], -1).unsqueeze(1).expand(*shape, 2)
            d = engine.draw(z, gen, version, torch.arange(start, H))
            steps = torch.full((R, G), H - start, dtype=torch.long)
            return group.extend(
                d.tokens, d.reported_logp, steps, torch.ones(R, G, dtype=torch.bool), version, d.version_logp
            )
        p1 = torch.sigmoid(theta).unsqueeze(1).expand(shape)
        # The comparison writes the 0/1 tokens straight into int64 (a bool result and its conversion
        # cost several times more on CPU), and log π(y_t) is picked from the pair
        # (log σ(−θ_t), log σ(θ_t)) by the token itself: the values torch.where would select.
        bits = torch.lt(draws.rand(shape, gen), p1, out=torch.empty(shape, dtype=torch.long))
        pair = torch.stack([F.logsigmoid(-theta), F.logsigmoid(theta)], -1).unsqueeze(1).expand(*shape, 2)
        logp = pair.gather(-1, bits.unsqueeze(-1)).squeeze(-1)
        steps = torch.full((R, G), H - start, dtype=torch.long)
        return group.extend(bits, logp, steps, torch.ones(R, G, dtype=torch.bool), version)

    def rewards(self, group, gen):
        # Without padding the mask is all ones and the count is the plain sum (no mask, no product).
        ones = group.tokens.sum(-1) if not group.padded else (group.tokens * group.mask.long()).sum(-1)
        return (ones >= self.needed).to(torch.float32)

    def logprobs(self, params, rollouts):
        T = rollouts.width
        theta = params["logits"][:, :T].unsqueeze(1)  # (R, 1, T)
        y = rollouts.tokens.to(theta.dtype)
        lp = y * F.logsigmoid(theta) + (1 - y) * F.logsigmoid(-theta)
        return lp * rollouts.mask

    @staticmethod
    def sequence_logprob(params, trajectory):
        """log π_θ(y) = Σ_t mask_t·log π(y_t) for ONE trajectory (``torch.func`` friendly: per-replica
        ``params["logits"]`` of shape ``(H,)``, ``trajectory = (tokens (T,), mask (T,))``)."""
        tokens, mask = trajectory
        theta = params["logits"][: tokens.shape[-1]]
        y = tokens.to(theta.dtype)
        return ((y * F.logsigmoid(theta) + (1 - y) * F.logsigmoid(-theta)) * mask).sum()

    def evaluate(self, params):
        p = torch.sigmoid(params["logits"].detach().double())  # (R, H)
        # Poisson-binomial distribution of the number of ones, one position at a time.
        dist = torch.zeros(p.shape[0], self.cfg.horizon + 1, dtype=torch.float64)
        dist[:, 0] = 1.0
        for t in range(self.cfg.horizon):
            pt = p[:, t : t + 1]
            shifted = torch.nn.functional.pad(dist[:, :-1], (1, 0))
            dist = dist * (1 - pt) + shifted * pt
        return {
            "eval/expected_reward": dist[:, self.needed :].sum(-1).float(),
            "eval/mean_bit": p.mean(-1).float(),
        }
