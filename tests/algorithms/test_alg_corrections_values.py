"""Hand-computed coefficients and masks of every correction, read back through the gradient.

Probe: decoupled mode with π_prox = π_θ (so the surrogate ratio is 1), REINFORCE with token-mean
aggregation and advantage A = R. Then d loss / d log π_t = −mult_t · A_t / n_valid, where mult_t is
the correction's factor for token t."""

import math

import pytest
import torch

from sandbox.algorithms import (
    BAPOConfig,
    CISPOConfig,
    DecoupledPPOConfig,
    DPPOMaskConfig,
    GeoMISConfig,
    GRPOConfig,
    IcePopConfig,
    M2POClipBandConfig,
    M2POMaskConfig,
    MISConfig,
    NoCorrectionConfig,
    OPSMConfig,
    PolicyLossInput,
    PPOConfig,
    ReinforceConfig,
    TBAConfig,
    TISConfig,
    TOPRConfig,
    build_policy_loss,
)
from sandbox.algorithms.corrections import m2po_clipband_tau, m2po_keep_mask


def multiplier(correction, w, rewards):
    w = torch.tensor(w)
    n, t = w.shape
    logp = torch.full((n, t), -0.5, requires_grad=True)
    inp = PolicyLossInput(
        logp=logp,
        behaviour_logp=logp.detach() - torch.log(w),
        mask=torch.ones(n, t),
        rewards=torch.tensor(rewards),
        group_size=1,
        prox_logp=logp.detach().clone(),
    )
    out = build_policy_loss(ReinforceConfig(aggregation="token_mean"), correction)(inp)
    out.loss.backward()
    adv = torch.tensor(rewards).unsqueeze(-1)
    return (-logp.grad * n * t / adv), out


def close(a, b):
    return torch.allclose(a, torch.tensor(b), atol=1e-5)


@pytest.mark.component("correction", "mis")
def test_token_mis():
    m, out = multiplier(MISConfig(C=2.0, C_low=0.5), [[3.0, 1.5, 0.4, 1.0]], [1.0])
    assert close(m, [[0.0, 1.5, 0.0, 1.0]])
    assert out.metrics["mask/frac"].item() == pytest.approx(0.5)


@pytest.mark.component("correction", "mis")
def test_sequence_mis():
    w = [[1.5, 1.2], [2.0, 1.5]]  # W = 1.8 (kept), 3 (dropped)
    m, _ = multiplier(MISConfig(level="sequence", C=2.0), w, [1.0, 1.0])
    assert close(m, [[1.8, 1.8], [0.0, 0.0]])
    m, _ = multiplier(MISConfig(level="sequence", C=2.0, seq_weight="one"), w, [1.0, 1.0])
    assert close(m, [[1.0, 1.0], [0.0, 0.0]])
    m, _ = multiplier(MISConfig(level="sequence", C=2.0, veto_low=0.7), [[1.5, 0.6], [1.0, 1.0]], [1.0, 1.0])
    assert close(m, [[0.0, 0.0], [1.0, 1.0]])  # W = .9 is in band but token .6 < veto


@pytest.mark.component("correction", "geo_mis")
def test_geo_mis():
    w = [[1.2, 0.8], [1.5, 1.0]]  # geometric means sqrt(.96) = .980 (kept), sqrt(1.5) = 1.22 (dropped)
    m, _ = multiplier(GeoMISConfig(lo=0.9, hi=1.1), w, [1.0, 1.0])
    assert close(m, [[1.0, 1.0], [0.0, 0.0]])
    m, _ = multiplier(GeoMISConfig(lo=0.9, hi=1.1, token_weight="tis", C=1.1), w, [1.0, 1.0])
    assert close(m, [[1.1, 0.8], [0.0, 0.0]])


@pytest.mark.component("correction", "icepop")
def test_icepop():
    m, _ = multiplier(IcePopConfig(), [[0.4, 0.6, 4.0, 6.0]], [1.0])  # band [.5, 5], weight w
    assert close(m, [[0.0, 0.6, 4.0, 0.0]])


@pytest.mark.component("correction", "opsm")
def test_opsm():
    # drift = mean(log μ − log π) = −mean log w; drop iff A < 0 and drift > 1e-4
    w = [[0.5, 0.5], [0.5, 0.5], [1.5, 1.0]]
    m, _ = multiplier(OPSMConfig(), w, [-1.0, 1.0, -1.0])
    assert close(m, [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]])


@pytest.mark.component("correction", "decoupled_ppo")
def test_decoupled_ppo_rejection():
    m, _ = multiplier(DecoupledPPOConfig(), [[6.0, 2.0]], [1.0])  # w > 5 rejected, else weight w
    assert close(m, [[0.0, 2.0]])
    m, _ = multiplier(DecoupledPPOConfig(level="sequence"), [[6.0, 2.0]], [1.0])
    assert close(m, [[0.0, 0.0]])


