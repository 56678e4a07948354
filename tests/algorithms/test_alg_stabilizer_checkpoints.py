"""Stabilizer state survives a checkpoint (``docs/methods/stabilizers.md#checkpoints``): N steps in one go
equal k steps, ``state_dict()`` through ``torch.save``/``torch.load(weights_only=True)`` into a fresh
:class:`StabilizedOptimizer` over a fresh copy of the parameters, and N − k more steps, bitwise in the
parameters, the optimizer state and every metric. Each stateful stack is also resumed WITHOUT its stabilizer
state, which must give another trajectory, so the comparison can fail."""

from __future__ import annotations

import io

import pytest
import torch

from sandbox.algorithms import StabilizedOptimizer, StepContext
from sandbox.algorithms.stabilizers import STABILIZERS
from sandbox.algorithms.stabilizers.gac import GACConfig
from sandbox.algorithms.stabilizers.grad_norm_skip import GradNormSkipConfig
from sandbox.algorithms.stabilizers.staleness_lr import StalenessLRConfig
from sandbox.algorithms.stabilizers.vcpo_lr import VCPOLRConfig

STEPS, RESUME_AT = 14, 7
SHAPES = [(5, 3), (3,), (4,), (3,)]  # two (3,) tensors: GAC's packed path stacks them

STACKS = {
    "gac": [GACConfig(c_thr=0.3)],
    "gac_prev_raw_skip": [GACConfig(c_thr=0.3, reference="prev_raw", c_skip=0.9)],
    "gac_ema_adaptive": [GACConfig(reference="ema", threshold_mode="ema_mean_std", min_history=2, window=4)],
    "gac_per_layer_quantile": [GACConfig(scope="per_layer", threshold_mode="quantile", min_history=2, window=3)],
    "gac_post_optimizer": [GACConfig(c_thr=0.2, placement="post_optimizer", strength="to_target")],
    "vcpo_then_gac": [VCPOLRConfig(), GACConfig(c_thr=0.2, clip_order="project_then_clip")],
    "grad_norm_skip": [GradNormSkipConfig(warmup=4)],  # the warm-up ends before the resume: EMA statistics
    "grad_norm_skip_in_warmup": [GradNormSkipConfig(warmup=8, on_spike="frozen")],  # resumed mid warm-up
    "staleness_lr": [StalenessLRConfig(rule="polynomial")],
    "staleness_drop": [StalenessLRConfig(rule="drop", max_staleness=2.5)],
    "all": [GradNormSkipConfig(warmup=3), StalenessLRConfig(), VCPOLRConfig(), GACConfig(c_thr=0.25)],
}
STATELESS = {"vcpo_lr", "staleness_lr"}


def _grad(t: int, params, replicas: int | None):
    """A gradient that depends on the weights (so a different past gives a different future), strongly
    aligned from step to step (GAC fires), with one spike at step 10 (grad_norm_skip)."""
    gen = torch.Generator().manual_seed(1000 + t)
    base = torch.Generator().manual_seed(7)
    out = []
    for p in params:
        shape = p.shape
        g = 2.0 * torch.randn(shape[1:] if replicas else shape, generator=base) + torch.randn(shape, generator=gen)
        out.append((30.0 if t == 10 else 1.0) * (g + 0.5 * p.detach()))
    return out


def _context(t: int, replicas: int | None):
    shape = (replicas,) if replicas else ()
    ess = torch.full(shape, 1.0 - 0.05 * t).double()
    lag = torch.arange(replicas or 1).double().reshape(shape) + t % 4
    return StepContext(ess_ratio=ess, staleness=lag)


def _fresh(stack, replicas: int | None, params=None):
    shapes = [((replicas,) + s) if replicas else s for s in SHAPES]
    params = params or [torch.zeros(s, requires_grad=True) for s in shapes]
    opt = torch.optim.AdamW(params, lr=0.05, weight_decay=0.01)
    return params, StabilizedOptimizer(
        opt, params, [s.model_copy() for s in stack], replica_dims=1 if replicas else 0, max_grad_norm=5.0
    )


def _steps(params, wrapped, steps, replicas):
    metrics = []
    for t in steps:
        for p, g in zip(params, _grad(t, params, replicas)):
            p.grad = g
        metrics.append({k: v.clone() for k, v in wrapped.step(_context(t, replicas)).items()})
    return metrics


def _roundtrip(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)  # what transformers' Trainer does with optimizer.pt


