"""precision: the sampler's forward at bf16 reproduces a bf16 forward bit for bit; fp8 rounds to the e4m3
grid; the exact log-probs are the float32 trainer's (``docs/engines.md#precision``)."""

from __future__ import annotations

import pytest
import torch
from _common import lm_task
from torch.func import functional_call

from sandbox.engines.precision import fp8_round
from sandbox.models.transformer import Transformer, sequence_logprobs


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
    from sandbox.errors import ScenarioError

    with pytest.raises(ScenarioError, match=r"engine.name: 'precision'.*task.dtype"):
        lm_task({"name": "precision"}, dtype="bfloat16")
    with pytest.raises(ScenarioError, match=r"engine.name: 'precision' needs .*task 'bitstring'"):
        from sandbox.scenario import validate_scenario

        validate_scenario({"engine": {"name": "precision"}}, "t")