@pytest.mark.component("correction", "topr")
def test_topr():
    w = [[2.0, 2.0], [0.5, 0.8], [2.0, 1.0]]  # sequence ratios 4, .4, 2
    m, _ = multiplier(TOPRConfig(), w, [1.0, -1.0, -1.0])
    assert close(m, [[1.0, 1.0], [0.4, 0.4], [1.0, 1.0]])  # positives 1, negatives clamp(W, 0, 1)
    m, _ = multiplier(TOPRConfig(level="token"), w, [1.0, -1.0, -1.0])
    assert close(m, [[1.0, 1.0], [0.5, 0.8], [1.0, 1.0]])


@pytest.mark.component("correction", "m2po_mask")
def test_m2po_mask_by_hand():
    # δ = log w = [.5, .1, .1, 0]: δ² = [.25, .01, .01, 0]; all: .0675 ≥ .04; drop the largest: .02/3 < .04
    w = [[math.exp(0.5), math.exp(0.1), math.exp(0.1), 1.0]]
    m, out = multiplier(M2POMaskConfig(), w, [1.0])
    assert close(m, [[0.0, math.exp(0.1), math.exp(0.1), 1.0]])
    assert out.metrics["m2/value"].item() == pytest.approx(0.0675, abs=1e-6)
    assert out.metrics["m2/value_kept"].item() == pytest.approx(0.02 / 3, abs=1e-6)


@pytest.mark.component("correction", "m2po_mask")
def test_m2po_mask_float32_outlier_does_not_cancel():
    """One dominant outlier: δ² = [225, 1e-6, 1.21e-6]. Dropping the outlier leaves mean δ² = 1.105e-6 ≥
    1.083e-6, so the larger small token must go too: keep [0, 1, 0] (float64 and AReaL 1.0.4's reversed
    cumulative sum). ``total − prefix`` in float32 cancels to 0 and kept [0, 1, 1]."""
    for dtype in (torch.float32, torch.float64):
        delta = torch.tensor([[15.0, 0.001, 0.0011]], dtype=dtype)
        keep = m2po_keep_mask(delta, torch.ones(1, 3, dtype=dtype), 1.083e-6)
        assert keep.tolist() == [[0.0, 1.0, 0.0]], dtype
    # the cancellation the reversed sum avoids
    q = torch.tensor([225.0, 1.21e-6, 1e-6], dtype=torch.float32)
    assert float(q.sum() - q[0]) == 0.0 and float(q.flip(0).cumsum(0).flip(0)[1]) == pytest.approx(2.21e-6, rel=1e-6)


def test_m2po_mask_property_random():
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        delta = torch.randn(3, 6, 7, generator=g) * (0.05 + 0.5 * torch.rand(3, 1, 1, generator=g))
        mask = (torch.rand(6, 7, generator=g) > 0.2).float()
        keep = m2po_keep_mask(delta, mask, 0.04)
        fm = mask.expand_as(delta)
        kept = (keep * fm).sum((-2, -1))
        assert torch.all(kept >= 1)
        assert torch.all(keep <= fm)  # never keeps padding
        m2 = ((delta**2) * keep).sum((-2, -1)) / kept
        assert torch.all((m2 < 0.04) | (kept == 1))
        # minimality: un-masking the smallest masked δ² would break the budget
        for r in range(3):
            dropped = (fm[r] > 0) & (keep[r] == 0)
            if dropped.any():
                q_add = (delta[r] ** 2)[dropped].min()
                assert ((delta[r] ** 2 * keep[r]).sum() + q_add) / (kept[r] + 1) >= 0.04 - 1e-7


@pytest.mark.component("correction", "m2po_clipband")
def test_m2po_clipband_tau_by_hand():
    d = torch.tensor([[0.1, -0.2, 0.3, -0.4]])
    h = torch.ones(1, 1, 4, dtype=torch.bool)
    # M2 = .075 > .04; f(τ) = mean(min(δ², τ²)): f(.1) = .01, f(.2) = .0325, f(.3) = .0575 -> τ = .2
    tau, m2 = m2po_clipband_tau(d.unsqueeze(0), h, 0.04)
    assert tau.item() == pytest.approx(0.2) and m2.item() == pytest.approx(0.075)
    tau, _ = m2po_clipband_tau(d.unsqueeze(0), h, 0.1)
    assert math.isinf(tau.item())  # within budget: no constraint


