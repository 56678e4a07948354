"""The sandbox's corrections as verl 0.9.1 policy losses (``sandbox.integrations.verl``), checked against
verl's real ``core_algos`` imported from the pinned wheel (unpacked without dependencies by
``sandbox.export.validate.wheels``). Importing ``verl.trainer.ppo.core_algos`` needs, besides torch, numpy,
omegaconf, hydra and ray: tensordict (0.8–0.10, with pyvers < 0.2 and orjson) and codetiming. Without the
wheel or those packages the tests skip, and fail under CI.
"""

from __future__ import annotations

import functools
import os

import pytest
import torch

from sandbox.algorithms.api import PolicyLossInput
from sandbox.algorithms.corrections import (
    CORRECTIONS,
    TISConfig,
    TOPRConfig,
    m2po_keep_mask,
)
from sandbox.algorithms.objectives import PPOConfig
from sandbox.algorithms.policy_loss import build_policy_loss
from sandbox.integrations.verl import (
    SANDBOX_PREFIX,
    VERL_AGGREGATION,
    register_sandbox_losses,
)


@functools.lru_cache(maxsize=1)
def _load_verl():
    """``(modules, None)`` or ``(None, why)``; cached, so a missing package costs one import attempt."""
    from sandbox.export.validate.wheels import WheelUnavailable, import_from_wheel

    try:
        core_algos, rollout_corr_helper, workers_config = import_from_wheel(
            "verl", "verl.trainer.ppo.core_algos", "verl.trainer.ppo.rollout_corr_helper", "verl.workers.config"
        )
    except WheelUnavailable as exc:
        return None, str(exc)
    register_sandbox_losses()
    return (core_algos, rollout_corr_helper, workers_config.ActorConfig), None


@pytest.fixture(scope="module")
def verl():
    """``(core_algos, rollout_corr_helper, ActorConfig)`` of the pinned verl wheel, with every sandbox
    correction registered under its default name."""
    modules, why = _load_verl()
    if modules is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must be able to import verl's core_algos: {why}")
        pytest.skip(f"verl core_algos unavailable here: {why}")
    return modules


def actor_config(ActorConfig, **kw):
    return ActorConfig(strategy="fsdp", rollout_n=4, ppo_micro_batch_size_per_gpu=2, **kw)


