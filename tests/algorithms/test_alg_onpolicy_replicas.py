"""On-policy reduction of every correction, and replica semantics of every loss."""

import pytest
import torch

from sandbox.algorithms import CORRECTIONS as CORRECTION_REGISTRY
from sandbox.algorithms import OBJECTIVES as OBJECTIVE_REGISTRY
from sandbox.algorithms import (
    BAPOConfig,
    CISPOConfig,
    DAPOConfig,
    DecoupledPPOConfig,
    DPPOMaskConfig,
    DrGRPOConfig,
    GeoMISConfig,
    GRPOConfig,
    GSPOConfig,
    M2POClipBandConfig,
    M2POMaskConfig,
    MISConfig,
    NoCorrectionConfig,
    OPSMConfig,
    PolicyLossInput,
    PPOConfig,
    ReinforceConfig,
    RLOOConfig,
    TBAConfig,
    TISConfig,
    TOPRConfig,
    build_policy_loss,
)

# every registered method at its defaults, plus variants exercising other code paths
CORRECTIONS = [cfg() for cfg in CORRECTION_REGISTRY.configs()] + [
    TISConfig(level="sequence"),
    MISConfig(level="sequence"),
    GeoMISConfig(token_weight="tis"),
    M2POMaskConfig(anchor="current"),
    TOPRConfig(level="token"),
    DPPOMaskConfig(variant="ipo"),
]
OBJECTIVES = [cfg() for cfg in OBJECTIVE_REGISTRY.configs()] + [ReinforceConfig(baseline="group_mean")]


def make(R=None, N=8, T=5, G=4, seed=0, drift=0.3):
    g = torch.Generator().manual_seed(seed)
    lead = () if R is None else (R,)
    logp = torch.log_softmax(torch.randn(*lead, N, T, 6, generator=g), -1)[..., 0]
    mu = logp + drift * torch.randn(*lead, N, T, generator=g)
    mask = (torch.arange(T) < torch.randint(2, T + 1, (N, 1), generator=g)).float()
    rewards = torch.randint(0, 3, (*lead, N), generator=g).float()
    return logp, mu, mask, rewards, G


def loss_and_grad(obj, corr, logp, mu, mask, rewards, G, prox=None, fn=None):
    lp = logp.clone().requires_grad_(True)
    fn = fn or build_policy_loss(obj, corr)
    out = fn(PolicyLossInput(lp, mu, mask, rewards, G, prox_logp=prox))
    out.loss.sum().backward()
    return out, lp.grad


@pytest.mark.parametrize("corr", CORRECTIONS, ids=lambda c: c.name + "_" + str(getattr(c, "level", "")))
@pytest.mark.parametrize("decoupled", [False, True])
def test_on_policy_every_correction_reduces_to_none(corr, decoupled):
    logp, _, mask, rewards, G = make()
    for obj in OBJECTIVES:
        try:
            fn = build_policy_loss(obj, corr)
        except ValueError:
            continue  # incompatible pair (bounds corrections need a clip objective)
        prox = logp.clone() if decoupled else None
        ref, g_ref = loss_and_grad(obj, NoCorrectionConfig(), logp, logp, mask, rewards, G, prox)
        out, g = loss_and_grad(obj, corr, logp, logp, mask, rewards, G, prox, fn=fn)
        assert torch.allclose(out.loss, ref.loss, atol=1e-6), (obj.name, corr.name)
        assert torch.allclose(g, g_ref, atol=1e-6), (obj.name, corr.name)


PAIRS = [
    (ReinforceConfig(baseline="ema"), NoCorrectionConfig()),
    (ReinforceConfig(baseline="leave_one_out"), TOPRConfig()),
    (GRPOConfig(), TISConfig(level="sequence")),
    (GRPOConfig(), M2POMaskConfig()),
    (PPOConfig(), BAPOConfig()),
    (DAPOConfig(), M2POClipBandConfig()),
    (GSPOConfig(), GeoMISConfig(lo=0.8, hi=1.2)),
    (CISPOConfig(), MISConfig(level="sequence", C=3.0)),
    (DrGRPOConfig(), OPSMConfig()),
    (RLOOConfig(), DPPOMaskConfig()),
    (PPOConfig(), DecoupledPPOConfig()),
    (TBAConfig(), NoCorrectionConfig()),
]


@pytest.mark.parametrize("obj,corr", PAIRS, ids=lambda c: c.name)
def test_batched_replicas_match_separate_runs(obj, corr):
    R = 3
    logp, mu, mask, rewards, G = make(R=R, drift=0.4)
    prox = mu + 0.1 if isinstance(corr, DecoupledPPOConfig) else None
    batched_fn = build_policy_loss(obj, corr)
    single_fns = [build_policy_loss(obj, corr) for _ in range(R)]
    for _ in range(2):  # two calls so that stateful baselines (EMA) are exercised
        out, g = loss_and_grad(obj, corr, logp, mu, mask, rewards, G, prox, fn=batched_fn)
        assert out.loss.shape == (R,)
        for r in range(R):
            o_r, g_r = loss_and_grad(
                obj, corr, logp[r], mu[r], mask, rewards[r], G, None if prox is None else prox[r], fn=single_fns[r]
            )
            assert torch.allclose(out.loss[r], o_r.loss, atol=1e-5)
            assert torch.allclose(g[r], g_r, atol=1e-6)
            for k, v in out.metrics.items():
                if v.dim() > 0:
                    assert torch.allclose(v[r], o_r.metrics[k], atol=1e-5, equal_nan=True), k
