"""Hand-computed values for REINFORCE baselines, GRPO and TIS (expected numbers derived from the
formulas of docs/methods/ in the comments, not from the implementation)."""

import math

import pytest
import torch

from sandbox.algorithms import (
    GRPOConfig,
    NoCorrectionConfig,
    PolicyLossInput,
    ReinforceConfig,
    TISConfig,
    build_policy_loss,
)

A = 0.5 / math.sqrt(0.5)  # GRPO advantage for rewards [1, 0]: (1 - .5) / std_bessel([1,0]) = .5/.70711


def grpo_batch():
    # two responses, two tokens each; learner log-probs 0, ratios r = [[1.5, .9], [1.1, .5]]
    r = torch.tensor([[1.5, 0.9], [1.1, 0.5]])
    logp = torch.zeros(2, 2, requires_grad=True)
    return PolicyLossInput(
        logp=logp, behaviour_logp=-torch.log(r), mask=torch.ones(2, 2), rewards=torch.tensor([1.0, 0.0]), group_size=2
    )


@pytest.mark.component("correction", "none")
@pytest.mark.component("objective", "grpo")
def test_grpo_clip_by_hand():
    inp = grpo_batch()
    out = build_policy_loss(GRPOConfig(), NoCorrectionConfig())(inp)
    # seq0 (A>0): -min(1.5A,1.2A)=-1.2A, -0.9A -> mean -1.05A; seq1 (A=-a): 1.1a, 0.8a -> .95a
    assert out.loss.item() == pytest.approx(-0.05 * A, abs=1e-5)
    assert out.metrics["clip/frac"].item() == pytest.approx(0.5)
    out.loss.backward()
    g = inp.logp.grad
    # unclipped token (0,1): d(-rA)/dlogp / (2 seqs * 2 tokens) = -0.9A/4; clipped (0,0): 0
    assert g[0, 1].item() == pytest.approx(-0.9 * A / 4, abs=1e-5)
    assert g[0, 0].item() == 0.0
    assert g[1, 1].item() == 0.0
    assert g[1, 0].item() == pytest.approx(1.1 * A / 4, abs=1e-5)


@pytest.mark.component("correction", "tis")
def test_seq_tis_bypass_by_hand():
    inp = grpo_batch()
    out = build_policy_loss(GRPOConfig(), TISConfig(level="sequence"))(inp)
    # W0 = 1.5*.9 = 1.35, W1 = 1.1*.5 = .55 (< C=8); each token carries W instead of its ratio:
    # seq0: -1.2A*(1.35/1.5) = -1.08A, -1.35A -> -1.215A; seq1: .55a, .8a*(.55/.5)=.88a -> .715a
    assert out.loss.item() == pytest.approx(-0.25 * A, abs=1e-5)
    out.loss.backward()
    assert inp.logp.grad[0, 1].item() == pytest.approx(-1.35 * A / 4, abs=1e-5)
    assert out.metrics["is/ess_ratio"].item() == pytest.approx((1.9**2) / (2 * (1.35**2 + 0.55**2)), rel=1e-5)


@pytest.mark.component("correction", "tis")
def test_token_tis_bypass_by_hand():
    inp = grpo_batch()
    out = build_policy_loss(GRPOConfig(), TISConfig(level="token", C=1.2))(inp)
    # coef = min(r, 1.2) = [1.2, .9, 1.1, .5]: only token (0,0) changes, -1.2A * 1.2/1.5 = -.96A
    # seq0 -> (-.96A - .9A)/2 = -.93A; seq1 .95a; loss = .02a/2
    assert out.loss.item() == pytest.approx(0.01 * A, abs=1e-5)
    assert out.metrics["is/trunc_frac"].item() == pytest.approx(0.25)


@pytest.mark.component("correction", "tis")
def test_token_tis_decoupled_by_hand():
    # decoupled: prox = learner (r = 1), w = π_prox/μ = [[3, .5]] ; TIS C=2 -> coef [2, .5]
    logp = torch.zeros(1, 2, requires_grad=True)
    inp = PolicyLossInput(
        logp=logp,
        behaviour_logp=-torch.log(torch.tensor([[3.0, 0.5]])),
        mask=torch.ones(1, 2),
        rewards=torch.tensor([2.0]),
        group_size=1,
        prox_logp=torch.zeros(1, 2),
    )
    out = build_policy_loss(ReinforceConfig(aggregation="token_mean"), TISConfig(C=2.0))(inp)
    # REINFORCE per token: -coef * A * logp = 0 in value; gradient -coef*A/2 = [-2, -.5]
    out.loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-2.0, -0.5]]))


@pytest.mark.component("objective", "grpo")
def test_grpo_kl_penalty_by_hand():
    # on-policy, r = 1: the policy term is -A, +A per token -> seq-mean-token-mean 0. ref - logp = [[ln2, 0], [0, ln.5]]:
    # k3(x) = e^x - 1 - x = [[1 - ln2, 0], [0, ln2 - .5]] -> seq means (1 - ln2)/2, (ln2 - .5)/2 -> mean .125
    logp = torch.zeros(2, 2, requires_grad=True)
    ref = torch.log(torch.tensor([[2.0, 1.0], [1.0, 0.5]]))
    inp = PolicyLossInput(
        logp=logp,
        behaviour_logp=torch.zeros(2, 2),
        mask=torch.ones(2, 2),
        rewards=torch.tensor([1.0, 0.0]),
        group_size=2,
        extras={"ref_logp": ref},
    )
    loss_fn = build_policy_loss(GRPOConfig(beta_kl=0.1))
    assert loss_fn.needs_reference_logp and not build_policy_loss(GRPOConfig()).needs_reference_logp
    out = loss_fn(inp)
    assert out.metrics["kl/ref_k3"].item() == pytest.approx(0.125, abs=1e-6)
    assert out.loss.item() == pytest.approx(0.0125, abs=1e-6)
    out.loss.backward()
    # d k3(ref - logp)/d logp = 1 - e^(ref - logp); β/(2 seqs · 2 tokens) = .025; policy term -A/4, +A/4
    expected = torch.tensor([[-A / 4 + 0.025 * (1 - 2), -A / 4], [A / 4, A / 4 + 0.025 * (1 - 0.5)]])
    assert torch.allclose(logp.grad, expected, atol=1e-6)
    with pytest.raises(KeyError, match="ref_logp"):
        loss_fn(
            PolicyLossInput(
                logp=logp,
                behaviour_logp=torch.zeros(2, 2),
                mask=torch.ones(2, 2),
                rewards=torch.tensor([1.0, 0.0]),
                group_size=2,
            )
        )


