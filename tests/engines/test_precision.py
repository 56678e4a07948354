"""precision: the sampler's forward at bf16 reproduces a bf16 forward bit for bit; fp8 rounds to the e4m3
grid; the exact log-probs are the float32 trainer's (``docs/engines.md#precision``)."""

from __future__ import annotations

import pytest
import torch
from _common import lm_task
from torch.func import functional_call

from sandbox.engines.precision import fp8_round
from sandbox.models.transformer import sequence_logprobs
from sandbox.models.transformer_nn import Transformer
from sandbox.tasks.lm.task import SEEDS


def _generate(task, params, seed=5):
    gen = torch.Generator().manual_seed(seed)
    group = task.new_group(6, gen)
    return task.generate(params, group, gen, 0)


@pytest.mark.component("engine", "precision")
def test_bf16_sampler_reproduces_a_bf16_forward_bit_for_bit():
    """The first token's reported log-prob is log_softmax(logits_bf16.float() / T) of a module cast with
    ``.to(torch.bfloat16)`` (torch's own cast), to the bit; every version_logp is the float32
    teacher-forced log-prob to the bit; and the two differ (the mismatch is real)."""
    task, params = lm_task({"name": "precision", "dtype": "bfloat16"}, temperature=0.7)
    ro = _generate(task, params)
    single = {k: v[0] for k, v in params.items()}
    bf = Transformer(task.model_cfg)
    bf.load_state_dict(single)
    bf = bf.to(torch.bfloat16)
    prompts = ro.prompts[0]
    logits, _ = bf(prompts)
    want = torch.log_softmax(logits[:, -1].float() / 0.7, -1).gather(-1, ro.tokens[0, :, :1]).squeeze(-1)
    assert torch.equal(ro.behaviour_logp[0, :, 0], want)
    fp32 = lambda toks, past=None: functional_call(task.model, single, (toks, past))  # noqa: E731
    exact = sequence_logprobs(fp32, prompts, ro.tokens[0], 0.7) * ro.mask[0]
    assert torch.equal(ro.version_logp[0], exact)
    valid = ro.mask[0] > 0
    gap = (ro.version_logp[0] - ro.behaviour_logp[0])[valid].abs()
    assert float(gap.max()) > 0 and float(gap.mean()) < 0.05  # bf16 rounding: small, not zero


@pytest.mark.component("engine", "precision")
def test_fp8_rounding_hand_values_and_fp16():
    """max|w| = 448 gives scale 1: 0.3 → 0.3125 (e4m3 has 3 mantissa bits: 1.25 · 2⁻²), 1.1 → 1.125,
    448 stays; a tensor with max 1 rounds w / s with s = 1/448. fp16 runs too and differs from bf16."""
    w = torch.tensor([448.0, 0.3, 1.1, -0.3])
    assert fp8_round(w).tolist() == [448.0, 0.3125, 1.125, -0.3125]
    v = torch.tensor([1.0, 0.5])
    assert torch.allclose(fp8_round(v), v)
    assert torch.equal(fp8_round(torch.zeros(3)), torch.zeros(3))
    t16, p16 = lm_task({"name": "precision", "dtype": "float16"})
    t8, p8 = lm_task({"name": "precision", "dtype": "fp8_e4m3"})
    r16, r8 = _generate(t16, p16), _generate(t8, p8)
    g16 = (r16.version_logp - r16.behaviour_logp).abs().sum() / r16.mask.sum()
    g8 = (r8.version_logp - r8.behaviour_logp).abs().sum() / r8.mask.sum()
    assert 0 < float(g16) < float(g8)  # fp16 (10 mantissa bits) is closer to fp32 than fp8 weights


def test_precision_is_refused_where_it_cannot_run():
    from sandbox.base.errors import ScenarioError

    with pytest.raises(ScenarioError, match=r"engine.name: 'precision'.*task.dtype"):
        lm_task({"name": "precision"}, dtype="bfloat16")
    with pytest.raises(ScenarioError, match=r"engine.name: 'precision' needs .*task 'bitstring'"):
        from sandbox.scenario.api import validate_scenario

        validate_scenario({"engine": {"name": "precision"}}, "t")


