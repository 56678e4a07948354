"""A compact decoder-only transformer (GPT-style, pre-LayerNorm) with KV-cache sampling.

One config (:class:`TransformerConfig`), one module (:class:`sandbox.models.transformer_nn.Transformer`:
the ``torch.nn.Module`` classes live in :mod:`sandbox.models.transformer_nn`, so that this config loads
without torch) and the sampling loop (:func:`sample`) that records, for every sampled token, the
log-probability of the distribution it was actually drawn from (``log_softmax(logits / temperature)``):
the behaviour log-probs μ that off-policy corrections compare against. The module is written so that
``torch.func.functional_call(model, params, ...)`` works (weights snapshots of the simulator's weight
store are plain ``{name: tensor}`` dicts) and so that ``torch.func.vmap(grad(...))`` over sequences
works (attention is written out; no fused kernels that lack batching rules).

Attention uses a causal mask over the whole (past + new) sequence, so the cached and uncached paths
compute the same function: :func:`sample` with ``use_cache=False`` re-runs the full sequence at every
step (the benchmark's baseline and the tests' reference).

``experts = E >= 2`` replaces each block's MLP by a top-1 mixture of E expert MLPs
(:class:`~sandbox.models.transformer_nn.MoE`, Switch Transformer routing); a rollout engine may perturb
the sampler's routing through :attr:`~sandbox.models.transformer_nn.Transformer.router_flip` and sample
through :func:`sample_with` (``docs/engines.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sandbox.base.lazy_torch import lazy_import, no_grad

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())

KVCache = list[tuple["Tensor", "Tensor"]]
"""Per layer ``(k, v)`` each ``(B, heads, L_past, head_dim)``."""


class TransformerConfig(BaseModel):
    """Architecture of the compact transformer. ``vocab_size`` and ``max_seq_len`` are normally
    filled in by the task (its tokenizer and prompt + answer length)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    backend: Literal["builtin"] = Field(
        "builtin", description="'builtin': this compact transformer (the default when task.model names no backend)."
    )
    d_model: int = Field(64, ge=8, description="Residual width; 64 keeps a learner step in milliseconds on a CPU.")
    n_layers: int = Field(2, ge=1, description="Transformer blocks; 2 suffice for the synthetic tasks' short answers.")
    n_heads: int = Field(4, ge=1, description="Attention heads (d_model must be divisible by it).")
    d_ff: int | None = Field(None, ge=1, description="MLP hidden width; None = 4 x d_model (GPT-2 ratio).")
    vocab_size: int | None = Field(None, ge=2, description="Vocabulary size; None = the task's tokenizer size.")
    max_seq_len: int | None = Field(
        None, ge=2, description="Longest prompt + response; None = the task's prompt length + max_new_tokens."
    )
    init_std: float = Field(0.02, gt=0, description="Std of the normal weight init (GPT-2 0.02).")
    tie_embeddings: bool = Field(True, description="Share the token embedding with the output head (GPT-2).")
    experts: int = Field(
        0,
        ge=0,
        le=64,
        description="Mixture-of-experts feed-forward: 0 = the dense MLP (default); E >= 2 = E expert MLPs of width d_ff "
        "per block with top-1 routing (Switch Transformer: the chosen expert's output times its router probability). "
        "The rollout engine 'routing' flips the sampler's choices (docs/engines.md#routing).",
    )

    @model_validator(mode="after")
    def _check(self):
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.experts == 1:
            raise ValueError("experts: 1 expert is the dense MLP with a router; use 0 (dense) or at least 2")
        return self

    @property
    def ff(self) -> int:
        return self.d_ff if self.d_ff is not None else 4 * self.d_model


RouterFlip = Callable[["Tensor", int], "Tensor"]
"""``(top-1 experts (B, L), E) -> the experts used``: a sampler's routing perturbation (``sandbox.engines.routing``)."""


Forward = Callable[["Tensor", "KVCache | None"], tuple["Tensor", KVCache]]


