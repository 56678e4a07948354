"""Per-trajectory gradient norms (torch.func) and the OPOB baseline on a bandit (docs/theory.md#t10)."""

import pytest
import torch

from sandbox.algorithms import (
    CISPOConfig,
    DAPOConfig,
    DrGRPOConfig,
    GRPOConfig,
    GSPOConfig,
    PolicyLossInput,
    PPOConfig,
    ReinforceConfig,
    RLOOConfig,
    TBAConfig,
    TISConfig,
    build_policy_loss,
    logit_space_grad_sq_norm,
    per_sequence_grad_sq_norms,
)


def mlp_seq_logprob(params, y):
    """Tiny sequence policy: logits_t = W2 tanh(W1 e_{t} + b); returns Σ_t log π(y_t)."""
    h = torch.tanh(params["emb"][torch.arange(y.shape[0])] @ params["w1"])
    logits = h @ params["w2"]
    return torch.log_softmax(logits, -1).gather(-1, y.unsqueeze(-1)).sum()


def test_per_sequence_grad_sq_norms_match_backward_loop():
    g = torch.Generator().manual_seed(0)
    params = {
        "emb": torch.randn(5, 4, generator=g),
        "w1": torch.randn(4, 8, generator=g),
        "w2": torch.randn(8, 6, generator=g),
    }
    ys = torch.randint(0, 6, (7, 5), generator=g)
    got = per_sequence_grad_sq_norms(mlp_seq_logprob, params, ys)
    expected = []
    for y in ys:
        p = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        mlp_seq_logprob(p, y).backward()
        expected.append(sum((v.grad**2).sum() for v in p.values()))
    assert torch.allclose(got, torch.stack(expected), rtol=1e-5)
    # replicas: params (R, ...), inputs (R, N, ...)
    rp = {k: torch.stack([v, 2 * v]) for k, v in params.items()}
    got_r = per_sequence_grad_sq_norms(mlp_seq_logprob, rp, torch.stack([ys, ys]), replica_dims=1)
    assert got_r.shape == (2, 7)
    assert torch.allclose(got_r[0], got, rtol=1e-5)
    assert torch.allclose(
        got_r[1], per_sequence_grad_sq_norms(mlp_seq_logprob, {k: v[1] for k, v in rp.items()}, ys), rtol=1e-5
    )


def test_logit_space_proxy_is_exact_for_a_softmax_bandit():
    # docs/theory.md#t10: π = (.5, .3, .2) -> ‖ψ_a‖² = 1 − 2π_a + Σπ² = (.38, .78, .98)
    logits = torch.log(torch.tensor([0.5, 0.3, 0.2])).expand(3, 1, 3)
    got = logit_space_grad_sq_norm(logits, torch.tensor([[0], [1], [2]]))
    assert torch.allclose(got, torch.tensor([0.38, 0.78, 0.98]), atol=1e-6)


def test_grpo_with_opob_runs_and_reduces_to_group_mean_for_equal_weights():
    logp = torch.zeros(2, 4, 3, requires_grad=True)
    rewards = torch.tensor([[1.0, 0.0, 0.5, 0.2], [0.0, 1.0, 1.0, 0.0]])
    inp = PolicyLossInput(
        logp=logp,
        behaviour_logp=logp.detach(),
        mask=torch.ones(4, 3),
        rewards=rewards,
        group_size=4,
        extras={"seq_grad_sq_norms": torch.ones(2, 4)},
    )
    a = build_policy_loss(GRPOConfig(baseline="opob"))(inp)
    b = build_policy_loss(GRPOConfig(std_unbiased=False))(inp)
    assert torch.allclose(a.metrics["adv/mean"], b.metrics["adv/mean"], atol=1e-6)
    assert torch.allclose(a.loss, b.loss, atol=1e-6)


@pytest.mark.parametrize(
    "cfg,needed",
    [
        (ReinforceConfig(), False),
        (ReinforceConfig(baseline="optimal"), True),
        (ReinforceConfig(baseline="opob"), True),
        (ReinforceConfig(baseline="leave_one_out"), False),
        (GRPOConfig(), False),
        (GRPOConfig(baseline="opob"), True),
        (DrGRPOConfig(baseline="opob"), True),
        (RLOOConfig(), False),
        (PPOConfig(advantage="opob"), True),
        (DAPOConfig(advantage="rloo"), False),
        (GSPOConfig(advantage="opob"), True),
        (CISPOConfig(), False),
        (TBAConfig(), False),
    ],
    ids=lambda c: getattr(c, "name", str(c)),
)
def test_needs_sequence_grad_norms_exactly_for_opob_and_optimal(cfg, needed):
    assert build_policy_loss(cfg).needs_sequence_grad_norms is needed


def test_missing_grad_norms_message():
    inp = PolicyLossInput(
        logp=torch.zeros(2, 1),
        behaviour_logp=torch.zeros(2, 1),
        mask=torch.ones(2, 1),
        rewards=torch.tensor([1.0, 0.0]),
        group_size=2,
    )
    with pytest.raises(KeyError, match="seq_grad_sq_norms"):
        build_policy_loss(GRPOConfig(baseline="opob"))(inp)