@pytest.mark.component("engine", "precision")
def test_added_noise_is_the_logit_noise_draw_on_the_bf16_logits():
    """noise_scale > 0: the first token is the logit_noise engine's draw (Student-t, same scale and
    dof) on the bf16 sampler's logits / T from the group's own stream, its reported log-prob is that
    draw's log q; the exact log-probs stay the float32 trainer's; and the noise widens the gap."""
    from sandbox.engines.logit_noise import LogitNoiseConfig, LogitNoiseEngine

    task, params = lm_task(
        {"name": "precision", "dtype": "bfloat16", "noise_scale": 0.5, "noise_dof": 3}, temperature=0.7
    )
    gen = torch.Generator().manual_seed(5)
    group = task.new_group(6, gen)
    own = torch.Generator().manual_seed(group.info[SEEDS])  # the group's own stream, at its start
    ro = task.generate(params, group, gen, 0)
    single = {k: v[0] for k, v in params.items()}
    bf = Transformer(task.model_cfg)
    bf.load_state_dict(single)
    logits, _ = bf.to(torch.bfloat16)(ro.prompts[0])
    d = LogitNoiseEngine(LogitNoiseConfig(scale=0.5, tail="student_t", dof=3)).draw(
        logits[:, -1].float() / 0.7, own, 0, 0
    )
    assert torch.equal(ro.tokens[0, :, 0], d.tokens)
    assert torch.equal(ro.behaviour_logp[0, :, 0], d.reported_logp)
    fp32 = lambda toks, past=None: functional_call(task.model, single, (toks, past))  # noqa: E731
    assert torch.equal(ro.version_logp[0], sequence_logprobs(fp32, ro.prompts[0], ro.tokens[0], 0.7) * ro.mask[0])
    plain_task, plain_params = lm_task({"name": "precision", "dtype": "bfloat16"}, temperature=0.7)
    plain = _generate(plain_task, plain_params)
    gap = lambda r: float((r.version_logp - r.behaviour_logp).abs().sum() / r.mask.sum())  # noqa: E731
    assert gap(ro) > 10 * gap(plain)
    with pytest.raises(Exception, match="noise_dof"):
        lm_task({"name": "precision", "noise_dof": 3})


def test_bf16_sampler_continuation_at_each_responses_own_position():
    """Responses cut at their own positions (``system.generation_time.mixed_versions``) and continued by the bf16
    sampler with new weights: after each cut the tokens carry version 1 and their exact log-probs
    (``version_logp``) are the float32 teacher-forced ones of the new weights; before it the old ones are
    kept bit for bit; the sampler's reported log-probs differ from the exact ones (bf16 rounding)."""
    task, params = lm_task({"name": "precision", "dtype": "bfloat16"}, temperature=0.7)
    params2 = {k: v + 0.05 * torch.randn_like(v, generator=torch.Generator().manual_seed(1)) for k, v in params.items()}
    gen = torch.Generator().manual_seed(3)
    full = task.generate(params, task.new_group(4, gen), gen, 0)
    cut = full.truncate_each(torch.tensor([[0, 1, 2, 3]]))
    cont = task.generate(params2, cut, gen, 1)
    m = cont.mask.bool()
    pos = torch.arange(cont.width).view(1, 1, -1)
    old, new = m & (pos < cut.lengths.unsqueeze(-1)), m & (pos >= cut.lengths.unsqueeze(-1))
    assert bool(new.any()) and bool(old.any())
    assert (cont.token_versions[new] == 1).all() and (cont.token_versions[old] == 0).all()
    w = cut.width  # every kept token sits before it
    assert torch.equal(cont.version_logp[..., :w][old[..., :w]], full.version_logp[..., :w][old[..., :w]])
    assert torch.equal(cont.behaviour_logp[..., :w][old[..., :w]], full.behaviour_logp[..., :w][old[..., :w]])
    with torch.no_grad():
        exact2 = task.logprobs(params2, cont)
    assert torch.allclose(cont.version_logp[new], exact2[new], atol=1e-5)
    assert float((cont.version_logp - cont.behaviour_logp)[new].abs().max()) > 0
