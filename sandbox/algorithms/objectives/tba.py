"""Trajectory balance with asynchrony (Bartoldson et al. arXiv 2503.18929; ``docs/methods/objectives.md#tba``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from sandbox.algorithms import advantages as A
from sandbox.algorithms._tensor import group_view, seq_sum
from sandbox.algorithms.api import REF_LOGP_KEY, PolicyLossInput
from sandbox.algorithms.base import MethodConfig, need_groups
from sandbox.algorithms.objectives.base import OBJECTIVES, Objective
from sandbox.base.lazy_torch import lazy_import

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())


class TBAConfig(MethodConfig):
    """Trajectory balance with asynchrony (Bartoldson et al., arXiv 2503.18929;
    docs/methods/objectives.md#tba): ``z_k = R_k/β − log π_θ(y_k) + log π_ref(y_k)``,
    ``L = mean_k (sg(mean_k z) − z_k)²`` per prompt."""

    name: Literal["tba"] = "tba"
    beta: float = Field(0.012, gt=0, description="β (kl_coef) at step 0; TBA GSM8K config 0.012.")
    beta_final: float = Field(0.004, gt=0, description="β after annealing; TBA GSM8K config 0.004.")
    anneal_steps: int = Field(500, ge=0, description="Linear β annealing length in learner versions (TBA: 500).")

    def validate_group_size(self, group_size: int) -> None:
        super().validate_group_size(group_size)
        need_groups(self.name, "the VarGrad estimate of log Z", group_size)


def tba_loss(
    logp: Tensor,
    fmask: Tensor,
    rewards: Tensor,
    group_size: int,
    beta: float,
    ref_logp: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """Trajectory balance, VarGrad form (TBA, Bartoldson et al. arXiv 2503.18929;
    docs/methods/objectives.md#tba):

    ``z_k = R_k/β − log π_θ(y_k|x) + log π_ref(y_k|x)`` (sequence log-probs), ``log Ẑ = sg(mean_k z_k)``,
    ``L(x) = mean_k (log Ẑ − z_k)²``; the loss per replica is the mean over prompts. Returns
    ``(loss (...), log Ẑ per prompt (..., N/G))``. Without a reference model ``log π_ref`` is taken as 0
    (target ∝ exp(R/β) over the support)."""
    z = rewards / beta - seq_sum(logp, fmask)
    if ref_logp is not None:
        z = z + seq_sum(ref_logp.detach(), fmask)
    zg = group_view(z, group_size)
    log_z = zg.detach().mean(-1, keepdim=True)
    loss = ((log_z - zg) ** 2).mean(-1).mean(-1)
    return loss, log_z.squeeze(-1)


def tba_beta(beta: float, beta_final: float, anneal_steps: int, step: int) -> float:
    """Linear annealing of β from ``beta`` to ``beta_final`` over ``anneal_steps`` learner versions (TBA GSM8K)."""
    if anneal_steps <= 0:
        return beta_final
    frac = min(max(step, 0) / anneal_steps, 1.0)
    return beta + frac * (beta_final - beta)


@OBJECTIVES.register(TBAConfig)
class TBA(Objective):
    """Trajectory balance: a whole loss per prompt group, valid off-policy without importance weights, so it
    takes no correction. Its advantages (centred rewards) are reported only."""

    takes_corrections = False
    no_correction_reason = "is valid off-policy without importance weights"

    @property
    def aggregation(self) -> None:
        """None: the loss is a mean over prompt groups, computed by :meth:`full_loss`."""
        return None

    def advantages(self, inp: PolicyLossInput, log_seq_rho: Tensor) -> tuple[Tensor, dict]:
        r = inp.rewards.detach()
        return r - A.group_mean_baseline(r, inp.group_size), {}

    def full_loss(self, inp: PolicyLossInput) -> tuple[Tensor, dict]:
        cfg = self.cfg
        beta = tba_beta(cfg.beta, cfg.beta_final, cfg.anneal_steps, inp.learner_version)
        loss, log_z = tba_loss(
            inp.logp, inp.fmask, inp.rewards.detach(), inp.group_size, beta, inp.extras.get(REF_LOGP_KEY)
        )
        return loss, {
            "loss/pg": loss.detach(),
            "loss/tb": loss.detach(),
            "tba/logZ": log_z.mean(-1),
            "tba/beta": torch.tensor(beta),
        }