# ---------------------------------------------------------------------------- Monte Carlo (T10 bandit)
PI = torch.tensor([0.5, 0.3, 0.2])
MU = torch.tensor([0.4, 0.4, 0.2])
REW = torch.tensor([1.0, 0.0, 0.5])
TRUE_GRAD = torch.tensor([0.2, -0.18, -0.02])  # E_μ[w (R − b) ψ] = Σ_a ∇π_a R_a w.r.t. logits


def bandit_gradients(objective, M, B, seed):
    """M independent batches of B draws from μ, batched as M replicas; returns ĝ (M, 3) w.r.t. the logits."""
    g = torch.Generator().manual_seed(seed)
    a = torch.multinomial(MU, M * B, replacement=True, generator=g).reshape(M, B)
    logits = torch.log(PI).repeat(M, 1).requires_grad_(True)
    logp = torch.log_softmax(logits, -1).gather(-1, a).unsqueeze(-1)  # (M, B, 1)
    norms = 1.0 - 2.0 * PI[a] + (PI**2).sum()
    inp = PolicyLossInput(
        logp=logp,
        behaviour_logp=torch.log(MU[a]).unsqueeze(-1),
        mask=torch.ones(B, 1),
        rewards=REW[a],
        group_size=B,
        extras={"seq_grad_sq_norms": norms},
    )
    out = build_policy_loss(objective, TISConfig(level="sequence", C=1e9))(inp)  # exact IS weights
    out.loss.sum().backward()
    return -logits.grad  # loss = −(1/B) Σ w (R − b) log π  ⇒  −∇ = ĝ


@pytest.mark.slow
@pytest.mark.parametrize("B", [4, 16])
def test_opob_unbiased_and_lower_variance_than_group_mean(B):
    M = 100_000
    opob = bandit_gradients(ReinforceConfig(baseline="opob", opob_leave_one_out=True), M, B, seed=1)
    mean_loo = bandit_gradients(ReinforceConfig(baseline="leave_one_out"), M, B, seed=1)
    mean_b = bandit_gradients(ReinforceConfig(baseline="group_mean"), M, B, seed=1)
    opob_batch = bandit_gradients(ReinforceConfig(baseline="opob"), M, B, seed=1)
    # unbiased: leave-one-out OPOB mean within 4 SE of the exact expected gradient, per coordinate
    se = opob.std(0) / M**0.5
    assert torch.all((opob.mean(0) - TRUE_GRAD).abs() <= 4 * se), (opob.mean(0), TRUE_GRAD, se)
    # variance (trace of covariance), paired on identical draws: OPOB ≤ group-mean baseline (+4 SE)
    for est, ref in [(opob, mean_loo), (opob_batch, mean_b)]:
        d = ((est - est.mean(0)) ** 2).sum(1) - ((ref - ref.mean(0)) ** 2).sum(1)
        assert d.mean() <= 4 * d.std() / M**0.5, (d.mean(), d.std() / M**0.5)


def _opob_minibatch_advantages(scope):
    """REINFORCE + OPOB over the whole batch, on-policy, one token per response, seq-mean-token-sum: the
    gradient of the loss w.r.t. log π(y_i) is −Â_i / B."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0], dtype=torch.float64)  # two groups of 3
    logp = torch.zeros(6, 1, dtype=torch.float64, requires_grad=True)
    inp = PolicyLossInput(
        logp=logp,
        behaviour_logp=logp.detach(),
        mask=torch.ones(6, 1, dtype=torch.float64),
        rewards=rewards,
        group_size=3,
        extras={"seq_grad_sq_norms": torch.tensor([1.0, 2.0, 1.0, 1.0, 1.0, 3.0], dtype=torch.float64)},
    )
    cfg = ReinforceConfig(baseline="opob", normalize_std=True, opob_scope=scope)
    build_policy_loss(cfg)(inp).loss.backward()
    return (-logp.grad[:, 0] * 6).tolist()


def test_opob_minibatch_scope_std_conventions_by_hand():
    """Values are the GRPO advantages (R − mean_g)/(σ_g + 1e-6); the baseline is their W-weighted mean
    (W = ‖∇log π‖², w = 1), Σ W·(R − mean_g) = −5/3 over Σ W = 9. Both groups have deviations ±(1/3, 2/3):
    population σ = √2/3 (the sandbox's 'minibatch'), Bessel σ = 1/√3 ('minibatch_bessel', VCPO's code:
    verl's compute_grpo_outcome_advantage uses torch.std)."""
    devs = [2 / 3, -1 / 3, -1 / 3, 1 / 3, 1 / 3, -2 / 3]
    for scope, sigma in (("minibatch", 2**0.5 / 3), ("minibatch_bessel", 3**-0.5)):
        values = [d / (sigma + 1e-6) for d in devs]
        b = (-5 / 3) / 9 / (sigma + 1e-6)
        assert _opob_minibatch_advantages(scope) == pytest.approx([v - b for v in values], rel=1e-12)
    # hand numbers of the Bessel convention
    assert _opob_minibatch_advantages("minibatch_bessel") == pytest.approx(
        [1.475448, -0.256600, -0.256600, 0.898099, 0.898099, -0.833949], abs=1e-6
    )
