"""Per-trajectory squared gradient norms ``‖∇_θ log π_θ(y^i|x)‖²`` from ONE batched forward and ONE
backward of ``Σ_i log π_θ(y^i|x)``, without materialising per-sample gradients ("ghost norms": Li et al.
2022, "Large language models can be strong differentially private learners", arXiv 2110.05679, §4;
Opacus 1.5 ``GradSampleModule`` with ``use_ghost_clipping``). Same quantity as the exact
:func:`sandbox.algorithms.per_sequence_grad_sq_norms` (``torch.func.vmap(grad)``), up to float rounding
(``docs/methods/objectives.md#opob-grad-norms``).

Every op of the forward that touches a parameter is seen through a ``torch.overrides.TorchFunctionMode``;
the op's input activations are kept and the gradient of its output comes from the one backward. With
``A_i`` (T×d_in) the inputs and ``G_i`` (T×d_out) the output gradients of sample i (T = all positions of
the sample, flattened):

* linear ``y = x Wᵀ + b`` (``F.linear``, ``x @ W``, ``x @ W.t()``, ``torch.addmm(b, x, W)``): ``‖∇W‖² = ‖A_iᵀ G_i‖_F² =
  Σ_{t,s} (a_t·a_s)(g_t·g_s)``, computed in the cheaper form (T² (d_in + d_out) against T·d_in·d_out);
  ``‖∇b‖² = ‖Σ_t g_t‖²``;
* embedding (``F.embedding``): rows scatter, so ``‖∇E‖² = Σ_{t,s} [id_t = id_s] (g_t·g_s)``, positions at
  ``padding_idx`` excluded; ids without the sample dimension (learned positions) are broadcast to every
  sample first;
* ``F.layer_norm``: ``∇w = Σ_t g_t ⊙ x̂_t``, ``∇b = Σ_t g_t`` (x̂ the normalised input); ``F.rms_norm``
  (``torch.nn.RMSNorm``): ``∇w = Σ_t g_t ⊙ x̂_t`` with x̂ = x / rms(x);
* ``x + p`` and ``x * p`` with ``p`` a parameter (or a slice of one) filling the trailing dims of ``x``
  (biases, learned positions, RMSNorm scales): ``Σ_t g_t`` and ``Σ_t g_t ⊙ x_t``.

A parameter with several uses (tied input/output embeddings) gets its per-sample gradients materialised
from each rule and summed before the norm (the cross terms matter). A parameter used by any other op, or
whose gradient is non-zero although no rule saw it, has no rule: its part of the norm comes from the exact
``vmap(grad)`` path restricted to those parameters (``seq_logprob_fn`` is then required). The squared
norm is the sum over parameters, so the two parts add.

Assumption (checked where possible): activations derived from the batch inputs keep the sample
dimension first, possibly flattened with the following dims (``x.view(-1, d)``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import grad, vmap
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

_TRANSPOSE = {
    torch.Tensor.t,
    torch.t,
    torch.Tensor.T.__get__,
    torch.Tensor.mT.__get__,
    torch.Tensor.transpose,
    torch.transpose,
}
_MATMUL = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__}
_ADD = {torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__}
_MUL = {torch.mul, torch.Tensor.mul, torch.Tensor.__mul__, torch.Tensor.__rmul__}
_HARMLESS = {torch.Tensor.detach, torch.Tensor.requires_grad_, torch.Tensor.dim, torch.Tensor.size}


@dataclass
class _View:
    """A tensor that is a parameter seen through ``.t()`` (``transposed``) or a basic-index slice."""

    name: str
    transposed: bool = False
    index: tuple | None = None


@dataclass
class _Use:
    """One rule-covered use of parameter ``name``: per-sample gradient contributions from ``kind``."""

    name: str
    kind: str  # linear_w | linear_wt | bias | scale | embedding
    view: _View
    act: Tensor | None  # saved input activation (linear, scale) or ids (embedding)
    out: Tensor  # the op's output: its gradient is taken in the backward
    dims: int = 1  # bias / scale: number of trailing dims of the output the used tensor fills
    padding_idx: int | None = None


def _tensors(args: tuple, kwargs: dict) -> list[Tensor]:
    """The tensors among an op's arguments (or outputs), one level into lists and tuples (cheaper than a
    pytree walk on every op; torch ops take no deeper nesting)."""
    out = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(b for b in a if isinstance(b, Tensor))
    return out


def _basic_index(idx) -> tuple | None:
    idx = idx if isinstance(idx, tuple) else (idx,)
    return idx if all(isinstance(i, (slice, int)) or i is Ellipsis for i in idx) else None


class _Recorder(TorchFunctionMode):
    """Sees every torch op of the forward; records rule-covered parameter uses, marks the others."""

    def __init__(self, params: dict[str, Tensor], batched: list[Tensor], n: int):
        super().__init__()
        self.names = {id(t): k for k, t in params.items()}
        self.n = n
        self.views: dict[int, _View] = {}
        self.batched: dict[int, Tensor] = {id(t): t for t in batched}
        self.keep: list[Tensor] = []  # keeps recorded tensors alive so their ids stay unique
        self.uses: list[_Use] = []
        self.unruled: set[str] = set()

    def _ref(self, x) -> _View | None:
        if not isinstance(x, Tensor):
            return None
        if id(x) in self.names:
            return _View(self.names[id(x)])
        return self.views.get(id(x))

    def _is_batched(self, x) -> bool:
        return isinstance(x, Tensor) and id(x) in self.batched and x.dim() >= 1 and x.shape[0] % self.n == 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat = _tensors(args, kwargs)
        refs = [r for r in (self._ref(a) for a in flat) if r is not None]
        shared_ids = (
            func is F.embedding
            and isinstance(args[0], Tensor)
            and not self._is_batched(args[0])
            and (args[0].dim() == 1 or args[0].shape[0] == 1)
        )  # position ids: (T,) or (1, T), the same for every row
        if refs and shared_ids:
            ids = args[0]
            ids = ids.expand(self.n, *ids.shape[1:]) if ids.dim() >= 2 else ids.expand(self.n, *ids.shape)
            args = (ids, *args[1:])
            self.batched[id(ids)] = ids
            self.keep.append(ids)
            flat = [ids, *flat[1:]]
        out = func(*args, **kwargs)
        if any(self._is_batched(a) for a in flat):
            for o in _tensors((out,), {}):
                self.batched[id(o)] = o
                self.keep.append(o)
        if refs and not self._rule(func, args, kwargs, out, refs):
            for r in refs:
                self.unruled.add(r.name)
        return out

    # ------------------------------------------------------------------------------------ rules
    def _rule(self, func, args, kwargs, out, refs) -> bool:
        """Record the use if a rule covers it; False = no rule (the parameters fall back to exact)."""
        if not _tensors((out,), {}) or func in _HARMLESS:
            return True
        if isinstance(out, Tensor) and len(refs) == 1 and self._ref(args[0]) is not None and out is args[0]:
            return True  # .to() / .float() that changed nothing
        a = list(args) + list(kwargs.values())
        if func in _TRANSPOSE and isinstance(args[0], Tensor) and args[0].dim() == 2 and len(refs) == 1:
            v = self._ref(args[0])
            if v.index is None:
                self._view(out, _View(v.name, not v.transposed))
                return True
            return False
        if func is torch.Tensor.__getitem__ and len(refs) == 1:
            v, idx = self._ref(args[0]), _basic_index(args[1])
            if v is not None and not v.transposed and v.index is None and idx is not None:
                self._view(out, _View(v.name, index=idx))
                return True
            return False
        x = args[0] if args else None
        if func is F.linear and self._is_batched(x) and self._ref(x) is None:
            w = self._ref(a[1]) if len(a) > 1 else None
            b = self._ref(a[2]) if len(a) > 2 else None
            if len([r for r in (w, b) if r is not None]) != len(refs):
                return False
            if w is not None:
                self._use(_Use(w.name, "linear_wt" if w.transposed else "linear_w", w, x.detach(), out))
            if b is not None:
                self._use(_Use(b.name, "bias", b, None, out, dims=1))
            return True
        if func in (torch.addmm, torch.Tensor.addmm) and len(args) == 3 and not kwargs and self._is_batched(a[1]):
            b, w = self._ref(args[0]), self._ref(args[2])  # addmm(b, x, W) = x W + b (transformers' Conv1D)
            if self._ref(a[1]) is None and w is not None and args[2].dim() == 2 and len(refs) == 1 + (b is not None):
                self._use(_Use(w.name, "linear_w" if w.transposed else "linear_wt", w, a[1].detach(), out))
                if b is not None:
                    self._use(_Use(b.name, "bias", b, None, out, dims=1))
                return True
            return False
        if func in _MATMUL and len(args) == 2 and self._is_batched(x) and self._ref(x) is None and len(refs) == 1:
            w = self._ref(args[1])
            if w is not None and args[1].dim() == 2:  # x @ W.t() is linear in W; x @ W in Wᵀ
                self._use(_Use(w.name, "linear_w" if w.transposed else "linear_wt", w, x.detach(), out))
                return True
            return False
        if func is F.embedding and self._is_batched(x) and len(refs) == 1 and self._ref(a[1]) is not None:
            w = self._ref(a[1])
            opts = dict(zip(("padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse"), a[2:]))
            if (
                w.index is not None
                or w.transposed
                or opts.get("max_norm") is not None
                or opts.get("scale_grad_by_freq")
            ):
                return False
            pad = opts.get("padding_idx")
            if pad is not None and pad < 0:
                pad += a[1].shape[0]
            self._use(_Use(w.name, "embedding", w, x.detach(), out, padding_idx=pad))
            return True
        if func is F.layer_norm and self._is_batched(x) and self._ref(x) is None:
            shape, w, b = a[1], (self._ref(a[2]) if len(a) > 2 else None), (self._ref(a[3]) if len(a) > 3 else None)
            eps = a[4] if len(a) > 4 else 1e-5
            if len([r for r in (w, b) if r is not None]) != len(refs):
                return False
            if w is not None:
                self._use(
                    _Use(w.name, "scale", w, F.layer_norm(x.detach(), shape, None, None, eps), out, dims=a[2].dim())
                )
            if b is not None:
                self._use(_Use(b.name, "bias", b, None, out, dims=a[3].dim()))
            return True
        if func is F.rms_norm and self._is_batched(x) and self._ref(x) is None and len(refs) == 1:
            w = self._ref(a[2]) if len(a) > 2 else None
            if w is None or w.transposed or w.index is not None:
                return False
            eps = a[3] if len(a) > 3 else None
            self._use(_Use(w.name, "scale", w, F.rms_norm(x.detach(), a[1], None, eps), out, dims=a[2].dim()))
            return True
        if (func in _ADD or func in _MUL) and len(args) == 2 and not kwargs and len(refs) == 1:
            p_pos = 0 if self._ref(args[0]) is not None else 1
            p, other = args[p_pos], args[1 - p_pos]
            if not (self._is_batched(other) and isinstance(out, Tensor) and out.shape == other.shape):
                return False
            if p.dim() == 0 or p.dim() >= out.dim() or tuple(out.shape[-p.dim() :]) != tuple(p.shape):
                return False
            v = self._ref(p)
            if v.transposed:
                return False
            if func in _ADD:
                self._use(_Use(v.name, "bias", v, None, out, dims=p.dim()))
            else:
                self._use(_Use(v.name, "scale", v, other.detach(), out, dims=p.dim()))
            return True
        return False

    def _view(self, out: Tensor, view: _View) -> None:
        self.views[id(out)] = view
        self.keep.append(out)

    def _use(self, use: _Use) -> None:
        self.uses.append(use)
        self.keep.append(use.out)


# ---------------------------------------------------------------------------------------- norms
def _per_sample(x: Tensor, n: int, trailing: int) -> Tensor:
    """``(n·k..., *trailing dims)`` → ``(n, T, *trailing)``: the sample's positions flattened."""
    return x.reshape(n, -1, *x.shape[x.dim() - trailing :])


