"""The sandbox's off-policy corrections as verl 0.9.1 policy losses, selected by name
(``docs/promotion.md#verl-sandbox-losses-by-name``).

**As verl's ``external_lib``.** Importing this module registers every correction under its default name
(``sandbox_<correction>``) in verl's ``POLICY_LOSS_REGISTRY`` when verl is importable, so verl can load it
itself in each worker::

    python -m verl.trainer.main_ppo ... \
        actor_rollout_ref.model.external_lib=sandbox.integrations.verl \
        actor_rollout_ref.actor.policy_loss.loss_mode=sandbox_m2po_mask

verl 0.9.1 imports ``actor_rollout_ref.model.external_lib`` with ``importlib.import_module`` in every
process that builds the model config (``HFModelConfig.__post_init__`` calls ``import_external_libs``,
``verl/workers/config/model.py`` and ``verl/utils/import_utils.py``), which includes the actor workers
where the loss runs. Without verl (``ModuleNotFoundError`` for ``verl``) the import registers nothing
and :func:`register_sandbox_losses` raises when called; a verl that is installed but fails to import
raises at import. Configured losses (a correction's own settings, another name) need a module of your
own that calls :func:`register_sandbox_losses`, named as ``external_lib`` in the same way.

:func:`register_sandbox_losses` puts one loss per correction into verl's ``POLICY_LOSS_REGISTRY``
(verl 0.9.1 ``verl/trainer/ppo/core_algos.py``: ``register_policy_loss``), named ``sandbox_<correction>``;
``actor_rollout_ref.actor.policy_loss.loss_mode=sandbox_m2po_mask`` then selects it. Each loss is the
sandbox's own :class:`~sandbox.algorithms.policy_loss.PolicyLoss` on verl's tensors:

* **Advantages.** verl passes ``(B, T)`` advantages computed by its estimator; the sandbox needs one per
  response, so they are taken from the first valid token and must be constant along each response
  (GRPO, RLOO, GRPO-pass@k, GDPO, REINFORCE++-baseline, OPO, GPG and ReMax broadcast one value;
  verl's whitening keeps it constant). Token-varying advantages (GAE, REINFORCE++, the optimal-token
  baseline) raise ``ValueError``.
* **Behaviour policy μ.** In verl 0.9.1 the loss receives ``old_log_prob`` and ``rollout_is_weights``,
  never the rollout log-probs themselves (``verl/workers/utils/losses.py``: ``ppo_loss``).
  ``behaviour="old_log_prob"`` (default) is the sandbox's bypass mode, ``μ := old_log_prob``: exact when
  verl's V1 trainer runs with ``algorithm.rollout_correction.bypass_mode=true`` (it copies the rollout
  log-probs into ``old_log_probs``); otherwise μ is the recomputed π_old and the engine mismatch is
  ignored. ``behaviour="rollout_is_weights"`` is the sandbox's decoupled mode, ``π_prox := old_log_prob``
  and ``log μ = old_log_prob − log w``, which holds only if verl computed untruncated token weights
  ``w = π_old/μ`` (``rollout_is=token``, ``rollout_is_threshold >= 5e8`` so that only verl's ±20
  log-ratio safety clamp applies, ``rollout_is_batch_normalize=false``).
* **Objective and clip.** Without an ``objective`` the surrogate is the sandbox's ``ppo`` with
  ``ε_low, ε_high, c`` read from verl's actor config on every call (``clip_ratio_low``,
  ``clip_ratio_high``, ``clip_ratio_c``, as verl's ``vanilla`` reads them). A given objective config is used
  as is (verl's clip keys are then ignored).
* **Aggregation.** verl's ``loss_agg_mode`` decides, and the objective's own ``aggregation`` is replaced.
  The sandbox aggregates the micro-batch with the matching mode (``token_mean``, ``seq_mean_token_mean``,
  ``seq_mean_token_sum``) and the result is rescaled by the constant that turns it into verl's ``agg_loss``
  with ``config.global_batch_info`` (global token count, global batch size, ``dp_size``,
  ``loss_scale_factor``), so micro-batch and data-parallel splits normalise as verl's own losses do.
* **Metrics.** The sandbox's names (``is/ess_ratio``, ``mask/frac``, ``m2/value``, ``clip/frac`` ...) as
  floats; ``reward/mean`` is dropped (the loss sees no rewards).

A correction's state (BAPO's last bounds) lives in the loss object, one per (aggregation, clip) setting,
for the life of the worker process. Everything a policy loss cannot see (GAC, VCPO's ESS-scaled
learning rate, OPOB's per-trajectory gradient norms) is listed in the docs section above.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

import torch
from pydantic import BaseModel
from torch import Tensor

from sandbox.algorithms.api import PolicyLossInput
from sandbox.algorithms.corrections import CORRECTIONS
from sandbox.algorithms.objectives import OBJECTIVES, PPOConfig
from sandbox.algorithms.policy_loss import PolicyLoss, build_policy_loss

__all__ = ["VERL_AGGREGATION", "Behaviour", "SandboxVerlLoss", "per_response_advantages", "register_sandbox_losses"]

Behaviour = Literal["old_log_prob", "rollout_is_weights"]
BEHAVIOURS: tuple[str, ...] = ("old_log_prob", "rollout_is_weights")

VERL_AGGREGATION: dict[str, str] = {
    "token-mean": "token_mean",
    "token-sum": "token_mean",
    "seq-mean-token-mean": "seq_mean_token_mean",
    "seq-mean-token-sum": "seq_mean_token_sum",
    "seq-mean-token-sum-norm": "seq_mean_token_sum",
}
"""verl 0.9.1 ``loss_agg_mode`` → the sandbox aggregation the loss is computed with before rescaling."""

VERL_CORRECTION_DEFAULTS: dict[str, dict[str, Any]] = {"topr": {"split_on": "advantage"}}
"""Settings a correction registered by name gets instead of its sandbox defaults, because the verl loss
sees advantages, not rewards (TOPR's sign test on R is impossible)."""

SANDBOX_PREFIX = "sandbox_"


# --------------------------------------------------------------------------------------------
# Tensor mapping
# --------------------------------------------------------------------------------------------


def per_response_advantages(advantages: Tensor, mask: Tensor) -> Tensor:
    """``(B, T)`` token advantages → ``(B,)``: the value at each response's first valid token (0 for a
    response with none). Raises ``ValueError`` unless every valid token of a response carries exactly
    that value (outcome estimators broadcast one advantage per response; GAE does not)."""
    if advantages.dim() == 1:
        return advantages
    valid = mask.to(torch.bool).expand_as(advantages)
    has = valid.any(-1)
    first = valid.to(torch.int8).argmax(-1, keepdim=True)
    adv = torch.where(has, advantages.gather(-1, first).squeeze(-1), torch.zeros_like(advantages[..., 0]))
    varies = valid & (advantages != adv.unsqueeze(-1))
    if bool(varies.any()):
        row = int(varies.any(-1).nonzero()[0, 0])
        spread = advantages[row][valid[row]]
        raise ValueError(
            "sandbox verl loss: advantages vary along response "
            f"{row} (min {float(spread.min()):.6g}, max {float(spread.max()):.6g}); the sandbox's losses need "
            "one advantage per response (algorithm.adv_estimator grpo, rloo, grpo_passk, gdpo, "
            "reinforce_plus_plus_baseline, opo, gpg, remax), not token-level ones (gae, reinforce_plus_plus, "
            "optimal_token_baseline)"
        )
    return adv


def behaviour_from_weights(old_log_prob: Tensor, rollout_is_weights: Tensor | None, mask: Tensor) -> Tensor:
    """``log μ = log π_old − log w`` from verl's token weights ``w = π_old/μ`` (0 where masked).
    Raises ``ValueError`` when the weights are missing or not positive and finite on valid tokens."""
    if rollout_is_weights is None:
        raise ValueError(
            "sandbox verl loss with behaviour='rollout_is_weights' got rollout_is_weights=None; set "
            "algorithm.rollout_correction.rollout_is=token, rollout_is_threshold=1e9, "
            "rollout_is_batch_normalize=false and bypass_mode=false (or use behaviour='old_log_prob')"
        )
    w = rollout_is_weights.detach()
    valid = mask.to(torch.bool).expand_as(w)
    bad = valid & ~(torch.isfinite(w) & (w > 0))
    if bool(bad.any()):
        raise ValueError(
            f"sandbox verl loss: {int(bad.sum())} valid tokens have rollout_is_weights <= 0 or not finite, so "
            "log μ = log π_old − log w cannot be recovered; an IcePop band ('lower_upper' threshold) zeroes "
            "weights: use rollout_is_threshold=1e9 with rollout_is=token"
        )
    log_w = torch.where(valid, torch.log(torch.where(valid, w, torch.ones_like(w))), torch.zeros_like(w))
    return old_log_prob.detach() - log_w


def _as_tensor(value, like: Tensor) -> Tensor:
    return torch.as_tensor(value, dtype=like.dtype, device=like.device)


def verl_aggregation_scale(loss_agg_mode: str, fmask: Tensor, batch_info: Mapping[str, Any]) -> Tensor | None:
    """The constant that turns the sandbox aggregation :data:`VERL_AGGREGATION` of one micro-batch into
    verl 0.9.1 ``agg_loss(loss_mat, mask, loss_agg_mode, **global_batch_info)`` (``None``: already equal).

    With ``n`` valid tokens and ``B`` responses in the micro-batch, ``dp = dp_size``:
    token-mean ``n / batch_num_tokens · dp``; token-sum ``max(n, 1) · dp``; seq-mean-token-mean and
    seq-mean-token-sum ``B / global_batch_size · dp``; seq-mean-token-sum-norm the same divided by
    ``loss_scale_factor`` (default ``T``). Missing global sizes default to the micro-batch's own (verl's
    rule), which is an error when ``dp_size > 1``."""
    dp = batch_info.get("dp_size") or 1
    n_tokens = fmask.sum()
    if loss_agg_mode == "token-mean":
        total = batch_info.get("batch_num_tokens")
        if total is None:
            if dp > 1:
                raise ValueError("(global) batch_num_tokens is required when dp_size > 1")
            return None
        return n_tokens / _as_tensor(total, fmask) * dp
    if loss_agg_mode == "token-sum":
        return n_tokens.clamp_min(1.0) * dp
    if loss_agg_mode not in VERL_AGGREGATION:
        raise ValueError(
            f"sandbox verl loss: unknown loss_agg_mode {loss_agg_mode!r}; expected one of {list(VERL_AGGREGATION)}"
        )
    n_seqs = fmask.shape[-2]
    size = batch_info.get("global_batch_size")
    if size is None:
        if dp > 1:
            raise ValueError("global_batch_size is required when dp_size > 1")
        size = (fmask.sum(-1) > 0).sum().clamp_min(1)
    scale = n_seqs / _as_tensor(size, fmask) * dp
    if loss_agg_mode == "seq-mean-token-sum-norm":
        horizon = batch_info.get("loss_scale_factor")
        scale = scale / (fmask.shape[-1] if horizon is None else horizon)
    return scale


# --------------------------------------------------------------------------------------------
# The loss
# --------------------------------------------------------------------------------------------


def _correction_config(spec) -> BaseModel:
    if isinstance(spec, BaseModel):
        CORRECTIONS.entry_for(spec)  # TypeError for a config of another family
        return spec
    if not isinstance(spec, str) or spec not in CORRECTIONS:
        raise ValueError(f"register_sandbox_losses: unknown correction {spec!r}; expected one of {CORRECTIONS.names()}")
    return CORRECTIONS[spec].config(**VERL_CORRECTION_DEFAULTS.get(spec, {}))


def _check_expressible(objective: BaseModel, correction: BaseModel, behaviour: str) -> None:
    """Reject pairs a verl policy loss cannot compute, with the reason."""
    if behaviour not in BEHAVIOURS:
        raise ValueError(f"register_sandbox_losses: behaviour must be one of {list(BEHAVIOURS)}, got {behaviour!r}")
    obj_name = objective.name  # type: ignore[attr-defined]
    if "aggregation" not in type(objective).model_fields:
        raise ValueError(
            f"register_sandbox_losses: objective {obj_name!r} is not a per-token surrogate, so verl's "
            "loss_agg_mode cannot be applied to it"
        )
    if getattr(correction, "split_on", None) == "reward":
        raise ValueError(
            f"register_sandbox_losses: {correction.name}.split_on='reward' needs rewards, which a verl policy "  # type: ignore[attr-defined]
            "loss never sees; use split_on='advantage'"
        )
    if getattr(correction, "require_prox", False) and behaviour != "rollout_is_weights":
        raise ValueError(
            f"register_sandbox_losses: {correction.name}.require_prox=True needs π_prox ≠ μ; use "  # type: ignore[attr-defined]
            "behaviour='rollout_is_weights'"
        )
    probe = build_policy_loss(objective, correction)  # incompatible pairs raise ValueError here
    if probe.needs_sequence_grad_norms:
        raise ValueError(
            f"register_sandbox_losses: objective {obj_name!r} with an opob/optimal baseline needs per-trajectory "
            "gradient norms, which a verl policy loss cannot compute; verl computes advantages itself "
            "(closest upstream: algorithm.adv_estimator=optimal_token_baseline)"
        )
    if probe.needs_reference_logp:
        raise ValueError(
            f"register_sandbox_losses: objective {obj_name!r} with beta_kl > 0 needs reference log-probs; set "
            "beta_kl=0 and use verl's actor.use_kl_loss / kl_loss_coef"
        )


class SandboxVerlLoss:
    """A verl 0.9.1 ``PolicyLossFn``: ``(old_log_prob, log_prob, advantages, response_mask,
    loss_agg_mode, config, rollout_is_weights) -> (loss, metrics)`` computed by the sandbox's
    :class:`~sandbox.algorithms.policy_loss.PolicyLoss` for ``correction`` (mapping in the module docstring).
    ``objective=None`` means ``ppo`` with verl's clip settings."""

    def __init__(self, correction, objective: BaseModel | None = None, behaviour: Behaviour = "old_log_prob"):
        self.correction = _correction_config(correction)
        self.objective = objective
        self.behaviour = behaviour
        _check_expressible(objective if objective is not None else PPOConfig(), self.correction, behaviour)
        self._losses: dict[tuple, PolicyLoss] = {}

    def objective_for(self, aggregation: str, config) -> BaseModel:
        """The objective config for one call: the given one, or ``ppo`` with verl's clip keys, with the
        aggregation set to ``aggregation``."""
        if self.objective is not None:
            base = self.objective.model_dump()
        else:
            if config is None:
                raise ValueError(
                    "sandbox verl loss without an objective reads clip_ratio_* from verl's actor config; got config=None"
                )
            eps = config.clip_ratio
            low = config.clip_ratio_low if config.clip_ratio_low is not None else eps
            high = config.clip_ratio_high if config.clip_ratio_high is not None else eps
            base = {"name": "ppo", "eps_low": low, "eps_high": high, "dual_clip_c": config.get("clip_ratio_c", 3.0)}
        return OBJECTIVES[base["name"]].config.model_validate({**base, "aggregation": aggregation})

    def policy_loss(self, aggregation: str, config) -> PolicyLoss:
        """The (cached) sandbox loss for one aggregation and clip setting; it keeps the correction's state."""
        objective = self.objective_for(aggregation, config)
        key = tuple(sorted(objective.model_dump().items()))
        if key not in self._losses:
            self._losses[key] = build_policy_loss(objective, self.correction)
        return self._losses[key]

    def __call__(
        self,
        old_log_prob: Tensor,
        log_prob: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str = "token-mean",
        config=None,
        rollout_is_weights: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        if loss_agg_mode not in VERL_AGGREGATION:
            raise ValueError(
                f"sandbox verl loss: unknown loss_agg_mode {loss_agg_mode!r}; expected one of {list(VERL_AGGREGATION)}"
            )
        fmask = response_mask.to(log_prob.dtype)
        adv = per_response_advantages(advantages.detach(), response_mask).to(log_prob.dtype)
        if self.behaviour == "rollout_is_weights":
            behaviour_logp, prox = behaviour_from_weights(old_log_prob, rollout_is_weights, response_mask), old_log_prob
        else:
            behaviour_logp, prox = old_log_prob, None
        loss_fn = self.policy_loss(VERL_AGGREGATION[loss_agg_mode], config)
        out = loss_fn(
            PolicyLossInput(
                logp=log_prob,
                behaviour_logp=behaviour_logp.detach(),
                mask=fmask,
                rewards=torch.zeros_like(adv),
                group_size=1,
                prox_logp=None if prox is None else prox.detach(),
                advantages=adv,
            )
        )
        batch_info = (getattr(config, "global_batch_info", None) if config is not None else None) or {}
        scale = verl_aggregation_scale(loss_agg_mode, fmask, batch_info)
        loss = out.loss if scale is None else out.loss * scale.detach()
        metrics = {k: float(v) for k, v in out.metrics.items() if k != "reward/mean"}
        return loss, metrics


# --------------------------------------------------------------------------------------------
# Registration
# --------------------------------------------------------------------------------------------


def register_sandbox_losses(
    corrections: Iterable[str | BaseModel] | None = None,
    objective: BaseModel | None = None,
    *,
    behaviour: Behaviour = "old_log_prob",
    name: str | None = None,
) -> dict[str, SandboxVerlLoss]:
    """Register one verl policy loss per correction, named ``sandbox_<correction name>`` (or ``name`` when
    exactly one correction is given), into verl's ``POLICY_LOSS_REGISTRY`` (``verl`` must be importable).

    ``corrections``: names (registered with the sandbox defaults, except :data:`VERL_CORRECTION_DEFAULTS`)
    or correction configs; ``None`` = every registered correction. ``objective``: an objective config
    (its aggregation is replaced by verl's ``loss_agg_mode``), ``None`` = ``ppo`` with verl's clip keys.
    ``behaviour``: where μ comes from (module docstring). Returns ``{name: loss}``. Must run in every
    process that builds the actor's loss (``docs/promotion.md#verl-sandbox-losses-by-name``)."""
    try:
        from verl.trainer.ppo import core_algos
    except ImportError as exc:
        raise ImportError(f"register_sandbox_losses needs verl (0.9.1) importable: {exc}") from exc
    specs = list(CORRECTIONS.names() if corrections is None else corrections)
    if name is not None and len(specs) != 1:
        raise ValueError(f"register_sandbox_losses: name={name!r} needs exactly one correction, got {len(specs)}")
    losses: dict[str, SandboxVerlLoss] = {}
    for spec in specs:
        loss = SandboxVerlLoss(spec, objective, behaviour)
        key = name if name is not None else SANDBOX_PREFIX + loss.correction.name  # type: ignore[attr-defined]
        existing = core_algos.POLICY_LOSS_REGISTRY.get(key)
        if existing is not None and not isinstance(existing, SandboxVerlLoss):
            raise ValueError(
                f"register_sandbox_losses: {key!r} is one of verl's own policy losses; choose another name"
            )
        losses[key] = core_algos.register_policy_loss(key)(loss)
    return losses


def _register_on_import() -> None:
    """Register every correction under its default name when verl is importable (module docstring)."""
    try:
        import verl.trainer.ppo.core_algos  # noqa: F401
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] == "verl":
            return  # verl is not installed here
        raise
    register_sandbox_losses()


_register_on_import()
