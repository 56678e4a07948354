"""``unhooked_step``: the optimizer's own update without torch's per-call wrappers (issue 32, row 11).
The weights after several steps are the wrapped ``optimizer.step``'s to the bit for each optimizer the
sandbox builds, and a registered step hook (or grad mode on) sends the call through ``optimizer.step``."""

from __future__ import annotations

import torch

from sandbox.learner.optim import OptimizerConfig, build_optimizer, unhooked_step


def _run(name: str, unhooked: bool) -> torch.Tensor:
    w = torch.tensor([[0.3, -1.2, 2.0, 0.5]], requires_grad=True)
    opt = build_optimizer(
        OptimizerConfig(name=name, lr=0.1, momentum=0.5 if name == "sgd" else 0.0, weight_decay=0.01), [w]
    )
    step = unhooked_step(opt) if unhooked else opt.step
    for k in range(5):
        w.grad = None
        ((w - k) ** 3).sum().backward()
        with torch.no_grad():
            step()
    return w.detach()


def test_the_same_weights_as_optimizer_step():
    for name in ("adam", "adamw", "sgd"):
        a, b = _run(name, True), _run(name, False)
        assert torch.equal(a, b), name
        assert not torch.equal(a, _run("sgd" if name != "sgd" else "adam", False))  # the comparison can fail


def test_hooks_and_grad_mode_take_the_wrapped_step():
    w = torch.zeros(1, 3, requires_grad=True)
    opt = build_optimizer(OptimizerConfig(name="adam"), [w])
    step = unhooked_step(opt)
    calls = []
    handle = opt.register_step_post_hook(lambda *_: calls.append(1))
    w.grad = torch.ones(1, 3)
    with torch.no_grad():
        step()
    assert calls == [1]
    handle.remove()
    with torch.no_grad():
        step()
    assert calls == [1]  # no hook: the unwrapped update ran, and it stepped
    assert int(opt.state[w]["step"]) == 2
    step()  # grad mode on: through optimizer.step, which switches it off itself
    assert int(opt.state[w]["step"]) == 3
