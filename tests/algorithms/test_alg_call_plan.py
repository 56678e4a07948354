"""The policy loss decides once what a call reads and computes (its ``_CallPlan``: log ρ, the ratio, each
optional monitor) and keeps the decision while what it depends on is unchanged: the monitors object, the
correction, whether a recorder observes, the objective, and whether the advantages are given and the loss is
decoupled. A loss whose plan was made for other inputs gives, after the change, what a new loss gives, to the
bit; a built-in mutable container of monitors is read at every call. The cheaper tensor forms of the loss path
(the float mask, the group-mean baseline's broadcast, the mask-free aggregation of one position per response)
are the forms they replace, to the bit, on random inputs with NaN, ±inf and −0.0."""

from __future__ import annotations

import pytest
import torch

from sandbox.algorithms import advantages as A
from sandbox.algorithms import policy_loss
from sandbox.algorithms._tensor import aggregate, group_view
from sandbox.algorithms.api import PolicyLossInput
from sandbox.algorithms.corrections import TISConfig
from sandbox.algorithms.objectives import PPOConfig, ReinforceConfig
from sandbox.algorithms.policy_loss import build_policy_loss
from sandbox.learner.metric_levels import metric_set

SPECIALS = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 3.0e38, -3.0e38, 1.0e-45])


def _random(shape, dtype, gen, specials=True) -> torch.Tensor:
    """Normal values over many magnitudes, with about a tenth of them NaN, ±inf, ±0.0, huge or subnormal."""
    x = torch.randn(shape, generator=gen, dtype=torch.float64) * torch.exp(
        torch.randn(shape, generator=gen, dtype=torch.float64) * 8
    )
    if specials:
        where = torch.rand(shape, generator=gen) < 0.1
        x[where] = SPECIALS[torch.randint(0, len(SPECIALS), (int(where.sum()),), generator=gen)].double()
    return x.to(dtype)


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.detach().contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()])


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


# ------------------------------------------------------------------------------------------- tensor forms
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_mask_free_aggregation_of_one_position_is_the_two_step_mean(dtype):
    gen = torch.Generator().manual_seed(11)
    shapes = [(1, 32, 1), (7, 1), (3, 65, 1), (2, 3, 9, 1), (1, 1000, 1), (4, 257, 1)]
    for trial in range(60):
        shape = shapes[trial % len(shapes)]
        base = _random(shape, dtype, gen, specials=trial % 3 != 0)
        if trial % 7 == 0:
            base = -torch.zeros(shape, dtype=dtype)
        if trial % 5 == 0:  # a strided view: every other response of a wider batch
            base = _random((*shape[:-2], 2 * shape[-2], 1), dtype, gen)

        def leaf(x=base, strided=trial % 5 == 0):  # noqa: B008 - the trial's tensor, fresh each call
            x = x.clone()
            return (x[..., ::2, :] if strided else x).detach().requires_grad_()

        a, b = leaf(), leaf()
        got = aggregate(a, None, "seq_mean_token_sum")
        want = b.sum(-1).mean(-1)
        assert _same_bits(got, want), (trial, shape)
        weights = _random(got.shape, dtype, gen, specials=False)
        (got * weights).sum().backward()
        (want * weights).sum().backward()
        assert _same_bits(a.grad, b.grad), (trial, shape)
    x = _random((2, 8, 3), dtype, gen, specials=False)  # more than one position: the two-step mean itself
    assert _same_bits(aggregate(x, None, "seq_mean_token_sum"), x.sum(-1).mean(-1))
    assert not torch.equal(x.mean((-2, -1)), x.sum(-1).mean(-1))  # which the one-step form is not


@pytest.mark.parametrize(
    "mask_dtype, mask_shape",
    [(torch.float32, (2, 8, 3)), (torch.float64, (2, 8, 3)), (torch.float32, (8, 3)), (torch.bool, (2, 8, 3))],
)
def test_float_mask_is_the_converted_broadcast_mask(mask_dtype, mask_shape):
    gen = torch.Generator().manual_seed(4)
    logp = _random((2, 8, 3), torch.float32, gen)
    mask = (torch.rand(mask_shape, generator=gen) < 0.6).to(mask_dtype)
    if mask_dtype.is_floating_point:
        mask[..., 0] = _random(mask[..., 0].shape, mask_dtype, gen)  # whatever the values, they pass unchanged
    inp = PolicyLossInput(logp=logp, behaviour_logp=logp, mask=mask, rewards=torch.zeros(2, 8), group_size=4)
    assert _same_bits(inp.fmask, mask.to(logp.dtype).expand_as(logp))


@pytest.mark.parametrize("leading", [(), (1,), (3,), (2, 2)])
def test_group_mean_baseline_is_the_reshaped_broadcast_mean(leading):
    gen = torch.Generator().manual_seed(8)
    for trial, dtype in enumerate([torch.float32, torch.float64, torch.float32, torch.float16]):
        rewards = _random((*leading, 24), dtype, gen, specials=trial != 2)
        g = group_view(rewards, 6)
        want = g.mean(-1, keepdim=True).expand_as(g).reshape(rewards.shape)
        got = A.group_mean_baseline(rewards, 6)
        assert _same_bits(got, want) and got.is_contiguous()


