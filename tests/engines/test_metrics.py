"""The mismatch / staleness metrics on hand-made log-probs (``sandbox/learner/mismatch.py``)."""

from __future__ import annotations

import math

import torch

from sandbox.learner.mismatch import length_buckets, mismatch_metrics, pair_metrics
from sandbox.tasks.rollouts import Rollouts


def test_pair_metrics_hand_values():
    """Two responses, lengths 2 and 1 (one padded slot): δ = log a − log b = (log 1.5, 0 | −log 4)."""
    a = torch.tensor([[[math.log(0.3), math.log(0.5)], [math.log(0.1), 0.0]]])
    b = torch.tensor([[[math.log(0.2), math.log(0.5)], [math.log(0.4), 9.9]]])
    mask = torch.tensor([[[1.0, 1.0], [1.0, 0.0]]])
    lengths = torch.tensor([[2, 1]])
    m = pair_metrics(a, b, mask, "x", lengths, max_len=4)
    rho = [1.5, 1.0, 0.25]
    k3 = [r - 1 - math.log(r) for r in rho]
    assert math.isclose(float(m["x/kl_k3"]), sum(k3) / 3, rel_tol=1e-6)
    assert math.isclose(float(m["x/kl_k1"]), -(math.log(1.5) - math.log(4)) / 3, rel_tol=1e-6)
    assert math.isclose(float(m["x/ratio_mean"]), sum(rho) / 3, rel_tol=1e-6)
    assert math.isclose(float(m["x/ratio_max"]), 1.5, rel_tol=1e-6) and math.isclose(
        float(m["x/ratio_min"]), 0.25, rel_tol=1e-6
    )
    std = math.sqrt(sum(r * r for r in rho) / 3 - (sum(rho) / 3) ** 2)
    assert math.isclose(float(m["x/ratio_std"]), std, rel_tol=1e-6)
    assert math.isclose(float(m["x/ratio_outside_band"]), 1 / 3, rel_tol=1e-6)  # 0.25 only
    assert math.isclose(float(m["x/prob_gap_mean"]), (0.1 + 0.0 + 0.3) / 3, rel_tol=1e-5)
    assert math.isclose(float(m["x/prob_gap_max"]), 0.3, rel_tol=1e-5)
    # log-ppl diff per response: mean log b − mean log a: (−log 1.5 / 2, log 4), averaged over responses
    assert math.isclose(float(m["x/log_ppl_diff"]), (-math.log(1.5) / 2 + math.log(4)) / 2, rel_tol=1e-6)
    # lengths 2 and 1 of at most 4: buckets 2 and 1; buckets 3 and 4 are empty (NaN)
    assert math.isclose(float(m["x/kl_k3_len1"]), k3[2], rel_tol=1e-6)
    assert math.isclose(float(m["x/kl_k3_len2"]), (k3[0] + k3[1]) / 2, rel_tol=1e-6)
    assert math.isnan(float(m["x/kl_k3_len3"])) and math.isnan(float(m["x/prob_gap_len4"]))


def test_length_buckets_edges():
    """(0, L/4] → 1, (L/4, L/2] → 2, (L/2, 3L/4] → 3, (3L/4, L] → 4 (0-based here)."""
    assert length_buckets(torch.tensor([1, 2, 3, 4, 5, 6, 7, 8]), 8).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


def test_split_adds_up_and_framework_names():
    """mismatch k1 + staleness k1 = total k1 (verl rollout_corr/kl); TRL's logp difference is |π_v − μ|;
    prime-rl's mismatch_kl/all/mean is verl's k3 of the whole pair."""
    g = torch.Generator().manual_seed(0)
    mu = -torch.rand(2, 3, 5, generator=g) - 0.1
    pv = mu + 0.1 * torch.randn(2, 3, 5, generator=g)
    pt = pv + 0.05 * torch.randn(2, 3, 5, generator=g)
    mask = torch.ones(2, 3, 5)
    mask[:, 0, 3:] = 0
    m = mismatch_metrics(pt, pv, mu, mask, torch.tensor([[3, 5, 5], [3, 5, 5]]), 5)
    assert torch.allclose(m["mismatch/kl_k1"] + m["staleness/kl_k1"], m["rollout_corr/kl"])
    valid = mask > 0
    diff = (pv - mu).abs()
    assert torch.allclose(
        m["sampling/sampling_logp_difference/max"], torch.stack([diff[r][valid[r]].max() for r in range(2)]).double()
    )
    assert torch.equal(m["mismatch_kl/all/mean"], m["rollout_corr/k3_kl"])
    d = (pt - mu).double()
    want = torch.stack([(torch.expm1(d[r]) - d[r])[valid[r]].mean() for r in range(2)])
    assert torch.allclose(m["rollout_corr/k3_kl"], want)


def test_version_logp_follows_truncate_cat_and_extend():
    """truncate / cat / extend carry version_logp (0 on padding); a group without it stays without."""

    def group(n, width, with_version):
        ro = Rollouts.empty(1, n)
        lp = -torch.rand(1, n, width)
        return ro.extend(
            torch.ones(1, n, width, dtype=torch.long),
            lp,
            torch.full((1, n), width),
            torch.zeros(1, n, dtype=torch.bool),
            0,
            (lp - 1.0) if with_version else None,
        )

    a = group(2, 3, True)
    assert torch.equal(a.version_logp, a.behaviour_logp - 1.0)
    t = a.truncate(2)
    assert t.version_logp.shape == (1, 2, 2)
    e = t.extend(
        torch.ones(1, 2, 1, dtype=torch.long),
        torch.zeros(1, 2, 1),
        torch.ones(1, 2, dtype=torch.long),
        torch.ones(1, 2, dtype=torch.bool),
        1,
    )  # a continuation without version_logp: its own logp
    assert e.version_logp.shape == (1, 2, 3) and torch.equal(e.version_logp[..., 2], e.behaviour_logp[..., 2])
    c = Rollouts.cat([group(2, 2, False), a])
    assert torch.equal(c.version_logp[0, 0, :2], c.behaviour_logp[0, 0, :2]) and float(c.version_logp[0, 0, 2]) == 0.0
    plain = group(2, 2, False)
    assert plain.version_logp is None and plain.truncate(1).version_logp is None
    assert Rollouts.cat([plain, plain]).version_logp is None
