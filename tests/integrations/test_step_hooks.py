"""The stabilizers attached by optimizer hooks (``sandbox.integrations.step_hooks``) do exactly what
the simulator's learner does with :class:`StabilizedOptimizer`: same parameters, bitwise, step after step."""

from __future__ import annotations

import math

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
        hooks = StabilizerHooks(
            opt,
            params,
            stabilizers,
            context=lambda: StepContext(ess_ratio=next(ess)),
            on_metrics=metrics.append,
            grad_cosine=False,
        )
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


@pytest.mark.parametrize("name", ["gac", "gac_skip", "gac_post_optimizer", "vcpo_then_gac", "grad_norm_skip"])
def test_the_optimizers_own_state_dict_carries_the_stabilizers_through_a_checkpoint(name):
    """``optimizer.state_dict()`` (what a trainer saves) holds the hooks' state, and
    ``optimizer.load_state_dict(torch.load(..., weights_only=True))`` on a fresh optimizer with fresh hooks
    restores it: resumed at step 7, the run is the continuous one bitwise (parameters, every metric,
    ``grad/cos_prev`` included); an optimizer state without it resumes differently."""
    import io

    from sandbox.integrations.step_hooks import STATE_KEY

    shapes, steps, k = [(5, 3), (3,), (4,)], 14, 7
    grads = _gradients(steps, shapes, aligned=2.0)
    ess = torch.linspace(1.0, 0.3, steps)

    def build(params):
        opt = torch.optim.AdamW(params, lr=0.1, weight_decay=0.01)
        metrics = []
        counter = iter(range(steps))
        hooks = StabilizerHooks(
            opt,
            params,
            [s.model_copy() for s in STACKS[name]],
            on_metrics=metrics.append,
            context=lambda: StepContext(ess_ratio=ess[next(counter)]),
            grad_cosine=True,
        )
        return opt, hooks, metrics

    def run(params, opt, ts):
        for t in ts:
            for p, g in zip(params, grads[t]):
                p.grad = (g + 0.5 * p.detach()).clone()
            opt.step()

    params = [torch.zeros(s, requires_grad=True) for s in shapes]
    opt, hooks, metrics = build(params)
    run(params, opt, range(k))
    buf = io.BytesIO()
    torch.save({"params": [p.detach().clone() for p in params], "optimizer": opt.state_dict()}, buf)
    run(params, opt, range(k, steps))
    assert STATE_KEY in opt.state_dict()

    def resume(with_state: bool):
        buf.seek(0)
        saved = torch.load(buf, weights_only=True)
        new = [p.clone().requires_grad_(True) for p in saved["params"]]
        opt2, hooks2, metrics2 = build(new)
        if not with_state:
            saved["optimizer"].pop(STATE_KEY)
        later = iter(range(k, steps))  # the resumed run's contexts continue at step k
        hooks2.context = lambda: StepContext(ess_ratio=ess[next(later)])
        opt2.load_state_dict(saved["optimizer"])
        assert STATE_KEY not in opt2.state_dict()["state"]
        run(new, opt2, range(k, steps))
        return new, hooks2, metrics2

    new, hooks2, metrics2 = resume(with_state=True)
    assert all(torch.equal(a, b) for a, b in zip(params, new))
    same = [
        a.keys() == b.keys() and all(a[m] == b[m] or (math.isnan(a[m]) and math.isnan(b[m])) for m in a)
        for a, b in zip(metrics[k:], metrics2)
    ]
    assert len(metrics2) == steps - k and all(same) and hooks2.steps == hooks.steps == steps
    assert not math.isnan(metrics2[0]["grad/cos_prev"])
    new, _, metrics3 = resume(with_state=False)
    assert metrics3[0]["grad/cos_prev"] != metrics3[0]["grad/cos_prev"]  # NaN: no previous gradient
    assert any(not torch.equal(a, b) for a, b in zip(params, new))