@pytest.mark.component("correction", "m2po_clipband")
def test_m2po_clipband_loss_bounds():
    # bypass, r = π/μ. A = +1 for both tokens, r = [e^.1, e^.3] -> both harmful (A>0, r>1):
    # M2 = (.01 + .09)/2 = .05 > .04; f(.1) = .01; f(.3) = .05 -> τ = .1: upper bound e^.1
    r = torch.tensor([[math.exp(0.1), math.exp(0.3)]])
    logp = torch.zeros(1, 2, requires_grad=True)
    inp = PolicyLossInput(
        logp=logp, behaviour_logp=-torch.log(r), mask=torch.ones(1, 2), rewards=torch.tensor([1.0]), group_size=1
    )
    out = build_policy_loss(PPOConfig(advantage="reward", dual_clip_c=None), M2POClipBandConfig())(inp)
    assert out.metrics["clip/upper_bound"].item() == pytest.approx(math.exp(0.1), rel=1e-5)
    assert out.loss.item() == pytest.approx(-(math.exp(0.1) + math.exp(0.1)) / 2, rel=1e-5)


def bapo_input(r, adv):
    r = torch.tensor(r)
    logp = torch.zeros_like(r, requires_grad=True)
    return PolicyLossInput(
        logp=logp, behaviour_logp=-torch.log(r), mask=torch.ones_like(r), rewards=torch.tensor(adv), group_size=1
    )


@pytest.mark.component("correction", "bapo")
def test_bapo_bounds_by_hand():
    # tokens: (A=+1, r=2), (A=-2, r=.5). 'value' stat: P = min(2, c_high), N = 2·max(.5, c_low) = 2·c_low.
    # start (.5, 1.25): P/N = 1.25/1 ≥ 1?  yes -> would stop. Use start c_low .625: N = 1.25 = P -> stop.
    # With c_low start .75: N = 1.5 > P = 1.25 -> c_low rises to max .875 (N = 1.75), then c_high
    # rises by .25 until P = c_high ≥ 1.75 -> 1.75.
    cfg = BAPOConfig(
        c_low_start=0.75, c_low_max=0.875, step_low=0.125, c_high_start=1.25, c_high_max=3.0, step_high=0.25
    )
    out = build_policy_loss(PPOConfig(advantage="reward"), cfg)(bapo_input([[2.0], [0.5]], [1.0, -2.0]))
    assert out.metrics["bapo/c_low"].item() == pytest.approx(0.875)
    assert out.metrics["bapo/c_high"].item() == pytest.approx(1.75)
    # loss: -(1.75·1) ; negative token: -min(.5·-2, .875·-2) = 1.75, dual clip 3·2 = 6 inactive -> mean 0
    assert out.loss.item() == pytest.approx(0.0, abs=1e-6)
    # 'gradient_carrying': the negative token (r = .5 < c_low) carries no gradient, N = 0 -> no move
    cfg2 = cfg.model_copy(update={"stat": "gradient_carrying"})
    out = build_policy_loss(PPOConfig(advantage="reward"), cfg2)(bapo_input([[2.0], [0.5]], [1.0, -2.0]))
    assert out.metrics["bapo/c_low"].item() == pytest.approx(0.75)
    assert out.metrics["bapo/c_high"].item() == pytest.approx(1.25)


@pytest.mark.component("correction", "dppo_mask")
def test_dppo_mask_by_hand():
    # π = [.9, .5], μ = [.5, .45], A = 1: token0 Δp = .4 > .2 masked; loss_t = -mask·A·ρ + 1e-3 (log ρ)²
    logp = torch.log(torch.tensor([[0.9, 0.5]])).requires_grad_(True)
    mu = torch.log(torch.tensor([[0.5, 0.45]]))
    inp = PolicyLossInput(
        logp=logp, behaviour_logp=mu, mask=torch.ones(1, 2), rewards=torch.tensor([1.0]), group_size=1
    )
    cfg = PPOConfig(advantage="reward", eps_low=1.0, eps_high=1e9, dual_clip_c=None)
    out = build_policy_loss(cfg, DPPOMaskConfig())(inp)
    rho0, rho1 = 1.8, 0.5 / 0.45
    expected = (1e-3 * math.log(rho0) ** 2 + (-rho1 + 1e-3 * math.log(rho1) ** 2)) / 2
    assert out.loss.item() == pytest.approx(expected, abs=1e-6)
    assert out.metrics["dppo/masked_high"].item() == pytest.approx(0.5)


def test_bounds_corrections_need_clip_objectives():
    with pytest.raises(ValueError, match="clip"):
        build_policy_loss(ReinforceConfig(), BAPOConfig())
    build_policy_loss(GRPOConfig(), M2POClipBandConfig())
    # the message lists exactly the registered ratio-clip objectives
    with pytest.raises(ValueError, match="one of dapo, dr_grpo, grpo, ppo, rloo \\(not cispo\\)"):
        build_policy_loss(CISPOConfig(), M2POClipBandConfig())


def test_objective_without_corrections_accepts_only_none():
    with pytest.raises(ValueError, match="tba is valid off-policy without importance weights; use correction 'none'"):
        build_policy_loss(TBAConfig(), TISConfig())
    build_policy_loss(TBAConfig(), NoCorrectionConfig())
