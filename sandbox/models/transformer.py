"""A compact decoder-only transformer (GPT-style, pre-LayerNorm) with KV-cache sampling.

One config (:class:`TransformerConfig`), one module (:class:`Transformer`) and the sampling loop
(:func:`sample`) that records, for every sampled token, the log-probability of the distribution it
was actually drawn from (``log_softmax(logits / temperature)``): the behaviour log-probs μ that
off-policy corrections compare against. The module is written so that
``torch.func.functional_call(model, params, ...)`` works (weights snapshots of the simulator's weight
store are plain ``{name: tensor}`` dicts) and so that ``torch.func.vmap(grad(...))`` over sequences
works (attention is written out; no fused kernels that lack batching rules).

Attention uses a causal mask over the whole (past + new) sequence, so the cached and uncached paths
compute the same function: :func:`sample` with ``use_cache=False`` re-runs the full sequence at every
step (the benchmark's baseline and the tests' reference).

``experts = E >= 2`` replaces each block's MLP by a top-1 mixture of E expert MLPs (:class:`MoE`,
Switch Transformer routing); a rollout engine may perturb the sampler's routing through
:attr:`Transformer.router_flip` and sample through :func:`sample_with` (``docs/engines.md``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import Tensor, nn

KVCache = list[tuple[Tensor, Tensor]]
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


class Expert(nn.Module):
    """One feed-forward expert: ``fc2(gelu(fc1(h)))``."""

    def __init__(self, d: int, ff: int):
        super().__init__()
        self.fc1 = nn.Linear(d, ff)
        self.fc2 = nn.Linear(ff, d)

    def forward(self, h: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(h)))


RouterFlip = Callable[[Tensor, int], Tensor]
"""``(top-1 experts (B, L), E) -> the experts used``: a sampler's routing perturbation (``sandbox.engines.routing``)."""


class MoE(nn.Module):
    """Top-1 mixture of experts (Switch Transformer, Fedus et al. 2021): ``g = softmax(W_r h + b_r)``,
    ``e* = argmax g`` (or the sampler's flipped choice), output ``g_{e*} · expert_{e*}(h)``. Every expert
    runs on every token and the chosen one is kept (tiny models: simpler than dispatch, same numbers)."""

    def __init__(self, d: int, ff: int, experts: int):
        super().__init__()
        self.router = nn.Linear(d, experts)
        self.experts = nn.ModuleList(Expert(d, ff) for _ in range(experts))

    def forward(self, h: Tensor, flip: RouterFlip | None = None) -> Tensor:
        gates = torch.softmax(self.router(h), -1)  # (B, L, E)
        top = gates.argmax(-1)
        if flip is not None:
            top = flip(top, gates.shape[-1])
        keep = F.one_hot(top, gates.shape[-1]).to(gates.dtype) * gates
        outs = torch.stack([e(h) for e in self.experts], -2)  # (B, L, E, d)
        return (keep.unsqueeze(-1) * outs).sum(-2)


class Block(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        d = cfg.d_model
        self.n_heads = cfg.n_heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        if cfg.experts:
            self.moe = MoE(d, cfg.ff, cfg.experts)
        else:
            self.fc1 = nn.Linear(d, cfg.ff)
            self.fc2 = nn.Linear(cfg.ff, d)

    def forward(
        self, x: Tensor, past: tuple[Tensor, Tensor] | None, flip: RouterFlip | None = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        B, L, D = x.shape
        H = self.n_heads
        hd = D // H
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q = q.view(B, L, H, hd).transpose(1, 2)
        k = k.view(B, L, H, hd).transpose(1, 2)
        v = v.view(B, L, H, hd).transpose(1, 2)
        if past is not None:
            k = torch.cat([past[0], k], 2)
            v = torch.cat([past[1], v], 2)
        Lk = k.shape[2]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        if L > 1:
            # query i sits at absolute position Lk - L + i and sees keys 0 .. Lk - L + i
            qpos = torch.arange(Lk - L, Lk, device=x.device).unsqueeze(1)
            kpos = torch.arange(Lk, device=x.device).unsqueeze(0)
            att = att.masked_fill(kpos > qpos, float("-inf"))
        y = torch.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).reshape(B, L, D)
        x = x + self.proj(y)
        if hasattr(self, "moe"):
            x = x + self.moe(self.ln2(x), flip)
        else:
            x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x, (k, v)


class Transformer(nn.Module):
    """Decoder-only transformer: token + learned position embeddings, pre-LN blocks, final LN."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        if cfg.vocab_size is None or cfg.max_seq_len is None:
            raise ValueError("TransformerConfig.vocab_size and max_seq_len must be set (the task fills them in)")
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.router_flip: RouterFlip | None = None
        """A sampler's routing perturbation applied by every mixture-of-experts block (None: argmax routing)."""

    def reset_parameters(self, gen: torch.Generator) -> None:
        """Deterministic init from ``gen``: normal(0, init_std) weights, zero biases, unit LayerNorms;
        residual output projections scaled by 1/sqrt(2 n_layers) (GPT-2)."""
        std = self.cfg.init_std
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif ".ln" in name or name.startswith("ln_"):
                    p.fill_(1.0)
                else:
                    s = std / math.sqrt(2 * self.cfg.n_layers) if name.endswith(("proj.weight", "fc2.weight")) else std
                    p.copy_(torch.randn(p.shape, generator=gen) * s)

    def forward(self, tokens: Tensor, past: KVCache | None = None) -> tuple[Tensor, KVCache]:
        """``tokens (B, L)`` following ``past`` (cached keys/values of the preceding positions) →
        ``(logits (B, L, V), present cache)``."""
        start = 0 if past is None else past[0][0].shape[2]
        L = tokens.shape[1]
        if start + L > self.cfg.max_seq_len:
            raise ValueError(f"sequence of {start + L} tokens exceeds max_seq_len={self.cfg.max_seq_len}")
        pos = torch.arange(start, start + L, device=tokens.device)
        x = self.tok(tokens) + self.pos(pos)
        present: KVCache = []
        for i, blk in enumerate(self.blocks):
            x, kv = blk(x, None if past is None else past[i], self.router_flip)
            present.append(kv)
        x = self.ln_f(x)
        logits = x @ self.tok.weight.t() if self.head is None else self.head(x)
        return logits, present


Forward = Callable[[Tensor, "KVCache | None"], tuple[Tensor, KVCache]]


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


@torch.no_grad()
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


DrawFn = Callable[[Tensor, int], tuple[Tensor, Tensor, Tensor]]
"""``(last logits (B, V), decode step) -> (tokens (B,), reported log-probs (B,), exact log-probs (B,))``."""


@torch.no_grad()
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
