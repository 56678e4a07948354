"""The policy loss's diagnostics take the same values as their plain formulas, to the bit."""

from __future__ import annotations

import torch

from sandbox.algorithms._tensor import as_float, float_flag, masked_frac, seq_sum, token_mean
from sandbox.algorithms.diagnostics import ess_ratio_from_log_weights, is_metrics, k3
from sandbox.algorithms.policy_loss import token_lag_metrics


def _lag_reference(version: int, token_versions: torch.Tensor, fmask: torch.Tensor) -> dict[str, torch.Tensor]:
    lag = (version - token_versions.to(fmask.dtype)).expand_as(fmask)
    return {
        "staleness/mean": token_mean(lag, fmask),
        "staleness/max": torch.where(fmask > 0, lag, torch.full_like(lag, -1e9)).amax((-2, -1)),
    }


def _masks(gen: torch.Generator, shape: tuple[int, ...]) -> list[torch.Tensor]:
    binary = (torch.rand(shape, generator=gen) < 0.7).float()
    binary[0] = 0.0  # a replica with no valid token
    odd = torch.rand(shape, generator=gen) * 2 - 0.5  # fractions and negatives
    odd[1, 0, 0] = float("nan")
    return [binary, odd, binary.double()]


def test_token_lag_metrics_match_the_plain_formulas():
    gen = torch.Generator().manual_seed(3)
    shape = (4, 6, 5)
    for version in (0, 7, 2**25 + 1):  # the last is not a float32
        for fmask in _masks(gen, shape):
            for versions in (
                torch.randint(-1, 9, shape, generator=gen),
                torch.randint(-1, 9, shape[1:], generator=gen),
            ):
                before = versions.clone()
                got, want = token_lag_metrics(version, versions, fmask), _lag_reference(version, versions, fmask)
                assert list(got) == list(want)
                for key in want:
                    torch.testing.assert_close(got[key], want[key], rtol=0, atol=0, equal_nan=True)
                assert torch.equal(versions, before)


def test_bool_flags_become_the_same_floats():
    gen = torch.Generator().manual_seed(4)
    flag = torch.rand(3, 4, 5, generator=gen) < 0.5
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        assert torch.equal(as_float(flag, dtype), flag.to(dtype))
    fmask = (torch.rand(3, 4, 5, generator=gen) < 0.8).float()
    torch.testing.assert_close(masked_frac(flag, fmask), token_mean(flag.float(), fmask), rtol=0, atol=0)
    assert torch.equal(as_float(flag.long(), torch.float32), flag.float())  # non-bool flags convert as before
    a = torch.randn(3, 4, 5, generator=gen).double()
    b = torch.randn(4, 1, generator=gen).double()
    a[0, 0, 0] = float("nan")
    for compare in (torch.gt, torch.lt, torch.ge):
        got = float_flag(compare, a, b)
        assert got.dtype == torch.float64 and torch.equal(got, compare(a, b).double())


def _is_reference(log_rho: torch.Tensor, fmask: torch.Tensor) -> dict[str, torch.Tensor]:
    log_rho = log_rho.detach() * fmask
    seq = seq_sum(log_rho, fmask)
    ratio = ess_ratio_from_log_weights(seq)
    return {
        "is/ess_ratio": ratio,
        "is/ess": ratio * seq.shape[-1],
        "is/chi2": token_mean(torch.exp(2.0 * log_rho.clamp(max=40.0)), fmask) - 1.0,
        "is/chi2_seq": 1.0 / ratio.clamp_min(1e-30) - 1.0,
        "is/kl_k3": token_mean(k3(log_rho.clamp(max=40.0)), fmask),
        "is/log_ratio_mean": token_mean(log_rho, fmask),
    }


def test_is_metrics_match_the_plain_formulas():
    gen = torch.Generator().manual_seed(5)
    shape = (3, 8, 6)
    log_rho = torch.randn(shape, generator=gen) * 3
    log_rho[0, 0, 0] = 60.0  # beyond the cap of 40
    log_rho[1, 1, 1] = float("-inf")
    for fmask in _masks(gen, shape) + [_masks(gen, shape)[0][0]]:  # the last one broadcasts over replicas
        for x in (log_rho, log_rho.double(), log_rho.transpose(-2, -1).contiguous().transpose(-2, -1)):
            before = x.clone()
            got, want = is_metrics(x, fmask), _is_reference(x, fmask)
            assert list(got) == list(want)
            for key in want:
                torch.testing.assert_close(got[key], want[key], rtol=0, atol=0, equal_nan=True)
            assert torch.equal(x, before)


