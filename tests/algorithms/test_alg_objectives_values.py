"""Hand-computed values for Dr.GRPO, RLOO, PPO dual clip, DAPO, GSPO, CISPO and TBA."""

import math

import pytest
import torch

from sandbox.algorithms import (
    CISPOConfig,
    DAPOConfig,
    DrGRPOConfig,
    GSPOConfig,
    PolicyLossInput,
    PPOConfig,
    RLOOConfig,
    TBAConfig,
    build_policy_loss,
)


def batch(ratios, rewards, group_size, mask=None, logp=None):
    r = torch.tensor(ratios)
    lp = torch.zeros_like(r) if logp is None else torch.tensor(logp)
    lp.requires_grad_(True)
    m = torch.ones_like(r) if mask is None else torch.tensor(mask)
    return PolicyLossInput(
        logp=lp, behaviour_logp=lp.detach() - torch.log(r), mask=m, rewards=torch.tensor(rewards), group_size=group_size
    )


RATIOS = [[1.5, 0.9], [1.1, 0.5]]


@pytest.mark.component("objective", "dr_grpo")
def test_dr_grpo_by_hand():
    # A = R - mean = [.5, -.5]; per-token -min(rA, clip(r)A): [-.6, -.45, .55, .4], sum -.1
    out = build_policy_loss(DrGRPOConfig())(batch(RATIOS, [1.0, 0.0], 2))
    assert out.loss.item() == pytest.approx(-0.1 / (2 * 2), abs=1e-6)  # B * L_const(=T)
    out = build_policy_loss(DrGRPOConfig(max_len=4))(batch(RATIOS, [1.0, 0.0], 2))
    assert out.loss.item() == pytest.approx(-0.1 / (2 * 4), abs=1e-6)


@pytest.mark.component("objective", "rloo")
def test_rloo_by_hand():
    # A = R_i - R_j = [1, -1]; tokens: -1.2, -.9, 1.1, .8 -> token mean -.05
    out = build_policy_loss(RLOOConfig())(batch(RATIOS, [1.0, 0.0], 2))
    assert out.loss.item() == pytest.approx(-0.05, abs=1e-6)


@pytest.mark.component("objective", "ppo")
def test_ppo_dual_clip_by_hand():
    # A = R = -1. token0 r=5: clip loss max(5, 1.2) = 5, dual clip min(5, 3) = 3.
    # token1 r=.5: -min(-.5, -.8) = .8 (clipped branch). token mean 1.9
    inp = batch([[5.0, 0.5]], [-1.0], 1)
    out = build_policy_loss(PPOConfig(advantage="reward"))(inp)
    assert out.loss.item() == pytest.approx(1.9, abs=1e-6)
    assert out.metrics["clip/frac"].item() == pytest.approx(0.5)
    assert out.metrics["clip/frac_lower"].item() == pytest.approx(0.5)
    out.loss.backward()
    assert torch.all(inp.logp.grad == 0)


@pytest.mark.component("objective", "dapo")
def test_dapo_clip_higher_token_mean_by_hand():
    # A = 1 for both; seq0 r = [1.25, .75] -> -1.25 (below 1.28: not clipped), -.75;
    # seq1 has one valid token, r = 2 -> clipped at 1.28. Token mean over 3 valid tokens.
    inp = batch([[1.25, 0.75], [2.0, 1.0]], [1.0, 1.0], 1, mask=[[1.0, 1.0], [1.0, 0.0]])
    out = build_policy_loss(DAPOConfig(advantage="reward"))(inp)
    assert out.loss.item() == pytest.approx(-(1.25 + 0.75 + 1.28) / 3, abs=1e-6)


