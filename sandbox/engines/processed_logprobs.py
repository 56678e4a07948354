"""Processed sampling: temperature, top-k and top-p at the sampler, with the engine reporting the
log-probs of the processed or of the raw distribution (``docs/engines.md#processed_logprobs``).

From the trainer's logits ``z`` (``π_v = softmax(z)``) the engine samples from

    q = renormalised softmax(z / τ) restricted to the top-k entries, then to the top-p nucleus

in vLLM's order (temperature, then top-k, then top-p; vLLM 0.11 ``Sampler``): top-k keeps the
``top_k`` largest entries (ties at the k-th value kept), top-p keeps the smallest set of largest
entries whose probability under the top-k-restricted distribution reaches ``top_p`` (the entry that
crosses ``top_p`` is kept). ``logprobs = "processed"`` reports ``log q(y)`` (vLLM
``logprobs_mode = "processed_logprobs"``); ``"raw"`` reports ``log softmax(z)(y)``, the log-prob before
any processing (vLLM ``"raw_logprobs"``): equal to the trainer's, so the ratio sees no mismatch although
the tokens come from ``q``. ``τ`` is relative to the trainer's distribution (for the LM, on top of
``task.temperature``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from sandbox.base.lazy_torch import lazy_import
from sandbox.engines.base import ENGINES, Draw, Engine, EngineBase, categorical

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())


class ProcessedLogprobsConfig(EngineBase):
    """Temperature, top-k and top-p at sampling; the engine reports processed or raw log-probs."""

    name: Literal["processed_logprobs"] = "processed_logprobs"
    needs = frozenset({"logits"})
    check_settings = {"top_p": 0.9}
    temperature: float = Field(
        1.0,
        ge=1e-3,
        le=1e3,
        description="τ: the sampler divides the trainer's logits by it (1 = the trainer's temperature).",
    )
    top_k: int | None = Field(None, ge=1, description="Keep the top_k most likely entries (None: all).")
    top_p: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Nucleus: keep the smallest set of most likely entries whose probability reaches top_p (1: all).",
    )
    logprobs: Literal["processed", "raw"] = Field(
        "processed",
        description="Which log-prob the engine reports: of the "
        "processed distribution q (vLLM processed_logprobs) or the raw one "
        "softmax(z) (vLLM raw_logprobs).",
    )


def processed_logp(z: Tensor, temperature: float, top_k: int | None, top_p: float) -> Tensor:
    """``log q`` of the module docstring for logits ``z (..., K)`` (−inf outside the kept set)."""
    x = torch.log_softmax(z.float() / temperature, -1)
    K = x.shape[-1]
    if top_k is not None and top_k < K:
        kth = x.topk(top_k, -1).values[..., -1:]
        x = torch.log_softmax(x.masked_fill(x < kth, float("-inf")), -1)
    if top_p < 1.0:
        sorted_x, order = x.sort(-1, descending=True)
        before = sorted_x.exp().cumsum(-1) - sorted_x.exp()  # mass of the entries ranked above
        drop_sorted = before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        x = torch.log_softmax(x.masked_fill(drop, float("-inf")), -1)
    return x


@ENGINES.register(ProcessedLogprobsConfig)
class ProcessedLogprobsEngine(Engine):
    def draw(self, z, gen, version=0, position=0):
        c = self.cfg
        logp = torch.log_softmax(z.float(), -1)
        logq = processed_logp(z, c.temperature, c.top_k, c.top_p)
        tok = categorical(logq, gen)
        pick = lambda t: t.gather(-1, tok.unsqueeze(-1)).squeeze(-1)  # noqa: E731
        exact = pick(logp)
        return Draw(tok, pick(logq) if c.logprobs == "processed" else exact, exact)
