"""routing and the mixture-of-experts feed-forward (``docs/engines.md#routing``)."""

from __future__ import annotations

import math

import pytest
import torch
from _common import engine, lm_task

from sandbox.engines.routing import RouterFlip
from sandbox.models.transformer import TransformerConfig
from sandbox.models.transformer_nn import MoE, Transformer


def test_moe_forward_hand_value_and_dense_default_unchanged():
    """out = g_{e*} · fc2_{e*}(gelu(fc1_{e*}(h))) with e* = argmax softmax(router(h)); experts = 0 keeps the
    dense block's parameter names (fc1, fc2: warm-start caches and checkpoints stay valid)."""
    torch.manual_seed(0)
    moe = MoE(4, 6, 3)
    h = torch.randn(1, 2, 4)
    g = torch.softmax(moe.router(h), -1)
    want = torch.stack([g[0, i, int(g[0, i].argmax())] * moe.experts[int(g[0, i].argmax())](h[0, i]) for i in range(2)])
    assert torch.allclose(moe(h)[0], want, atol=1e-6)
    dense = Transformer(TransformerConfig(vocab_size=5, max_seq_len=4, d_model=8, n_heads=2, n_layers=1))
    names = [n for n, _ in dense.named_parameters()]
    assert "blocks.0.fc1.weight" in names and not any("moe" in n for n in names)


@pytest.mark.component("engine", "routing")
def test_flip_fraction_and_uniform_other_expert():
    """A router flip happens with probability p (4 binomial standard errors) and goes to each of the other
    E − 1 experts equally often; p = 0 builds no perturbation at all (nothing drawn)."""
    e = engine({"name": "routing", "flip_prob": 0.3})
    flip = RouterFlip(e, torch.Generator().manual_seed(0))
    n, E = 200_000, 4
    top = torch.zeros(n, dtype=torch.long)
    used = flip(top, E)
    frac = float((used != 0).double().mean())
    assert abs(frac - 0.3) < 4 * math.sqrt(0.3 * 0.7 / n)
    assert e.flips == int((used != 0).sum()) and e.decisions == n
    others = torch.bincount(used[used != 0], minlength=E)[1:].double()
    share = others / others.sum()
    assert torch.all((share - 1 / 3).abs() < 4 * math.sqrt((1 / 3) * (2 / 3) / others.sum()))
    assert engine({"name": "routing", "flip_prob": 0.0}).router_flip(torch.Generator()) is None


@pytest.mark.component("engine", "routing")
def test_sampler_flips_routes_in_the_lm_and_the_learner_does_not():
    """flip_prob 0: no flip and the reported log-probs are the trainer's (up to cached vs uncached
    rounding); flip_prob 0.2: about 20 % of the sampler's decisions flipped, and a visible mismatch."""
    t0, p0 = lm_task({"name": "routing", "flip_prob": 0.0}, model={"experts": 4})
    gen = torch.Generator().manual_seed(1)
    ro = t0.generate(p0, t0.new_group(8, gen), gen, 0)
    assert t0.engine.flips == 0 and t0.model.router_flip is None
    assert torch.allclose(ro.behaviour_logp, ro.version_logp, atol=1e-5)
    t1, p1 = lm_task({"name": "routing", "flip_prob": 0.2}, model={"experts": 4})
    gen = torch.Generator().manual_seed(1)
    ro = t1.generate(p1, t1.new_group(8, gen), gen, 0)
    n = t1.engine.decisions
    assert n > 100 and abs(t1.engine.flips / n - 0.2) < 4 * math.sqrt(0.2 * 0.8 / n)
    assert t1.model.router_flip is None  # reset after sampling: the learner routes by the argmax
    assert float((ro.behaviour_logp - ro.version_logp).abs().max()) > 1e-4
    lp = t1.logprobs(p1, ro)
    assert torch.allclose(lp, ro.version_logp, atol=1e-5)  # learner at the same weights = the exact log-prob


def test_routing_needs_experts():
    from sandbox.base.errors import ScenarioError

    with pytest.raises(ScenarioError, match=r"engine.name: 'routing' needs a task that has a mixture-of-experts"):
        lm_task({"name": "routing"})
    with pytest.raises(ValueError, match="experts"):
        TransformerConfig(experts=1)


def test_budget_counts_the_experts_parameters():
    """The LM's budget estimate counts E expert MLPs and the router per block (the module's own count)."""
    from sandbox.tasks.lm.task import LMTask

    task, params = lm_task({"name": "routing"}, model={"experts": 3})
    counted = sum(int(v[0].numel()) for v in params.values())
    assert LMTask.budget_shape(task.cfg).params == counted
    dense, dparams = lm_task({"name": "exact"})
    assert LMTask.budget_shape(dense.cfg).params == sum(int(v[0].numel()) for v in dparams.values())
