"""Gradient alignment control (GAC; Xu et al. arXiv 2603.01501) as a parameterised **[reconstruction]**
family (no public implementation exists): ``docs/methods/stabilizers.md#gac``.

Per optimizer step, with ``g`` the gradient (``pre_optimizer``: stage ``gradient``) or the optimizer's
update (``post_optimizer``: stage ``update``) and ``p`` the reference direction:

    c = ⟨g, p⟩ / (‖g‖‖p‖)                      (per replica; per parameter tensor if scope = per_layer)
    if c > c_skip: skip (no update, or a zero gradient fed to the optimizer)
    elif c > thr (one-sided; |c| > thr two-sided):
        a = ⟨g, p̂⟩
        alpha:     g̃ = g − α·a·p̂                  (α = 1 → post cosine exactly 0)
        to_target: g̃ = g − (a − a′)·p̂, a′ = sign(a)·thr·‖g − a p̂‖/sqrt(1 − thr²)   (post cosine = thr)
        renorm:    g̃ ← g̃·‖g‖/‖g̃‖
    p ← g (prev_raw) | g̃ (prev_applied) | β p + (1 − β) g̃ (ema)      (unchanged on skipped replicas)

Cost: one gradient-sized reference buffer and three reductions per step.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Literal

from pydantic import Field, model_validator

from sandbox.algorithms._tensor import replica_sum, replica_view
from sandbox.algorithms.base import MethodConfig
from sandbox.algorithms.stabilizers._packed import Blocks, Layout
from sandbox.algorithms.stabilizers.base import STABILIZERS, Stabilizer
from sandbox.base.lazy_torch import lazy_import

torch = lazy_import("torch", globals())
Tensor = lazy_import("torch:Tensor", globals())


class GACConfig(MethodConfig):
    """Gradient alignment control (Xu et al. arXiv 2603.01501) as a **[reconstruction]** family: every
    unknown of the paper is a knob (``docs/methods/stabilizers.md#gac``).

    Defaults = the reference setting (previous *applied* gradient as reference, whole model, edit the
    raw gradient before Adam, clip then project, fixed ``c_thr = 0.3``, one-sided full removal, no skip).
    Why: ``docs/theory.md#t3`` and ``docs/theory.md#t4`` show that with these settings the projection is
    idle in stable (synchronous or mildly stale) runs, where consecutive cosines are ≲ 0.1 < 0.3, so it
    matches the synchronous baseline there, while at high staleness (c → 0.95+) it fires every step,
    returns near-orthogonal consecutive updates (post cosine ≤ c_thr by construction) and moves the
    divergence boundary outward, which is the paper's qualitative claim (on-policy-like dynamics at
    high staleness).
    """

    name: Literal["gac"] = "gac"
    reference: Literal["prev_raw", "prev_applied", "ema"] = Field("prev_applied", description="Reference direction p.")
    ema_beta: float = Field(0.9, ge=0, lt=1, description="β of p ← βp + (1−β)g̃ when reference='ema' [reconstruction].")
    scope: Literal["global", "per_layer"] = Field(
        "global", description="One cosine for the flattened model or one per parameter tensor."
    )
    placement: Literal["pre_optimizer", "post_optimizer"] = Field(
        "pre_optimizer", description="Edit the raw gradient fed to the optimizer, or the optimizer's update Δθ."
    )
    clip_order: Literal["clip_then_project", "project_then_clip"] = Field(
        "clip_then_project", description="Order relative to global-norm clipping (StabilizedOptimizer.max_grad_norm)."
    )
    threshold_mode: Literal["fixed", "ema_mean_std", "quantile", "staleness_scaled"] = Field(
        "fixed", description="fixed c_thr; mean+κ·std or q-quantile of the last `window` cosines; c_thr/(1+γ·k̄)."
    )
    c_thr: float = Field(
        0.3,
        ge=0,
        lt=1,
        description="Threshold (c_0 for staleness_scaled); reference setting 0.3, "
        "docs/methods/stabilizers.md#gac and docs/theory.md#t4.",
    )
    kappa: float = Field(1.0, description="κ for ema_mean_std [reconstruction].")
    quantile: float = Field(0.9, gt=0, lt=1, description="q for threshold_mode='quantile' [reconstruction].")
    window: int = Field(50, ge=2, description="History length W for adaptive thresholds [reconstruction].")
    min_history: int = Field(
        5, ge=1, description="Adaptive thresholds fall back to c_thr until this many cosines are seen."
    )
    gamma: float = Field(0.1, ge=0, description="γ for staleness_scaled [reconstruction].")
    sided: Literal["one_sided", "two_sided"] = Field(
        "one_sided", description="Act only when ⟨g, p̂⟩ > 0, or on any |cos| > threshold."
    )
    strength: Literal["alpha", "to_target"] = Field(
        "alpha", description="Remove α of the parallel part, or shrink to cos = c_thr."
    )
    alpha: float = Field(1.0, ge=0, le=1, description="Fraction of the parallel component removed (1 = full).")
    c_skip: float | None = Field(None, description="Skip the step when cos > c_skip (must exceed c_thr); None = never.")
    skip_mode: Literal["zero_update", "skip_step"] = Field(
        "skip_step", description="zero_update: feed g̃ = 0 to the optimizer; skip_step: no optimizer update."
    )
    renorm: bool = Field(False, description="Rescale g̃ to ‖g‖ after projection.")

    @model_validator(mode="after")
    def _check(self):
        if self.c_skip is not None and self.c_skip <= self.c_thr:
            raise ValueError(f"gac: c_skip={self.c_skip} must exceed c_thr={self.c_thr}")
        return self


def _dot(xs: list[Tensor], ys: list[Tensor], rd: int) -> Tensor:
    """``Σ_i replica_sum(x_i·y_i)``: see :func:`_dots`."""
    return _dots([(xs, ys)], rd)[0]


def _dots(pairs: list[tuple[list[Tensor], list[Tensor]]], rd: int) -> list[Tensor]:
    """Several inner products ``⟨x, y⟩ = Σ_i replica_sum(x_i·y_i)`` over tensor lists in one pass: the
    element-wise products of every pair come from one ``torch._foreach_mul`` call, then each tensor is
    reduced on its own and the per-tensor sums are accumulated left to right from 0. The per-tensor
    products, reductions and the accumulation order are those of the plain loop
    ``sum(replica_sum(x * y) for x, y in zip(xs, ys))``, so the results are bitwise the same."""
    xs = [x for a, _ in pairs for x in a]
    ys = [y for _, b in pairs for y in b]
    prods = torch._foreach_mul(xs, ys)
    out, lo = [], 0
    for a, _ in pairs:
        out.append(sum(replica_sum(t, rd) for t in prods[lo : lo + len(a)]))
        lo += len(a)
    return out


def _scaled(vecs: list[Tensor], scale: Tensor, rd: int) -> list[Tensor]:
    """``[replica_view(scale, v) * v]`` with one ``torch._foreach_mul`` call (element-wise, so bitwise
    the same as the loop)."""
    if rd == 0:
        return torch._foreach_mul(vecs, scale)
    return torch._foreach_mul(vecs, [replica_view(scale, v, rd) for v in vecs])


@STABILIZERS.register(GACConfig)
class GAC(Stabilizer):
    """Stateful GAC stabilizer (see module docstring). ``transform(vecs, replica_dims, context)`` edits
    the list of gradient (or update) tensors and returns ``(new_vecs, skip_mask | None, metrics)``."""

    def __init__(self, cfg: GACConfig):
        super().__init__(cfg)
        self.ref: list[Tensor] | None = None
        self.history: list[deque] = []
        self._ref_blocks: Blocks | None = None  # self.ref as stacks (global scope on the CPU), same values
        self._layout: tuple[tuple, Layout] | None = None

    # -------------------------------------------------------------------------------- protocol
    @property
    def stage(self) -> str:
        return "gradient" if self.cfg.placement == "pre_optimizer" else "update"

    @property
    def before_clip(self) -> bool:
        return self.stage == "gradient" and self.cfg.clip_order == "project_then_clip"

    @property
    def can_skip(self) -> bool:
        return self.cfg.c_skip is not None and self.cfg.skip_mode == "skip_step"

    # -------------------------------------------------------------------------------- threshold
    def _threshold(self, unit: int, like: Tensor, context) -> Tensor:
        cfg = self.cfg
        thr = torch.full_like(like, cfg.c_thr)
        hist = self.history[unit]
        if cfg.threshold_mode in ("ema_mean_std", "quantile") and len(hist) >= cfg.min_history:
            h = torch.stack(list(hist))  # (H, R...)
            if cfg.threshold_mode == "ema_mean_std":
                thr = h.mean(0) + cfg.kappa * h.std(0, unbiased=False)
            else:
                thr = torch.quantile(h, cfg.quantile, dim=0)
        elif cfg.threshold_mode == "staleness_scaled":
            k = getattr(context, "staleness", None) if context is not None else None
            if k is not None:
                k = torch.as_tensor(k, dtype=like.dtype).detach()
                if k.dim() > like.dim():
                    k = k.mean(tuple(range(like.dim(), k.dim())))
                thr = cfg.c_thr / (1.0 + cfg.gamma * k) * torch.ones_like(like)
        return thr.clamp(0.0, 1.0 - 1e-6)

    def _projection(self, unit: int, gp: Tensor, gg: Tensor, pp: Tensor, context):
        """From the inner products g·p, g·g, p·p of one unit: the cosine c, the threshold, whether it
        fires, the coefficient of p̂ to remove (α·a, or a − a_target for ``strength = 'to_target'``;
        a = g·p/‖p‖) and ‖p‖ (+1e-12). The cosine joins the unit's history."""
        cfg = self.cfg
        c = gp / (gg.sqrt() * pp.sqrt() + 1e-12)
        thr = self._threshold(unit, c, context)
        self.history[unit].append(c.detach())
        a = gp / (pp.sqrt() + 1e-12)
        trigger = (c > thr) if cfg.sided == "one_sided" else (c.abs() > thr)
        if cfg.strength == "alpha":
            coeff = cfg.alpha * a
        else:
            b = (gg - a * a).clamp_min(0.0).sqrt()
            a_target = torch.sign(a) * thr * b / torch.sqrt(1.0 - thr * thr)
            coeff = a - a_target
        coeff = torch.where(trigger, coeff, torch.zeros_like(coeff))
        return c, thr, trigger, coeff, pp.sqrt() + 1e-12

    # -------------------------------------------------------------------------------- main
    def transform(self, vecs: list[Tensor], replica_dims: int, context=None):
        cfg = self.cfg
        rd = replica_dims
        units = [list(range(len(vecs)))] if cfg.scope == "global" else [[i] for i in range(len(vecs))]
        if self.ref is None or len(self.ref) != len(vecs):
            self.ref = [v.detach().clone() for v in vecs]
            self.history = [deque(maxlen=cfg.window) for _ in units]
            self._ref_blocks = None
            return vecs, None, {}
        if len(self.history) != len(units):
            self.history = [deque(maxlen=cfg.window) for _ in units]
        if cfg.scope == "global" and Layout.usable(vecs) and Layout.usable(self.ref):
            return self._transform_packed(vecs, rd, context)
        self._ref_blocks = None

        out: list[Tensor] = list(vecs)  # every index belongs to exactly one unit and is replaced below
        cos_raw, cos_post, proj_flags, thrs, unit_gg, unit_nn = [], [], [], [], [], []
        for u, idx in enumerate(units):
            g = [vecs[i] for i in idx]
            p = [self.ref[i] for i in idx]
            gp, gg, pp = _dots([(g, p), (g, g), (p, p)], rd)
            c, thr, trigger, coeff, pn = self._projection(u, gp, gg, pp, context)
            new = torch._foreach_sub(g, _scaled(p, coeff / pn, rd))
            if cfg.renorm:
                nn = _dot(new, new, rd).sqrt()
                scale = torch.where(trigger, gg.sqrt() / (nn + 1e-12), torch.ones_like(nn))
                new = _scaled(new, scale, rd)
            for i, ni in zip(idx, new):
                out[i] = ni
            np_, nn2 = _dots([(new, p), (new, new)], rd)
            cos_raw.append(c)
            cos_post.append(np_ / (nn2.sqrt() * pp.sqrt() + 1e-12))
            proj_flags.append(trigger.to(c.dtype))
            thrs.append(thr)
            unit_gg.append(gg)
            unit_nn.append(nn2)

        c_mean = torch.stack(cos_raw).mean(0)
        skip = None
        if cfg.c_skip is not None:
            skip = c_mean > cfg.c_skip
            if cfg.skip_mode == "zero_update":
                keep = (~skip).to(c_mean.dtype)
                out = [o * replica_view(keep, o, rd) for o in out]
                skip_for_step = None
            else:
                skip_for_step = skip
        else:
            skip_for_step = None

        # ‖g‖² and ‖out‖² are the unit sums already computed (bitwise the same as recomputing them: a
        # global unit is the whole list, per-layer units are single tensors summed in list order)
        g_norm = (unit_gg[0] if len(units) == 1 else sum(unit_gg)).sqrt()
        if skip is not None and cfg.skip_mode == "zero_update":
            o_norm = _dot(out, out, rd).sqrt()
        else:
            o_norm = (unit_nn[0] if len(units) == 1 else sum(unit_nn)).sqrt()
        self._update_reference(vecs, out, skip, rd)
        metrics = {
            "gac/cos_ref": c_mean.detach(),
            "gac/cos_post": torch.stack(cos_post).mean(0).detach(),
            "gac/projected": torch.stack(proj_flags).mean(0).detach(),
            "gac/threshold": torch.stack(thrs).mean(0).detach(),
            "gac/norm_ratio": (o_norm / (g_norm + 1e-12)).detach(),
            "gac/skipped": (skip.to(c_mean.dtype) if skip is not None else torch.zeros_like(c_mean)).detach(),
        }
        return out, skip_for_step, metrics

    def _transform_packed(self, vecs: list[Tensor], rd: int, context):
        """Global scope with the tensors stacked by shape (:mod:`._packed`): the same formulas, element-wise
        ops and reductions as the per-tensor path in :meth:`transform`, bitwise, in a few ops per shape."""
        cfg = self.cfg
        key = (rd, tuple((tuple(v.shape), v.dtype) for v in vecs))
        if self._layout is None or self._layout[0] != key:
            self._layout = (key, Layout.of(vecs, rd))
            self._ref_blocks = None
        layout = self._layout[1]
        g = Blocks.pack(layout, vecs, rd)
        p = self._ref_blocks if self._ref_blocks is not None else Blocks.pack(layout, self.ref, rd)
        gp, gg, pp = g.dot(p), g.dot(g), p.dot(p)
        c, thr, trigger, coeff, pn = self._projection(0, gp, gg, pp, context)
        new = g.sub_scaled(p, coeff / pn)
        if cfg.renorm:
            nn = new.dot(new).sqrt()
            new = new.scaled(torch.where(trigger, gg.sqrt() / (nn + 1e-12), torch.ones_like(nn)))
        np_, nn2 = new.dot(p), new.dot(new)
        cos_post = np_ / (nn2.sqrt() * pp.sqrt() + 1e-12)
        c_mean = torch.stack([c]).mean(0)
        skip = skip_for_step = None
        o_norm = nn2.sqrt()
        if cfg.c_skip is not None:
            skip = c_mean > cfg.c_skip
            if cfg.skip_mode == "zero_update":
                new = new.scaled((~skip).to(c_mean.dtype))
                o_norm = new.dot(new).sqrt()
            else:
                skip_for_step = skip
        g_norm = gg.sqrt()
        if cfg.reference == "prev_raw":
            cand = g
        elif cfg.reference == "prev_applied":
            cand = new
        else:
            cand = p.map(lambda j, r_old, gt: cfg.ema_beta * r_old + (1.0 - cfg.ema_beta) * gt, new)
        if skip is not None:
            cand = p.map(lambda j, r_old, cd: torch.where(p.view(skip, j), r_old, cd), cand)
        self._ref_blocks = cand.map(lambda j, b: b.clone())
        self.ref = self._ref_blocks.tensors()
        metrics = {
            "gac/cos_ref": c_mean.detach(),
            "gac/cos_post": torch.stack([cos_post]).mean(0).detach(),
            "gac/projected": torch.stack([trigger.to(c.dtype)]).mean(0).detach(),
            "gac/threshold": torch.stack([thr]).mean(0).detach(),
            "gac/norm_ratio": (o_norm / (g_norm + 1e-12)).detach(),
            "gac/skipped": (skip.to(c_mean.dtype) if skip is not None else torch.zeros_like(c_mean)).detach(),
        }
        return new.tensors(), skip_for_step, metrics

    def _update_reference(self, raw: list[Tensor], applied: list[Tensor], skip: Tensor | None, rd: int) -> None:
        cfg = self.cfg
        new_ref = []
        for r_old, g, gt in zip(self.ref, raw, applied):
            if cfg.reference == "prev_raw":
                cand = g.detach()
            elif cfg.reference == "prev_applied":
                cand = gt.detach()
            else:
                cand = cfg.ema_beta * r_old + (1.0 - cfg.ema_beta) * gt.detach()
            if skip is not None:
                keep_old = replica_view(skip, cand, rd)
                cand = torch.where(keep_old if isinstance(keep_old, Tensor) else torch.as_tensor(keep_old), r_old, cand)
            new_ref.append(cand.clone())
        self.ref = new_ref

    def state_dict(self) -> dict:
        """The reference direction ``p`` (one tensor per parameter; None before the first step) and, per
        unit, the cosines seen (the adaptive thresholds' history, at most ``window`` each). The packed
        copy of the reference and the layout are caches, rebuilt from ``ref`` with the same values."""
        return {"ref": None if self.ref is None else list(self.ref), "history": [list(h) for h in self.history]}

    def load_state_dict(self, state: dict) -> None:
        self.ref = None if state["ref"] is None else list(state["ref"])
        self.history = [deque(h, maxlen=self.cfg.window) for h in state["history"]]
        self._ref_blocks = None
        self._layout = None

    def reset(self) -> None:
        self.ref = None
        self.history = []
        self._ref_blocks = None
        self._layout = None


def to_target_coefficient(a: float, b: float, thr: float) -> float:
    """Scalar form of the ``to_target`` shrink (for documentation/tests): parallel part ``a`` is reduced
    to ``thr·b/sqrt(1 − thr²)`` so that the result has cosine ``thr`` with the reference."""
    return a - math.copysign(thr * b / math.sqrt(1.0 - thr * thr), a)
