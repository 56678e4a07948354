"""REINFORCE on the sequence log-probability with a baseline (Williams 1992;
``docs/methods/objectives.md#reinforce``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from sandbox.algorithms import advantages as A
from sandbox.algorithms._tensor import Aggregation
from sandbox.algorithms.api import PolicyLossInput
from sandbox.algorithms.base import need_groups
from sandbox.algorithms.objectives.base import (
    OBJECTIVES,
    Baseline,
    Objective,
    OpobKnobs,
    Surrogate,
    SurrogateInput,
    opob_advantage,
    reinforce_surrogate,
)
from sandbox.base.lazy_torch import lazy_import

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())


class ReinforceConfig(OpobKnobs):
    """REINFORCE on the sequence log-probability with a baseline (Williams 1992;
    docs/methods/objectives.md#reinforce).

    ``L = −(1/B) Σ_i sg(R_i − b_i) log π_θ(y^i|x)`` (seq-mean-token-sum)."""

    name: Literal["reinforce"] = "reinforce"
    baseline: Baseline = Field(
        "none",
        description="none | constant | ema | group_mean | leave_one_out | optimal (needs per-sequence gradient "
        "norms) | opob (VCPO). Default 'none' = textbook REINFORCE (Williams 1992).",
    )
    constant_baseline: float = Field(0.0, description="b for baseline='constant'.")
    ema_decay: float = Field(
        0.9,
        ge=0.0,
        lt=1.0,
        description="EMA decay for baseline='ema' (docs/methods/objectives.md#reinforce: 0.9–0.99).",
    )
    ema_init: float = Field(0.0, description="EMA baseline before the first batch has been seen.")
    normalize_std: bool = Field(False, description="Divide advantages by the group std (+1e-6) as GRPO does.")
    aggregation: Aggregation = Field(
        "seq_mean_token_sum", description="docs/methods/objectives.md#aggregation: REINFORCE uses seq-mean-token-sum."
    )

    def validate_group_size(self, group_size: int) -> None:
        super().validate_group_size(group_size)
        if self.baseline == "leave_one_out" or self.normalize_std:
            need_groups(self.name, f"baseline={self.baseline!r}/normalize_std", group_size)


@OBJECTIVES.register(ReinforceConfig)
class Reinforce(Objective):
    """``ℓ_t = −sg(R_i − b_i) log π_θ(y_t|s_t)`` with the configured baseline ``b``; the ``ema`` baseline
    depends only on earlier batches, its state lives here."""

    def __init__(self, cfg: ReinforceConfig):
        super().__init__(cfg)
        self._ema = A.EMABaseline(cfg.ema_decay, cfg.ema_init) if cfg.baseline == "ema" else None

    @property
    def needs_sequence_grad_norms(self) -> bool:
        return self.cfg.baseline in ("opob", "optimal")

    @property
    def reads_log_seq_rho(self) -> bool:
        return self.cfg.baseline in ("opob", "optimal")  # opob_advantage reads its IS weights, or their shape

    def advantages(self, inp: PolicyLossInput, log_seq_rho: Tensor) -> tuple[Tensor, dict]:
        cfg, r, g = self.cfg, inp.rewards.detach(), inp.group_size
        kind = cfg.baseline
        if kind == "none":
            b = torch.zeros_like(r)
        elif kind == "constant":
            b = torch.full_like(r, cfg.constant_baseline)
        elif kind == "ema":
            b = self._ema(r)
        elif kind == "group_mean":
            b = A.group_mean_baseline(r, g)
        elif kind == "leave_one_out":
            b = A.leave_one_out_baseline(r, g)
        else:
            adv, b = opob_advantage(cfg, inp, log_seq_rho, cfg.normalize_std, False, 1e-6, with_is=kind == "opob")
            return adv, {"adv/baseline_mean": b.mean(-1)}
        adv = r - b
        if cfg.normalize_std:
            adv = A.normalize_by_group_std(adv, r, g, 1e-6, True)
        return adv, {"adv/baseline_mean": b.mean(-1)}

    reads_ratio = False  # the surrogate is −sg(Â) log π_θ: no ratio

    def surrogate(self, s: SurrogateInput) -> Surrogate:
        return reinforce_surrogate(s.logp, s.adv)
