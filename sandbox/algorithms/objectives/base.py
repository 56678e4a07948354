"""What an objective is: the registry, the :class:`Objective` protocol, the shared surrogates and the
knob mixins its configs are built from (``docs/methods/objectives.md``).

An objective turns a batch into advantages (:meth:`Objective.advantages`) and, given the ratio, the
advantages and any clip bounds a correction supplies, into a per-token loss (:meth:`Objective.surrogate`).
:class:`~sandbox.algorithms.policy_loss.PolicyLoss` composes it with a correction
(``docs/methods/objectives.md#composition``) and aggregates (``docs/methods/objectives.md#aggregation``).
An objective whose loss is not a per-token surrogate returns its whole loss from
:meth:`Objective.full_loss` instead and sets ``takes_corrections = False`` (``tba``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from sandbox.algorithms import advantages as A
from sandbox.algorithms._tensor import Aggregation, float_flag, maximum, seq_mean
from sandbox.algorithms.api import SEQ_GRAD_KEY, PolicyLossInput
from sandbox.algorithms.base import MethodConfig, need_groups
from sandbox.base.lazy_torch import lazy_import
from sandbox.base.registry import Registry

torch = lazy_import("torch", globals())
Tensor = lazy_import("torch:Tensor", globals())

OBJECTIVES = Registry("objective", plugins="objective")
"""Every objective, keyed by its TOML ``name``; one module of this package each."""

Baseline = Literal["none", "constant", "ema", "group_mean", "leave_one_out", "optimal", "opob"]
AdvantageKind = Literal["grpo", "dr_grpo", "rloo", "reward", "opob"]


# --------------------------------------------------------------------------------------------
# Knob mixins shared by several objective configs
# --------------------------------------------------------------------------------------------


class OpobKnobs(MethodConfig):
    opob_weight: Literal["readme", "code"] = Field(
        "readme",
        description="OPOB weight W_i: 'readme' = w_i²‖∇log π(y_i)‖² (VCPO README, optimal per docs/theory.md#t10); "
        "'code' = min(w_i,C)²·w_i²·‖∇log π‖² (mit-han-lab/vcpo compute_opob_baseline) as an ablation.",
    )
    opob_clip_c: float = Field(8.0, gt=0, description="C in the 'code' OPOB weight; VCPO's sequence-TIS cap C = 8.")
    opob_leave_one_out: bool = Field(
        False,
        description="Exclude sample i from its own OPOB/optimal baseline (unbiased; docs/theory.md#t10). VCPO uses the "
        "plain batch estimate (False), which has an O(1/G) bias.",
    )
    opob_scope: Literal["group", "minibatch", "minibatch_bessel"] = Field(
        "group",
        description="OPOB scope: per prompt group (VCPO default), or the whole mini-batch with GRPO advantages as "
        "values, normalised by the objective's own group std ('minibatch': population for reinforce, std_unbiased "
        "for grpo) or by the Bessel-corrected one ('minibatch_bessel': mit-han-lab/vcpo's values from verl's "
        "compute_grpo_outcome_advantage, torch.std).",
    )
    opob_grad_norms: Literal["exact", "ghost"] = Field(
        "exact",
        description="How ‖∇log π(y_i)‖² is computed: 'exact' = per-sequence gradients (torch.func vmap(grad)); 'ghost' = "
        "from one batched forward and backward without materialising them (docs/methods/objectives.md#opob-grad-norms; "
        "equal up to float rounding, so runs differ from 'exact' in the last digits). Tasks without a batched "
        "log-probability (bit-string, bandit, gym) always use 'exact'.",
    )


OPOB_KNOBS: tuple[str, ...] = tuple(OpobKnobs.model_fields)
"""The OPOB/optimal-baseline knobs, in declaration order (what the exporters account for)."""


class ClipKnobs(MethodConfig):
    eps_low: float = Field(
        0.2, ge=0.0, description="Lower clip: ratio floor 1 − eps_low. PPO default 0.2 (arXiv 1707.06347)."
    )
    eps_high: float = Field(
        0.2,
        ge=0.0,
        allow_inf_nan=True,
        description="Upper clip: ratio cap 1 + eps_high. PPO default 0.2; inf = no upper clip.",
    )
    dual_clip_c: float | None = Field(
        None,
        description="Dual clip c > 1 bounding the loss of negative-advantage tokens at −c·Â (arXiv 1912.09729); "
        "None disables it. verl clip_ratio_c = 3.0.",
    )

    @model_validator(mode="after")
    def _check_clip(self):
        if self.eps_low > 1.0:
            raise ValueError(f"eps_low={self.eps_low} gives a negative ratio floor; use eps_low <= 1")
        if self.dual_clip_c is not None and self.dual_clip_c <= 1.0:
            raise ValueError(f"dual_clip_c must be > 1 (got {self.dual_clip_c}); use None to disable")
        return self


class AdvantageKnob(MethodConfig):
    advantage: AdvantageKind = Field(
        "grpo",
        description="Critic-free advantage: grpo (mean/std), dr_grpo (centred), rloo, reward (raw R), opob.",
    )
    eps_std: float = Field(1e-6, ge=0.0, description="ε in the GRPO std normaliser (verl 1e-6).")

    def _check_adv_group(self, group_size: int) -> None:
        if self.advantage != "reward":
            need_groups(self.name, f"advantage={self.advantage!r}", group_size)  # type: ignore[attr-defined]


# --------------------------------------------------------------------------------------------
# Surrogates
# --------------------------------------------------------------------------------------------


@dataclass
class Surrogate:
    """A per-token loss ``ℓ_{i,t}`` to minimise (before any correction factor and before aggregation),
    the *value* of the importance ratio it already applies to the token's gradient (``None`` for
    REINFORCE-form losses that carry none; :mod:`..policy_loss` divides it out in bypass mode so a
    correction's weight is not counted twice), and clip flags for monitoring."""

    per_token: Tensor
    ratio_value: Tensor | None
    clipped: Tensor | None = None
    """Where the clip bound binds: bool, or 1.0 / 0.0 in the loss's dtype."""
    dual_clipped: Tensor | None = None


