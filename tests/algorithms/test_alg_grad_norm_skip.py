"""grad_norm_skip: ZClip's z-score rule on the gradient norm (arXiv 2504.02507), skipping instead of
clipping (docs/methods/stabilizers.md#grad_norm_skip). Hand values of μ, σ², z; per-replica skip that
leaves parameters and Adam moments untouched; warm-up never skips; a scenario run logs the z-score."""

import math

import numpy as np
import pytest
import torch

from sandbox.algorithms import GradNormSkipConfig, StabilizedOptimizer, build_stabilizers
from sandbox.algorithms.stabilizers.grad_norm_skip import EPS, GradNormSkip


def zclip_skip_reference(norms, alpha, z_thr, warmup, on_spike="capped"):
    """Independent scalar re-statement of the rule: z per step (NaN in warm-up) and the skip flags."""
    zs, skips, mean, var = [], [], None, None
    for t, n in enumerate(norms):
        if t < warmup:
            zs.append(math.nan)
            skips.append(False)
            if t == warmup - 1:
                mean = sum(norms[:warmup]) / warmup
                var = sum((x - mean) ** 2 for x in norms[:warmup]) / warmup
            continue
        z = (n - mean) / (math.sqrt(var) + EPS)
        zs.append(z)
        skips.append(z > z_thr)
        if z <= z_thr or on_spike == "capped":
            seen = n if z <= z_thr else mean + z_thr * math.sqrt(var)
            mean = alpha * mean + (1 - alpha) * seen
            var = alpha * var + (1 - alpha) * (seen - mean) ** 2
    return zs, skips


@pytest.mark.component("stabilizer", "grad_norm_skip")
def test_defaults_are_zclips():
    cfg = GradNormSkipConfig()
    assert (cfg.alpha, cfg.z_threshold, cfg.warmup) == (0.97, 2.5, 25)
    s = GradNormSkip(cfg)
    assert (s.stage, s.before_clip, s.can_skip) == ("gradient", True, True)


@pytest.mark.component("stabilizer", "grad_norm_skip")
def test_mean_variance_and_z_by_hand():
    s = GradNormSkip(GradNormSkipConfig(alpha=0.5, z_threshold=2.5, warmup=3, on_spike="frozen"))
    step = lambda n: s.transform([torch.tensor([n], dtype=torch.float64)], 0)  # noqa: E731
    for n in (1.0, 2.0, 3.0):  # warm-up: μ = 2, σ² = ((1-2)² + 0 + (3-2)²)/3 = 2/3
        vecs, skip, m = step(n)
        assert skip is None and math.isnan(m["grad_skip/z"]) and m["grad_skip/skipped"] == 0
    assert s.mean.item() == pytest.approx(2.0) and s.var.item() == pytest.approx(2 / 3)

    _, skip, m = step(2.5)  # z = 0.5/sqrt(2/3) = 0.6124 -> kept; μ = 2.25, σ² = (2/3)/2 + (2.5-2.25)²/2
    assert m["grad_skip/z"].item() == pytest.approx(0.5 / (math.sqrt(2 / 3) + EPS))
    assert not skip and s.mean.item() == pytest.approx(2.25) and s.var.item() == pytest.approx(1 / 3 + 0.03125)

    _, skip, m = step(10.0)  # z = 7.75/sqrt(0.364583) = 12.83 -> skipped, statistics unchanged
    assert m["grad_skip/z"].item() == pytest.approx(7.75 / (math.sqrt(0.364583333) + EPS), rel=1e-6)
    assert skip and m["grad_skip/skipped"] == 1.0
    assert s.mean.item() == pytest.approx(2.25) and s.var.item() == pytest.approx(0.364583333)

    _, skip, m = step(2.0)  # z = -0.25/0.6038 -> kept; μ = 2.125, σ² = 0.182292 + 0.0078125
    assert not skip and m["grad_skip/z"].item() == pytest.approx(-0.25 / (math.sqrt(0.364583333) + EPS))
    assert s.mean.item() == pytest.approx(2.125) and s.var.item() == pytest.approx(0.190104167)


