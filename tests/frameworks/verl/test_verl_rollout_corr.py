"""The verl exporter's rejection bands and batch normalisation, run through verl 0.9.1's own
``rollout_corr_helper`` (imported from the pinned wheel):
on random log-ratios the written ``algorithm.rollout_correction`` keeps, rejects and weights the same
tokens as the sandbox's correction. verl's ``*_k1`` rejection thresholds apply to −log r = log(μ/π), so a
band [lo, hi] on π/μ must be written ``"1/hi_1/lo"``; the test also shows that a naive copy of an
asymmetric band disagrees on many tokens. Skips without the wheel or verl's import dependencies (fails
under CI)."""

from __future__ import annotations

import os

import pytest
import torch
from export_cases import SCENARIOS

import sandbox.frameworks.verl.export  # noqa: F401  registers the exporter
from sandbox.algorithms import PolicyLossInput, ReinforceConfig, build_policy_loss
from sandbox.export.api import export_scenario
from sandbox.scenario.api import load_scenario

C = "algorithm.rollout_correction"


@pytest.fixture(scope="module")
def helper():
    from sandbox.export.validate.wheels import WheelUnavailable, import_from_wheel

    try:
        (module,) = import_from_wheel("verl", "verl.trainer.ppo.rollout_corr_helper")
    except WheelUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must be able to import verl's rollout_corr_helper: {exc}")
        pytest.skip(f"verl rollout_corr_helper unavailable here: {exc}")
    return module


def reinforce_with(correction: dict):
    obj = {"name": "reinforce", "baseline": "group_mean", "normalize_std": True, "aggregation": "seq_mean_token_mean"}
    return load_scenario(
        SCENARIOS / "quickstart.toml", {"algorithm.objective": obj, "algorithm.correction": correction}
    )[0]


def verl_factor(helper, settings: dict, log_ratio, mask):
    """Per-token factor verl applies with the written keys: IS weight (1 without one) times the rejection mask."""
    weights, new_mask, _ = helper.compute_rollout_correction_and_rejection_mask(
        old_log_prob=log_ratio,
        rollout_log_prob=torch.zeros_like(log_ratio),
        response_mask=mask,
        rollout_is=settings[f"{C}.rollout_is"],
        rollout_is_threshold=settings.get(f"{C}.rollout_is_threshold"),
        rollout_is_batch_normalize=settings.get(f"{C}.rollout_is_batch_normalize", False),
        rollout_rs=settings[f"{C}.rollout_rs"],
        rollout_rs_threshold=settings.get(f"{C}.rollout_rs_threshold"),
    )
    w = weights.batch["rollout_is_weights"] if weights is not None else torch.ones_like(log_ratio)
    return w * new_mask * mask


def sandbox_factor(correction, log_ratio, mask):
    """Per-token coefficient × mask of the sandbox's correction, read back through the gradient of REINFORCE
    with token-mean aggregation in decoupled mode with π_prox = π_θ (so w = π_θ/μ, as verl's decoupled route)."""
    logp = torch.full_like(log_ratio, -0.5).requires_grad_(True)
    inp = PolicyLossInput(
        logp=logp,
        behaviour_logp=logp.detach() - log_ratio,
        mask=mask,
        rewards=torch.ones(log_ratio.shape[0], dtype=log_ratio.dtype),
        group_size=1,
        prox_logp=logp.detach().clone(),
    )
    build_policy_loss(ReinforceConfig(aggregation="token_mean"), correction)(inp).loss.backward()
    return -logp.grad * mask.sum()


def random_batch(seed: int, spread: float, B: int = 96, T: int = 24):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    mask = (torch.arange(T) < lengths.unsqueeze(1)).to(torch.float64)
    log_ratio = (spread * torch.randn(B, T, generator=g, dtype=torch.float64)) * mask
    return log_ratio, mask