def test_correction_context_sums_the_sequence_log_weight_once():
    from sandbox.algorithms.corrections.base import CorrectionContext

    gen = torch.Generator().manual_seed(6)
    log_w = torch.randn(2, 4, 3, generator=gen)
    fmask = (torch.rand(2, 4, 3, generator=gen) < 0.7).float()
    blank = torch.zeros(2, 4)
    ctx = CorrectionContext(
        log_w=log_w,
        log_rho=log_w,
        ratio=log_w.exp(),
        fmask=fmask,
        adv=blank,
        rewards=blank,
        logp=log_w,
        behaviour_logp=log_w,
        decoupled=False,
    )
    first = ctx.seq_log_w()
    assert torch.equal(first, seq_sum(log_w, fmask)) and ctx.seq_log_w() is first
    given = torch.ones(2, 4)
    ctx.log_seq_w = given
    assert ctx.seq_log_w() is given


def test_given_staleness_takes_the_place_of_the_token_lag():
    from sandbox.algorithms import GRPOConfig, PolicyLossInput, TISConfig, build_policy_loss

    gen = torch.Generator().manual_seed(7)
    R, N, T = 3, 4, 5
    logp = -torch.rand(R, N, T, generator=gen)
    versions = torch.randint(0, 4, (R, N, T), generator=gen)

    def inp(**kw):
        return PolicyLossInput(
            logp=logp.clone().requires_grad_(True),
            behaviour_logp=logp - 0.1,
            mask=torch.ones(R, N, T),
            rewards=(torch.rand(R, N, generator=gen) < 0.5).float(),
            group_size=2,
            token_versions=versions,
            learner_version=5,
            **kw,
        )

    loss = build_policy_loss(GRPOConfig(), TISConfig(level="sequence"))
    measured = loss(inp()).metrics
    given = {
        "staleness/mean": torch.full((R,), 1.5, dtype=torch.float64),
        "staleness/max": torch.full((R,), 3.0),
        "staleness/min": torch.zeros(R),
    }
    reported = loss(inp(staleness=given)).metrics
    assert list(reported) == list(measured)  # same names in the same places
    assert reported["staleness/mean"] is given["staleness/mean"] and reported["staleness/max"] is given["staleness/max"]
    want = token_lag_metrics(5, versions, torch.ones(R, N, T))
    torch.testing.assert_close(measured["staleness/max"], want["staleness/max"], rtol=0, atol=0)


def test_maximum_has_the_values_and_gradients_of_torch_maximum(monkeypatch):
    from sandbox.algorithms import _tensor
    from sandbox.algorithms._tensor import maximum

    monkeypatch.setattr(_tensor, "_FUSED_MAXIMUM_MIN_SIZE", 1)  # the edge values too
    a0 = torch.tensor([1.0, 2.0, float("nan"), 3.0, float("inf"), -0.0, 0.0, 5.0, float("-inf"), 1e-45, 4.0])
    b0 = torch.tensor([1.0, 1.0, 1.0, float("nan"), float("inf"), 0.0, -0.0, 7.0, float("-inf"), 1e-45, 4.0])
    grad = torch.tensor([1.0, -3.0, 2.0, 4.0, 6.0, -1.0, 1e-45, -0.0, 1.0, 3e-45, float("nan")])
    gen = torch.Generator().manual_seed(8)
    cases = [(a0, b0, grad)]
    x = torch.randn(4, 64, 64, generator=gen)  # above the size of the fused backward
    cases.append((x, x.clamp(-0.5, 0.5), torch.randn(4, 64, 64, generator=gen)))  # many ties
    for a_in, b_in, g in cases:
        results = []
        for fn in (torch.maximum, maximum):
            for grads in ((True, True), (True, False), (False, True)):
                a = a_in.clone().requires_grad_(grads[0])
                b = b_in.clone().requires_grad_(grads[1])
                out = fn(a, b)
                out.backward(g)
                results.append([out.detach()] + [t.grad if t.grad is not None else torch.empty(0) for t in (a, b)])
        half = len(results) // 2
        for want, got in zip(results[:half], results[half:]):
            for w, v in zip(want, got):
                assert torch.equal(w.view(torch.int32), v.view(torch.int32))  # the bits, NaN and signed zeros included