@pytest.mark.component("stabilizer", "grad_norm_skip")
def test_capped_statistics_absorb_a_lasting_jump_and_frozen_ones_never_do():
    # capped, by hand: warm-up 1, 3 -> μ = 2, σ² = 1; a spike 10 (z = 8) is skipped and the cap
    # μ + 2.5σ = 4.5 is fed: μ = 0.5·2 + 0.5·4.5 = 3.25, σ² = 0.5·1 + 0.5·(4.5 − 3.25)² = 1.28125
    s = GradNormSkip(GradNormSkipConfig(alpha=0.5, z_threshold=2.5, warmup=2))
    for n in (1.0, 3.0):
        s.transform([torch.tensor([n], dtype=torch.float64)], 0)
    _, skip, _ = s.transform([torch.tensor([10.0], dtype=torch.float64)], 0)
    assert skip and s.mean.item() == pytest.approx(3.25) and s.var.item() == pytest.approx(1.28125)

    norms = [1.0, 1.1, 0.9, 1.0] * 10 + [20.0] * 300  # the norm jumps for good from ~1 to 20
    for mode in ("capped", "frozen"):
        s = GradNormSkip(GradNormSkipConfig(warmup=40, on_spike=mode))
        flags = [bool(s.transform([torch.tensor([n], dtype=torch.float64)], 0)[1] or False) for n in norms]
        ref = zclip_skip_reference(norms, 0.97, 2.5, 40, mode)[1]
        assert flags == ref
        after = flags[40:]
        if mode == "frozen":
            assert all(after)  # training would stop: why 'capped' is the default
        else:
            assert after[0] and not any(after[100:])  # skipped at first, then absorbed


@pytest.mark.component("stabilizer", "grad_norm_skip")
def test_global_norm_over_tensors_and_per_replica_statistics():
    s = GradNormSkip(GradNormSkipConfig(alpha=0.9, z_threshold=1.0, warmup=2, on_spike="frozen"))
    # replica 0: norms 13 (‖(3,4)‖ and ‖12‖ together), 13; replica 1: norms 1, 3
    s.transform([torch.tensor([[3.0, 4.0], [1.0, 0.0]]), torch.tensor([[12.0], [0.0]])], 1)
    s.transform([torch.tensor([[5.0, 0.0], [0.0, 3.0]]), torch.tensor([[12.0], [0.0]])], 1)
    assert s.mean.tolist() == pytest.approx([13.0, 2.0]) and s.var.tolist() == pytest.approx([0.0, 1.0])
    vecs = [torch.tensor([[13.0, 0.0], [4.0, 0.0]]), torch.zeros(2, 1)]
    out, skip, m = s.transform(vecs, 1)
    assert out is vecs  # never edits the gradient, only flags the step
    assert m["grad_skip/z"].tolist() == pytest.approx([0.0, 2.0 / (1.0 + EPS)])
    assert skip.tolist() == [False, True]
    assert s.mean.tolist() == pytest.approx([13.0, 2.0]) and s.var.tolist() == pytest.approx([0.0, 1.0])


