"""The compact transformer's ``torch.nn.Module`` classes: the decoder-only transformer of
:mod:`sandbox.models.transformer` (its config :class:`~sandbox.models.transformer.TransformerConfig`, its
sampling loop) as modules, GPT-style pre-LayerNorm blocks and, with ``experts = E >= 2``, a top-1 mixture
of E expert MLPs per block (:class:`MoE`, Switch Transformer routing). They subclass ``torch.nn.Module``,
so this module imports torch: the task builds them when it runs (``LMTask``), while the config module
loads without torch (a scenario is validated without it).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

if TYPE_CHECKING:
    from sandbox.models.transformer import KVCache, RouterFlip, TransformerConfig


class Expert(nn.Module):
    """One feed-forward expert: ``fc2(gelu(fc1(h)))``."""

    def __init__(self, d: int, ff: int):
        super().__init__()
        self.fc1 = nn.Linear(d, ff)
        self.fc2 = nn.Linear(ff, d)

    def forward(self, h: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(h)))


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
