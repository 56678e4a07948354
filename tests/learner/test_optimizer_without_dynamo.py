"""``without_dynamo``: the sandbox's optimizers are torch's own with the wrappers that import
``torch._dynamo`` taken off (issue 48). Each runs the same update to the bit as the torch class it
subclasses, with the same state dict, for every optimizer ``build_optimizer`` builds; and building and
stepping one imports no ``torch._dynamo`` (checked in a fresh interpreter)."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch

from sandbox.learner.optim import OptimizerConfig, build_optimizer, without_dynamo

TORCH_CLASS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}


def _cfg(name: str) -> OptimizerConfig:
    return OptimizerConfig(name=name, lr=0.05, momentum=0.5 if name == "sgd" else 0.0, weight_decay=0.01)


def _train(opt, w: torch.Tensor, steps: int = 7) -> torch.Tensor:
    for k in range(steps):
        opt.zero_grad()
        (torch.sin(3 * w) * (w - k) ** 2).sum().backward()
        for g in opt.param_groups:
            g["lr"] = 0.05 / (k + 1)
        opt.step()
    return w.detach().clone()


@pytest.mark.parametrize("name", sorted(TORCH_CLASS))
def test_the_same_update_and_state_as_torch(name):
    cfg = _cfg(name)
    start = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    ours_w, theirs_w = start.clone().requires_grad_(True), start.clone().requires_grad_(True)
    ours = build_optimizer(cfg, [ours_w])
    kw = (
        {"lr": cfg.lr, "momentum": cfg.momentum, "weight_decay": cfg.weight_decay}
        if name == "sgd"
        else {"lr": cfg.lr, "betas": cfg.betas, "eps": cfg.eps, "weight_decay": cfg.weight_decay}
    )
    theirs = TORCH_CLASS[name]([theirs_w], **kw)
    assert isinstance(ours, TORCH_CLASS[name]) and type(ours) is not TORCH_CLASS[name]
    a, b = _train(ours, ours_w), _train(theirs, theirs_w)
    assert torch.equal(a, b)
    assert not torch.equal(a, start)  # it trained
    sa, sb = ours.state_dict(), theirs.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    for key in sb["state"][0]:
        sa_v, sb_v = sa["state"][0][key], sb["state"][0][key]
        assert torch.equal(sa_v, sb_v) and sa_v.dtype == sb_v.dtype, key
    # a state dict loads across the two classes and the runs continue together
    resumed_w = ours_w.detach().clone().requires_grad_(True)
    resumed = build_optimizer(cfg, [resumed_w])
    resumed.load_state_dict(copy.deepcopy(sb))  # a state dict shares the live moment tensors
    assert torch.equal(_train(resumed, resumed_w, 3), _train(theirs, theirs_w, 3))


def test_one_subclass_per_torch_class():
    assert without_dynamo(torch.optim.Adam) is without_dynamo(torch.optim.Adam)
    assert without_dynamo(torch.optim.Adam) is not without_dynamo(torch.optim.AdamW)


def test_building_and_stepping_imports_no_dynamo():
    code = (
        "import sys, torch\n"
        "from sandbox.learner.optim import OptimizerConfig, build_optimizer\n"
        "for name in ('adam', 'adamw', 'sgd'):\n"
        "    w = torch.ones(2, 3, requires_grad=True)\n"
        "    opt = build_optimizer(OptimizerConfig(name=name), [w])\n"
        "    (w * w).sum().backward(); opt.step(); opt.zero_grad(); opt.load_state_dict(opt.state_dict())\n"
        "    assert float(w.sum()) != 6.0\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "False"


@pytest.mark.parametrize("name", sorted(TORCH_CLASS))
def test_unhooked_step_takes_the_unwrapped_update(name):
    from sandbox.learner.optim import unhooked_step

    w = torch.ones(1, 3, requires_grad=True)
    opt = build_optimizer(_cfg(name), [w])
    step = unhooked_step(opt)
    assert step != opt.step  # not the fallback: the profiler/hook wrapper is bypassed
    calls = []
    type(opt).step, wrapped = (lambda *a, **k: calls.append(1)), type(opt).step  # a wrapper that would be seen
    try:
        w.grad = torch.ones(1, 3)
        with torch.no_grad():
            step()
    finally:
        type(opt).step = wrapped
    assert calls == [] and not torch.equal(w.detach(), torch.ones(1, 3))