@pytest.mark.component("objective", "gspo")
def test_gspo_by_hand():
    # log r = [.002, 0] -> s = exp(.001) = 1.0010005 > 1 + 4e-4
    inp = batch([[math.exp(0.002), 1.0]], [1.0], 1)
    out = build_policy_loss(GSPOConfig(advantage="reward"))(inp)
    assert out.loss.item() == pytest.approx(-1.0004, abs=1e-6)  # clipped: no gradient
    out.loss.backward()
    assert torch.all(inp.logp.grad == 0)
    inp = batch([[math.exp(0.002), 1.0]], [-1.0], 1)
    out = build_policy_loss(GSPOConfig(advantage="reward"))(inp)
    s = math.exp(0.001)
    assert out.loss.item() == pytest.approx(s, abs=1e-6)
    out.loss.backward()
    # sequence GSPO: d(s·1)/d log π_t = s/|y| for every token
    assert torch.allclose(inp.logp.grad, torch.full((1, 2), s / 2), atol=1e-6)


@pytest.mark.component("objective", "gspo")
def test_gspo_refuses_a_dual_clip():
    """GSPO has no dual clip: a value is an error naming the field, not a silently ignored knob."""
    with pytest.raises(ValueError, match="dual_clip_c=3.0: GSPO .* defines no dual clip"):
        GSPOConfig(dual_clip_c=3.0)
    assert GSPOConfig().dual_clip_c is None


@pytest.mark.component("objective", "cispo")
def test_cispo_by_hand():
    # weights clip(r, 0, 5) = [3, 5, .5]; loss = -mean_t w A log π -> grad -w/3
    inp = batch([[3.0, 8.0, 0.5]], [1.0], 1, logp=[[-0.1, -0.2, -0.3]])
    out = build_policy_loss(CISPOConfig(advantage="reward"))(inp)
    assert out.loss.item() == pytest.approx(-(3 * -0.1 + 5 * -0.2 + 0.5 * -0.3) / 3, abs=1e-6)
    out.loss.backward()
    assert torch.allclose(inp.logp.grad, torch.tensor([[-1.0, -5 / 3, -0.5 / 3]]), atol=1e-6)


@pytest.mark.component("objective", "tba")
def test_tba_by_hand():
    # β = .5: R/β = [2, 0]; log π(y) = [-1, -2] -> z = [3, 2]; log Z = 2.5; loss = mean(.25, .25)
    inp = batch([[1.0, 1.0], [1.0, 1.0]], [1.0, 0.0], 2, logp=[[-0.5, -0.5], [-1.0, -1.0]])
    out = build_policy_loss(TBAConfig(beta=0.5, beta_final=0.5))(inp)
    assert out.loss.item() == pytest.approx(0.25, abs=1e-6)
    assert out.metrics["tba/logZ"].item() == pytest.approx(2.5, abs=1e-6)
    out.loss.backward()
    # d/dlogπ_0 of ½[(logZ − z0)² + ...] with dz0/dlogπ_0 = −1: (logZ − z0) = −.5
    assert torch.allclose(inp.logp.grad, torch.tensor([[-0.5, -0.5], [0.5, 0.5]]), atol=1e-6)
    # reference log-probs enter z with a + sign: ref = [-1, 0] -> z = [2, 2] -> loss 0
    inp.extras["ref_logp"] = torch.tensor([[-1.0, 0.0], [0.0, 0.0]])
    assert build_policy_loss(TBAConfig(beta=0.5, beta_final=0.5))(inp).loss.item() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.component("objective", "tba")
def test_tba_beta_annealing():
    from sandbox.algorithms.objectives.tba import tba_beta

    assert tba_beta(0.012, 0.004, 500, 0) == pytest.approx(0.012)
    assert tba_beta(0.012, 0.004, 500, 250) == pytest.approx(0.008)
    assert tba_beta(0.012, 0.004, 500, 10_000) == pytest.approx(0.004)


def test_dapo_overlong_penalty_and_dynamic_sampling():
    from sandbox.algorithms.shaping import dynamic_sampling_keep, overlong_penalty

    # L_max = 10, L_cache = 4: soft limit 6; |y| = 8 -> (6 - 8)/4 = -.5; 11 -> -1
    pen = overlong_penalty(torch.tensor([5, 6, 8, 10, 11]), max_len=10, cache_len=4)
    assert pen.tolist() == pytest.approx([0.0, 0.0, -0.5, -1.0, -1.0])
    keep = dynamic_sampling_keep(torch.tensor([[1.0, 1.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0]]), 2)
    assert keep.tolist() == [[False, True], [True, False]]
