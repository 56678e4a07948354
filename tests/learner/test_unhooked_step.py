"""``unhooked_step``: the optimizer's own update without torch's per-call wrappers (issue 32, row 11).
The weights after several steps are the wrapped ``optimizer.step``'s to the bit for each optimizer the
sandbox builds, and a registered step hook (or grad mode on) sends the call through ``optimizer.step``."""

from __future__ import annotations

import copy

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


def _adam_pair(name: str, fast: bool) -> list[torch.Tensor]:
    """Two parameters (one of them without a gradient on odd steps) and a rate changed every step, as the
    learner's schedule does; ``fast``: every step after the first through the single-tensor Adam path."""
    from sandbox.learner.optim import _single_tensor_adam_step

    w = torch.tensor([[0.3, -1.2, 2.0, 0.5]], requires_grad=True)
    v = torch.tensor([[1.5, -0.25]], requires_grad=True)
    opt = build_optimizer(OptimizerConfig(name=name, lr=0.1, weight_decay=0.01), [w, v])
    adam = _single_tensor_adam_step(opt)
    assert adam is not None
    for k in range(6):
        w.grad = v.grad = None
        loss = ((w - k) ** 3).sum() + (0.0 if k % 2 else (v * v).sum())
        loss.backward()
        for group in opt.param_groups:
            group["lr"] = 0.1 / (k + 1)
        with torch.no_grad():
            if not fast:
                opt.step()
            elif not adam():  # only the first step, which creates the state
                assert k == 0
                opt.step()
    return [w.detach(), v.detach(), *(opt.state[p]["exp_avg_sq"] for p in (w, v))]


def test_single_tensor_adam_path_is_adam_step_to_the_bit():
    for name in ("adam", "adamw"):
        fast, full = _adam_pair(name, True), _adam_pair(name, False)
        for a, b in zip(fast, full):
            assert torch.equal(a, b), name
    assert not torch.equal(_adam_pair("adam", True)[0], _adam_pair("adamw", True)[0])  # the comparison can fail


def test_single_tensor_adam_path_declines_what_adam_step_does_more():
    from sandbox.learner.optim import _single_tensor_adam_step

    w = torch.zeros(1, 3, requires_grad=True)
    sgd = build_optimizer(OptimizerConfig(name="sgd"), [w])
    assert _single_tensor_adam_step(sgd) is None
    amsgrad = torch.optim.Adam([w], amsgrad=True)
    assert _single_tensor_adam_step(amsgrad) is None
    opt = build_optimizer(OptimizerConfig(name="adam"), [w])
    adam = _single_tensor_adam_step(opt)
    w.grad = torch.ones(1, 3)
    with torch.no_grad():
        assert adam() is False and w.abs().sum() == 0  # no state yet: nothing done
        opt.step()
        assert adam() is True and int(opt.state[w]["step"]) == 2
        opt.grad_scale = torch.ones(())  # a gradient scaler: the full step
        assert adam() is False and int(opt.state[w]["step"]) == 2


def test_single_tensor_adam_path_follows_load_state_dict():
    """``load_state_dict`` replaces the optimizer's state and groups: the path steps the loaded ones (the
    weights of a run resumed from a checkpoint are the full steps' to the bit), and re-checks the groups."""
    from sandbox.learner.optim import _single_tensor_adam_step

    def run(fast: bool) -> torch.Tensor:
        w = torch.tensor([[0.3, -1.2, 2.0, 0.5]], requires_grad=True)
        opt = build_optimizer(OptimizerConfig(name="adam", lr=0.1), [w])
        adam = _single_tensor_adam_step(opt)
        saved = None
        for k in range(6):
            if k == 4:  # back to the state after step 1, then on
                opt.load_state_dict(saved)
            w.grad = None
            ((w - k) ** 3).sum().backward()
            with torch.no_grad():
                if not (fast and adam()):
                    opt.step()
            if k == 1:
                saved = copy.deepcopy(opt.state_dict())
        return w.detach()

    assert torch.equal(run(True), run(False))
    w = torch.zeros(1, 3, requires_grad=True)
    opt = build_optimizer(OptimizerConfig(name="adam"), [w])
    adam = _single_tensor_adam_step(opt)
    w.grad = torch.ones(1, 3)
    with torch.no_grad():
        opt.step()
        state = opt.state_dict()
        state["param_groups"][0]["amsgrad"] = True
        opt.load_state_dict(state)  # groups the path does not cover: the full step
        assert adam() is False
