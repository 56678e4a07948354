"""GAC, VCPO ESS learning-rate control, staleness LR rules and the StabilizedOptimizer protocol
(docs/methods/stabilizers.md)."""

import inspect
import math

import pytest
import torch

from sandbox.algorithms import (
    GACConfig,
    StabilizedOptimizer,
    StalenessLRConfig,
    StepContext,
    VCPOLRConfig,
    build_stabilizers,
    ess_ratio_from_log_weights,
    stabilized,
    staleness_weight,
    vcpo_lr_multiplier,
)
from sandbox.algorithms.stabilizers import GAC, STABILIZERS, Stabilizer, to_target_coefficient


def cos(a, b):
    return (a * b).sum() / (a.norm() * b.norm())


def correlated_grads(n, d=20, rho=0.8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(d, generator=g)
    out = []
    for _ in range(n):
        x = rho * x + math.sqrt(1 - rho**2) * torch.randn(d, generator=g) + 0.5
        out.append(x.clone())
    return out


@pytest.mark.component("stabilizer", "gac")
def test_gac_one_sided_full_removal_bounds_cosine():
    gac = GAC(GACConfig(c_thr=0.3))
    ref = None
    fired = 0
    for g in correlated_grads(50):
        (gt,), _, m = gac.transform([g], 0)
        if ref is not None:
            c = cos(gt, ref)
            assert c <= 0.3 + 1e-6
            if m["gac/projected"] > 0:
                fired += 1
                assert abs(c) < 1e-5  # α = 1 removes the whole parallel part
                assert m["gac/cos_ref"] > 0.3
        ref = gt  # reference = previous applied gradient
    assert fired > 10


@pytest.mark.component("stabilizer", "gac")
def test_gac_inactive_below_threshold():
    gac = GAC(GACConfig(c_thr=0.3))
    g1 = torch.tensor([1.0, 0.0, 0.0])
    g2 = torch.tensor([0.2, 1.0, 0.0])  # cos = .196 < .3
    gac.transform([g1], 0)
    (out,), _, m = gac.transform([g2], 0)
    assert torch.equal(out, g2) and m["gac/projected"] == 0


@pytest.mark.component("stabilizer", "gac")
def test_gac_to_target_and_two_sided_and_renorm():
    g1 = torch.tensor([1.0, 0.0])
    g2 = torch.tensor([1.0, 1.0])  # cos .707
    gac = GAC(GACConfig(c_thr=0.3, strength="to_target"))
    gac.transform([g1], 0)
    (out,), _, _ = gac.transform([g2], 0)
    assert cos(out, g1).item() == pytest.approx(0.3, abs=1e-6)
    # two-sided acts on anti-aligned gradients too; one-sided leaves them alone
    g3 = torch.tensor([-1.0, 1.0])
    for sided, expect_change in [("one_sided", False), ("two_sided", True)]:
        gac = GAC(GACConfig(c_thr=0.3, sided=sided, renorm=True))
        gac.transform([g1], 0)
        (out,), _, _ = gac.transform([g3], 0)
        assert (not torch.allclose(out, g3)) == expect_change
        if expect_change:
            assert out.norm().item() == pytest.approx(g3.norm().item())  # renorm keeps ‖g‖
            assert abs(cos(out, g1).item()) < 1e-6


@pytest.mark.component("stabilizer", "gac")
def test_gac_per_layer_scope():
    gac = GAC(GACConfig(scope="per_layer", c_thr=0.3))
    a1, b1 = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    a2, b2 = torch.tensor([1.0, 0.1]), torch.tensor([1.0, 0.0])  # layer a aligned, layer b orthogonal
    gac.transform([a1, b1], 0)
    (oa, ob), _, m = gac.transform([a2, b2], 0)
    assert abs(cos(oa, a1)) < 1e-6 and torch.equal(ob, b2)
    assert m["gac/projected"].item() == pytest.approx(0.5)


@pytest.mark.component("stabilizer", "gac")
def test_gac_through_optimizer_sgd_applied_updates_near_orthogonal():
    torch.manual_seed(0)
    p = torch.zeros(20, requires_grad=True)
    opt = StabilizedOptimizer(torch.optim.SGD([p], lr=1.0), [p], [GACConfig(c_thr=0.3)])
    prev_delta = None
    for g in correlated_grads(30, seed=1):
        before = p.detach().clone()
        p.grad = g.clone()
        opt.step()
        delta = p.detach() - before
        if prev_delta is not None:
            assert cos(delta, prev_delta) <= 0.3 + 1e-6
        prev_delta = delta


@pytest.mark.component("stabilizer", "gac")
def test_gac_skip_step_keeps_parameters():
    p = torch.zeros(2, requires_grad=True)
    opt = StabilizedOptimizer(torch.optim.SGD([p], lr=1.0), [p], [GACConfig(c_thr=0.3, c_skip=0.9)])
    p.grad = torch.tensor([1.0, 0.0])
    opt.step()
    p.grad = torch.tensor([1.0, 0.01])  # cos > .9 -> skip
    before = p.detach().clone()
    m = opt.step()
    assert torch.equal(p.detach(), before) and m["step/skipped"].item() == 1.0


@pytest.mark.component("stabilizer", "gac")
def test_gac_post_optimizer_placement_edits_update():
    p = torch.zeros(2, requires_grad=True)
    opt = StabilizedOptimizer(torch.optim.Adam([p], lr=0.1), [p], [GACConfig(c_thr=0.3, placement="post_optimizer")])
    p.grad = torch.tensor([1.0, 0.0])
    before = p.detach().clone()
    opt.step()
    d1 = p.detach() - before
    p.grad = torch.tensor([1.0, 0.5])
    before = p.detach().clone()
    opt.step()
    d2 = p.detach() - before
    assert abs(cos(d1, d2)) < 1e-5  # Adam's update direction had its aligned part removed


@pytest.mark.component("stabilizer", "vcpo_lr")
def test_vcpo_multiplier_formula():
    # weights [2, 1, 1, .5]: (Σw)²/(B Σw²) = 4.5²/(4·6.25) = .81
    ratio = ess_ratio_from_log_weights(torch.log(torch.tensor([2.0, 1.0, 1.0, 0.5])))
    assert ratio.item() == pytest.approx(0.81, rel=1e-6)
    assert vcpo_lr_multiplier(ratio, 1.0).item() == pytest.approx(0.9, rel=1e-6)
    assert vcpo_lr_multiplier(ratio, 0.9).item() == pytest.approx(math.sqrt(0.9), rel=1e-6)
    assert vcpo_lr_multiplier(ratio, 0.9, "linear").item() == pytest.approx(0.9, rel=1e-6)
    assert vcpo_lr_multiplier(ratio, 0.55).item() == 1.0  # ESS ratio above ρ_ref: no reduction
    assert vcpo_lr_multiplier(torch.tensor([0.81, 0.2, 1.0]), 0.5).tolist() == pytest.approx([1.0, math.sqrt(0.4), 1.0])


@pytest.mark.component("stabilizer", "vcpo_lr")
@pytest.mark.parametrize("opt_cls", [torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW])
def test_vcpo_lr_scales_this_step_only(opt_cls):
    torch.manual_seed(0)
    g1, g2 = torch.randn(5), torch.randn(5)
    p = torch.zeros(5, requires_grad=True)
    q = torch.zeros(5, requires_grad=True)
    opt = StabilizedOptimizer(opt_cls([p], lr=0.1), [p], build_stabilizers([VCPOLRConfig(rho_ref=1.0)]))
    ref = opt_cls([q], lr=0.1)
    # step 1 with ESS ratio .64 -> multiplier .8 ; a reference optimizer with lr .08 must agree exactly
    p.grad, q.grad = g1.clone(), g1.clone()
    m = opt.step(StepContext(ess_ratio=0.64))
    ref.param_groups[0]["lr"] = 0.08
    ref.step()
    assert m["lr/scale"].item() == pytest.approx(0.8)
    assert torch.allclose(p, q, atol=1e-7)
    assert opt.param_groups[0]["lr"] == 0.1  # base LR untouched
    p.grad, q.grad = g2.clone(), g2.clone()
    opt.step(StepContext(ess_ratio=1.0))
    ref.param_groups[0]["lr"] = 0.1
    ref.step()
    assert torch.allclose(p, q, atol=1e-7)


def test_vcpo_lr_requires_ess():
    p = torch.zeros(2, requires_grad=True)
    opt = StabilizedOptimizer(torch.optim.SGD([p], lr=1.0), [p], [VCPOLRConfig()])
    p.grad = torch.ones(2)
    with pytest.raises(ValueError, match="ess_ratio"):
        opt.step(StepContext())


@pytest.mark.component("stabilizer", "staleness_lr")
def test_staleness_rules_by_hand():
    assert staleness_weight(4.0, StalenessLRConfig(rule="inverse")).item() == pytest.approx(0.25)
    assert staleness_weight(0.0, StalenessLRConfig(rule="inverse")).item() == 1.0
    # (1+3)^-.5 / (1+1)^-.5 = .5 / .7071
    assert staleness_weight(3.0, StalenessLRConfig(rule="polynomial")).item() == pytest.approx(0.5 * math.sqrt(2))
    assert staleness_weight(1.0, StalenessLRConfig(rule="polynomial")).item() == pytest.approx(1.0)
    assert staleness_weight(4.0, StalenessLRConfig(rule="delay_adaptive", num_workers=2)).item() == 0.5
    assert staleness_weight(1.0, StalenessLRConfig(rule="delay_adaptive", num_workers=2)).item() == 1.0
    assert staleness_weight(9.0, StalenessLRConfig(rule="drop")).item() == 0.0
    assert staleness_weight(5.0, StalenessLRConfig(rule="threshold")).item() == 0.5


@pytest.mark.component("stabilizer", "staleness_lr")
def test_staleness_lr_uses_batch_mean_or_max():
    p = torch.zeros(1, requires_grad=True)
    opt = StabilizedOptimizer(torch.optim.SGD([p], lr=1.0), [p], [StalenessLRConfig(batch_tau="max")])
    p.grad = torch.ones(1)
    m = opt.step(StepContext(staleness=torch.tensor([1.0, 2.0, 4.0])))
    assert m["lr/scale"].item() == pytest.approx(0.25) and p.item() == pytest.approx(-0.25)


@pytest.mark.component("stabilizer", "staleness_lr")
def test_staleness_lr_drop_discards_the_gradient_from_adam_too():
    """The drop rule skips the over-stale replica's step: its parameters AND its Adam moments stay as
    they were (a zero multiplier would still feed the stale gradient to the moments), while the other
    replica steps exactly as a plain Adam step."""
    p = torch.zeros(2, 3, requires_grad=True)
    ref = torch.zeros(2, 3, requires_grad=True)
    opt = StabilizedOptimizer(
        torch.optim.Adam([p], lr=0.1), [p], [StalenessLRConfig(rule="drop", max_staleness=2.0)], replica_dims=1
    )
    plain = torch.optim.Adam([ref], lr=0.1)
    for step, lags in enumerate([[0.0, 1.0], [1.0, 5.0], [0.0, 0.0]]):
        g = torch.tensor([[1.0, -2.0, 0.5], [3.0, 1.0, -1.0]]) * (step + 1)
        p.grad, ref.grad = g.clone(), g.clone()
        before = p.detach()[1].clone()
        m = opt.step(StepContext(staleness=torch.tensor([[lags[0]] * 4, [lags[1]] * 4])))
        plain.step()
        assert m["step/skipped"].tolist() == [0.0, float(lags[1] > 2.0)]
        assert m["lr/staleness_scale"].tolist() == [1.0, float(lags[1] <= 2.0)]
        assert torch.equal(before, p.detach()[1]) is (lags[1] > 2.0)  # a dropped replica does not move
    # replica 0 never dropped: identical to plain Adam; replica 1 saw only steps 0 and 2
    assert torch.equal(p.detach()[0], ref.detach()[0])
    other = torch.zeros(3, requires_grad=True)
    adam = torch.optim.Adam([other], lr=0.1)
    for k in (1, 3):
        other.grad = torch.tensor([3.0, 1.0, -1.0]) * k
        adam.step()
    exp_avg = opt.optimizer.state[p]["exp_avg"][1]
    assert torch.allclose(exp_avg, adam.state[other]["exp_avg"], atol=1e-7)
    assert torch.allclose(opt.optimizer.state[p]["exp_avg_sq"][1], adam.state[other]["exp_avg_sq"], atol=1e-7)


def test_gradient_clipping_per_replica():
    p = torch.zeros(2, 3, requires_grad=True)
    opt = StabilizedOptimizer(torch.optim.SGD([p], lr=1.0), [p], [], replica_dims=1, max_grad_norm=1.0)
    p.grad = torch.tensor([[3.0, 4.0, 0.0], [0.3, 0.4, 0.0]])
    m = opt.step()
    assert m["grad/norm"].tolist() == pytest.approx([5.0, 0.5])
    assert torch.allclose(p.detach(), -torch.tensor([[0.6, 0.8, 0.0], [0.3, 0.4, 0.0]]), atol=1e-6)


@pytest.mark.component("stabilizer", "gac", "vcpo_lr", "staleness_lr")
@pytest.mark.parametrize(
    "gac_cfg",
    [
        GACConfig(c_thr=0.3),
        GACConfig(c_thr=0.2, scope="per_layer", reference="ema", clip_order="project_then_clip"),
        GACConfig(c_thr=0.3, placement="post_optimizer", strength="to_target", renorm=True),
        GACConfig(c_thr=0.2, threshold_mode="ema_mean_std", min_history=2),
        GACConfig(c_thr=0.2, c_skip=0.6, skip_mode="zero_update"),
    ],
    ids=["default", "per_layer_ema", "post_to_target", "adaptive", "zero_update_skip"],
)
def test_replicas_match_separate_optimizers(gac_cfg):
    R, steps = 3, 8
    gen = torch.Generator().manual_seed(0)
    grads = [[torch.randn(R, 4, generator=gen) + 0.7, torch.randn(R, 2, generator=gen) + 0.3] for _ in range(steps)]
    ess = [torch.rand(R, generator=gen) for _ in range(steps)]
    stale = [torch.randint(0, 6, (R, 5), generator=gen).float() for _ in range(steps)]
    cfgs = [gac_cfg, VCPOLRConfig(rho_ref=0.8), StalenessLRConfig(rule="polynomial")]

    a, b = torch.zeros(R, 4, requires_grad=True), torch.zeros(R, 2, requires_grad=True)
    batched = StabilizedOptimizer(
        torch.optim.Adam([a, b], lr=0.1), [a, b], build_stabilizers(cfgs), replica_dims=1, max_grad_norm=1.5
    )
    singles = []
    for _ in range(R):
        pa, pb = torch.zeros(4, requires_grad=True), torch.zeros(2, requires_grad=True)
        singles.append(
            (
                pa,
                pb,
                StabilizedOptimizer(
                    torch.optim.Adam([pa, pb], lr=0.1), [pa, pb], build_stabilizers(cfgs), max_grad_norm=1.5
                ),
            )
        )
    for t in range(steps):
        a.grad, b.grad = grads[t][0].clone(), grads[t][1].clone()
        mb = batched.step(StepContext(ess_ratio=ess[t], staleness=stale[t]))
        for r, (pa, pb, opt) in enumerate(singles):
            pa.grad, pb.grad = grads[t][0][r].clone(), grads[t][1][r].clone()
            ms = opt.step(StepContext(ess_ratio=ess[t][r], staleness=stale[t][r]))
            assert torch.allclose(a[r], pa, atol=1e-6) and torch.allclose(b[r], pb, atol=1e-6)
            for k, v in ms.items():
                assert torch.allclose(mb[k][r], v, atol=1e-5), k


# ------------------------------------------------------------------------------------------------
# the protocol (docs/methods/stabilizers.md#protocol)
# ------------------------------------------------------------------------------------------------


def test_optimizer_wrapper_names_no_stabilizer():
    source = inspect.getsource(stabilized).lower()
    assert len(STABILIZERS) >= 4
    for name in STABILIZERS.names():
        assert name not in source, f"stabilized.py special-cases {name!r}; use the stabilizer protocol"


@pytest.mark.component("stabilizer", "gac")
def test_gac_declares_stage_clip_order_and_skip_from_its_config():
    cases = [
        (GACConfig(), ("gradient", False, False)),
        (GACConfig(clip_order="project_then_clip"), ("gradient", True, False)),
        (GACConfig(placement="post_optimizer", clip_order="project_then_clip"), ("update", False, False)),
        (GACConfig(c_skip=0.9), ("gradient", False, True)),
        (GACConfig(c_skip=0.9, skip_mode="zero_update"), ("gradient", False, False)),
        (GACConfig(c_skip=0.9, placement="post_optimizer"), ("update", False, True)),
    ]
    for cfg, expect in cases:
        g = GAC(cfg)
        assert (g.stage, g.before_clip, g.can_skip) == expect, cfg
    assert to_target_coefficient(1.0, 1.0, 0.3) == pytest.approx(1.0 - 0.3 / math.sqrt(0.91))
    assert to_target_coefficient(-2.0, 1.0, 0.3) == pytest.approx(-2.0 + 0.3 / math.sqrt(0.91))


class _Recorder(Stabilizer):
    """Unregistered test stabilizer: records what it sees, optionally scales or flags it."""

    def __init__(self, stage, before_clip=False, factor=1.0, mask=None, can_skip=False):
        super().__init__(None)
        self.stage, self.before_clip, self.factor, self.mask, self.can_skip = stage, before_clip, factor, mask, can_skip
        self.seen = []

    def transform(self, vecs, replica_dims, context=None):
        self.seen.append([v.clone() for v in vecs])
        return [v * self.factor for v in vecs], self.mask, {}

    def lr_scale(self, context, replica_dims=0):
        return torch.tensor(self.factor), {}


def test_protocol_stage_order_and_clip_placement():
    p = torch.zeros(2, requires_grad=True)
    before, after = _Recorder("gradient", before_clip=True), _Recorder("gradient")
    update, lr = _Recorder("update", factor=0.5), _Recorder("lr", factor=0.4)
    opt = StabilizedOptimizer(torch.optim.SGD([p], lr=1.0), [p], [update, after, lr, before], max_grad_norm=1.0)
    p.grad = torch.tensor([3.0, 4.0])
    opt.step()
    assert before.seen[0][0].tolist() == [3.0, 4.0]  # before clipping
    assert after.seen[0][0].tolist() == pytest.approx([0.6, 0.8])  # after clipping
    assert update.seen[0][0].tolist() == pytest.approx([-0.6, -0.8])  # the SGD update Δθ
    assert p.tolist() == pytest.approx([-0.6 * 0.5 * 0.4, -0.8 * 0.5 * 0.4])  # Δ halved, then × 0.4


def test_protocol_refuses_an_undeclared_skip_and_an_unknown_stage():
    p = torch.zeros(2, requires_grad=True)
    opt = StabilizedOptimizer(torch.optim.SGD([p], lr=1.0), [p], [_Recorder("gradient", mask=torch.tensor(True))])
    p.grad = torch.ones(2)
    with pytest.raises(RuntimeError, match="can_skip"):
        opt.step()
    with pytest.raises(ValueError, match="stage"):
        StabilizedOptimizer(torch.optim.SGD([p], lr=1.0), [p], [_Recorder("loss")])