@dataclass
class SurrogateInput:
    """What :meth:`Objective.surrogate` receives, all ``(..., N, T)``: the learner log-probs (with
    gradient), the anchor ``π_prox`` (decoupled) or ``μ`` (bypass), the ratio ``π_θ/π_anchor`` (with
    gradient), the advantages broadcast to tokens, the float mask, and the absolute clip bounds and dual
    clip a correction supplies in place of the objective's own (``None``: use the objective's)."""

    logp: Tensor
    anchor_logp: Tensor
    ratio: Tensor | None
    """None when the objective does not read it and the correction is the identity (``Objective.reads_ratio``)."""
    adv: Tensor
    fmask: Tensor
    bounds: tuple | None = None
    dual_clip_c: float | None = None


def _bcast(bound, like: Tensor):
    """A per-replica bound ``(...)`` broadcast against ``(..., N, T)``; floats pass through."""
    if isinstance(bound, Tensor):
        return bound.reshape(*bound.shape, 1, 1)
    return bound


def clip_surrogate(
    ratio: Tensor,
    adv: Tensor,
    low,
    high,
    dual_clip_c=None,
) -> Surrogate:
    """PPO clip (Schulman et al. arXiv 1707.06347) with optional dual clip (Ye et al. arXiv 1912.09729):

    ``ℓ = −min(r Â, clip(r, low, high) Â)``; for ``Â < 0``: ``ℓ ← min(ℓ, −c Â)``.

    ``low``/``high`` are absolute ratio bounds (``1 − ε_low``, ``1 + ε_high`` for PPO/GRPO/DAPO;
    BAPO and M2PO-clipband pass adaptive per-replica tensors). ``adv`` is per token ``(..., N, T)``.
    """
    low_b, high_b = _bcast(low, ratio), _bcast(high, ratio)
    unclipped = -ratio * adv
    if isinstance(low_b, Tensor) or isinstance(high_b, Tensor):
        low_b = torch.as_tensor(low_b, dtype=ratio.dtype, device=ratio.device)
        high_b = torch.as_tensor(high_b, dtype=ratio.dtype, device=ratio.device)
        clipped_r = torch.minimum(torch.maximum(ratio, low_b), high_b)
    else:
        clipped_r = ratio.clamp(low_b, high_b)
    clipped = -clipped_r * adv
    loss = maximum(unclipped, clipped)
    clip_flag = float_flag(torch.gt, clipped.detach(), unclipped.detach())
    dual_flag = None
    if dual_clip_c is not None:
        c = _bcast(dual_clip_c, ratio)
        cap = -c * adv
        neg = adv < 0
        dual_flag = neg & (loss.detach() > cap.detach())
        loss = torch.where(neg, torch.minimum(loss, cap), loss)
    return Surrogate(loss, ratio.detach(), clip_flag, dual_flag)


def reinforce_surrogate(logp: Tensor, adv: Tensor) -> Surrogate:
    """REINFORCE (Williams 1992): ``ℓ_t = −sg(Â) log π_θ(y_t|s_t)``; with seq-mean-token-sum this is
    ``−(1/B) Σ_i sg(Â_i) log π_θ(y^i|x)`` (``docs/methods/objectives.md#reinforce``)."""
    return Surrogate(-adv.detach() * logp, None)


