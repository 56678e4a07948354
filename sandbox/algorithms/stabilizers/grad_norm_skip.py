"""Skip the optimizer step on a gradient-norm spike, by the z-score rule of ZClip (Kumar et al.
arXiv 2504.02507, "ZClip: Adaptive Spike Mitigation for LLM Pre-Training"; code bluorion-com/ZClip
``zclip/zclip.py``, package version 0.0.1): ``docs/methods/stabilizers.md#grad_norm_skip``.

Per replica, with ``n_t = ‖g_t‖`` the global gradient norm before clipping:

    warm-up (steps 1..W):  collect n_t; at step W:  μ = mean(n_1..n_W),  σ² = var(n_1..n_W) (population)
    after:                 z_t = (n_t − μ) / (σ + ε),   skip the step iff z_t > z_thr
                           statistics:  μ ← α μ + (1 − α) m_t;   σ² ← α σ² + (1 − α) (m_t − μ)²
                           m_t = n_t if kept; on a skipped step m_t = μ + z_thr·σ (on_spike = "capped")
                           or no update at all (on_spike = "frozen")

The variance update uses the freshly updated μ and ``ε = 1e-6``, as ZClip's code does. Difference from
ZClip: ZClip CLIPS a spike (by default to ``μ + z_thr²·σ/z``, or ``μ + z_thr·σ`` in its percentile mode)
and feeds the clipped norm to the statistics; this rule SKIPS the replica's step instead, a plain
gradient-norm step skip. Why ``capped`` is the default: with ``frozen`` (ZClip's
``skip_update_on_spike``) a lasting jump of the norm is never absorbed and every later step is skipped,
so training stops; feeding the cap ``μ + z_thr·σ`` grows σ² by the factor ``α + (1 − α)α²z_thr²`` per
skipped step (1.146 at the defaults), so a lasting level is absorbed after a number of skips logarithmic
in its size. Warm-up steps never skip. Acts before global-norm clipping, on the gradient handed on by any earlier
before-clip stabilizer of the list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from sandbox.algorithms._tensor import replica_sum
from sandbox.algorithms.base import MethodConfig
from sandbox.algorithms.stabilizers.base import STABILIZERS, Stabilizer
from sandbox.base.lazy_torch import lazy_import

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())

EPS = 1e-6
"""ε of ``z = (n − μ)/(σ + ε)``: ZClip's default ``eps`` (``zclip/zclip.py``)."""


class GradNormSkipConfig(MethodConfig):
    """Skip the step when the gradient norm is a spike: z-score of the norm against EMA statistics
    above ``z_threshold`` (ZClip's rule, Kumar et al. arXiv 2504.02507, skipping instead of clipping;
    ``docs/methods/stabilizers.md#grad_norm_skip``)."""

    name: Literal["grad_norm_skip"] = "grad_norm_skip"
    alpha: float = Field(
        0.97,
        gt=0,
        lt=1,
        description=(
            "EMA decay α of the norm's mean and variance; 0.97 = ZClip's default (arXiv 2504.02507 Fig. 1; "
            "zclip/zclip.py alpha=0.97)."
        ),
    )
    z_threshold: float = Field(
        2.5,
        gt=0,
        description=(
            "Skip when z = (‖g‖ − μ)/σ exceeds this; 2.5 = ZClip's default (arXiv 2504.02507 Fig. 1; "
            "zclip/zclip.py z_thresh=2.5)."
        ),
    )
    warmup: int = Field(
        25,
        ge=1,
        description=(
            "Steps whose norms initialise μ and σ² (no skip before); 25 = ZClip's code default "
            "(zclip/zclip.py warmup_steps=25, version 0.0.1; not stated in the paper's text we could read)."
        ),
    )
    on_spike: Literal["capped", "frozen"] = Field(
        "capped",
        description=(
            "Statistics on a skipped step: 'capped' feeds the cap μ + z_thr·σ (like ZClip, which feeds the clipped "
            "norm; a lasting change of the norm is absorbed, our default) or 'frozen' leaves them unchanged (ZClip's "
            "skip_update_on_spike=True; a lasting jump then skips every later step)."
        ),
    )


@STABILIZERS.register(GradNormSkipConfig)
class GradNormSkip(Stabilizer):
    """Stateful spike detector (see module docstring): gradient stage, before clipping, may skip.
    Metrics ``(R...)``: ``grad_skip/z`` (NaN during warm-up) and ``grad_skip/skipped``."""

    stage = "gradient"
    before_clip = True
    can_skip = True

    def __init__(self, cfg: GradNormSkipConfig):
        super().__init__(cfg)
        self.reset()

    def reset(self) -> None:
        self.warmup_norms: list[Tensor] = []
        self.mean: Tensor | None = None
        self.var: Tensor | None = None

    def state_dict(self) -> dict:
        """The warm-up norms seen so far and the EMA statistics μ, σ² (None before the warm-up ends)."""
        return {"warmup_norms": list(self.warmup_norms), "mean": self.mean, "var": self.var}

    def load_state_dict(self, state: dict) -> None:
        self.warmup_norms = list(state["warmup_norms"])
        self.mean, self.var = state["mean"], state["var"]

    def transform(self, vecs: list[Tensor], replica_dims: int, context=None):
        norm = sum(replica_sum(g * g, replica_dims) for g in vecs).sqrt().detach()
        if self.mean is None:
            self.warmup_norms.append(norm.clone())
            if len(self.warmup_norms) >= self.cfg.warmup:
                seen = torch.stack(self.warmup_norms)
                self.mean, self.var = seen.mean(0), seen.var(0, unbiased=False)
                self.warmup_norms = []
            return (
                vecs,
                None,
                {"grad_skip/z": torch.full_like(norm, float("nan")), "grad_skip/skipped": torch.zeros_like(norm)},
            )
        z = (norm - self.mean) / (self.var.sqrt() + EPS)
        skip = z > self.cfg.z_threshold
        a = self.cfg.alpha
        seen = norm
        if self.cfg.on_spike == "capped":
            seen = torch.where(skip, self.mean + self.cfg.z_threshold * self.var.sqrt(), norm)
        mean = a * self.mean + (1.0 - a) * seen
        var = a * self.var + (1.0 - a) * (seen - mean) ** 2
        if self.cfg.on_spike == "frozen":
            mean, var = torch.where(skip, self.mean, mean), torch.where(skip, self.var, var)
        self.mean, self.var = mean, var
        return vecs, skip, {"grad_skip/z": z, "grad_skip/skipped": skip.to(norm.dtype)}