def batch(seed: int, drift: float = 0.0, B: int = 8, T: int = 7):
    """Hand-made micro-batch: ragged mask (one response has no valid token), log-probs, per-response
    advantages broadcast on valid tokens as verl's outcome estimators write them, and ``log_prob`` =
    ``old_log_prob`` + ``drift``·noise (0: on-policy)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([7, 3, 5, 1, 7, 0, 4, 6])[:B]
    mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
    old = -torch.rand(B, T, generator=g) * 2.0
    adv = torch.randn(B, 1, generator=g).expand(B, T) * mask
    new = old + drift * torch.randn(B, T, generator=g)
    return old, new, adv, mask


def call(core_algos, name, old, new, adv, mask, cfg, mode="token-mean", weights=None):
    """``(loss, d loss / d log_prob, metrics)`` of the registered loss ``name``."""
    logp = new.clone().requires_grad_(True)
    loss, metrics = core_algos.get_policy_loss_fn(name)(
        old_log_prob=old,
        log_prob=logp,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode=mode,
        config=cfg,
        rollout_is_weights=weights,
    )
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.detach(), grad, metrics


GLOBAL_INFO = {"dp_size": 2, "batch_num_tokens": 80, "global_batch_size": 24, "loss_scale_factor": 16}


@pytest.mark.parametrize("mode", list(VERL_AGGREGATION))
@pytest.mark.parametrize("global_info", [False, True], ids=["local", "global"])
@pytest.mark.parametrize("correction", CORRECTIONS.names())
def test_on_policy_equals_verl_vanilla(verl, correction, mode, global_info):
    """On-policy (log_prob == old_log_prob) every correction is the identity, so each sandbox loss and its
    gradient equal verl's ``vanilla`` with the same actor config, for every ``loss_agg_mode`` with and
    without global batch sizes. Not bitwise: verl divides by the global count once, the sandbox divides
    by the micro-batch count and rescales (and verl adds 1e-8 to sequence lengths); tolerance 1e-6."""
    core_algos, _, ActorConfig = verl
    cfg = actor_config(ActorConfig, clip_ratio_low=0.2, clip_ratio_high=0.28, loss_agg_mode=mode)
    if global_info:
        cfg.global_batch_info.update(GLOBAL_INFO)
    old, _, adv, mask = batch(0)
    ref_loss, ref_grad, _ = call(core_algos, "vanilla", old, old, adv, mask, cfg, mode)
    loss, grad, metrics = call(core_algos, SANDBOX_PREFIX + correction, old, old, adv, mask, cfg, mode)
    assert torch.allclose(loss, ref_loss, rtol=1e-6, atol=1e-7), (loss, ref_loss)
    assert torch.allclose(grad, ref_grad, rtol=1e-6, atol=1e-7)
    assert grad.abs().sum() > 0
    assert all(type(v) is float for v in metrics.values()) and metrics["is/ess_ratio"] == pytest.approx(1.0)


@pytest.mark.parametrize("mode", list(VERL_AGGREGATION))
def test_uncorrected_ppo_equals_vanilla_off_policy(verl, mode):
    """With μ := old_log_prob (bypass) and correction ``none``, the sandbox's ``ppo`` with verl's clip keys
    is verl's dual-clip ``vanilla`` off-policy too (clipped tokens, dual clip and all)."""
    core_algos, _, ActorConfig = verl
    cfg = actor_config(ActorConfig, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=2.0, loss_agg_mode=mode)
    cfg.global_batch_info.update(GLOBAL_INFO)
    old, new, adv, mask = batch(1, drift=0.5)
    ref_loss, ref_grad, ref_metrics = call(core_algos, "vanilla", old, new, adv, mask, cfg, mode)
    loss, grad, metrics = call(core_algos, "sandbox_none", old, new, adv, mask, cfg, mode)
    assert 0 < ref_metrics["actor/pg_clipfrac"] < 1 and ref_metrics["actor/pg_clipfrac_lower"] > 0
    assert metrics["clip/frac"] == pytest.approx(ref_metrics["actor/pg_clipfrac"], abs=1e-7)
    assert torch.allclose(loss, ref_loss, rtol=1e-6, atol=1e-7)
    assert torch.allclose(grad, ref_grad, rtol=1e-6, atol=1e-7)