CASES = {  # correction, per-token log-ratio spread (sequence statistics need a small one to straddle the band)
    "mis_token": ({"name": "mis", "C": 2.0, "C_low": 0.5}, 0.6),
    "mis_token_verl_band": ({"name": "mis", "C": 2.0, "C_low": 0.5, "batch_normalize": "verl_band"}, 0.6),
    "mis_token_no_floor": ({"name": "mis", "C": 1.5}, 0.6),
    "mis_sequence_ratio": ({"name": "mis", "level": "sequence", "C": 3.0, "C_low": 0.25}, 0.25),
    "mis_sequence_ratio_verl_band": (
        {"name": "mis", "level": "sequence", "C": 3.0, "C_low": 0.25, "batch_normalize": "verl_band"},
        0.25,
    ),
    "mis_sequence_one": ({"name": "mis", "level": "sequence", "C": 4.0, "C_low": 0.5, "seq_weight": "one"}, 0.25),
    "mis_sequence_one_no_floor": ({"name": "mis", "level": "sequence", "C": 2.0, "seq_weight": "one"}, 0.25),
    "geo_mis": ({"name": "geo_mis", "lo": 0.8, "hi": 1.1}, 0.3),
    "geo_mis_tis": ({"name": "geo_mis", "lo": 0.95, "hi": 1.1, "token_weight": "tis", "C": 1.5}, 0.3),
    "icepop": ({"name": "icepop", "alpha": 0.5, "beta": 1.8}, 0.6),
    "decoupled_ppo": ({"name": "decoupled_ppo", "behave_imp_weight_cap": 1.7}, 0.6),
}


@pytest.mark.parametrize("case", list(CASES))
def test_exported_keys_keep_and_weight_the_same_tokens_in_verl(helper, case):
    correction, spread = CASES[case]
    scn = reinforce_with(correction)
    exp = export_scenario(scn, "verl", allow_partial=True)
    assert not [r for r in exp.plan.gaps() if r.source.startswith("algorithm.correction")], exp.plan.gaps()
    for seed in range(3):
        log_ratio, mask = random_batch(seed, spread)
        ours = sandbox_factor(scn.algorithm.correction, log_ratio, mask)
        theirs = verl_factor(helper, exp.plan.settings, log_ratio, mask)
        valid = mask > 0
        kept, kept_verl = (ours > 0) & valid, (theirs > 0) & valid
        # both sides of the band are exercised
        assert 0.05 < float(kept.sum() / valid.sum()) < 0.95, (case, float(kept.sum() / valid.sum()))
        assert torch.equal(kept, kept_verl), (case, seed, int((kept != kept_verl).sum()))
        # verl's masked_mean adds 1e-8 to its denominators (verl/utils/torch_functional.py): relative 1e-8 at most
        assert torch.allclose(ours, theirs, rtol=1e-7, atol=1e-12), (case, seed)


@pytest.mark.parametrize("case", ["mis_sequence_one", "geo_mis"])
def test_a_naive_copy_of_an_asymmetric_k1_band_disagrees(helper, case):
    """The k1 band is on μ/π: writing [lo, hi] instead of [1/hi, 1/lo] changes the kept set."""
    correction, spread = CASES[case]
    scn = reinforce_with(correction)
    settings = dict(export_scenario(scn, "verl", allow_partial=True).plan.settings)
    lo, hi = (
        (correction["C_low"], correction["C"]) if correction["name"] == "mis" else (correction["lo"], correction["hi"])
    )
    assert settings[f"{C}.rollout_rs_threshold"] == f"{1 / hi!r}_{1 / lo!r}"
    settings[f"{C}.rollout_rs_threshold"] = f"{lo!r}_{hi!r}"
    log_ratio, mask = random_batch(0, spread, B=512)
    ours = sandbox_factor(scn.algorithm.correction, log_ratio, mask)
    naive = verl_factor(helper, settings, log_ratio, mask)
    wrong = int((((ours > 0) != (naive > 0)) & (mask > 0)).sum())
    assert wrong > 0.1 * int(mask.sum()), wrong


