"""The builtin transformer over a leading replica dimension: R independent models in one set of kernels.

:func:`forward` computes what :class:`sandbox.models.transformer_nn.Transformer` computes, for R weight
sets stacked along a leading dimension (``{name: (R, *shape)}``, the task's parameter dict) and
tokens ``(R, B, L)``: every matrix product is one ``torch.bmm`` over the replicas (a linear layer
``x W_rᵀ + b_r`` is ``bmm(x, Wᵀ) + b``), attention is one ``bmm`` over the ``R·B·heads`` sequences,
LayerNorm normalises over the last dimension (``F.layer_norm`` without weights) and then applies each
replica's ``w_r ⊙ x̂ + b_r``, and the KV cache holds ``(R·B·heads, L, head_dim)`` keys and values.
:func:`decode` is the KV-cache sampling loop over the replicas: one forward per step for all of them,
each replica drawing its own tokens (its own generator) until its own rows end.

Why this formulation: every batched kernel used here computes each batch entry on its own, with the
kernel chosen by the entry's shape, not by the number of entries (measured on the CPU for ``torch.bmm``,
``F.layer_norm``, ``softmax``, the reductions of the backward pass: ``tests/lm/test_lm_replicas.py``),
so replica r of an R-replica forward equals the same forward with R = 1 to the bit. The task runs every
builtin model through it, R = 1 included, so replica r of a run equals the one-replica run with its
seeds (``docs/tasks.md#replicas``). The one exception found, a batch of ONE product with one output
column (MKL then takes a matrix-vector path), is avoided by :func:`bmm`. The numbers differ from the
plain module (``F.linear`` is ``addmm``, bias fused; LayerNorm's affine is fused) by float rounding only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from sandbox.base.lazy_torch import lazy_import, no_grad
from sandbox.models.transformer import TransformerConfig

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())
F = lazy_import("torch.nn.functional", globals())

Params = dict[str, "Tensor"]
Cache = list[tuple["Tensor", "Tensor"]]
"""Per layer ``(k, v)`` each ``(R·B·heads, L_past, head_dim)``."""
Flips = Sequence[Callable[["Tensor", int], "Tensor"] | None]
"""Per replica: its sampler's routing perturbation (``sandbox.engines.routing``) or None."""


def bmm(a: Tensor, b: Tensor) -> Tensor:
    """``torch.bmm(a, b)``, except that a batch of one product with one output column is computed as
    a batch of two (MKL takes a matrix-vector path for it whose sums round differently)."""
    if a.shape[0] == 1 and b.shape[-1] == 1:
        return torch.bmm(a.expand(2, -1, -1), b.expand(2, -1, -1))[:1]
    return torch.bmm(a, b)