def cispo_surrogate(logp: Tensor, ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float) -> Surrogate:
    """CISPO (MiniMax-M1, arXiv 2506.13585): ``ℓ_t = −sg(clip(r_t, 1−ε_low, 1+ε_high)) Â_t log π_θ``;
    clipped tokens keep their gradient (bounds in verl/SkyRL's 1 ± ε convention)."""
    r = ratio.detach()
    w = r.clamp(1.0 - eps_low, 1.0 + eps_high)
    flag = (r < 1.0 - eps_low) | (r > 1.0 + eps_high)
    return Surrogate(-w * adv.detach() * logp, r, flag)


def gspo_surrogate(
    logp: Tensor, anchor_logp: Tensor, adv: Tensor, fmask: Tensor, eps_low: float, eps_high: float
) -> Surrogate:
    """GSPO (arXiv 2507.18071) in its GSPO-token form: ``s_i = exp(mean_t log(π_θ/π_anchor))``,
    ``s_{i,t} = sg(s_i)·π_θ(y_t)/sg(π_θ(y_t))``, ``ℓ = −min(s Â, clip(s, 1−ε_l, 1+ε_h) Â)``. Same value and
    (with per-sequence advantages) the same gradient as sequence-level GSPO, but per-token factors compose."""
    log_s = seq_mean(logp.detach() - anchor_logp, fmask)
    s = torch.exp(log_s).unsqueeze(-1).expand_as(logp)
    s_tok = s * torch.exp(logp - logp.detach())
    return clip_surrogate(s_tok, adv, 1.0 - eps_low, 1.0 + eps_high)


# --------------------------------------------------------------------------------------------
# Baselines shared by several objectives
# --------------------------------------------------------------------------------------------


def seq_grad_sq_norms(inp: PolicyLossInput, who: str) -> Tensor:
    """``‖∇_θ log π_θ(y_i|x)‖²`` from ``inp.extras``, with the message saying how to supply it."""
    try:
        g = inp.extras[SEQ_GRAD_KEY]
    except KeyError:
        raise KeyError(
            f"{who} needs per-trajectory squared gradient norms ‖∇_θ log π_θ(y_i|x)‖² in "
            f"PolicyLossInput.extras[{SEQ_GRAD_KEY!r}] with shape (..., N); compute them with "
            "sandbox.algorithms.per_sequence_grad_sq_norms"
        ) from None
    return g.detach().to(inp.rewards.dtype).expand_as(inp.rewards)


def opob_advantage(
    cfg: OpobKnobs,
    inp: PolicyLossInput,
    log_seq_rho: Tensor,
    normalize: bool,
    unbiased: bool,
    eps: float,
    with_is: bool = True,
) -> tuple[Tensor, Tensor]:
    """OPOB (VCPO, arXiv 2602.17616; ``docs/methods/objectives.md#reinforce``, ``docs/theory.md#t10``):
    ``Â_i = (R_i − b*_g)/σ_g`` with ``b*_g = Σ W R / Σ W``. With ``opob_scope='minibatch'`` the values are the
    GRPO advantages ``(R_i − mean_g R)/(σ_g + ε)`` (σ_g Bessel-corrected with ``opob_scope='minibatch_bessel'``,
    as VCPO's code) and the baseline is their W-weighted mean over the batch. With ``with_is=False`` the weights are
    ``‖∇log π‖²`` only (classic optimal baseline). Returns ``(advantages, baseline)``."""
    r, g = inp.rewards, inp.group_size
    norms = seq_grad_sq_norms(inp, "baseline 'opob'/'optimal'")
    lsr = log_seq_rho if with_is else torch.zeros_like(log_seq_rho)
    lw = A.opob_log_weights(lsr, norms, cfg.opob_weight if with_is else "readme", cfg.opob_clip_c)
    if cfg.opob_scope in ("minibatch", "minibatch_bessel"):
        values = r - A.group_mean_baseline(r, g)
        if normalize:
            values = A.normalize_by_group_std(values, r, g, eps, unbiased or cfg.opob_scope == "minibatch_bessel")
        b = A.weighted_group_baseline(values, lw, r.shape[-1], cfg.opob_leave_one_out)
        return values - b, b
    b = A.weighted_group_baseline(r, lw, g, cfg.opob_leave_one_out)
    adv = r - b
    if normalize:
        adv = A.normalize_by_group_std(adv, r, g, eps, unbiased)
    return adv, b


# --------------------------------------------------------------------------------------------
# The protocol
# --------------------------------------------------------------------------------------------


