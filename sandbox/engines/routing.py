"""Routing: the sampler routes a token to a different expert than the learner would
(``docs/engines.md#routing``).

For the LM with a mixture-of-experts feed-forward (``task.model.experts > 0``, top-1 routing,
:mod:`sandbox.models.transformer`), every router decision of the sampler's forward (one per token per
layer, prefill included) is flipped with probability ``flip_prob`` to an expert drawn uniformly among
the other ``E − 1``; the learner's teacher-forced forward routes by the argmax. Tokens are drawn from
the sampler's distribution and its log-prob is reported; the trainer's exact log-prob comes from a
float32 teacher-forced forward with argmax routing. The draws come from the sampling stream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from sandbox.base.lazy_torch import lazy_import
from sandbox.engines.base import ENGINES, Engine, EngineBase, tiny_lm_check_settings
from sandbox.tasks import draws

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())


class RoutingConfig(EngineBase):
    """The sampler routes each token to another expert with probability flip_prob (lm task with a mixture-of-experts layer)."""

    name: Literal["routing"] = "routing"
    needs = frozenset({"logits", "forward", "experts"})
    check_settings = tiny_lm_check_settings(experts=2)
    flip_prob: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Probability that a router decision of the sampler goes "
        "to another expert (uniform among the other E − 1) than the learner's argmax.",
    )


class RouterFlip:
    """The perturbation a mixture-of-experts layer applies to its top-1 choices (one sampler forward)."""

    def __init__(self, engine: RoutingEngine, gen):
        self.engine = engine
        self.gen = gen

    def __call__(self, top: Tensor, experts: int) -> Tensor:
        """``top (...)`` argmax experts → the sampler's experts (a flip with probability ``flip_prob``)."""
        shape = tuple(top.shape)
        u = draws.rand(shape, self.gen).to(top.device)
        other = draws.rand(shape, self.gen).to(top.device)
        flip = u < self.engine.cfg.flip_prob
        shift = 1 + (other * (experts - 1)).long().clamp_(max=experts - 2)
        self.engine.flips += int(flip.sum())
        self.engine.decisions += flip.numel()
        return torch.where(flip, (top + shift) % experts, top)


@ENGINES.register(RoutingConfig)
class RoutingEngine(Engine):
    def router_flip(self, gen):
        return RouterFlip(self, gen) if self.cfg.flip_prob > 0 else None