def _sq_norm(use: _Use, g_out: Tensor, n: int) -> Tensor:
    """``(n,)`` squared norm of the per-sample gradient of this one use (no materialisation)."""
    if use.kind in ("linear_w", "linear_wt"):
        a, g = _per_sample(use.act, n, 1), _per_sample(g_out, n, 1)
        t, din, dout = a.shape[1], a.shape[2], g.shape[2]
        if t * t * (din + dout) <= t * din * dout:
            ka = torch.bmm(a, a.transpose(1, 2))
            kg = torch.bmm(g, g.transpose(1, 2))
            return (ka * kg).sum((1, 2))
        return torch.bmm(a.transpose(1, 2), g).pow(2).sum((1, 2))
    if use.kind == "embedding":
        ids, g = use.act.reshape(n, -1), _per_sample(g_out, n, 1)
        same = ids.unsqueeze(2) == ids.unsqueeze(1)
        if use.padding_idx is not None:
            keep = ids != use.padding_idx
            same = same & keep.unsqueeze(2) & keep.unsqueeze(1)
        return (torch.bmm(g, g.transpose(1, 2)) * same).sum((1, 2))
    return _materialise_view(use, g_out, n).reshape(n, -1).pow(2).sum(-1)


def _materialise_view(use: _Use, g_out: Tensor, n: int) -> Tensor:
    """``(n, *shape of the used tensor)``: per-sample gradient of the tensor the op consumed."""
    if use.kind == "bias" or use.kind == "scale":
        x = g_out if use.kind == "bias" else g_out * use.act
        return _per_sample(x, n, use.dims).sum(1)
    a, g = _per_sample(use.act, n, 1), _per_sample(g_out, n, 1)
    if use.kind == "linear_w":  # y = x Wᵀ: ∇W = Gᵀ A
        return torch.bmm(g.transpose(1, 2), a)
    if use.kind == "linear_wt":  # y = x W: ∇W = Aᵀ G
        return torch.bmm(a.transpose(1, 2), g)
    raise AssertionError(use.kind)


