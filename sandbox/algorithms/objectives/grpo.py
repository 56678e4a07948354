"""GRPO (DeepSeekMath, arXiv 2402.03300; ``docs/methods/objectives.md#grpo``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from sandbox.algorithms import advantages as A
from sandbox.algorithms._tensor import Aggregation, aggregate
from sandbox.algorithms.api import REF_LOGP_KEY, PolicyLossInput
from sandbox.algorithms.base import need_groups
from sandbox.algorithms.diagnostics import k3
from sandbox.algorithms.objectives.base import (
    OBJECTIVES,
    ClipKnobs,
    ClipSurrogate,
    Objective,
    OpobKnobs,
    opob_advantage,
)

if TYPE_CHECKING:
    from torch import Tensor


class GRPOConfig(ClipKnobs, OpobKnobs):
    """GRPO (DeepSeekMath, arXiv 2402.03300; docs/methods/objectives.md#grpo):
    ``Â = (R − mean_g R)/(std_g R + ε_std)``, PPO clip surrogate, seq-mean-token-mean, optional k3 KL to
    ``extras['ref_logp']``."""

    name: Literal["grpo"] = "grpo"
    baseline: Literal["group_mean", "opob"] = Field(
        "group_mean",
        description="group_mean (GRPO) or opob (VCPO off-policy optimal baseline, needs seq_grad_sq_norms).",
    )
    eps_std: float = Field(1e-6, ge=0.0, description="ε added to the group std; verl 1e-6 (TRL uses 1e-4).")
    normalize_std: bool = Field(True, description="Divide by the group std (GRPO); False gives Dr.GRPO's centring.")
    std_unbiased: bool | None = Field(
        None,
        description="Bessel-corrected std? None = True for group_mean (torch/verl default), False (population std) "
        "for opob (VCPO norm_by_std).",
    )
    beta_kl: float = Field(
        0.0, ge=0.0, description="β of the k3(π_ref/π_θ) penalty; 0 in recent recipes (TRL beta=0.0)."
    )
    aggregation: Aggregation = Field("seq_mean_token_mean", description="Original GRPO: seq-mean-token-mean.")

    def validate_group_size(self, group_size: int) -> None:
        super().validate_group_size(group_size)
        need_groups(self.name, "a group-relative advantage", group_size)


@OBJECTIVES.register(GRPOConfig)
class GRPO(ClipSurrogate, Objective):
    """Group-normalised advantages (or VCPO's OPOB baseline) with the PPO clip surrogate, plus
    ``β·k3(π_ref/π_θ)`` aggregated like the policy term when ``beta_kl > 0``."""

    @property
    def needs_sequence_grad_norms(self) -> bool:
        return self.cfg.baseline == "opob"

    @property
    def needs_reference_logp(self) -> bool:
        return self.cfg.beta_kl > 0

    def advantages(self, inp: PolicyLossInput, log_seq_rho: Tensor) -> tuple[Tensor, dict]:
        cfg, r, g = self.cfg, inp.rewards.detach(), inp.group_size
        if cfg.baseline == "opob":
            unbiased = False if cfg.std_unbiased is None else cfg.std_unbiased
            eps = cfg.eps_std if cfg.eps_std > 0 else 1e-6
            adv, b = opob_advantage(cfg, inp, log_seq_rho, cfg.normalize_std, unbiased, eps)
            return adv, {"adv/baseline_mean": b.mean(-1)}
        unbiased = True if cfg.std_unbiased is None else cfg.std_unbiased
        adv = r - A.group_mean_baseline(r, g)
        if cfg.normalize_std:
            adv = A.normalize_by_group_std(adv, r, g, cfg.eps_std, unbiased)
        return adv, {}

    def regularizer(self, inp: PolicyLossInput) -> tuple[Tensor, dict] | None:
        if not self.needs_reference_logp:
            return None
        ref = inp.extras.get(REF_LOGP_KEY)
        if ref is None:
            raise KeyError(f"grpo beta_kl > 0 needs extras[{REF_LOGP_KEY!r}] (reference log-probs, (..., N, T))")
        kl = aggregate(k3(ref.detach() - inp.logp), inp.fmask, self.aggregation, self.max_len)
        return self.cfg.beta_kl * kl, {"kl/ref_k3": kl.detach()}
