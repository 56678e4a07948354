"""Logit noise: a seeded perturbation of the sampler's logits (``docs/engines.md#logit_noise``).

The engine samples from ``q = softmax(z + ε)`` and reports ``log q(y)``; the trainer's
``π_v = softmax(z)``. Per vocabulary entry ``k`` of a row at response position ``t`` drawn by a
sampler holding version ``v``::

    ε_k = s_k · ξ_k,   s_k = (scale + drift · v) · (1 + position_slope · t) · (1 − π_v(k))^prob_power

with ``ξ_k`` independent standard normal (``tail = "gaussian"``) or Student-t with ``dof`` degrees of
freedom (``tail = "student_t"``: ``ξ = g / sqrt(χ²_dof / dof)``, heavy-tailed; its standard deviation
is ``sqrt(dof / (dof − 2))`` for ``dof > 2``). ``drift`` grows the scale with the sampling version,
which advances with every optimizer step whatever the learning rate: the gap then grows at lr = 0,
as reported for engines whose numerics drift during training.

To first order in the scale (Gaussian, constant ``s``), the per-token log-ratio
``δ = log π_v(y) − log q(y) = −(ε_y − Σ_k π_k ε_k) + O(s²)`` has variance ``s² (1 − Σ_k π_k²)``
(``docs/engines.md#logit_noise``); ``tests/engines`` checks the exact two-class value by quadrature.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from sandbox.base.lazy_torch import lazy_import
from sandbox.engines.base import ENGINES, Draw, Engine, EngineBase, categorical
from sandbox.tasks import draws

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())


class LogitNoiseConfig(EngineBase):
    """Seeded per-token perturbation of the sampler's logits (Gaussian or Student-t), optionally depending on
    token probability and position and drifting over training steps."""

    name: Literal["logit_noise"] = "logit_noise"
    needs = frozenset({"logits"})
    check_settings = {"scale": 0.1}
    scale: float = Field(
        0.0,
        ge=0,
        le=100,
        description="σ: scale of the per-entry perturbation of the sampler's "
        "logits at version 0, position 0 (0: the exact distribution, though the noise is still drawn).",
    )
    tail: Literal["gaussian", "student_t"] = Field(
        "gaussian",
        description="Distribution of the standardised noise: 'gaussian' or 'student_t' (heavy-tailed, with `dof`).",
    )
    dof: int = Field(3, ge=1, le=100, description="Degrees of freedom of the Student-t noise (tail = 'student_t').")
    drift: float = Field(
        0.0,
        ge=0,
        le=100,
        description="Growth of the scale per sampling version (per optimizer "
        "step): s = scale + drift · v; > 0 makes the gap grow even at learning rate 0.",
    )
    position_slope: float = Field(
        0.0,
        ge=0,
        le=100,
        description="Relative growth of the scale per response position t: factor (1 + position_slope · t).",
    )
    prob_power: float = Field(
        0.0,
        ge=0,
        le=100,
        description="Dependence on the entry's trainer probability π_v(k): "
        "factor (1 − π_v(k))^prob_power (0 = none; > 0 spares confident tokens).",
    )

    @model_validator(mode="after")
    def _tail(self):
        if self.tail == "gaussian" and "dof" in self.model_fields_set:
            raise ValueError("dof: only used with tail = 'student_t'")
        return self


@ENGINES.register(LogitNoiseConfig)
class LogitNoiseEngine(Engine):
    def noise(self, shape: tuple[int, ...], gen) -> Tensor:
        """Standardised noise ξ of ``shape`` from the sampling stream."""
        if self.cfg.tail == "gaussian":
            return draws.randn(shape, gen)
        nu = self.cfg.dof
        g = draws.randn((*shape[:-1], shape[-1] * (nu + 1)), gen).view(*shape, nu + 1)
        chi2 = g[..., 1:].square().sum(-1)
        return g[..., 0] / torch.sqrt(chi2 / nu)

    def scale(self, logp: Tensor, version, position) -> Tensor:
        """``s`` of the module docstring, broadcastable to ``logp``. The version and position factors are
        formed in float64 whether ``version`` is an int or a per-replica tensor (one rounding: a replica
        under its own schedule gets the numbers of its separate run), then cast to float32."""
        c = self.cfg
        lead = [1] * (logp.dim() - 1)
        v = torch.as_tensor(version, dtype=torch.float64)
        s = c.scale + c.drift * (v.view(-1, *lead) if v.dim() else v)
        if c.position_slope:
            t = torch.as_tensor(position, dtype=torch.float64)
            s = s * (1.0 + c.position_slope * (t.unsqueeze(-1) if t.dim() else t))
        s = s.to(torch.float32).to(logp.device)
        if c.prob_power:
            s = s * (1.0 - logp.exp()).clamp_min(0.0).pow(c.prob_power)
        return s

    def draw(self, z, gen, version=0, position=0):
        logp = torch.log_softmax(z.float(), -1)
        s = self.scale(logp, version, position)
        eps = self.noise(tuple(logp.shape), gen).to(logp.device) * s
        logq = torch.log_softmax(logp + eps, -1)
        tok = categorical(logq, gen)
        pick = lambda t: t.gather(-1, tok.unsqueeze(-1)).squeeze(-1)  # noqa: E731
        return Draw(tok, pick(logq), pick(logp))