def _materialise(use: _Use, g_out: Tensor, n: int, param: Tensor) -> Tensor:
    """``(n, *param.shape)``: per-sample gradient of the parameter from this use."""
    if use.kind == "embedding":
        ids, g = use.act.reshape(n, -1), _per_sample(g_out, n, 1)
        if use.padding_idx is not None:
            g = g * (ids != use.padding_idx).unsqueeze(-1).to(g.dtype)
        full = torch.zeros(n, param.shape[0], param.shape[1], dtype=g.dtype, device=g.device)
        return full.scatter_add_(1, ids.unsqueeze(-1).expand_as(g), g)
    v = _materialise_view(use, g_out, n)  # linear kinds already give the parameter's own layout
    if use.view.index is not None:
        full = torch.zeros(n, *param.shape, dtype=v.dtype, device=v.device)
        full[(slice(None), *use.view.index)] = v
        v = full
    return v


class GhostNormRecorder:
    """Records a batched forward and turns its backward into per-sequence squared gradient norms.

    Use it around the forward whose log-probs the training loss also uses, so that the norms cost one
    extra backward and no extra forward::

        with GhostNormRecorder(dict(model.named_parameters()), (tokens, mask)) as rec:
            logp = token_logprobs(model, tokens)            # (N, T), one sequence per row
        norms = rec.sq_norms((logp * mask).sum(-1), retain_graph=True)
        loss(logp, norms).backward()                        # the same graph

    Args:
        params: ``{name: tensor}``, the tensors the forward uses as parameters (by identity; leaves that
            require grad).
        batch_inputs: the batch's input tensors (pytree), each with the sample dim N first.
        seq_logprob_fn: ``(params, one_trajectory) -> scalar`` for the exact fallback of parameters no rule
            covers (as for :func:`sandbox.algorithms.per_sequence_grad_sq_norms`); None = such a
            parameter is an error.
    """

    def __init__(self, params: dict[str, Tensor], batch_inputs: Any, seq_logprob_fn=None):
        batched = [x for x in tree_flatten(batch_inputs)[0] if isinstance(x, Tensor)]
        if not batched:
            raise ValueError("ghost norms: batch_inputs holds no tensor")
        n = batched[0].shape[0] if batched[0].dim() else 0
        for x in batched:
            if x.dim() == 0 or x.shape[0] != n:
                raise ValueError(
                    f"ghost norms: every batch input needs the sample dim N={n} first, got shape {tuple(x.shape)}"
                )
        self.params, self.batch_inputs, self.seq_logprob_fn, self.n = params, batch_inputs, seq_logprob_fn, n
        self._rec = _Recorder(params, batched, n)

    def __enter__(self) -> GhostNormRecorder:
        self._rec.__enter__()
        return self

    def __exit__(self, *exc):
        return self._rec.__exit__(*exc)

    def sq_norms(self, per_seq_logprob: Tensor, retain_graph: bool = False) -> Tensor:
        """``(N,)`` ``‖∇_θ per_seq_logprob[i]‖²`` (detached) from one backward of ``per_seq_logprob.sum()``."""
        n, rec, params = self.n, self._rec, self.params
        if per_seq_logprob.shape != (n,):
            raise ValueError(f"ghost norms: expected ({n},) sequence log-probs, got {tuple(per_seq_logprob.shape)}")
        seen = set(rec.unruled) | {u.name for u in rec.uses}
        unseen = [k for k, v in params.items() if k not in seen and v.requires_grad]
        outs = [u.out for u in rec.uses]
        wrt = outs + [params[k] for k in unseen]
        grads: tuple = ()
        if wrt:
            with torch.enable_grad():
                grads = torch.autograd.grad(per_seq_logprob.sum(), wrt, allow_unused=True, retain_graph=retain_graph)
        g_outs = grads[: len(outs)]
        fallback = set(rec.unruled)
        for k, gp in zip(unseen, grads[len(outs) :]):
            if gp is not None and bool((gp != 0).any()):
                fallback.add(k)  # used by something no rule saw
        by_param: dict[str, list[tuple[_Use, Tensor]]] = {}
        for u, g in zip(rec.uses, g_outs):
            by_param.setdefault(u.name, []).append((u, torch.zeros_like(u.out) if g is None else g))
        total = torch.zeros(n, dtype=per_seq_logprob.dtype, device=per_seq_logprob.device)
        for k, uses in by_param.items():
            if k in fallback:
                continue
            if len(uses) == 1:
                u, g = uses[0]
                total = total + _sq_norm(u, g, n).to(total.dtype)
            else:
                per_sample = sum(_materialise(u, g, n, params[k]) for u, g in uses)
                total = total + per_sample.reshape(n, -1).pow(2).sum(-1).to(total.dtype)
        if fallback:
            total = total + self._exact(sorted(fallback)).to(total.dtype)
        return total.detach()

    def _exact(self, names: list[str]) -> Tensor:
        if self.seq_logprob_fn is None:
            raise ValueError(
                f"ghost norms: no rule covers parameter(s) {names}; pass seq_logprob_fn for the exact "
                "vmap(grad) fallback"
            )
        frozen = {k: v.detach() for k, v in self.params.items() if k not in names}
        sub = {k: self.params[k].detach() for k in names}
        fn = self.seq_logprob_fn

        def f(s, x):
            return fn({**frozen, **s}, x)

        g = vmap(grad(f), in_dims=(None, 0))(sub, self.batch_inputs)
        return sum(v.reshape(self.n, -1).pow(2).sum(-1) for v in g.values())