def test_batch_normalize_hand_values_in_verl(helper):
    """The issue's numbers, from verl's own function: token level w = [1.5, 3.0] with C = 2, C_low = 0.5 is
    [2, 0] with the 'lo_hi' band the exporter writes (the sandbox's 'verl_band') and [0.857, 0] with TIS 2
    plus token_k1 rejection (the sandbox's 'verl_is_rs'); sequence level W = 2 and 0.5 over 1 and 3 tokens,
    nothing rejected, is 1.6 / 0.4 in both routes (the sandbox's kept-token default gives 2.286 / 0.571)."""
    mask = torch.ones(1, 2, dtype=torch.float64)
    log_ratio = torch.log(torch.tensor([[1.5, 3.0]], dtype=torch.float64))
    band = {
        f"{C}.rollout_is": "token",
        f"{C}.rollout_is_threshold": "0.5_2.0",
        f"{C}.rollout_rs": None,
        f"{C}.rollout_is_batch_normalize": True,
    }
    assert verl_factor(helper, band, log_ratio, mask).flatten().tolist() == pytest.approx([2.0, 0.0])
    is_rs = {
        f"{C}.rollout_is": "token",
        f"{C}.rollout_is_threshold": 2.0,
        f"{C}.rollout_rs": "token_k1",
        f"{C}.rollout_rs_threshold": "0.5_2.0",
        f"{C}.rollout_is_batch_normalize": True,
    }
    assert verl_factor(helper, is_rs, log_ratio, mask).flatten().tolist() == pytest.approx([6 / 7, 0.0])
    mis = {"name": "mis", "C": 2.0, "C_low": 0.5}
    for convention, settings in (("verl_band", band), ("verl_is_rs", is_rs)):
        ours = sandbox_factor(
            reinforce_with({**mis, "batch_normalize": convention}).algorithm.correction, log_ratio, mask
        )
        assert torch.allclose(ours, verl_factor(helper, settings, log_ratio, mask))

    seq_mask = torch.tensor([[1.0, 0, 0], [1, 1, 1]], dtype=torch.float64)
    seq_ratio = torch.log(torch.tensor([[2.0, 1, 1], [0.5, 1, 1]], dtype=torch.float64)) * seq_mask
    seq = {
        f"{C}.rollout_is": "sequence",
        f"{C}.rollout_is_threshold": "1e-09_10.0",
        f"{C}.rollout_rs": None,
        f"{C}.rollout_is_batch_normalize": True,
    }
    assert verl_factor(helper, seq, seq_ratio, seq_mask)[:, 0].tolist() == pytest.approx([1.6, 0.4])
    seq_mis = {"name": "mis", "level": "sequence", "C": 10.0}
    ours = sandbox_factor(
        reinforce_with({**seq_mis, "batch_normalize": "verl_band"}).algorithm.correction, seq_ratio, seq_mask
    )
    assert ours[:, 0].tolist() == pytest.approx([1.6, 0.4])
    kept = sandbox_factor(
        reinforce_with({**seq_mis, "batch_normalize": True}).algorithm.correction, seq_ratio, seq_mask
    )
    assert kept[:, 0].tolist() == pytest.approx([16 / 7, 4 / 7])


def test_batch_normalize_rows():
    def rows(convention):
        exp = export_scenario(
            reinforce_with({"name": "mis", "C": 2.0, "C_low": 0.5, "batch_normalize": convention}),
            "verl",
            allow_partial=True,
        )
        return exp.plan.settings.get(f"{C}.rollout_is_batch_normalize"), {r.source for r in exp.plan.gaps()}

    assert rows("verl_band") == (True, set())
    for convention in (True, "kept_tokens", "verl_is_rs"):
        assert "algorithm.correction.batch_normalize" in rows(convention)[1]