def _resumed(stack, replicas, load_stabilizers=True):
    params, wrapped = _fresh(stack, replicas)
    first = _steps(params, wrapped, range(RESUME_AT), replicas)
    state = _roundtrip({"params": [p.detach().clone() for p in params], "optimizer": wrapped.state_dict()})
    new_params = [p.clone().requires_grad_(True) for p in state["params"]]
    new_params, resumed = _fresh(stack, replicas, new_params)
    if load_stabilizers:
        resumed.load_state_dict(state["optimizer"])
    else:  # what a checkpoint of the inner optimizer alone restores
        resumed.optimizer.load_state_dict(state["optimizer"]["optimizer"])
    return new_params, resumed, first + _steps(new_params, resumed, range(RESUME_AT, STEPS), replicas)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


@pytest.mark.parametrize("replicas", [None, 3])
@pytest.mark.parametrize("name", list(STACKS))
def test_resume_is_bitwise_the_continuous_run(name, replicas):
    params, wrapped = _fresh(STACKS[name], replicas)
    metrics = _steps(params, wrapped, range(STEPS), replicas)
    new_params, resumed, resumed_metrics = _resumed(STACKS[name], replicas)
    for a, b in zip(params, new_params):
        assert _same(a.detach(), b.detach())
    for a, b in zip(metrics, resumed_metrics):
        assert a.keys() == b.keys()
        for k in a:
            assert _same(a[k], b[k]), k
    inner, inner_resumed = wrapped.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    for i in inner:
        for k in inner[i]:
            assert _same(torch.as_tensor(inner[i][k]), torch.as_tensor(inner_resumed[i][k])), (i, k)
    saved, saved_resumed = wrapped.stabilizer_state_dict(), resumed.stabilizer_state_dict()
    assert _roundtrip(saved) is not None and [e["name"] for e in saved] == [e["name"] for e in saved_resumed]


@pytest.mark.parametrize("replicas", [None, 3])
@pytest.mark.parametrize("name", [n for n, stack in STACKS.items() if {s.name for s in stack} - STATELESS])
def test_resuming_without_the_stabilizer_state_gives_another_run(name, replicas):
    """The test above can fail: a stateful stack resumed from the inner optimizer's state alone (the old
    ``StabilizedOptimizer.state_dict()``) takes other steps."""
    params, wrapped = _fresh(STACKS[name], replicas)
    _steps(params, wrapped, range(STEPS), replicas)
    new_params, _, _ = _resumed(STACKS[name], replicas, load_stabilizers=False)
    assert any(not _same(a.detach(), b.detach()) for a, b in zip(params, new_params))


def test_every_registered_stabilizer_is_covered():
    """A new stabilizer (stateful or not) must join the stacks above."""
    covered = {s.name for stack in STACKS.values() for s in stack}
    assert set(STABILIZERS.names()) <= covered, set(STABILIZERS.names()) - covered
    assert {n for n in STABILIZERS.names() if n in STATELESS} == STATELESS


def test_the_stacks_really_act():
    """GAC projects (and skips), grad_norm_skip skips the spike after its warm-up, drop skips stale replicas,
    and the LR rules scale: the states compared above are not idle."""
    params, wrapped = _fresh(STACKS["gac_prev_raw_skip"], 3)
    m = _steps(params, wrapped, range(STEPS), 3)
    assert sum(float(x["gac/projected"].sum()) for x in m[RESUME_AT:]) >= 3
    assert sum(float(x.get("gac/skipped", torch.zeros(1)).sum()) for x in m) >= 1
    params, wrapped = _fresh(STACKS["grad_norm_skip"], 3)
    m = _steps(params, wrapped, range(STEPS), 3)
    assert bool(m[10]["grad_skip/skipped"].all())
    params, wrapped = _fresh(STACKS["staleness_drop"], 3)
    assert any(bool(x["step/skipped"].any()) for x in _steps(params, wrapped, range(STEPS), 3))
    params, wrapped = _fresh(STACKS["vcpo_then_gac"], None)
    assert float(_steps(params, wrapped, range(STEPS), None)[-1]["lr/scale"]) < 0.9


def test_a_checkpoint_of_other_stabilizers_is_refused():
    params, wrapped = _fresh(STACKS["gac"], None)
    _steps(params, wrapped, range(2), None)
    _, other = _fresh(STACKS["vcpo_then_gac"], None)
    with pytest.raises(ValueError, match=r"stabilizers \['gac'\], but this optimizer runs \['vcpo_lr', 'gac'\]"):
        other.load_state_dict(wrapped.state_dict())
    with pytest.raises(ValueError, match="optimizer.*missing"):
        other.load_state_dict({"stabilizers": []})
    with pytest.raises(ValueError, match="VCPOLR carries no state"):
        STABILIZERS.build(VCPOLRConfig()).load_state_dict({"window": []})
