"""``build_policy_loss``: one objective (``docs/methods/objectives.md``) composed with one off-policy
correction (``docs/methods/corrections.md``); the composition rules are ``docs/methods/objectives.md#composition``.

Pipeline for a batch (all per replica):

1. advantages ``Â`` from the rewards and groups (the objective's :meth:`~.objectives.base.Objective.advantages`);
2. ratio of the surrogate ``r = π_θ/π_anchor`` with ``π_anchor = π_prox`` when ``prox_logp`` is given
   (decoupled mode) and ``μ`` otherwise (bypass mode, ``π_prox := μ``);
3. the correction turns ``w = π_prox/μ`` (decoupled) or ``sg(π_θ)/μ`` (bypass) into stop-gradient
   factors (see :mod:`.corrections.base`);
4. per-token loss ``pg_scale · mask · coef' · ℓ(r) + penalty``, with ``coef' = coef`` in decoupled mode and
   ``coef / sg(ratio carried by ℓ)`` in bypass mode, then the objective's aggregation
   (``docs/methods/objectives.md#aggregation``) and its regularizer, if any.

An objective whose loss is not a per-token surrogate (``full_loss``) skips steps 2–4. With on-policy data
(``μ = π_prox = π_θ``) every correction's factor is 1 and every loss reduces to the uncorrected objective.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox.algorithms import advantages as A
from sandbox.algorithms._tensor import aggregate, masked_frac, token_mean
from sandbox.algorithms.api import REF_LOGP_KEY, SEQ_GRAD_KEY, LossOutput, PolicyLossInput
from sandbox.algorithms.corrections import CORRECTIONS, CorrectionContext, CorrectionResult, NoCorrectionConfig
from sandbox.algorithms.diagnostics import k3, masked_is_metrics
from sandbox.algorithms.objectives import OBJECTIVES, SurrogateInput
from sandbox.base.lazy_torch import lazy_import

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_import("torch", globals())

__all__ = ["PolicyLoss", "build_policy_loss", "SEQ_GRAD_KEY", "REF_LOGP_KEY"]


def pairing_problem(objective, correction) -> str | None:
    """Why ``objective`` and ``correction`` (validated configs) cannot be composed, or None: an
    objective valid off-policy without importance weights (``takes_corrections = False``) accepts only
    the identity correction, and a correction that replaces the PPO clip bounds needs a ratio-clip
    objective. Read from the registered classes' facts, so a scenario is refused at load time by the
    same rule that would refuse it when the loss is built."""
    objective_cls = OBJECTIVES.entry_for(objective).impl
    correction_cls = CORRECTIONS.entry_for(correction).impl
    if not objective_cls.takes_corrections and not correction_cls.is_identity:
        return (
            f"{objective.name} {objective_cls.no_correction_reason}; use correction "
            f"{NoCorrectionConfig().name!r} (got {correction.name!r})"
        )
    if correction_cls.replaces_clip_bounds and not objective_cls.ratio_clip:
        clip_objectives = ", ".join(e.name for e in OBJECTIVES.entries() if e.impl.ratio_clip)
        return (
            f"correction {correction.name!r} replaces PPO clip bounds; use it with one of "
            f"{clip_objectives} (not {objective.name})"
        )
    return None


class PolicyLoss:
    """Callable ``inp -> LossOutput`` for one (objective, correction) pair; holds the state a method
    needs across batches (EMA baseline, last BAPO bounds) in its objective and correction objects.
    Build with :func:`build_policy_loss`. ``objective`` and ``correction_cfg`` are the configs,
    ``objective_impl`` and ``correction`` the registered implementations built from them."""

    def __init__(self, objective, correction=None):
        correction = correction if correction is not None else NoCorrectionConfig()
        self.objective = objective
        self.correction_cfg = correction
        problem = pairing_problem(objective, correction)
        if problem:
            raise ValueError(problem)
        self.objective_impl = OBJECTIVES.build(objective)
        self.correction = CORRECTIONS.build(correction)
        self._valid_group_size: int | None = None  # the last group size the objective accepted (its config is frozen)
        self._on_policy_is: dict = {}  # _is_monitors' values of this loss, per shape (per run: see there)
        self._plan: _CallPlan | None = None  # what a call reads and computes, while its inputs are unchanged
        self.recorder = None
        """``None``, or a callable ``recorder(context, result)`` given each batch's :class:`CorrectionContext`
        (the learner's own ``log w``, ``log ρ``, mask) and the correction's :class:`CorrectionResult` (its
        factors and token mask) after the correction ran: what ``sandbox check``'s learner checks read. It
        only observes (nothing it returns is used), so a run's numbers are the same with or without it."""

    @property
    def needs_sequence_grad_norms(self) -> bool:
        """Whether ``inp.extras['seq_grad_sq_norms']`` must be supplied (OPOB / optimal baseline)."""
        return self.objective_impl.needs_sequence_grad_norms

    @property
    def sequence_grad_norms(self) -> str:
        """How the per-trajectory gradient norms are computed: ``exact`` or ``ghost`` (``opob_grad_norms``)."""
        return getattr(self.objective, "opob_grad_norms", "exact")

    @property
    def needs_reference_logp(self) -> bool:
        """Whether ``inp.extras['ref_logp']`` must be supplied (GRPO's KL penalty, ``beta_kl > 0``)."""
        return self.objective_impl.needs_reference_logp

    # ----------------------------------------------------------------------------------- advantages
    def advantages(self, inp: PolicyLossInput, log_seq_rho: Tensor) -> tuple[Tensor, dict]:
        """Per-response advantages ``(..., N)`` and baseline metrics, after checking the group size."""
        if inp.group_size != self._valid_group_size:
            self.objective.validate_group_size(inp.group_size)
            self._valid_group_size = inp.group_size
        return self.objective_impl.advantages(inp, log_seq_rho)

    # ----------------------------------------------------------------------------------------- loss
    def _correct(self, context: CorrectionContext):
        """The correction's result on ``context``, shown to the recorder."""
        corr = self.correction(context)
        if self.recorder is not None:
            self.recorder(context, corr)
        return corr

    def _plan_for(self, monitors, injected: bool, decoupled: bool) -> _CallPlan:
        """The :class:`_CallPlan` of a call with these ``monitors`` and kind of input: the one held while its
        inputs are unchanged, else a new one (held unless ``monitors`` is a built-in mutable container, whose
        answers may change between calls)."""
        plan = self._plan
        if (
            plan is not None
            and plan.monitors is monitors
            and plan.injected is injected
            and plan.decoupled is decoupled
            and plan.correction is self.correction
            and plan.method is self.objective_impl
            and plan.recorded is (self.recorder is not None)
        ):
            return plan
        plan = _CallPlan(self, monitors, injected, decoupled)
        self._plan = None if isinstance(monitors, _MUTABLE_CONTAINERS) else plan
        return plan

    def __call__(self, inp: PolicyLossInput) -> LossOutput:
        method = self.objective_impl
        logp = inp.logp
        fmask = inp.fmask
        mu = inp.behaviour_logp.detach()
        prox = inp.prox_logp
        decoupled = prox is not None
        anchor = prox.detach() if decoupled else mu
        injected = inp.advantages is not None
        plan = self._plan_for(inp.monitors, injected, decoupled)
        reads_log_rho = plan.reads_log_rho
        if reads_log_rho:
            log_rho = (logp.detach() - mu).mul_(fmask)
            log_w = (anchor - mu) * fmask if decoupled else log_rho
            # log ρ · m · m: what seq_sum(log_rho) sums, and the log ρ · m of is_metrics(log_rho) (same numbers).
            masked_twice = log_rho * fmask
            log_seq_rho = masked_twice.sum(-1)
        else:
            log_rho = masked_twice = log_seq_rho = None
            log_w = (anchor - mu) * fmask if decoupled else None
        adv, metrics = (inp.advantages, {}) if injected else self.advantages(inp, log_seq_rho)
        # Detached, unless already without gradient (the same values; detach would only make a new alias).
        if adv.requires_grad:
            adv = adv.detach()
        rewards = inp.rewards
        if rewards.requires_grad:
            rewards = rewards.detach()
        metrics["reward/mean"] = rewards.mean(-1)
        if plan.adv_mean:
            metrics["adv/mean"] = adv.mean(-1)
        if plan.adv_std:
            metrics["adv/std"] = adv.std(-1, unbiased=False)
        if plan.zero_var_groups:
            metrics["adv/zero_var_groups"] = A.zero_variance_group_frac(rewards, inp.group_size)
        if plan.wants_is:
            # overwrites masked_twice
            metrics.update(_is_monitors(masked_twice, fmask, inp.full_mask, self._on_policy_is))
        if plan.ppo_kl:
            metrics["ppo/kl"] = token_mean((anchor - logp.detach()) * fmask, fmask)
        if plan.kl_k3_prox:
            metrics["is/kl_k3_prox"] = token_mean(k3(log_w.clamp(max=40.0)), fmask)
        staleness = inp.staleness
        if staleness is not None:
            if staleness:
                metrics.update({k: staleness[k] for k in TOKEN_LAG_KEYS if k in staleness})
        elif plan.token_lag and inp.token_versions is not None:
            metrics.update(token_lag_metrics(inp.learner_version, inp.token_versions, fmask))

        whole = method.full_loss(inp)
        if whole is not None:
            loss, whole_metrics = whole
            metrics.update(whole_metrics)
            return LossOutput(loss, metrics)

        # r = π_θ/π_anchor, unless no one reads it (REINFORCE with the identity correction: it is not in the loss).
        ratio = torch.exp((logp - anchor) * fmask) if plan.reads_ratio else None
        a_tok = adv.unsqueeze(-1)
        if a_tok.shape != logp.shape:  # expand_as would return the same view
            a_tok = a_tok.expand_as(logp)
        if reads_log_rho:
            context = CorrectionContext(
                log_w=log_w,
                log_rho=log_rho,
                ratio=None if ratio is None else ratio.detach(),
                fmask=fmask,
                adv=adv,
                rewards=rewards,
                logp=logp,
                behaviour_logp=mu,
                decoupled=decoupled,
                log_seq_w=None if decoupled else log_seq_rho,
                prox_logp=anchor if decoupled else None,
                token_versions=inp.token_versions,
                learner_version=inp.learner_version,
                group_size=inp.group_size,
                staleness=inp.staleness,
                extras=inp.extras,
            )
            corr = self._correct(context)
        else:  # the identity correction with no recorder: nothing reads the context
            corr = _IDENTITY
        metrics.update(corr.metrics)
        sur = method.surrogate(
            SurrogateInput(
                logp=logp,
                anchor_logp=anchor,
                ratio=ratio,
                adv=a_tok,
                fmask=fmask,
                bounds=corr.bounds,
                dual_clip_c=corr.dual_clip_c,
            )
        )

        mult = None
        if corr.coef is not None:
            coef = corr.coef
            if not decoupled and sur.ratio_value is not None:
                coef = coef / sur.ratio_value.clamp_min(1e-30)
            mult = coef
        if corr.mask is not None:
            mult = corr.mask if mult is None else mult * corr.mask
            if plan.mask_frac:
                metrics["mask/frac"] = masked_frac(corr.mask <= 0, fmask)
        per_token = sur.per_token if mult is None else mult.detach() * sur.per_token
        if corr.pg_scale != 1.0:
            per_token = corr.pg_scale * per_token
        pg_loss = aggregate(per_token, None if inp.full_mask else fmask, method.aggregation, method.max_len)
        loss = pg_loss
        if corr.penalty is not None:
            pen = aggregate(corr.penalty, fmask, method.aggregation, method.max_len)
            metrics["loss/penalty"] = pen.detach()
            loss = loss + pen
        extra = method.regularizer(inp)
        if extra is not None:
            term, extra_metrics = extra
            metrics.update(extra_metrics)
            loss = loss + term

        metrics["loss/pg"] = pg_value = pg_loss.detach()
        # one tensor for both when the loss is its policy-gradient term
        metrics["loss/total"] = pg_value if loss is pg_loss else loss.detach()
        if mult is not None and plan.coef_mean:
            metrics["is/coef_mean"] = token_mean(mult.detach(), fmask)
        if sur.clipped is not None and plan.clip_frac:
            metrics["clip/frac"] = masked_frac(sur.clipped, fmask)
        if sur.dual_clipped is not None and plan.clip_frac_lower:
            metrics["clip/frac_lower"] = masked_frac(sur.dual_clipped, fmask)
        return LossOutput(loss, metrics)


class _CallPlan:
    """What :meth:`PolicyLoss.__call__` reads and computes for one kind of call, decided once from what the
    decision depends on (kept with it, compared by identity): the monitors asked for, the correction, whether a
    recorder observes, the objective, and whether the advantages are given (``injected``) and the loss is
    decoupled. Each flag is the test the generic body made at every call, with the same answer:

    * ``reads_log_rho``: log ρ = log π_θ − log μ is read by a correction other than the identity (or a plain
      callable one), the recorder, an importance-weighted baseline (``Objective.reads_log_seq_rho``) or the IS
      monitors; when none of them runs it is not computed;
    * ``reads_ratio``: r = π_θ/π_anchor is read by the objective (``Objective.reads_ratio``) or a correction
      other than the identity;
    * the others: whether each optional monitor is asked for (every one when ``monitors`` is None).
    """

    __slots__ = (
        "monitors",
        "injected",
        "decoupled",
        "correction",
        "method",
        "recorded",
        "wants_is",
        "reads_log_rho",
        "reads_ratio",
        "adv_mean",
        "adv_std",
        "zero_var_groups",
        "ppo_kl",
        "kl_k3_prox",
        "token_lag",
        "mask_frac",
        "coef_mean",
        "clip_frac",
        "clip_frac_lower",
    )

    def __init__(self, loss: PolicyLoss, monitors, injected: bool, decoupled: bool):
        want = (lambda _: True) if monitors is None else monitors.__contains__  # noqa: E731
        method, correction = loss.objective_impl, loss.correction
        self.monitors, self.injected, self.decoupled = monitors, injected, decoupled
        self.correction, self.method, self.recorded = correction, method, loss.recorder is not None
        identity = getattr(correction, "is_identity", False)
        self.wants_is = any(want(k) for k in IS_MONITOR_KEYS)
        self.reads_log_rho = (
            not identity
            or self.recorded
            or monitors is None
            or (not injected and method.reads_log_seq_rho)
            or self.wants_is
        )
        self.reads_ratio = method.reads_ratio or not identity
        self.adv_mean = want("adv/mean")
        self.adv_std = want("adv/std")
        self.zero_var_groups = not injected and want("adv/zero_var_groups")
        self.ppo_kl = decoupled and want("ppo/kl")
        self.kl_k3_prox = decoupled and want("is/kl_k3_prox")
        self.token_lag = any(want(k) for k in TOKEN_LAG_KEYS)
        self.mask_frac = want("mask/frac")
        self.coef_mean = want("is/coef_mean")
        self.clip_frac = want("clip/frac")
        self.clip_frac_lower = want("clip/frac_lower")


_MUTABLE_CONTAINERS = (set, list, dict)
"""Monitors of these types may change between calls: a plan made for them is used for its call only."""

_IDENTITY = CorrectionResult()
"""What the identity correction returns (no factor, mask, penalty or metric): shared, never modified."""


def _is_monitors(masked_twice: Tensor, fmask: Tensor, full_mask: bool, cache: dict) -> dict[str, Tensor]:
    """:func:`masked_is_metrics` of ``masked_twice = log ρ · m · m``. On-policy data under a mask of ones (``log ρ``
    zero at every token: ``x − x = +0`` wherever the learner's log-probs are the sampler's, the synchronous runs'
    batches) its value depends only on the shape and dtype: computed once per (shape, dtype, device) from zeros and
    ones by the same function, kept in ``cache`` (the loss's own: one run, so a function replaced for a run is the
    one it computes with, and nothing outlives the run) and shared by those batches (their version counters
    checked: a write to one makes new ones): one test of the input instead of about twenty tensor operations.
    Anything else (a NaN too: ``any`` counts it) is measured."""
    if full_mask and not masked_twice.any():
        key = (tuple(masked_twice.shape), masked_twice.dtype, masked_twice.device)
        cached = cache.get(key)
        if cached is None or any(v._version != n for v, n in zip(cached[0].values(), cached[1])):
            out = masked_is_metrics(torch.zeros_like(masked_twice), torch.ones_like(masked_twice))
            cached = cache[key] = (out, [v._version for v in out.values()])
        return dict(cached[0])
    return masked_is_metrics(masked_twice, fmask)


TOKEN_LAG_KEYS = ("staleness/mean", "staleness/max")
"""The metrics of :func:`token_lag_metrics`, or of ``PolicyLossInput.staleness`` when the caller gives it."""
IS_MONITOR_KEYS = ("is/ess_ratio", "is/ess", "is/chi2", "is/chi2_seq", "is/kl_k3", "is/log_ratio_mean")
"""The monitors of :func:`sandbox.algorithms.diagnostics.masked_is_metrics`, computed together."""


def token_lag_metrics(learner_version: int, token_versions: Tensor, fmask: Tensor) -> dict[str, Tensor]:
    """Per replica, the token lag ``v − v_t`` (in ``fmask``'s dtype): its mean over the valid tokens
    and its largest value (−1e9 where no token is valid).

    The lag is built in place on one converted copy (``−v_t + v`` is ``v − v_t`` to the bit), which
    then takes the −1e9 of the padding for the maximum: the values of
    ``torch.where(fmask > 0, lag, −1e9)`` without a second full-size tensor."""
    lag = token_versions.to(fmask.dtype, copy=True)
    lag.neg_().add_(learner_version)
    mean = token_mean(lag.expand_as(fmask), fmask)
    padding = ~(fmask > 0)
    masked = (
        lag.masked_fill_(padding, -1e9) if lag.shape == fmask.shape else lag.expand_as(fmask).masked_fill(padding, -1e9)
    )
    return {"staleness/mean": mean, "staleness/max": masked.amax((-2, -1))}


def build_policy_loss(objective_cfg, correction_cfg=None) -> PolicyLoss:
    """Compose an objective config (``ObjectiveConfig``) with a correction config (``CorrectionConfig``,
    default ``none``) into a :class:`PolicyLoss`. Incompatible pairs raise ``ValueError`` here."""
    return PolicyLoss(objective_cfg, correction_cfg)
