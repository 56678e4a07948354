"""MIS ``batch_normalize`` conventions by hand (issue 16 part 4; docs/methods/corrections.md#mis).

Probe as in test_alg_corrections_values.py: decoupled mode with π_prox = π_θ (surrogate ratio 1), REINFORCE
with token-mean aggregation and advantage A = R = 1, so d loss / d log π_t = −mult_t / n_valid with mult_t
the token's final coefficient (0 where masked). The same numbers from verl 0.9.1's own
``compute_rollout_correction_weights`` are checked in tests/frameworks/verl/test_verl_rollout_corr.py."""

import pytest
import torch

from sandbox.algorithms import MISConfig, PolicyLossInput, ReinforceConfig, build_policy_loss


def multiplier(correction, w, mask):
    w, mask = torch.tensor(w, dtype=torch.float64), torch.tensor(mask, dtype=torch.float64)
    n, t = w.shape
    logp = torch.full((n, t), -0.5, dtype=torch.float64, requires_grad=True)
    inp = PolicyLossInput(
        logp=logp,
        behaviour_logp=logp.detach() - torch.log(w),
        mask=mask,
        rewards=torch.ones(n, dtype=torch.float64),
        group_size=1,
        prox_logp=logp.detach().clone(),
    )
    build_policy_loss(ReinforceConfig(aggregation="token_mean"), correction)(inp).loss.backward()
    return (-logp.grad * mask.sum()).flatten().tolist()


TOKEN = dict(C=2.0, C_low=0.5)


def test_token_level_conventions_on_the_issue_numbers():
    w, mask = [[1.5, 3.0]], [[1.0, 1.0]]  # 3.0 is outside [0.5, 2]
    assert multiplier(MISConfig(**TOKEN), w, mask) == pytest.approx([1.5, 0.0])
    # kept tokens only: 1.5 / mean(1.5) = 1
    for on in (True, "kept_tokens"):
        assert multiplier(MISConfig(**TOKEN, batch_normalize=on), w, mask) == pytest.approx([1.0, 0.0])
    # verl's 'lo_hi' band (what --framework verl writes): weights [1.5, 0], mean over both valid tokens 0.75
    assert multiplier(MISConfig(**TOKEN, batch_normalize="verl_band"), w, mask) == pytest.approx([2.0, 0.0])
    # verl's TIS + token_k1 rejection: min(w, 2) = [1.5, 2], mean 1.75, then the rejection: 1.5/1.75 = 0.857
    assert multiplier(MISConfig(**TOKEN, batch_normalize="verl_is_rs"), w, mask) == pytest.approx([6 / 7, 0.0])


def test_token_level_lower_edge_in_verl_is_rs():
    # w = 0.25 is below C_low: rejected, but its weight 0.25 is in verl's normaliser (mean of [1.5, 0.25, 1] = 11/12)
    out = multiplier(MISConfig(**TOKEN, batch_normalize="verl_is_rs"), [[1.5, 0.25, 1.0]], [[1.0, 1.0, 1.0]])
    assert out == pytest.approx([1.5 * 12 / 11, 0.0, 12 / 11])
    out = multiplier(MISConfig(**TOKEN, batch_normalize="verl_band"), [[1.5, 0.25, 1.0]], [[1.0, 1.0, 1.0]])
    assert out == pytest.approx([1.5 * 3 / 2.5, 0.0, 3 / 2.5])


def test_sequence_level_conventions_on_the_issue_numbers():
    # W = 2 over 1 token, W = 0.5 over 3 tokens, band wide enough that nothing is rejected
    w = [[2.0, 1.0, 1.0], [0.5, 1.0, 1.0]]
    mask = [[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
    cfg = dict(level="sequence", C=10.0)
    # token-weighted: (2·1 + 0.5·3)/4 = 0.875 -> 2.286 / 0.571
    kept = multiplier(MISConfig(**cfg, batch_normalize=True), w, mask)
    assert kept == pytest.approx([16 / 7, 0, 0] + [4 / 7] * 3)
    # one weight per sequence: (2 + 0.5)/2 = 1.25 -> 1.6 / 0.4, in both verl routes
    for convention in ("verl_band", "verl_is_rs"):
        assert multiplier(MISConfig(**cfg, batch_normalize=convention), w, mask) == pytest.approx(
            [1.6, 0, 0] + [0.4] * 3
        )


def test_sequence_level_rejection_and_empty_responses():
    # W = 3 rejected (C = 2); one response has no valid token and is not a sequence for verl
    w = [[1.5, 1.2], [2.0, 1.5], [1.0, 1.0]]  # W = 1.8, 3, (none)
    mask = [[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]
    band = multiplier(MISConfig(level="sequence", C=2.0, batch_normalize="verl_band"), w, mask)
    assert band == pytest.approx([2.0, 2.0, 0.0, 0.0, 0.0, 0.0])  # mean of [1.8, 0] = 0.9
    is_rs = multiplier(MISConfig(level="sequence", C=2.0, batch_normalize="verl_is_rs"), w, mask)
    assert is_rs == pytest.approx([18 / 19, 18 / 19, 0.0, 0.0, 0.0, 0.0])  # 1.8 / mean(1.8, min(3, 2))
    # pure rejection: verl writes no IS weight, so nothing is normalised
    one = multiplier(MISConfig(level="sequence", C=2.0, seq_weight="one", batch_normalize="verl_band"), w, mask)
    assert one == pytest.approx([1.0, 1.0, 0.0, 0.0, 0.0, 0.0])


def test_default_is_off_and_bad_names_are_clear_errors():
    assert MISConfig().batch_normalize is False
    with pytest.raises(ValueError, match="batch_normalize"):
        MISConfig(batch_normalize="verl")
