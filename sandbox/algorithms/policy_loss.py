"""``build_policy_loss``: one objective (§1, §3.5) composed with one off-policy correction (§2–3) of
``shared/reference/algorithms.md``.

Pipeline for a batch (all per replica):

1. advantages ``Â`` from the rewards and groups (objective's baseline / estimator);
2. ratio of the surrogate ``r = π_θ/π_anchor`` with ``π_anchor = π_prox`` when ``prox_logp`` is given
   (decoupled mode) and ``μ`` otherwise (bypass mode, ``π_prox := μ``);
3. the correction turns ``w = π_prox/μ`` (decoupled) or ``sg(π_θ)/μ`` (bypass) into stop-gradient
   factors (see :mod:`.corrections.base`);
4. per-token loss ``pg_scale · mask · coef' · ℓ(r) + penalty``, with ``coef' = coef`` in decoupled mode and
   ``coef / sg(ratio carried by ℓ)`` in bypass mode, then the objective's aggregation.

With on-policy data (``μ = π_prox = π_θ``) every correction's factor is 1 and every loss reduces to
the uncorrected objective.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import advantages as A
from ._tensor import aggregate, masked_frac, seq_sum, token_mean
from .api import LossOutput, PolicyLossInput
from .configs import (
    CISPOConfig,
    DAPOConfig,
    DrGRPOConfig,
    GRPOConfig,
    GSPOConfig,
    NoCorrectionConfig,
    PPOConfig,
    ReinforceConfig,
    RLOOConfig,
    TBAConfig,
)
from .corrections import BOUNDS_CORRECTIONS, CorrectionContext, build_correction
from .diagnostics import is_metrics, k3
from .objectives import cispo_surrogate, clip_surrogate, gspo_surrogate, reinforce_surrogate, tba_beta, tba_loss

OBJECTIVES = (ReinforceConfig, GRPOConfig, DrGRPOConfig, RLOOConfig, PPOConfig, DAPOConfig, GSPOConfig, CISPOConfig, TBAConfig)
_CLIP_OBJECTIVES = (GRPOConfig, DrGRPOConfig, RLOOConfig, PPOConfig, DAPOConfig)

SEQ_GRAD_KEY = "seq_grad_sq_norms"
REF_LOGP_KEY = "ref_logp"


def _seq_grad_sq_norms(inp: PolicyLossInput, who: str) -> Tensor:
    try:
        g = inp.extras[SEQ_GRAD_KEY]
    except KeyError:
        raise KeyError(
            f"{who} needs per-trajectory squared gradient norms ‖∇_θ log π_θ(y_i|x)‖² in "
            f"PolicyLossInput.extras[{SEQ_GRAD_KEY!r}] with shape (..., N); compute them with "
            "sandbox.algorithms.per_sequence_grad_sq_norms"
        ) from None
    return g.detach().to(inp.rewards.dtype).expand_as(inp.rewards)


def _opob_advantage(cfg, inp: PolicyLossInput, log_seq_rho: Tensor, normalize: bool, unbiased: bool, eps: float,
                    with_is: bool = True) -> tuple[Tensor, Tensor]:
    """OPOB (VCPO, arXiv 2602.17616): ``Â_i = (R_i − b*_g)/σ_g`` with ``b*_g = Σ W R / Σ W``. With
    ``with_is=False`` the weights are ``‖∇log π‖²`` only (classic optimal baseline)."""
    r, g = inp.rewards, inp.group_size
    norms = _seq_grad_sq_norms(inp, "baseline 'opob'/'optimal'")
    lsr = log_seq_rho if with_is else torch.zeros_like(log_seq_rho)
    lw = A.opob_log_weights(lsr, norms, cfg.opob_weight if with_is else "readme", cfg.opob_clip_c)
    if getattr(cfg, "opob_scope", "group") == "minibatch":
        values = (r - A.group_mean_baseline(r, g))
        if normalize:
            values = A.normalize_by_group_std(values, r, g, eps, unbiased)
        b = A.weighted_group_baseline(values, lw, r.shape[-1], cfg.opob_leave_one_out)
        return values - b, b
    b = A.weighted_group_baseline(r, lw, g, cfg.opob_leave_one_out)
    adv = r - b
    if normalize:
        adv = A.normalize_by_group_std(adv, r, g, eps, unbiased)
    return adv, b


class PolicyLoss:
    """Callable ``inp -> LossOutput`` for one (objective, correction) pair; holds the state a method
    needs across batches (EMA baseline, last BAPO bounds). Build with :func:`build_policy_loss`."""

    def __init__(self, objective, correction=None):
        correction = correction if correction is not None else NoCorrectionConfig()
        if not isinstance(objective, OBJECTIVES):
            raise TypeError(f"unknown objective config {type(objective).__name__}")
        if isinstance(objective, TBAConfig) and not isinstance(correction, NoCorrectionConfig):
            raise ValueError("tba is valid off-policy without importance weights; use correction 'none'")
        if isinstance(correction, BOUNDS_CORRECTIONS) and not isinstance(objective, _CLIP_OBJECTIVES):
            raise ValueError(
                f"correction {correction.name!r} replaces PPO clip bounds; use it with one of "
                "grpo, dr_grpo, rloo, ppo, dapo (not " + objective.name + ")"
            )
        self.objective = objective
        self.correction_cfg = correction
        self.correction = build_correction(correction)
        self._ema = (
            A.EMABaseline(objective.ema_decay, objective.ema_init)
            if isinstance(objective, ReinforceConfig) and objective.baseline == "ema"
            else None
        )

    @property
    def needs_sequence_grad_norms(self) -> bool:
        """OPOB (VCPO) and the classic optimal baseline weigh trajectories by ‖∇ log π(y)‖²: the
        learner must put them in ``extras[SEQ_GRAD_KEY]``."""
        cfg = self.objective
        return getattr(cfg, "baseline", None) in ("opob", "optimal") or getattr(cfg, "advantage", None) == "opob"

    @property
    def needs_reference_logp(self) -> bool:
        """A KL penalty to π_ref (GRPO ``beta_kl > 0``) needs ``extras[REF_LOGP_KEY]``."""
        return isinstance(self.objective, GRPOConfig) and self.objective.beta_kl > 0

    # ----------------------------------------------------------------------------------- advantages
    def advantages(self, inp: PolicyLossInput, log_seq_rho: Tensor) -> tuple[Tensor, dict]:
        """Per-response advantages ``(..., N)`` (no gradient) and baseline metrics."""
        cfg, r, g = self.objective, inp.rewards.detach(), inp.group_size
        cfg.validate_group_size(g)
        metrics: dict = {}
        if isinstance(cfg, ReinforceConfig):
            kind = cfg.baseline
            if kind == "none":
                b = torch.zeros_like(r)
            elif kind == "constant":
                b = torch.full_like(r, cfg.constant_baseline)
            elif kind == "ema":
                b = self._ema(r)
            elif kind == "group_mean":
                b = A.group_mean_baseline(r, g)
            elif kind == "leave_one_out":
                b = A.leave_one_out_baseline(r, g)
            else:
                adv, b = _opob_advantage(cfg, inp, log_seq_rho, cfg.normalize_std, False, 1e-6, with_is=kind == "opob")
                return adv, {"adv/baseline_mean": b.mean(-1)}
            adv = r - b
            if cfg.normalize_std:
                adv = A.normalize_by_group_std(adv, r, g, 1e-6, True)
            return adv, {"adv/baseline_mean": b.mean(-1)}
        if isinstance(cfg, (GRPOConfig, DrGRPOConfig)):
            normalize = isinstance(cfg, GRPOConfig) and cfg.normalize_std
            eps = cfg.eps_std if isinstance(cfg, GRPOConfig) else 0.0
            if cfg.baseline == "opob":
                unbiased = False if not isinstance(cfg, GRPOConfig) or cfg.std_unbiased is None else cfg.std_unbiased
                adv, b = _opob_advantage(cfg, inp, log_seq_rho, normalize, unbiased, eps if eps > 0 else 1e-6)
                metrics["adv/baseline_mean"] = b.mean(-1)
                return adv, metrics
            unbiased = True if not isinstance(cfg, GRPOConfig) or cfg.std_unbiased is None else cfg.std_unbiased
            adv = r - A.group_mean_baseline(r, g)
            if normalize:
                adv = A.normalize_by_group_std(adv, r, g, eps, unbiased)
            return adv, metrics
        if isinstance(cfg, RLOOConfig):
            return r - A.leave_one_out_baseline(r, g), metrics
        if isinstance(cfg, TBAConfig):  # TB uses rewards directly; centred rewards are reported only
            return r - A.group_mean_baseline(r, g), metrics
        kind = cfg.advantage  # ppo, dapo, gspo, cispo
        if kind == "reward":
            return r.clone(), metrics
        if kind == "rloo":
            return r - A.leave_one_out_baseline(r, g), metrics
        if kind == "opob":
            adv, b = _opob_advantage(cfg, inp, log_seq_rho, True, False, cfg.eps_std)
            return adv, {"adv/baseline_mean": b.mean(-1)}
        adv = r - A.group_mean_baseline(r, g)
        if kind == "grpo":
            adv = A.normalize_by_group_std(adv, r, g, cfg.eps_std, True)
        return adv, metrics

    # ----------------------------------------------------------------------------------------- loss
    def __call__(self, inp: PolicyLossInput) -> LossOutput:
        cfg = self.objective
        logp = inp.logp
        fmask = inp.fmask
        mu = inp.behaviour_logp.detach()
        decoupled = inp.prox_logp is not None
        anchor = inp.prox_logp.detach() if decoupled else mu
        log_rho = (logp.detach() - mu) * fmask
        log_w = (anchor - mu) * fmask if decoupled else log_rho
        log_seq_rho = seq_sum(log_rho, fmask)

        adv, metrics = self.advantages(inp, log_seq_rho)
        adv = adv.detach()
        metrics.update(
            {
                "reward/mean": inp.rewards.detach().mean(-1),
                "adv/mean": adv.mean(-1),
                "adv/std": adv.std(-1, unbiased=False),
                "adv/zero_var_groups": A.zero_variance_group_frac(inp.rewards.detach(), inp.group_size),
            }
        )
        metrics.update(is_metrics(log_rho, fmask))
        if decoupled:
            metrics["ppo/kl"] = token_mean((anchor - logp.detach()) * fmask, fmask)
            metrics["is/kl_k3_prox"] = token_mean(k3(log_w.clamp(max=40.0)), fmask)
        if inp.token_versions is not None:
            lag = (inp.learner_version - inp.token_versions.to(fmask.dtype)).expand_as(fmask)
            metrics["staleness/mean"] = token_mean(lag, fmask)
            metrics["staleness/max"] = torch.where(fmask > 0, lag, torch.full_like(lag, -1e9)).amax((-2, -1))

        if isinstance(cfg, TBAConfig):
            beta = tba_beta(cfg.beta, cfg.beta_final, cfg.anneal_steps, inp.learner_version)
            loss, log_z = tba_loss(logp, fmask, inp.rewards.detach(), inp.group_size, beta, inp.extras.get(REF_LOGP_KEY))
            metrics.update({"loss/pg": loss.detach(), "loss/tb": loss.detach(), "tba/logZ": log_z.mean(-1), "tba/beta": torch.tensor(beta)})
            return LossOutput(loss, metrics)

        ratio = torch.exp((logp - anchor) * fmask)
        a_tok = adv.unsqueeze(-1).expand_as(logp)
        corr = self.correction(
            CorrectionContext(
                log_w=log_w, log_rho=log_rho, ratio=ratio.detach(), fmask=fmask, adv=adv,
                rewards=inp.rewards.detach(), logp=logp, behaviour_logp=mu, decoupled=decoupled,
            )
        )
        metrics.update(corr.metrics)

        if isinstance(cfg, ReinforceConfig):
            sur = reinforce_surrogate(logp, a_tok)
        elif isinstance(cfg, CISPOConfig):
            sur = cispo_surrogate(logp, ratio, a_tok, cfg.eps_low, cfg.eps_high)
        elif isinstance(cfg, GSPOConfig):
            sur = gspo_surrogate(logp, anchor, a_tok, fmask, cfg.eps_low, cfg.eps_high)
        else:
            low, high = (1.0 - cfg.eps_low, 1.0 + cfg.eps_high) if corr.bounds is None else corr.bounds
            dual = corr.dual_clip_c if corr.dual_clip_c is not None else cfg.dual_clip_c
            sur = clip_surrogate(ratio, a_tok, low, high, dual)

        mult = None
        if corr.coef is not None:
            coef = corr.coef
            if not decoupled and sur.ratio_value is not None:
                coef = coef / sur.ratio_value.clamp_min(1e-30)
            mult = coef
        if corr.mask is not None:
            mult = corr.mask if mult is None else mult * corr.mask
            metrics["mask/frac"] = masked_frac(corr.mask <= 0, fmask)
        per_token = sur.per_token if mult is None else mult.detach() * sur.per_token
        if corr.pg_scale != 1.0:
            per_token = corr.pg_scale * per_token
        max_len = getattr(cfg, "max_len", None)
        pg_loss = aggregate(per_token, fmask, cfg.aggregation, max_len)
        loss = pg_loss
        if corr.penalty is not None:
            pen = aggregate(corr.penalty, fmask, cfg.aggregation, max_len)
            metrics["loss/penalty"] = pen.detach()
            loss = loss + pen
        if isinstance(cfg, GRPOConfig) and cfg.beta_kl > 0:
            ref = inp.extras.get(REF_LOGP_KEY)
            if ref is None:
                raise KeyError(f"grpo beta_kl > 0 needs extras[{REF_LOGP_KEY!r}] (reference log-probs, (..., N, T))")
            kl = aggregate(k3(ref.detach() - logp), fmask, cfg.aggregation, max_len)
            metrics["kl/ref_k3"] = kl.detach()
            loss = loss + cfg.beta_kl * kl

        metrics["loss/pg"] = pg_loss.detach()
        metrics["loss/total"] = loss.detach()
        if mult is not None:
            metrics["is/coef_mean"] = token_mean(mult.detach(), fmask)
        if sur.clipped is not None:
            metrics["clip/frac"] = masked_frac(sur.clipped, fmask)
        if sur.dual_clipped is not None:
            metrics["clip/frac_lower"] = masked_frac(sur.dual_clipped, fmask)
        return LossOutput(loss, metrics)


def build_policy_loss(objective_cfg, correction_cfg=None) -> PolicyLoss:
    """Compose an objective config (``ObjectiveConfig``) with a correction config (``CorrectionConfig``,
    default ``none``) into a :class:`PolicyLoss`. Incompatible pairs raise ``ValueError`` here."""
    return PolicyLoss(objective_cfg, correction_cfg)
