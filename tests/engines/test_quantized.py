"""quantized: the sampler's mismatch is systematic (a fixed function of the weights and the context), not
zero, deterministic, and its per-response log-ratio grows with the response length
(``docs/engines.md#quantized``)."""

from __future__ import annotations

import pytest
import torch
from _common import lm_task

from sandbox.engines.quantized import rtn

LONG = {"problem": {"kind": "reverse", "min_len": 4, "max_len": 24}}
"""Responses of up to 26 tokens; the untrained tiny model ends them at random lengths."""
PEAKED = {"init_std": 0.2}
"""Weights large enough that the untrained model's distributions are not uniform (at the default 0.02 every
logit is near 0 and int4 rounding moves a log-prob by ~1e-3 only)."""


def _generate(task, params, seed=5, groups=4, size=8):
    gen = torch.Generator().manual_seed(seed)
    return [task.generate(params, task.new_group(size, gen), gen, 0) for _ in range(groups)]


def _deltas(groups):
    """Per group ``(tokens, δ = log π_v − log μ, mask)`` of replica 0."""
    return [(g.tokens[0], (g.sampler_logp[0] - g.behaviour_logp[0]) * g.mask[0], g.mask[0]) for g in groups]


@pytest.mark.component("engine", "quantized")
def test_rtn_hand_values():
    """Per-channel int4 (7 levels each side): the row [7, 3.4, −1.2] has scale 1 → [7, 3, −1]; per tensor the
    row [0.7, 0.34] shares the scale 1 of the other row; a zero row stays zero."""
    w = torch.tensor([[7.0, 3.4, -1.2], [0.7, 0.34, 0.0], [0.0, 0.0, 0.0]])
    assert rtn(w, 4, True).tolist()[0] == [7.0, 3.0, -1.0]
    assert torch.allclose(rtn(w, 4, True)[1], torch.tensor([0.7, 0.3, 0.0]))
    assert rtn(w, 4, False)[1].tolist() == [1.0, 0.0, 0.0]
    assert rtn(w, 4, True)[2].tolist() == [0.0, 0.0, 0.0]
    assert rtn(w, 8, True)[0].tolist() == pytest.approx([7.0, 3.4, -1.2], abs=7 / 127 / 2 + 1e-6)


@pytest.mark.component("engine", "quantized")
def test_mismatch_is_nonzero_deterministic_and_the_trainers_logprob_stays_exact():
    """Two runs with one seed give the same bits; the mismatch is not zero (it fails if the engine reported
    the trainer's log-prob); the trainer's log-prob equals the exact engine's on the same tokens."""
    task, params = lm_task({"name": "quantized", "bits": 4}, PEAKED, **LONG)
    a, b = _generate(task, params), _generate(task, params)
    for x, y in zip(a, b):
        assert torch.equal(x.tokens, y.tokens) and torch.equal(x.behaviour_logp, y.behaviour_logp)
        assert torch.equal(x.version_logp, y.version_logp)
    k3 = torch.cat([(d.exp() - 1 - d)[m > 0] for _, d, m in _deltas(a)])
    assert float(k3.mean()) > 1e-4
    for g in a:
        assert torch.allclose(task.logprobs(params, g), g.version_logp, atol=1e-5)


@pytest.mark.component("engine", "quantized")
def test_the_same_context_gives_the_same_mismatch_and_noise_does_not():
    """Systematic: two responses of a group that sampled the same tokens up to position t (the same prompt and
    context) carry the same δ_t, to the bit. An engine that redraws noise per sample (logit_noise at a scale giving
    a similar k3) fails this: its δ differs between such responses."""

    def spread(engine):
        task, params = lm_task(engine, PEAKED, **LONG)
        worst, pairs = 0.0, 0
        for toks, d, m in _deltas(_generate(task, params, groups=2, size=32)):
            seen: dict[tuple, float] = {}
            for i in range(toks.shape[0]):
                for t in range(int(m[i].sum())):
                    key = tuple(toks[i, : t + 1].tolist())
                    if key in seen:
                        pairs += 1
                        worst = max(worst, abs(float(d[i, t]) - seen[key]))
                    else:
                        seen[key] = float(d[i, t])
        assert pairs > 10
        return worst

    assert spread({"name": "quantized", "bits": 4}) == 0.0
    assert spread({"name": "logit_noise", "scale": 0.1}) > 1e-3


@pytest.mark.component("engine", "quantized")
def test_the_per_response_mismatch_grows_with_length():
    """Per response, the k3 sum ``Σ_t (ρ_t − 1 − δ_t)`` (an estimate of the sequence KL(μ‖π_v)) is on average at
    least 1.5 × larger for responses longer than half the budget than for shorter ones (the per-token
    disagreements add up over the response); it is zero for an engine reporting the trainer's log-prob."""
    task, params = lm_task({"name": "quantized", "bits": 4}, PEAKED, **LONG)
    lens, k3 = [], []
    for _, d, m in _deltas(_generate(task, params, groups=8)):
        lens.append(m.sum(-1))
        k3.append(((d.exp() - 1 - d) * m).sum(-1))
    lens, k3 = torch.cat(lens), torch.cat(k3)
    long_ = lens > task.max_new / 2
    assert int(long_.sum()) >= 10 and int((~long_).sum()) >= 10
    assert float(k3[long_].mean()) >= 1.5 * float(k3[~long_].mean()) > 0


def test_bad_settings_name_the_field():
    from sandbox.base.errors import ScenarioError
    from sandbox.scenario.api import validate_scenario

    with pytest.raises(ScenarioError, match="engine.bits"):
        validate_scenario({"task": {"name": "lm"}, "engine": {"name": "quantized", "bits": 1}}, "t")
    with pytest.raises(ScenarioError, match="engine.name: 'quantized'"):
        validate_scenario({"task": {"name": "bandit"}, "engine": {"name": "quantized"}}, "t")
    with pytest.raises(ScenarioError, match="task.dtype"):
        validate_scenario({"task": {"name": "lm", "dtype": "bfloat16"}, "engine": {"name": "quantized"}}, "t")
