"""A synthetic rollout engine for the component checker: the sampler draws from softmax(z / 2) (twice the
trainer's temperature) and reports that log-prob. It declares nothing beyond ``draw`` (its ``needs``: the
default, a task that hands its logits to the engine)."""

from __future__ import annotations

from typing import Literal

import torch

from sandbox.engines.base import ENGINES, Draw, Engine, EngineBase, categorical


class SyntheticEngineConfig(EngineBase):
    """Synthetic engine: samples at twice the trainer's temperature and reports it (component checker)."""

    name: Literal["synthetic_engine"] = "synthetic_engine"


@ENGINES.register(SyntheticEngineConfig)
class SyntheticEngine(Engine):
    def draw(self, z, gen, version=0, position=0):
        logq = torch.log_softmax(z.float() / 2, -1)
        tok = categorical(logq, gen)
        exact = torch.log_softmax(z.float(), -1).gather(-1, tok.unsqueeze(-1)).squeeze(-1)
        return Draw(tok, logq.gather(-1, tok.unsqueeze(-1)).squeeze(-1), exact)