def _ghost_one_replica(batch_logprob_fn, seq_logprob_fn, params: dict[str, Tensor], batch_inputs) -> Tensor:
    leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    with torch.enable_grad():
        with GhostNormRecorder(leaves, batch_inputs, seq_logprob_fn) as rec:
            per_seq = batch_logprob_fn(leaves, batch_inputs)
        return rec.sq_norms(per_seq)


def ghost_sequence_grad_sq_norms(
    batch_logprob_fn: Callable[[dict[str, Tensor], Any], Tensor],
    params: dict[str, Tensor],
    batch_inputs: Any,
    seq_logprob_fn: Callable[[dict[str, Tensor], Any], Tensor] | None = None,
    replica_dims: int = 0,
) -> Tensor:
    """``‖∇_θ log π_θ(y^i|x)‖²`` for every trajectory i by ghost norms (module docstring).

    Args:
        batch_logprob_fn: ``(params, batch_inputs) -> (N,)`` sequence log-probabilities of the whole batch in
            one forward (use ``torch.func.functional_call(module, params, ...)`` inside); one sequence per row.
        params: ``{name: tensor}`` of one replica (with ``replica_dims=1`` every tensor has a leading R).
        batch_inputs: tensor or pytree of tensors with leading dim N (``(R, N, ...)`` with replicas).
        seq_logprob_fn: ``(params, one_trajectory_inputs) -> scalar`` as for
            :func:`sandbox.algorithms.per_sequence_grad_sq_norms`; needed only when some parameter has no rule.
        replica_dims: 0 or 1 (replicas are done one after the other).

    Returns:
        ``(N,)`` (or ``(R, N)``) squared norms, detached.
    """
    if replica_dims == 0:
        return _ghost_one_replica(batch_logprob_fn, seq_logprob_fn, params, batch_inputs)
    if replica_dims == 1:
        r = next(iter(params.values())).shape[0]
        rows = []
        for i in range(r):
            one = tree_map(lambda x: x[i] if isinstance(x, Tensor) else x, batch_inputs)
            rows.append(_ghost_one_replica(batch_logprob_fn, seq_logprob_fn, {k: v[i] for k, v in params.items()}, one))
        return torch.stack(rows)
    raise ValueError(f"replica_dims must be 0 or 1, got {replica_dims}")