def reinforce_batch(log_rho=(0.0, 0.0, 0.0, 0.0), norms=None):
    # sequence log-probs S = [-1, -2, -.5, -3]; second response has one padding token
    logp = torch.tensor([[-0.4, -0.6], [-2.0, 0.0], [-0.25, -0.25], [-1.0, -2.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    mu = logp.clone()
    mu[:, 0] -= torch.tensor(log_rho)
    extras = {} if norms is None else {"seq_grad_sq_norms": torch.tensor(norms)}
    return PolicyLossInput(
        logp=logp, behaviour_logp=mu, mask=mask, rewards=torch.tensor([1.0, 0.0, 3.0, 1.0]), group_size=2, extras=extras
    )


@pytest.mark.parametrize(
    "cfg,expected",
    [
        (ReinforceConfig(baseline="none"), 1.375),  # -(1*-1 + 3*-.5 + 1*-3)/4
        (ReinforceConfig(baseline="group_mean"), -0.75),  # A=[.5,-.5,1,-1]: -(−.5+1−.5+3)/4
        (ReinforceConfig(baseline="leave_one_out"), -1.5),  # A=[1,-1,2,-2]: -(−1+2−1+6)/4
        (ReinforceConfig(baseline="constant", constant_baseline=1.0), -0.25),  # A=[0,-1,2,0]
    ],
)
@pytest.mark.component("objective", "reinforce")
def test_reinforce_baselines_by_hand(cfg, expected):
    out = build_policy_loss(cfg)(reinforce_batch())
    assert out.loss.item() == pytest.approx(expected, abs=1e-6)


@pytest.mark.component("objective", "reinforce")
def test_reinforce_ema_baseline_by_hand():
    loss = build_policy_loss(ReinforceConfig(baseline="ema", ema_decay=0.5))
    assert loss(reinforce_batch()).loss.item() == pytest.approx(1.375)  # b = init 0
    # b = .5*0 + .5*mean(R)=.625 -> A=[.375,-.625,2.375,.375]: -(−.375+1.25−1.1875−1.125)/4
    assert loss(reinforce_batch()).loss.item() == pytest.approx(0.359375)


@pytest.mark.component("objective", "reinforce")
def test_reinforce_optimal_baseline_by_hand():
    # ‖ψ‖² = [1,3,2,2]: b1 = (1*1+3*0)/4 = .25, b2 = 2 -> A=[.75,-.25,1,-1]: -(−.75+.5−.5+3)/4
    out = build_policy_loss(ReinforceConfig(baseline="optimal"))(reinforce_batch(norms=[1.0, 3.0, 2.0, 2.0]))
    assert out.loss.item() == pytest.approx(-0.5625, abs=1e-6)


@pytest.mark.component("objective", "reinforce")
def test_reinforce_opob_baseline_by_hand():
    # ρ = [2,1,1,.5], ‖ψ‖² = [1,3,2,2] -> W = ρ²‖ψ‖² = [4,3,2,.5]; b1 = 4/7, b2 = (6+.5)/2.5 = 2.6
    batch = reinforce_batch(log_rho=[math.log(2), 0.0, 0.0, math.log(0.5)], norms=[1.0, 3.0, 2.0, 2.0])
    out = build_policy_loss(ReinforceConfig(baseline="opob"))(batch)
    adv = [1 - 4 / 7, -4 / 7, 3 - 2.6, 1 - 2.6]
    expected = -(adv[0] * -1 + adv[1] * -2 + adv[2] * -0.5 + adv[3] * -3) / 4
    assert out.loss.item() == pytest.approx(expected, abs=1e-5)
    # code weight, C = 1.5: W = min(ρ,C)²ρ²‖ψ‖² = [9, 3, 2, .125]; b1 = .75, b2 = 6.125/2.125
    out = build_policy_loss(ReinforceConfig(baseline="opob", opob_weight="code", opob_clip_c=1.5))(batch)
    b2 = 6.125 / 2.125
    adv = [0.25, -0.75, 3 - b2, 1 - b2]
    expected = -(adv[0] * -1 + adv[1] * -2 + adv[2] * -0.5 + adv[3] * -3) / 4
    assert out.loss.item() == pytest.approx(expected, abs=1e-5)
    assert out.metrics["is/ess_ratio"].item() == pytest.approx(4.5**2 / (4 * 6.25), rel=1e-5)


def test_group_size_validation_messages():
    with pytest.raises(ValueError, match="group_size"):
        GRPOConfig().validate_group_size(1)
    with pytest.raises(ValueError, match="group_size"):
        ReinforceConfig(baseline="leave_one_out").validate_group_size(1)
    ReinforceConfig().validate_group_size(1)


def test_unknown_knob_rejected():
    with pytest.raises(Exception):
        GRPOConfig(epsilon=0.3)