class Objective:
    """One objective inside one :class:`~sandbox.algorithms.policy_loss.PolicyLoss` (so it may keep state
    across batches, e.g. an EMA baseline). Built from its validated config by :data:`OBJECTIVES`.

    Class facts read by the generic composition (never the objective's name or type):

    * ``ratio_clip``: the surrogate is the PPO ratio clip, whose bounds a correction may replace
      (``bapo``, ``m2po_clipband``);
    * ``takes_corrections``: ``False`` when the objective is valid off-policy without importance weights
      and only ``none`` may be composed with it; ``no_correction_reason`` says why in the error;
    * ``reads_ratio``: ``False`` when :meth:`surrogate` never reads ``SurrogateInput.ratio`` (REINFORCE):
      with an identity correction the policy loss then does not compute it (``ratio`` is None).
    """

    ratio_clip: ClassVar[bool] = False
    reads_ratio: ClassVar[bool] = True
    takes_corrections: ClassVar[bool] = True
    no_correction_reason: ClassVar[str] = ""

    def __init__(self, cfg):
        self.cfg = cfg

    # ------------------------------------------------------------------------------ needs and layout
    @property
    def needs_sequence_grad_norms(self) -> bool:
        """Whether ``inp.extras['seq_grad_sq_norms']`` is read (OPOB / optimal baseline)."""
        return False

    @property
    def needs_reference_logp(self) -> bool:
        """Whether ``inp.extras['ref_logp']`` is required (a KL penalty to a reference policy)."""
        return False

    @property
    def reads_log_seq_rho(self) -> bool:
        """Whether :meth:`advantages` reads its ``log_seq_rho`` argument (an importance-weighted baseline). When
        it does not and nothing else reads log ρ, the policy loss does not compute it and passes ``None``."""
        return True

    @property
    def aggregation(self) -> Aggregation | None:
        """How per-token losses become one loss per replica (``docs/methods/objectives.md#aggregation``)."""
        return self.cfg.aggregation

    @property
    def max_len(self) -> int | None:
        """``L_const`` of ``seq_mean_token_sum_norm`` (None: the padded length)."""
        return None

    # ----------------------------------------------------------------------------------- the loss
    def advantages(self, inp: PolicyLossInput, log_seq_rho: Tensor) -> tuple[Tensor, dict]:
        """Per-response advantages ``(..., N)`` and baseline metrics; ``log_seq_rho`` is the detached
        ``Σ_t log π_θ − log μ`` per response (``(..., N)``) for importance-weighted baselines."""
        raise NotImplementedError

    def surrogate(self, s: SurrogateInput) -> Surrogate:
        """The per-token loss given the ratio, the advantages and any bounds a correction supplies."""
        raise NotImplementedError(f"{self.cfg.name} returns its whole loss from full_loss")

    def full_loss(self, inp: PolicyLossInput) -> tuple[Tensor, dict] | None:
        """``(loss (...), metrics)`` for an objective that is not a per-token surrogate; ``None`` (the
        default) means: compose :meth:`surrogate` with the correction and aggregate."""
        return None

    def regularizer(self, inp: PolicyLossInput) -> tuple[Tensor, dict] | None:
        """An extra term added to the loss after aggregation (e.g. a KL penalty), with its metrics."""
        return None


class ClipSurrogate:
    """Mixin: the PPO clip surrogate ``−min(rÂ, clip(r, 1−ε_low, 1+ε_high)Â)`` with the config's dual clip;
    a correction's bounds and dual clip replace the config's when given."""

    ratio_clip: ClassVar[bool] = True

    def surrogate(self, s: SurrogateInput) -> Surrogate:
        cfg = self.cfg  # type: ignore[attr-defined]
        low, high = (1.0 - cfg.eps_low, 1.0 + cfg.eps_high) if s.bounds is None else s.bounds
        dual = s.dual_clip_c if s.dual_clip_c is not None else cfg.dual_clip_c
        return clip_surrogate(s.ratio, s.adv, low, high, dual)


class KnobAdvantage:
    """Mixin: the advantage chosen by :class:`AdvantageKnob` (``grpo``, ``dr_grpo``, ``rloo``, ``reward``,
    ``opob``)."""

    @property
    def needs_sequence_grad_norms(self) -> bool:
        return self.cfg.advantage == "opob"  # type: ignore[attr-defined]

    def advantages(self, inp: PolicyLossInput, log_seq_rho: Tensor) -> tuple[Tensor, dict]:
        cfg, r, g = self.cfg, inp.rewards.detach(), inp.group_size  # type: ignore[attr-defined]
        kind = cfg.advantage
        if kind == "reward":
            return r.clone(), {}
        if kind == "rloo":
            return r - A.leave_one_out_baseline(r, g), {}
        if kind == "opob":
            adv, b = opob_advantage(cfg, inp, log_seq_rho, True, False, cfg.eps_std)
            return adv, {"adv/baseline_mean": b.mean(-1)}
        adv = r - A.group_mean_baseline(r, g)
        if kind == "grpo":
            adv = A.normalize_by_group_std(adv, r, g, cfg.eps_std, True)
        return adv, {}