def draw(logits: Tensor, temperature: float, gen: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """One token per row of ``logits (B, V)``: sampled from softmax(logits/temperature) with ``gen``
    (``torch.multinomial``: deterministic for a given generator state), or greedy when
    ``temperature == 0``. Returns ``(token (B,), log-prob of the distribution used (B,))``;
    greedy reports the temperature-1 log-prob."""
    if temperature == 0:
        tok = torch.argmax(logits, -1)
        logp = torch.log_softmax(logits.float(), -1)
    else:
        logp = torch.log_softmax(logits.float() / temperature, -1)
        probs = logp.exp()
        if probs.device.type != "cpu" and gen is not None and gen.device.type == "cpu":
            tok = torch.multinomial(probs.cpu(), 1, generator=gen).squeeze(-1).to(probs.device)
        else:
            tok = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
    return tok, logp.gather(-1, tok.unsqueeze(-1)).squeeze(-1)


@no_grad
def sample(
    forward: Forward,
    context: Tensor,
    max_new_tokens: int,
    eos_id: int,
    temperature: float = 1.0,
    gen: torch.Generator | None = None,
    use_cache: bool = True,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Decode up to ``max_new_tokens`` after ``context (B, L)`` (prompt plus any earlier response
    prefix). Rows stop at ``eos_id`` (the end token is kept and counted); later positions hold 0.

    Returns ``tokens (B, S)``, ``logp (B, S)`` (behaviour log-probs, 0 after the end), ``lengths (B,)``
    (valid tokens including the end token) and ``hit_eos (B,)``; ``S <= max_new_tokens`` is the
    longest row. With ``use_cache`` the prompt is prefilled once and every later step feeds one
    token; without it every step recomputes the whole sequence (same function, same draws).
    """
    B = context.shape[0]
    dev = context.device
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    lengths = torch.zeros(B, dtype=torch.long, device=dev)
    toks, lps = [], []
    if max_new_tokens <= 0:
        z = torch.zeros(B, 0, dtype=torch.long, device=dev)
        return z, z.float(), lengths, done
    seq = context
    logits, cache = forward(context, None)
    for _ in range(max_new_tokens):
        tok, lp = draw(logits[:, -1], temperature, gen)
        tok = tok.masked_fill(done, 0)
        lp = lp.masked_fill(done, 0.0)
        toks.append(tok)
        lps.append(lp)
        lengths += (~done).long()
        done = done | (tok == eos_id)
        if bool(done.all()) or len(toks) == max_new_tokens:
            break
        if use_cache:
            logits, cache = forward(tok.unsqueeze(1), cache)
        else:
            seq = torch.cat([seq, tok.unsqueeze(1)], 1)
            logits, _ = forward(seq, None)
    return torch.stack(toks, 1), torch.stack(lps, 1), lengths, done


DrawFn = Callable[["Tensor", int], tuple["Tensor", "Tensor", "Tensor"]]
"""``(last logits (B, V), decode step) -> (tokens (B,), reported log-probs (B,), exact log-probs (B,))``."""


@no_grad
def sample_with(
    forward: Forward,
    context: Tensor,
    max_new_tokens: int,
    eos_id: int,
    draw_fn: DrawFn,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """:func:`sample` (with the KV cache) whose tokens come from ``draw_fn`` (a rollout engine,
    ``sandbox.engines``), which also returns a second log-prob per token (the trainer's exact one).
    Returns ``tokens, reported logp, exact logp (B, S)`` (0 after the end), ``lengths``, ``hit_eos``."""
    B = context.shape[0]
    dev = context.device
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    lengths = torch.zeros(B, dtype=torch.long, device=dev)
    toks, lps, exact = [], [], []
    if max_new_tokens <= 0:
        z = torch.zeros(B, 0, dtype=torch.long, device=dev)
        return z, z.float(), z.float(), lengths, done
    logits, cache = forward(context, None)
    for step in range(max_new_tokens):
        tok, lp, ex = draw_fn(logits[:, -1], step)
        toks.append(tok.masked_fill(done, 0))
        lps.append(lp.masked_fill(done, 0.0))
        exact.append(ex.masked_fill(done, 0.0))
        lengths += (~done).long()
        done = done | (toks[-1] == eos_id)
        if bool(done.all()) or len(toks) == max_new_tokens:
            break
        logits, cache = forward(toks[-1].unsqueeze(1), cache)
    return torch.stack(toks, 1), torch.stack(lps, 1), torch.stack(exact, 1), lengths, done


def sequence_logprobs(forward: Forward, context: Tensor, tokens: Tensor, temperature: float = 1.0) -> Tensor:
    """Teacher-forced ``log softmax(logits/temperature)[y_t]`` of ``tokens (B, S)`` after
    ``context (B, P)`` in one forward pass → ``(B, S)`` (differentiable; caller masks padding)."""
    P = context.shape[1]
    full = torch.cat([context, tokens], 1)
    logits, _ = forward(full[:, :-1], None)
    logits = logits[:, P - 1 :]
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits.float(), -1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