@pytest.mark.component("stabilizer", "grad_norm_skip")
def test_spike_skips_one_replica_and_keeps_its_adam_moments():
    gen = torch.Generator().manual_seed(0)
    warm = [torch.randn(2, 3, generator=gen) for _ in range(4)]
    spike = torch.randn(2, 3, generator=gen)
    spike[0] *= 100.0  # replica 0 spikes, replica 1 is an ordinary gradient
    p = torch.zeros(2, 3, requires_grad=True)
    adam = torch.optim.Adam([p], lr=0.1)
    opt = StabilizedOptimizer(
        adam, [p], build_stabilizers([GradNormSkipConfig(warmup=4)]), replica_dims=1, max_grad_norm=1.0
    )
    q = torch.zeros(3, requires_grad=True)  # replica 1 alone, plain Adam with the same clipping
    ref = torch.optim.Adam([q], lr=0.1)
    for g in warm + [spike]:
        before = p.detach().clone()
        moments = {k: v.clone() for k, v in adam.state[p].items()} if adam.state.get(p) else None
        p.grad = g.clone()
        m = opt.step()
        q.grad = g[1].clone()
        torch.nn.utils.clip_grad_norm_([q], 1.0)
        ref.step()
        assert torch.allclose(p[1], q, atol=1e-6)
    norms = [x.norm(dim=1) for x in warm]
    mu = torch.stack(norms).mean(0)
    sigma = torch.stack(norms).var(0, unbiased=False).sqrt()
    z = (spike.norm(dim=1) - mu) / (sigma + EPS)  # from the raw (pre-clip) norm
    assert m["grad_skip/z"].tolist() == pytest.approx(z.tolist(), rel=1e-5)
    assert z[0] > 2.5 > z[1]
    assert m["step/skipped"].tolist() == [1.0, 0.0] and m["grad_skip/skipped"].tolist() == [1.0, 0.0]
    assert torch.equal(p[0], before[0]) and not torch.equal(p[1], before[1])
    for k in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(adam.state[p][k][0], moments[k][0])
        assert not torch.equal(adam.state[p][k][1], moments[k][1])


@pytest.mark.component("stabilizer", "grad_norm_skip")
def test_warmup_never_skips():
    p = torch.zeros(2, requires_grad=True)
    opt = StabilizedOptimizer(torch.optim.SGD([p], lr=1.0), [p], [GradNormSkipConfig(warmup=5)])
    for n in (1.0, 1e3, 1.0, 1e6, 1.0):
        before = p.detach().clone()
        p.grad = torch.tensor([n, 0.0])
        m = opt.step()
        assert m["step/skipped"] == 0 and math.isnan(m["grad_skip/z"]) and p[0] == before[0] - n
    p.grad = torch.tensor([1e7, 0.0])  # after warm-up: μ ≈ 2e5, σ ≈ 4e5 -> z ≈ 24.5, skipped
    before = p.detach().clone()
    m = opt.step()
    assert m["step/skipped"] == 1 and torch.equal(p.detach(), before)


@pytest.mark.component("stabilizer", "grad_norm_skip")
def test_scenario_on_bitstring_logs_z_matching_the_logged_norms():
    from sandbox.run.runner import run_scenario
    from sandbox.scenario.api import validate_scenario

    scn = validate_scenario(
        {
            "task": {"name": "bitstring", "horizon": 6, "replicas": 2},
            "system": {"num_workers": 3, "staleness": {"kind": "max_lag", "k_max": 3}},
            "algorithm": {"group_size": 4, "groups_per_step": 2, "stabilizers": [{"name": "grad_norm_skip"}]},
            "run": {"seed": 7, "steps": 32, "figures": False},
        }
    )
    res = run_scenario(scn, force=True)
    assert "grad_skip/z" in res.metrics.columns and "grad_skip/skipped" in res.metrics.columns
    z, norms = res.replica_metrics["grad_skip/z"], res.replica_metrics["grad/norm"]
    assert z.shape == (32, 2) and np.isnan(z[:25]).all() and np.isfinite(z[25:]).all()
    cfg = GradNormSkipConfig()
    for r in range(2):
        expect, skips = zclip_skip_reference(norms[:, r].tolist(), cfg.alpha, cfg.z_threshold, cfg.warmup)
        assert z[25:, r] == pytest.approx(expect[25:], rel=1e-4, abs=1e-4)
        assert res.replica_metrics["grad_skip/skipped"][:, r].tolist() == [float(s) for s in skips]
