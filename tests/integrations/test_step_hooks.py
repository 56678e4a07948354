"""The stabilizers attached by optimizer hooks (``sandbox.integrations.step_hooks``) do exactly what
the simulator's learner does with :class:`StabilizedOptimizer`: same parameters, bitwise, step after step."""

from __future__ import annotations

import pytest
import torch

from sandbox.algorithms import GACConfig, StabilizedOptimizer, StepContext, VCPOLRConfig
from sandbox.algorithms.stabilizers.grad_norm_skip import GradNormSkipConfig
from sandbox.integrations.step_hooks import StabilizerHooks, check_full_gradients


def _gradients(steps: int, shapes, aligned: float):
    """Gradient sequences whose consecutive members are strongly aligned (GAC fires) plus noise."""
    gen = torch.Generator().manual_seed(7)
    base = [torch.randn(s, generator=gen) for s in shapes]
    out = []
    for t in range(steps):
        scale = 30.0 if t == 9 else 1.0  # one spike for grad_norm_skip
        out.append([scale * (aligned * b + torch.randn(s, generator=gen)) for b, s in zip(base, shapes)])
    return out


def _run(stabilizers, use_hooks: bool, steps: int = 14):
    shapes = [(5, 3), (3,), (4,)]
    params = [torch.zeros(s, requires_grad=True) for s in shapes]
    opt = torch.optim.AdamW(params, lr=0.1, weight_decay=0.01)
    ess = iter(torch.linspace(1.0, 0.3, steps))
    metrics = []
    if use_hooks:
        hooks = StabilizerHooks(opt, params, stabilizers, context=lambda: StepContext(ess_ratio=next(ess)),
                                on_metrics=metrics.append, grad_cosine=False)
    else:
        wrapped = StabilizedOptimizer(opt, params, stabilizers)
    for grads in _gradients(steps, shapes, aligned=2.0):
        for p, g in zip(params, grads):
            p.grad = g.clone()
        if use_hooks:
            opt.step()
        else:
            m = wrapped.step(StepContext(ess_ratio=next(ess)))
            metrics.append({k: float(v) for k, v in m.items()})
    state = [{k: v.clone() for k, v in opt.state[p].items()} for p in params]
    return [p.detach().clone() for p in params], state, metrics, (hooks if use_hooks else None)


STACKS = {
    "gac": [GACConfig(c_thr=0.3)],
    "gac_skip": [GACConfig(c_thr=0.3, c_skip=0.8)],
    "gac_post_optimizer": [GACConfig(c_thr=0.3, placement="post_optimizer", c_skip=0.8)],
    "vcpo_then_gac": [VCPOLRConfig(), GACConfig(c_thr=0.2, strength="to_target")],
    "grad_norm_skip": [GradNormSkipConfig(warmup=3, on_spike="frozen")],
}


@pytest.mark.parametrize("name", list(STACKS))
def test_hooks_match_the_stabilized_optimizer_bitwise(name):
    p_wrap, s_wrap, m_wrap, _ = _run(STACKS[name], use_hooks=False)
    p_hook, s_hook, m_hook, hooks = _run(STACKS[name], use_hooks=True)
    for a, b in zip(p_wrap, p_hook):
        assert torch.equal(a, b)
    for a, b in zip(s_wrap, s_hook):  # Adam moments and step count, skipped steps included
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), k
    assert [m["lr/scale"] for m in m_wrap] == [m["lr/scale"] for m in m_hook]
    assert [m["step/skipped"] for m in m_wrap] == [m["step/skipped"] for m in m_hook]
    assert hooks.steps == len(m_hook)


def test_the_stacks_really_act():
    """Each stack above changes the trajectory (a test that compared two idle wrappers would prove nothing)."""
    plain, _, _, _ = _run([], use_hooks=True)
    for name, stack in STACKS.items():
        params, _, metrics, _ = _run(stack, use_hooks=True)
        assert any(not torch.equal(a, b) for a, b in zip(plain, params)), name
    _, _, metrics, _ = _run(STACKS["gac_skip"], use_hooks=True)
    assert sum(m["step/skipped"] for m in metrics) >= 1
    _, _, metrics, _ = _run(STACKS["gac"], use_hooks=True)
    assert sum(m.get("gac/projected", 0.0) for m in metrics) >= 3


def test_project_then_clip_runs_before_the_trainers_clipping():
    """``before_clip()`` is the trainer's hook point: GAC placed before clipping sees the unclipped gradient,
    and the trainer's in-place clipping (torch's clip_grad_norm_) then acts on the projected one."""
    gen = torch.Generator().manual_seed(0)
    p = torch.zeros(6, requires_grad=True)
    opt = torch.optim.SGD([p], lr=1.0)
    gac = GACConfig(c_thr=0.1, clip_order="project_then_clip", reference="prev_raw")
    hooks = StabilizerHooks(opt, [p], [gac], grad_cosine=True)
    g0 = torch.randn(6, generator=gen)
    raw = []
    for t in range(4):
        before = p.detach().clone()
        raw.append(10.0 * g0 + 0.1 * torch.randn(6, generator=gen))
        p.grad = raw[-1].clone()
        hooks.before_clip()
        torch.nn.utils.clip_grad_norm_([p], 1.0)
        opt.step()
        update = p.detach() - before
        if t:
            assert hooks.last_metrics["gac/projected"] == 1.0
            assert hooks.last_metrics["grad/cos_prev"] > 0.99  # the raw gradients are aligned
            cos = torch.nn.functional.cosine_similarity(update, raw[-2], dim=0)
            # Full removal: orthogonal to the previous raw gradient, up to float32 cancellation of a parallel
            # part ~100x the residual (|cos| of order 100 x 1e-7 x sqrt(dim)).
            assert abs(float(cos)) < 1e-3
            # Projected first, the residual (norm ~0.24) is below the clip norm and kept whole; clipped first,
            # it would have been scaled by about 1/30 before the projection.
            assert 0.1 < float(update.norm()) <= 1.0 + 1e-6


@pytest.mark.parametrize("backend", ["FSDP", "DistributedType.DEEPSPEED"])
def test_sharded_gradients_are_refused(backend):
    with pytest.raises(ValueError, match="full gradient"):
        check_full_gradients(backend)
    check_full_gradients("MULTI_GPU")
