"""Objectives, off-policy corrections and optimizer-level stabilizers for asynchronous RL of LMs.

Each method is one module holding its config next to its implementation, registered once:
objectives in :mod:`.objectives` (``docs/methods/objectives.md``), corrections in :mod:`.corrections`
(``docs/methods/corrections.md``), stabilizers (``docs/methods/stabilizers.md``). Every method cites its
source in its docstring. Nothing here depends on the simulator: all pieces work in a plain torch loop
(``examples/plain_torch_loop.py``).

Losses (pure functions of tensors)
----------------------------------
::

    loss_fn = build_policy_loss(GRPOConfig(), TISConfig(level="sequence"))
    out = loss_fn(PolicyLossInput(logp, behaviour_logp, mask, rewards, group_size))
    out.loss            # shape (...): one loss per replica; call out.loss.sum().backward()
    out.metrics         # {"loss/pg", "adv/mean", "clip/frac", "mask/frac", "is/ess_ratio", ...}

Tensors may carry any number of leading replica dims ``...``; reductions are over ``(N, T)`` only
(``docs/methods/objectives.md#aggregation``). ``prox_logp=None`` is bypass mode (``π_prox := μ``); giving
it selects decoupled mode. Methods needing more inputs read ``inp.extras`` and say so through
``PolicyLoss.needs_sequence_grad_norms`` (``"seq_grad_sq_norms"`` ``(..., N)`` for the ``opob``/``optimal``
baselines, see :func:`per_sequence_grad_sq_norms`) and ``PolicyLoss.needs_reference_logp`` (``"ref_logp"``
``(..., N, T)`` for GRPO's KL; TBA uses it when given).

Composition of objective and correction (bypass vs decoupled; ``docs/methods/objectives.md#composition``)
-----------------------------------------------------------------------------------------------------------
The surrogate's ratio is ``π_θ/π_prox`` (decoupled) or ``π_θ/μ`` (bypass). A correction returns a
stop-gradient coefficient meant as the token's *effective importance weight*; in decoupled mode it
replaces ``w = π_prox/μ``, in bypass mode the surrogate's ratio value is divided out first so the weight
is not counted twice (the clip still gates). REINFORCE-form objectives (``reinforce``) carry no ratio, so
the coefficient multiplies directly (VCPO's sequence-TIS REINFORCE = ``reinforce``/``grpo`` + ``tis``
sequence). Masks multiply; the aggregation denominator is the token count before masking.

Metrics of a loss (each ``(...)``): ``loss/pg``, ``loss/total``, ``reward/mean``, ``adv/mean``, ``adv/std``,
``adv/zero_var_groups``, ``is/ess_ratio``, ``is/ess``, ``is/chi2``, ``is/chi2_seq``, ``is/kl_k3``,
``is/log_ratio_mean``; when meaningful ``clip/frac``, ``clip/frac_lower``, ``mask/frac``, ``is/coef_mean``,
``is/trunc_frac``, ``ppo/kl``, ``is/kl_k3_prox``, ``staleness/mean|max``, ``adv/baseline_mean``,
``m2/value``, ``m2/value_kept``, ``m2/tau``, ``clip/lower_bound``, ``clip/upper_bound``, ``bapo/c_low``,
``bapo/c_high``, ``bapo/pos_neg_ratio``, ``topr/*``, ``dppo/*``, ``opsm/drop_frac``, ``tba/logZ``,
``tba/beta``, ``loss/penalty``, ``kl/ref_k3``.

Stabilizers (around any torch optimizer; ``docs/methods/stabilizers.md#protocol``)
----------------------------------------------------------------------------------
::

    opt = StabilizedOptimizer(torch.optim.Adam(params, lr), params,
                              build_stabilizers([GACConfig(), VCPOLRConfig()]),
                              replica_dims=0, max_grad_norm=1.0)
    out.loss.sum().backward()
    metrics = opt.step(StepContext(ess_ratio=out.metrics["is/ess_ratio"], staleness=lag))
    opt.zero_grad()

:class:`StabilizedOptimizer` knows no stabilizer by name: each declares its ``stage`` (gradient before
the optimizer, optimizer update after it, learning-rate multiplier), whether it acts ``before_clip`` and
whether it ``can_skip`` a replica's step (``docs/methods/stabilizers.md#protocol``). With
``replica_dims = 1`` dim 0 of every parameter indexes independent learners and every cosine, norm, skip
and scale is per replica.

Adding an objective, a correction or a stabilizer is adding one module to its package
(``CONTRIBUTING.md``); the unions (:data:`ObjectiveConfig`, :data:`CorrectionConfig`,
:data:`StabilizerConfig`), the registries (:data:`OBJECTIVES`, :data:`CORRECTIONS`, :data:`STABILIZERS`)
and ``__all__`` follow.
"""

from __future__ import annotations

from sandbox.algorithms import stabilizers as _stabilizers
from sandbox.algorithms.api import LossOutput, PolicyLossInput, masked_mean
from sandbox.algorithms.corrections import CORRECTIONS, Correction, CorrectionConfig
from sandbox.algorithms.diagnostics import ess_ratio, ess_ratio_from_log_weights, is_metrics
from sandbox.algorithms.objectives import OBJECTIVES, Objective, ObjectiveConfig
from sandbox.algorithms.opob import logit_space_grad_sq_norm, per_sequence_grad_sq_norms
from sandbox.algorithms.policy_loss import PolicyLoss, build_policy_loss
from sandbox.algorithms.shaping import dynamic_sampling_keep, overlong_penalty
from sandbox.algorithms.stabilized import StabilizedOptimizer, build_stabilizers
from sandbox.algorithms.stabilizers import STABILIZERS, Stabilizer, StabilizerConfig, StepContext

__all__ = [
    "PolicyLossInput",
    "LossOutput",
    "masked_mean",
    "PolicyLoss",
    "build_policy_loss",
    "StabilizedOptimizer",
    "build_stabilizers",
    "ess_ratio",
    "ess_ratio_from_log_weights",
    "is_metrics",
    "per_sequence_grad_sq_norms",
    "logit_space_grad_sq_norm",
    "overlong_penalty",
    "dynamic_sampling_keep",
    # the families: registry, union of configs, base class
    "OBJECTIVES",
    "ObjectiveConfig",
    "Objective",
    "CORRECTIONS",
    "CorrectionConfig",
    "Correction",
    "STABILIZERS",
    "StabilizerConfig",
    "Stabilizer",
    "StepContext",
]
# Every registered config class (GRPOConfig, TISConfig, GACConfig, ...) and every stabilizer's public
# names (GAC, VCPOLR, vcpo_lr_multiplier, ...), derived from the registries.
__all__ += OBJECTIVES.export_configs(globals())
__all__ += CORRECTIONS.export_configs(globals())
for _name in _stabilizers.__all__:
    if _name not in __all__:
        globals()[_name] = getattr(_stabilizers, _name)
        __all__.append(_name)
del _name

from sandbox.base.lazy_api import api_getattr  # noqa: E402  (after the registration above)

__getattr__ = api_getattr(__name__)
