"""Structured lengths of the continuous-batching engine's length model (docs/system.md#structured-lengths):
per-prompt medians that persist across epochs, a trend with the weight version, a Pareto tail; off by
default with the plain model's draws unchanged."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from sandbox.system.config import SystemConfig
from sandbox.system.delays.continuous_batching import ContinuousBatchingDelay
from sandbox.system.timing_only import TimingPayload, simulate_timing


def _cb(**kw) -> ContinuousBatchingDelay:
    return ContinuousBatchingDelay(**{"length_median": 100, **kw})


def test_defaults_draw_exactly_the_plain_model():
    cfg = _cb(length_sigma=0.7, max_tokens=900)
    got = cfg.lengths(np.random.default_rng(3), TimingPayload(0), 8, job_id=17, version=5)
    z = np.random.default_rng(3).standard_normal(8)
    assert got == [int(v) for v in np.clip(np.rint(100 * np.exp(0.7 * z)), 1, 900)]


def test_the_plain_model_is_the_array_expression_to_the_bit():
    """Without a tail the lengths are computed on Python floats: the same integers as ``np.rint`` of the array
    expression cut to ``[1, max_tokens]``, ties (``x.5``) and both cuts included, the stream left in step."""
    rng = np.random.default_rng(48)
    for i in range(400):
        median = float(rng.choice([0.3, 0.5, 2.5, 63.5, 64.5, rng.uniform(0.1, 300)]))
        sigma, cut = float(rng.choice([0.0, 0.4, 2.0])), [None, 1, 64, 2048][i % 4]
        extra = {"prompts": 7, "prompt_sigma": 0.8} if i % 3 == 0 else {"length_trend": 0.3} if i % 3 == 1 else {}
        cfg = _cb(length_median=median, length_sigma=sigma, max_tokens=cut, **extra)
        G, job, version = int(rng.integers(1, 20)), int(rng.integers(0, 50)), int(rng.integers(0, 9))
        a, b = np.random.default_rng(i), np.random.default_rng(i)
        got = cfg.lengths(a, TimingPayload(0), G, job, version)
        z = b.standard_normal(G) if sigma > 0 else np.zeros(G)
        x = np.rint(cfg.median_for(job, version) * np.exp(sigma * z))
        assert got == [int(v) for v in np.minimum(np.maximum(x, 1), np.inf if cut is None else cut)]
        assert a.random() == b.random()


def test_prompt_medians_persist_across_epochs_hand_values():
    cfg = _cb(prompts=5, prompt_sigma=0.5, prompt_seed=7)
    P = 5
    epoch0 = [cfg.prompt_of(j) for j in range(P)]
    epoch1 = [cfg.prompt_of(j) for j in range(P, 2 * P)]
    assert sorted(epoch0) == sorted(epoch1) == list(range(P))  # each epoch visits every prompt once
    assert epoch0 == list(np.random.default_rng([7, 0]).permutation(P))
    assert epoch1 == list(np.random.default_rng([7, 1]).permutation(P))
    z = np.random.default_rng([7, 1 << 32]).standard_normal(P)
    for j in range(2 * P):
        i = cfg.prompt_of(j)
        assert cfg.median_for(j) == pytest.approx(100 * math.exp(0.5 * z[i]), rel=1e-15)
    # length_sigma = 0: a prompt's responses have the same length in every epoch
    rng = np.random.default_rng(0)
    by_prompt: dict[int, set] = {}
    for j in range(3 * P):
        by_prompt.setdefault(cfg.prompt_of(j), set()).update(cfg.lengths(rng, TimingPayload(0), 4, job_id=j))
    assert all(len(v) == 1 for v in by_prompt.values()) and len({next(iter(v)) for v in by_prompt.values()}) > 1


def test_trend_hand_value():
    cfg = _cb(length_trend=0.1)
    assert cfg.lengths(np.random.default_rng(0), TimingPayload(0), 2, version=5) == [150, 150]  # 100 * (1 + 0.1 * 5)


def test_pareto_tail_hand_value_and_tail_probability():
    cfg = _cb(tail_alpha=2.0)
    got = cfg.lengths(np.random.default_rng(1), TimingPayload(0), 3)
    u = 1.0 - np.random.default_rng(1).random(3)
    assert got == [int(v) for v in np.rint(100 * u**-0.5 / math.sqrt(2))]
    # P(L > 100 t) = (t 2^(1/α))^(-α) = t^(-α) / 2: 1/32 at t = 4, α = 2; 200,000 draws: se = 0.00039
    big = np.array(cfg.lengths(np.random.default_rng(2), TimingPayload(0), 200_000))
    assert np.mean(big > 400) == pytest.approx(1 / 32, abs=4 * math.sqrt((1 / 32) * (31 / 32) / 200_000))
    assert np.median(big) == pytest.approx(100, abs=1)  # the median is kept


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"length_median": None, "prompts": 4}, "set length_median too"),
        ({"length_median": None, "tail_alpha": 1.5}, "set length_median too"),
        ({"prompt_sigma": 0.3}, "prompt_sigma: the prompts' medians need prompts"),
        ({"tail_alpha": 0}, "tail_alpha"),
    ],
)
def test_bad_structure_is_refused_naming_the_field(kw, match):
    with pytest.raises(ValidationError, match=match):
        _cb(**kw)


def test_cluster_passes_job_and_version():
    """In a run each group's lengths are its prompt's median times the trend at the version it was
    generated with (length_sigma = 0, no tail): the cluster hands the engine the job id and version."""
    gen = {"kind": "continuous_batching", "length_median": 50, "prompts": 7, "prompt_sigma": 0.8, "length_trend": 0.05}
    cfg = SystemConfig(
        num_workers=4,
        generation_time=gen,
        train_time={"kind": "constant", "value": 0.1},
        staleness={"kind": "max_lag", "k_max": 2},
    )
    res = simulate_timing(cfg, 30, 2, 3, seed=0, record_events=False)
    delay = cfg.generation_time
    assert len(res.lengths) > 14
    for job in res.jobs:
        if job.id in res.lengths:
            expected = int(np.rint(delay.median_for(job.id, job.head_version)))
            assert res.lengths[job.id] == [max(expected, 1)] * 3