def test_m2po_mask_keeps_the_second_moment_below_the_threshold(verl):
    """``sandbox_m2po_mask`` masks exactly the tokens ``m2po_keep_mask`` drops (δ = log π_θ − log π_old in
    bypass mode): the kept tokens' mean δ² is below τ = 0.04, and the loss equals verl's ``vanilla`` with
    the response mask cut to the kept tokens and the token count of the full mask (dropped tokens stay in
    the denominator, as in AReaL and the sandbox)."""
    core_algos, _, ActorConfig = verl
    cfg = actor_config(ActorConfig, clip_ratio_low=0.99, clip_ratio_high=10.0)
    old, new, adv, mask = batch(2, drift=0.3)
    fmask = mask.float()
    delta = (new - old) * fmask
    keep = m2po_keep_mask(delta, fmask, 0.04).bool()
    assert 0 < int((mask & ~keep).sum()) < int(mask.sum()) // 2
    assert float((delta[keep] ** 2).mean()) < 0.04 < float((delta[mask] ** 2).mean())

    loss, grad, metrics = call(core_algos, "sandbox_m2po_mask", old, new, adv, mask, cfg)
    assert metrics["m2/value_kept"] == pytest.approx(float((delta[keep] ** 2).mean()), rel=1e-6)
    assert metrics["mask/frac"] == pytest.approx(float((mask & ~keep).sum() / mask.sum()), rel=1e-6)
    assert torch.all(grad[mask & ~keep] == 0) and torch.all(grad[keep & (adv != 0)] != 0)
    cfg.global_batch_info["batch_num_tokens"] = int(mask.sum())
    ref_loss, ref_grad, _ = call(core_algos, "vanilla", old, new, adv, keep, cfg)
    assert torch.allclose(loss, ref_loss, rtol=1e-6, atol=1e-7)
    assert torch.allclose(grad, ref_grad, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("correction", CORRECTIONS.names())
def test_gradient_is_the_sandbox_policy_loss_gradient(verl, correction):
    """Off-policy, with verl's default (micro-batch) token-mean, each verl loss runs the very computation of
    the sandbox's own ``PolicyLoss`` (ppo with verl's clip keys, μ = old_log_prob, the per-response
    advantages): loss and gradient are bitwise equal (no rescaling is applied when verl gives no global sizes)."""
    core_algos, _, ActorConfig = verl
    cfg = actor_config(ActorConfig, clip_ratio_low=0.2, clip_ratio_high=0.28)
    old, new, adv, mask = batch(3, drift=0.4)
    loss, grad, _ = call(core_algos, SANDBOX_PREFIX + correction, old, new, adv, mask, cfg)

    corr_cfg = TOPRConfig(split_on="advantage") if correction == "topr" else CORRECTIONS[correction].config()
    direct = build_policy_loss(PPOConfig(eps_low=0.2, eps_high=0.28, dual_clip_c=3.0), corr_cfg)
    logp = new.clone().requires_grad_(True)
    out = direct(
        PolicyLossInput(
            logp=logp, behaviour_logp=old, mask=mask.float(), rewards=torch.zeros(8), group_size=1, advantages=adv[:, 0]
        )
    )
    (ref_grad,) = torch.autograd.grad(out.loss, logp)
    assert torch.equal(loss, out.loss.detach())
    assert torch.equal(grad, ref_grad)


def test_decoupled_mode_recovers_mu_from_verl_rollout_is_weights(verl):
    """``behaviour='rollout_is_weights'``: μ is recovered from verl's own token weights
    (``compute_rollout_correction_weights``, rollout_is='token', threshold 1e9); the sandbox's token TIS with
    an unreachable cap is then verl's ``vanilla`` with those weights (ratio π_θ/π_old times w = π_old/μ)."""
    core_algos, helper, ActorConfig = verl
    (loss_name,) = register_sandbox_losses(
        [TISConfig(C=1e9)], behaviour="rollout_is_weights", name="sandbox_test_dec_tis"
    )
    cfg = actor_config(ActorConfig)
    old, new, adv, mask = batch(4, drift=0.1)
    mu = old + 0.3 * torch.randn(old.shape, generator=torch.Generator().manual_seed(5))
    weights, _ = helper.compute_rollout_correction_weights(
        log_ratio=old - mu, response_mask=mask.float(), rollout_is="token", rollout_is_threshold=1e9
    )
    ref_loss, ref_grad, _ = call(core_algos, "vanilla", old, new, adv, mask, cfg, weights=weights)
    loss, grad, metrics = call(core_algos, loss_name, old, new, adv, mask, cfg, weights=weights)
    assert torch.allclose(loss, ref_loss, rtol=1e-5, atol=1e-7)
    assert torch.allclose(grad, ref_grad, rtol=1e-5, atol=1e-7)
    assert metrics["is/log_ratio_mean"] == pytest.approx(float(((new - mu) * mask).sum() / mask.sum()), rel=1e-5)
    with pytest.raises(ValueError, match="rollout_is_weights=None"):
        call(core_algos, loss_name, old, new, adv, mask, cfg, weights=None)
    with pytest.raises(ValueError, match="cannot be recovered"):
        call(core_algos, loss_name, old, new, adv, mask, cfg, weights=weights * (old > -1.0))


def test_bad_requests_are_clear_errors(verl):
    core_algos, _, ActorConfig = verl
    with pytest.raises(ValueError, match=r"unknown correction 'm2po'; expected one of \[.*'m2po_mask'"):
        register_sandbox_losses(["m2po"])
    with pytest.raises(ValueError, match="split_on='reward' needs rewards"):
        register_sandbox_losses([TOPRConfig()])
    with pytest.raises(ValueError, match="one of verl's own policy losses"):
        register_sandbox_losses(["tis"], name="vanilla")
    with pytest.raises(ValueError, match="needs exactly one correction"):
        register_sandbox_losses(["tis", "mis"], name="sandbox_both")
    with pytest.raises(ValueError, match="opob/optimal baseline"):
        register_sandbox_losses(["tis"], objective=PPOConfig(advantage="opob"))
    old, new, _, mask = batch(6)
    gae_like = torch.cumsum(torch.ones_like(old), -1) * mask
    with pytest.raises(ValueError, match="advantages vary along response 0"):
        call(core_algos, "sandbox_tis", old, new, gae_like, mask, actor_config(ActorConfig))


# --------------------------------------------------------------------------------------------
# as verl's external_lib (issue 25, item 10)
# --------------------------------------------------------------------------------------------

_EXTERNAL_LIB_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from verl.trainer.ppo import core_algos
from verl.utils.import_utils import import_external_libs
assert not [k for k in core_algos.POLICY_LOSS_REGISTRY if k.startswith("sandbox_")], "registered before the import"
import_external_libs("sandbox.integrations.verl")   # what HFModelConfig.__post_init__ does with model.external_lib
from sandbox.algorithms.corrections import CORRECTIONS
from sandbox.integrations.verl import SandboxVerlLoss
missing = [n for n in CORRECTIONS.names() if not isinstance(core_algos.POLICY_LOSS_REGISTRY.get("sandbox_" + n), SandboxVerlLoss)]
assert not missing, missing
assert isinstance(core_algos.get_policy_loss_fn("sandbox_m2po_mask"), SandboxVerlLoss)
print("REGISTERED", len(CORRECTIONS.names()))
"""


def test_importing_the_module_registers_every_loss_in_verls_registry(verl):
    """In a fresh process (this one already registered the losses), verl's own ``import_external_libs``, the
    loader of ``actor_rollout_ref.model.external_lib``, imports the module and so registers every correction."""
    import subprocess
    import sys
    from pathlib import Path

    from sandbox.export.validate.wheels import unpacked_wheel

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", _EXTERNAL_LIB_CHILD, str(unpacked_wheel("verl"))],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert proc.returncode == 0 and "REGISTERED" in proc.stdout, proc.stderr[-3000:]


def test_external_lib_is_a_key_of_verls_config(verl):
    """``actor_rollout_ref.model.external_lib`` is the key verl 0.9.1's ``ppo_trainer`` composes (an unknown key
    would raise ``ConfigCompositionException``)."""
    from omegaconf import OmegaConf

    from sandbox.export.validate.wheels import unpacked_wheel
    from sandbox.frameworks.verl.validation import CONFIG_DIR, compose

    cfg = compose(
        unpacked_wheel("verl") / CONFIG_DIR,
        "ppo_trainer",
        ["actor_rollout_ref.model.external_lib=sandbox.integrations.verl"],
    )
    assert OmegaConf.select(cfg, "actor_rollout_ref.model.external_lib") == "sandbox.integrations.verl"


def test_import_without_verl_registers_nothing_and_does_not_fail():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = (
        "import sys; sys.modules['verl'] = None\n"  # verl unimportable, whatever is installed
        "import sandbox.integrations.verl as m\n"
        "try:\n    m.register_sandbox_losses()\nexcept ImportError as e:\n    print('REFUSED', e)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert proc.returncode == 0 and "REFUSED" in proc.stdout, proc.stderr[-3000:]
