"""BAPO balanced adaptive clipping (Xi et al. arXiv 2510.18927; ``docs/methods/corrections.md#bapo``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from sandbox.algorithms.base import MethodConfig
from sandbox.algorithms.corrections.base import CORRECTIONS, Correction, CorrectionContext, CorrectionResult
from sandbox.base.lazy_torch import lazy_import

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())


class BAPOConfig(MethodConfig):
    """BAPO balanced adaptive clipping (Xi et al. arXiv 2510.18927; code WooooDyy/BAPO;
    docs/methods/corrections.md#bapo): absolute bounds ``[c_low, c_high]`` moved (lower first) until the
    positive/negative surrogate ratio P/N reaches the target; loss = dual-clip PPO with those bounds."""

    name: Literal["bapo"] = "bapo"
    pos_neg_target: float = Field(
        1.0, gt=0, description="Target P/N; 1.0 ⇔ positive share ρ₀ = 0.5 (paper README; code adv_ratio_target=1)."
    )
    c_low_start: float = Field(0.6, gt=0, description="a⁻; paper README 0.6.")
    c_low_max: float = Field(0.9, gt=0, description="b⁻; paper README 0.9 (code default 0.8).")
    c_high_start: float = Field(1.2, gt=0, description="a⁺; paper README 1.2.")
    c_high_max: float = Field(3.0, gt=0, description="b⁺; paper README 3.0 (code default 2.0).")
    step_low: float = Field(0.05, gt=0, description="δ⁻; code default 0.05.")
    step_high: float = Field(0.05, gt=0, description="δ⁺; code default 0.05.")
    dual_clip_c: float = Field(3.0, gt=1, description="Dual clip c = 3 (BAPO code).")
    stat: Literal["value", "gradient_carrying"] = Field(
        "value",
        description="'value': P, N from the clipped surrogate values (official code); 'gradient_carrying': count only "
        "tokens still carrying gradient ([reconstruction] of the README's intent).",
    )

    @model_validator(mode="after")
    def _check(self):
        if not (self.c_low_start <= self.c_low_max <= 1.0 <= self.c_high_start <= self.c_high_max):
            raise ValueError(
                "bapo: need c_low_start <= c_low_max <= 1 <= c_high_start <= c_high_max, got "
                f"{self.c_low_start}, {self.c_low_max}, {self.c_high_start}, {self.c_high_max}"
            )
        return self


def _bapo_pn(r: Tensor, a: Tensor, m: Tensor, c_low: Tensor, c_high: Tensor, stat: str) -> tuple[Tensor, Tensor]:
    cl = c_low.reshape(*c_low.shape, 1, 1)
    ch = c_high.reshape(*c_high.shape, 1, 1)
    if stat == "value":
        eff = torch.where(a >= 0, torch.minimum(r, ch) * a, torch.maximum(r, cl) * a)
        return (m * eff.clamp_min(0)).sum((-2, -1)), (m * (-eff).clamp_min(0)).sum((-2, -1))
    pos = (a > 0) & (r <= ch)
    neg = (a < 0) & (r >= cl)
    return (m * pos * r * a).sum((-2, -1)), (m * neg * r * (-a)).sum((-2, -1))


@CORRECTIONS.register(BAPOConfig)
class BAPO(Correction):
    """BAPO (Xi et al. arXiv 2510.18927; WooooDyy/BAPO ``compute_policy_loss_bapo``): starting from
    ``[a⁻, a⁺]`` every update, raise ``c_low`` by δ⁻ while ``P/N < target`` and ``c_low < b⁻``, then
    ``c_high`` by δ⁺ likewise; the loss is dual-clip PPO with ``clamp(r, c_low, c_high)`` and c = 3.
    ``P``/``N`` are the positive/negative parts of the clipped surrogate (``stat='value'``, official code)
    or only of tokens still carrying gradient (``'gradient_carrying'``, [reconstruction])."""

    replaces_clip_bounds = True

    def __init__(self, cfg: BAPOConfig):
        super().__init__(cfg)
        self.last_bounds: tuple[Tensor, Tensor] | None = None

    def __call__(self, ctx: CorrectionContext) -> CorrectionResult:
        c = self.cfg
        r, m = ctx.ratio, ctx.fmask
        a = ctx.adv.unsqueeze(-1).expand_as(r)
        shape = r.shape[:-2]
        c_low = torch.full(shape, c.c_low_start, dtype=r.dtype, device=r.device)
        c_high = torch.full(shape, c.c_high_start, dtype=r.dtype, device=r.device)
        P, N = _bapo_pn(r, a, m, c_low, c_high, c.stat)
        for _ in range(int(math.ceil((c.c_low_max - c.c_low_start) / c.step_low)) + 1):
            active = (P < c.pos_neg_target * N) & (c_low < c.c_low_max)
            if not bool(active.any()):
                break
            c_low = torch.where(active, (c_low + c.step_low).clamp(max=c.c_low_max), c_low)
            P, N = _bapo_pn(r, a, m, c_low, c_high, c.stat)
        for _ in range(int(math.ceil((c.c_high_max - c.c_high_start) / c.step_high)) + 1):
            active = (P < c.pos_neg_target * N) & (c_high < c.c_high_max)
            if not bool(active.any()):
                break
            c_high = torch.where(active, (c_high + c.step_high).clamp(max=c.c_high_max), c_high)
            P, N = _bapo_pn(r, a, m, c_low, c_high, c.stat)
        self.last_bounds = (c_low, c_high)
        return CorrectionResult(
            bounds=(c_low, c_high),
            dual_clip_c=c.dual_clip_c,
            metrics={"bapo/c_low": c_low, "bapo/c_high": c_high, "bapo/pos_neg_ratio": P / N.clamp_min(1e-12)},
        )