# ---------------------------------------------------------------------------------------------- the plan
def _batch(monitors=None, prox=False, injected=False, full=False) -> PolicyLossInput:
    gen = torch.Generator().manual_seed(0)
    logp = (-torch.rand(2, 8, 3, generator=gen)).requires_grad_(True)
    mu = logp.detach() - 0.3 * torch.rand(2, 8, 3, generator=gen)
    mask = torch.ones(2, 8, 3)
    if not full:
        mask[:, 1, 2] = 0.0
    return PolicyLossInput(
        logp=logp,
        behaviour_logp=mu,
        mask=mask,
        rewards=torch.rand(2, 8, generator=gen).round(),
        group_size=4,
        prox_logp=logp.detach() - 0.1 if prox else None,
        token_versions=torch.zeros(2, 8, 3, dtype=torch.long),
        learner_version=2,
        advantages=torch.randn(2, 8, generator=gen) if injected else None,
        monitors=monitors,
        full_mask=full,
    )


def _same_output(a, b) -> None:
    assert _same_bits(a.loss, b.loss)
    assert a.metrics.keys() == b.metrics.keys()
    for k in a.metrics:
        assert _same_bits(torch.as_tensor(a.metrics[k]), torch.as_tensor(b.metrics[k])), k


def _count_plans(monkeypatch) -> list:
    made = []
    init = policy_loss._CallPlan.__init__

    def counted(self, *args):
        made.append(args)
        init(self, *args)

    monkeypatch.setattr(policy_loss._CallPlan, "__init__", counted)
    return made


def test_the_plan_is_made_once_and_kept_while_its_inputs_are_the_same(monkeypatch):
    made = _count_plans(monkeypatch)
    lean = metric_set("lean")
    loss = build_policy_loss(ReinforceConfig(baseline="group_mean"))
    for _ in range(3):
        _same_output(
            loss(_batch(lean, full=True)),
            build_policy_loss(ReinforceConfig(baseline="group_mean"))(_batch(lean, full=True)),
        )
    assert len(made) == 1 + 3  # this loss's one plan, and one for each new loss
    assert set(loss(_batch(lean)).metrics) == {"adv/baseline_mean", "reward/mean", "loss/pg", "loss/total"}


# Each change of what the decision depends on, made on a loss that planned a call (REINFORCE unless named,
# at lean monitors unless ``None`` is named), such that some flag of the decision changes with it.
GROUP_MEAN = ReinforceConfig(baseline="group_mean")
CHANGES = {
    "monitors": (GROUP_MEAN, "lean", lambda loss, kw: kw.update(monitors=None)),
    "other monitors": (GROUP_MEAN, "lean", lambda loss, kw: kw.update(monitors=metric_set("lean", figures=True))),
    "injected": (PPOConfig(), "lean", lambda loss, kw: kw.update(injected=True)),
    "decoupled": (GROUP_MEAN, None, lambda loss, kw: kw.update(prox=True)),
    "recorder": (GROUP_MEAN, "lean", lambda loss, kw: setattr(loss, "recorder", lambda context, result: None)),
    "correction": (
        GROUP_MEAN,
        "lean",
        lambda loss, kw: setattr(loss, "correction", build_policy_loss(PPOConfig(), TISConfig()).correction),
    ),
    "objective": (
        GROUP_MEAN,
        "lean",
        lambda loss, kw: setattr(loss, "objective_impl", build_policy_loss(PPOConfig()).objective_impl),
    ),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_changed_input_of_the_decision_makes_a_new_plan(change):
    objective, level, make_change = CHANGES[change]
    kw = {"monitors": None if level is None else metric_set(level)}
    loss = build_policy_loss(objective)
    loss(_batch(**kw))
    first = loss._plan
    make_change(loss, kw)
    fresh = build_policy_loss(objective)
    fresh.correction, fresh.recorder, fresh.objective_impl = loss.correction, loss.recorder, loss.objective_impl
    _same_output(loss(_batch(**kw)), fresh(_batch(**kw)))
    decided = loss._plan
    assert decided is not first
    flags = policy_loss._CallPlan.__slots__[6:]
    assert any(getattr(decided, k) != getattr(first, k) for k in flags), change  # a stale plan would differ


def test_the_recorder_sees_every_call_after_it_is_set():
    loss = build_policy_loss(ReinforceConfig(baseline="group_mean"))
    lean = metric_set("lean")
    loss(_batch(lean))
    seen = []
    loss.recorder = lambda context, result: seen.append(context.log_rho)
    loss(_batch(lean))
    loss.recorder = None
    loss(_batch(lean))
    assert len(seen) == 1 and seen[0].abs().sum() > 0


def test_a_mutable_container_of_monitors_is_read_at_every_call():
    monitors = {"reward/mean"}
    loss = build_policy_loss(ReinforceConfig(baseline="group_mean"))
    assert "adv/mean" not in loss(_batch(monitors)).metrics
    monitors.add("adv/mean")
    out = loss(_batch(monitors))
    assert "adv/mean" in out.metrics
    _same_output(out, build_policy_loss(ReinforceConfig(baseline="group_mean"))(_batch(monitors)))
    assert loss._plan is None