def linear(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    """``x_r W_rᵀ + b_r`` for ``x (R, ..., in)``, ``w (R, out, in)``, ``b (R, out)``. Each row's result does
    not depend on how many rows the product has: with fewer than :func:`min_rows` rows, zero rows are
    added (MKL and ATen take other paths for them, whose sums round differently)."""
    R, d = x.shape[0], x.shape[-1]
    rows = x.reshape(R, -1, d)
    M, need = rows.shape[1], min_rows(d, w.shape[1])
    if M < need:
        y = bmm(torch.cat([rows, rows.new_zeros(R, need - M, d)], 1), w.transpose(1, 2))[:, :M]
    else:
        y = bmm(rows, w.transpose(1, 2))
    if b is not None:
        y = y + b.unsqueeze(1)
    return y.view(*x.shape[:-1], w.shape[1])


def min_rows(inner: int, cols: int) -> int:
    """The fewest rows of a product ``(M, inner) @ (inner, cols)`` whose every row is computed as in any
    larger product: at least 4 (MKL's small-M path) and ``inner · M · cols >= 400`` (below it ATen
    multiplies with its own loop). Measured on the CPU for float32, bfloat16 and float16 over
    inner 8-1024, cols 1-1024, M 1-4096 (``tests/lm/test_lm_replicas.py`` holds it for the model)."""
    return max(4, -(-400 // (inner * cols)))


def layer_norm(x: Tensor, w: Tensor, b: Tensor, eps: float = 1e-5) -> Tensor:
    """``w_r ⊙ (x − mean) / sqrt(var + eps) + b_r`` over the last dim of ``x (R, ..., d)`` (``nn.LayerNorm``,
    its affine step unfused)."""
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
    return F.layer_norm(x, x.shape[-1:], eps=eps) * w.view(shape) + b.view(shape)


def _mlp(p: Params, pre: str, h: Tensor) -> Tensor:
    return linear(
        F.gelu(linear(h, p[pre + "fc1.weight"], p[pre + "fc1.bias"])), p[pre + "fc2.weight"], p[pre + "fc2.bias"]
    )


def _moe(p: Params, pre: str, h: Tensor, experts: int, flips: Flips | None) -> Tensor:
    """Top-1 mixture of experts (:class:`sandbox.models.transformer_nn.MoE`) per replica; replica r's
    routing perturbation sees its own ``(B, L)`` choices."""
    gates = torch.softmax(linear(h, p[pre + "router.weight"], p[pre + "router.bias"]), -1)  # (R, B, L, E)
    top = gates.argmax(-1)
    if flips is not None and any(f is not None for f in flips):
        top = torch.stack([t if f is None else f(t, experts) for t, f in zip(top, flips)])
    keep = F.one_hot(top, experts).to(gates.dtype) * gates
    outs = torch.stack([_mlp(p, f"{pre}experts.{e}.", h) for e in range(experts)], -2)  # (R, B, L, E, d)
    return (keep.unsqueeze(-1) * outs).sum(-2)


def forward(
    cfg: TransformerConfig, p: Params, tokens: Tensor, past: Cache | None = None, flips: Flips | None = None
) -> tuple[Tensor, Cache]:
    """``tokens (R, B, L)`` following ``past`` → ``(logits (R, B, L, V), present cache)`` under the
    replicas' weights ``p`` (``{name: (R, *shape)}``, the names of ``Transformer.named_parameters``)."""
    R, B, L = tokens.shape
    D, H = cfg.d_model, cfg.n_heads
    hd = D // H
    start = 0 if past is None else past[0][0].shape[1]
    if start + L > cfg.max_seq_len:
        raise ValueError(f"sequence of {start + L} tokens exceeds max_seq_len={cfg.max_seq_len}")
    tok = p["tok.weight"]
    V = tok.shape[1]
    offsets = (torch.arange(R, device=tokens.device) * V).view(R, 1, 1)
    x = F.embedding(tokens + offsets, tok.reshape(R * V, D)) + p["pos.weight"][:, start : start + L].unsqueeze(1)
    mask = None
    if L > 1:  # query i sits at absolute position start + i and sees keys 0 .. start + i
        qpos = torch.arange(start, start + L, device=tokens.device).unsqueeze(1)
        kpos = torch.arange(start + L, device=tokens.device).unsqueeze(0)
        mask = kpos > qpos
    scale = 1.0 / math.sqrt(hd)
    present: Cache = []
    for i in range(cfg.n_layers):
        pre = f"blocks.{i}."
        h = layer_norm(x, p[pre + "ln1.weight"], p[pre + "ln1.bias"])
        qkv = linear(h, p[pre + "qkv.weight"], p[pre + "qkv.bias"]).view(R, B, L, 3, H, hd)
        q, k, v = (qkv[:, :, :, j].permute(0, 1, 3, 2, 4).reshape(R * B * H, L, hd) for j in range(3))
        if past is not None:
            k = torch.cat([past[i][0], k], 1)
            v = torch.cat([past[i][1], v], 1)
        att = bmm(q, k.transpose(1, 2)) * scale
        if mask is not None:
            att = att.masked_fill(mask, float("-inf"))
        y = bmm(torch.softmax(att, dim=-1), v)  # (R·B·H, L, hd)
        y = y.view(R, B, H, L, hd).transpose(2, 3).reshape(R, B, L, D)
        x = x + linear(y, p[pre + "proj.weight"], p[pre + "proj.bias"])
        h = layer_norm(x, p[pre + "ln2.weight"], p[pre + "ln2.bias"])
        x = x + (_moe(p, pre + "moe.", h, cfg.experts, flips) if cfg.experts else _mlp(p, pre, h))
        present.append((k, v))
    x = layer_norm(x, p["ln_f.weight"], p["ln_f.bias"])
    head = p["tok.weight"] if cfg.tie_embeddings else p["head.weight"]
    return linear(x, head, None), present


Draw = Callable[["Tensor", list[int], int], tuple["Tensor", "Tensor", "Tensor | None"]]
"""``(last logits (R', B, V) of the active replicas, their indices, decode step) -> (tokens, reported
log-probs, exact log-probs or None)``, each ``(R', B)``: one draw of every active replica, each from its
own stream."""


@no_grad
def decode(
    cfg: TransformerConfig,
    p: Params,
    context: Tensor,
    max_new_tokens: int,
    eos_id: int,
    draw: Draw,
    flips: Flips | None = None,
    prefilled: tuple[Tensor, Cache] | None = None,
    compact: bool = False,
) -> list[tuple[Tensor, Tensor, Tensor | None, Tensor, Tensor]]:
    """KV-cache decoding of ``context (R, B, L)`` for every replica at once: one prefill, then one
    forward of the last tokens per step, ``draw`` making the active replicas' tokens. A replica stops
    drawing, as its one-replica :func:`sandbox.models.transformer.sample` does, once all its rows have
    ended (end token kept and counted) or after ``max_new_tokens``; its rows are then fed token 0 (their
    logits are never read) and its routing perturbation (``flips[r]``) is no longer called. ``prefilled``:
    the prefill ``(logits (R, B, ≥1, V), cache)`` of ``context`` computed before (its last position is read).

    ``compact``: ended rows leave the forward (each replica's live rows are gathered to the front of a
    batch as wide as the most live rows of any replica, with their keys/values; the other slots hold ended
    rows, whose logits are not read). Every live row's numbers are the same (a row's result does not depend
    on the rows beside it: :func:`linear`, and attention, LayerNorm and the rest are row by row); ``draw``
    still sees ``(R', B, V)``, an ended row's logits then 0. Only for a draw whose tokens of live rows and
    whose random numbers consumed do not depend on the ended rows' logits (``torch.multinomial`` draws one
    exponential per row and token whatever the probabilities; greedy draws none), and not with ``flips``
    (a routing perturbation draws per row of the forward).

    Returns per replica ``(tokens (B, S_r), reported logp (B, S_r), exact logp or None, lengths (B,),
    hit_eos (B,))``, 0 after the end, ``S_r`` the steps that replica drew."""
    if compact and flips is not None:
        raise ValueError("decode: compact=True with a routing perturbation (it draws per row of the forward)")
    R, B, _ = context.shape
    dev = context.device
    done = torch.zeros(R, B, dtype=torch.bool, device=dev)
    lengths = torch.zeros(R, B, dtype=torch.long, device=dev)
    steps = [0] * R
    if max_new_tokens <= 0:
        z = torch.zeros(B, 0, dtype=torch.long, device=dev)
        return [(z, z.float(), None, lengths[r], done[r]) for r in range(R)]
    toks = torch.zeros(R, B, max_new_tokens, dtype=torch.long, device=dev)
    lps = torch.zeros(R, B, max_new_tokens, device=dev)
    exact: Tensor | None = None
    active = list(range(R))
    logits, cache = prefilled if prefilled is not None else _prefill(cfg, p, context, flips)
    last = logits[:, :, -1]  # (R, B, V)
    slots: Tensor | None = None  # compact: (R, B') the row of each slot of the forward's batch (None: row = slot)
    for step in range(max_new_tokens):
        every = len(active) == R
        rows = slice(None) if every else torch.tensor(active, device=dev)
        tok, lp, ex = draw(last if every else last[rows], active, step)
        d = done[rows]
        tok = tok.masked_fill(d, 0)
        toks[rows, :, step] = tok
        lps[rows, :, step] = lp.float().masked_fill(d, 0.0)
        if ex is not None:
            if exact is None:
                exact = torch.zeros(R, B, max_new_tokens, device=dev)
            exact[rows, :, step] = ex.float().masked_fill(d, 0.0)
        lengths[rows] += (~d).long()
        d = d | (tok == eos_id)
        done[rows] = d
        for r in active:
            steps[r] += 1
        if step + 1 == max_new_tokens:
            break
        finished = d.all(1).tolist()
        active = [r for r, f in zip(active, finished) if not f]
        if not active:
            break
        feed = torch.zeros(R, B, dtype=torch.long, device=dev)
        feed[rows] = tok
        if flips is not None:  # a replica that stopped draws no more routes (its stream stays its own run's)
            flips = [f if r in active else None for r, f in enumerate(flips)]
        if compact:
            slots, cache = _compact(done, slots, cache, cfg.n_heads)
            feed = feed if slots is None else feed.gather(1, slots)
        logits, cache = forward(cfg, p, feed.unsqueeze(-1), cache, flips)
        last = logits[:, :, -1]
        if slots is not None:  # back to (R, B, V): ended rows out of the batch read 0
            last = last.new_zeros(R, B, last.shape[-1]).scatter_(
                1, slots.unsqueeze(-1).expand(-1, -1, last.shape[-1]), last
            )
    return [
        (
            toks[r, :, : steps[r]],
            lps[r, :, : steps[r]],
            None if exact is None else exact[r, :, : steps[r]],
            lengths[r],
            done[r],
        )
        for r in range(R)
    ]


COMPACT_ROWS = 32
"""The fewest rows a compaction of :func:`decode`'s batch must drop: below it the gathers cost more than the
rows (a group of 8 responses of one replica is decoded faster without it; an evaluation's 256-512 rows per
replica gain 12-20%)."""


def _compact(done: Tensor, slots: Tensor | None, cache: Cache, heads: int) -> tuple[Tensor | None, Cache]:
    """:func:`decode`'s batch without ended rows: when the most live rows of any replica (``~done (R, B)``)
    is at most 3/4 of the batch's slots and that drops at least :data:`COMPACT_ROWS` rows in all, each
    replica's live slots move to the front (in row order), the batch is cut to that width and the
    keys/values ``(R·B'·heads, L, hd)`` follow. Returns ``(slots, cache)``."""
    R, B = done.shape
    live = ~done if slots is None else ~done.gather(1, slots)  # (R, width) per slot
    width = live.shape[1]
    keep = int(live.sum(1).max())
    if keep == 0 or (width - keep) * R < COMPACT_ROWS or 4 * keep > 3 * width:
        return slots, cache
    pick = torch.argsort((~live).to(torch.uint8), dim=1, stable=True)[:, :keep]  # live slots first, in order
    slots = pick if slots is None else slots.gather(1, pick)
    idx = torch.arange(R, device=done.device).unsqueeze(1) * width + pick  # into the flat (R·width) slots

    def cut(t: Tensor) -> Tensor:
        return t.reshape(R * width, heads, *t.shape[1:]).index_select(0, idx.flatten()).flatten(0, 1)

    return slots, [(cut(k), cut(v)) for k, v in cache]


def _prefill(cfg: TransformerConfig, p: Params, context: Tensor, flips: Flips | None) -> tuple[Tensor, Cache]:
    """:func:`forward` of ``context (R, B, L)``, each distinct row (the same tokens in every replica) computed
    once and copied to its duplicates: a group's responses share their prompt, a sampled evaluation repeats
    each prompt. Every row's numbers are those of the full batch (:func:`linear` does not depend on the
    number of rows; attention, LayerNorm and the rest are row by row). Not with a routing perturbation,
    which draws per row."""
    R, B, L = context.shape
    if B > 1 and (flips is None or all(f is None for f in flips)):
        uniq, inverse = torch.unique(context.transpose(0, 1).reshape(B, R * L), dim=0, return_inverse=True)
        U = uniq.shape[0]
        if U < B:
            logits, cache = forward(cfg, p, uniq.view(U, R, L).transpose(0, 1), None, flips)
            H = cfg.n_heads

            def spread(t: Tensor) -> Tensor:
                return t.view(R, U, H, *t.shape[1:]).index_select(1, inverse).reshape(R * B * H, *t.shape[1:])

            return logits.index_select(1, inverse), [(spread(k), spread(v)) for k, v in cache]
    return forward(cfg, p, context, None, flips)


def sequence_logprobs(
    cfg: TransformerConfig,
    p: Params,
    context: Tensor,
    tokens: Tensor,
    temperature: float = 1.0,
    shared_rows: int = 1,
) -> Tensor:
    """Teacher-forced ``log softmax(logits/temperature)[y_t]`` of ``tokens (R, B, S)`` after
    ``context (R, B, P)`` → ``(R, B, S)`` (differentiable), every replica in one forward.

    ``shared_rows = n > 1``: the rows come in consecutive blocks of ``n`` that share their context in every
    replica (a group's responses share their prompt), and each block's context is computed once
    (:func:`_shared_contexts`): one forward of the blocks' contexts, whose keys/values and last logits each row
    then continues from, the responses' positions in a second forward over the cached keys, as :func:`decode`
    computes them (the prompt's positions are about two thirds of an LM batch's; the values differ from the one
    forward's by float rounding, cached vs uncached attention). The blocks are fixed by the rows' positions, not
    by their values, so replica r's numbers and gradients do not depend on the other replicas nor on the other
    blocks (every row computed on its own, :func:`linear`; the gradient of a block's context sums its rows' in
    row order, ``index_select``'s backward). Rows that do not share their block's context in every replica:
    the one forward."""
    P = context.shape[-1]
    shared = _shared_contexts(context, shared_rows) if tokens.shape[-1] > 1 else None
    if shared is None:
        full = torch.cat([context, tokens], -1)
        logits, _ = forward(cfg, p, full[..., :-1])
        logits = logits[:, :, P - 1 :]
    else:
        blocks, inverse = shared
        R, B, H = context.shape[0], context.shape[1], cfg.n_heads
        U = blocks.shape[1]
        first, cache = forward(cfg, p, blocks)

        def spread(t: Tensor) -> Tensor:
            return t.view(R, U, H, *t.shape[1:]).index_select(1, inverse).reshape(R * B * H, *t.shape[1:])

        rest, _ = forward(cfg, p, tokens[..., :-1], [(spread(k), spread(v)) for k, v in cache])
        logits = torch.cat([first[:, :, -1:].index_select(1, inverse), rest], 2)
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits.float(), -1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def _shared_contexts(context: Tensor, size: int) -> tuple[Tensor, Tensor] | None:
    """``(each block's context (R, B / size, P), the block of each row (B,))`` when the rows of ``context
    (R, B, P)`` come in consecutive blocks of ``size`` rows with one context in every replica; else None."""
    R, B, P = context.shape
    if size < 2 or B % size:
        return None
    blocks = context[:, ::size]
    if not torch.equal(context.view(R, B // size, size, P), blocks.unsqueeze(2).expand(R, B // size, size, P)):
        return None
    return blocks, torch.arange(B, device=context.device) // size
