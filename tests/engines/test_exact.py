"""The exact engine changes nothing: same numbers as a scenario without [engine], nothing stored twice."""

from __future__ import annotations

import pytest
import torch

from sandbox.run.runner import prepare_run
from sandbox.scenario.api import validate_scenario

BASE = {
    "task": {"name": "bitstring", "horizon": 6, "replicas": 2},
    "system": {
        "num_workers": 3,
        "staleness": {"kind": "max_lag", "k_max": 2},
        "partial_rollouts": True,
        "generation_time": {"kind": "cost_model", "prefill": 0.05, "per_token": 0.02, "jitter": 0.2},
    },
    "run": {"steps": 6, "eval_every": 2, "record_events": False},
}


def _run(raw):
    scn = validate_scenario(raw, "test")
    task, learner, cluster = prepare_run(scn)
    res = cluster.run(scn.run.steps)
    return task, learner, res


@pytest.mark.component("engine", "exact")
def test_exact_is_todays_code_path_bitwise():
    """An explicit exact engine gives the very numbers of no [engine] section (partial rollouts included),
    the rollouts hold no version_logp (sampler_logp IS behaviour_logp), and the learner adds no column."""
    t0, l0, r0 = _run(BASE)
    t1, l1, r1 = _run({**BASE, "engine": {"name": "exact"}})
    assert t1.engine.exact and t1.sampling_engine() is None
    a, b = l0.last_batch, l1.last_batch
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.behaviour_logp, b.behaviour_logp)
    assert b.version_logp is None and b.sampler_logp is b.behaviour_logp
    for k in l0.params:
        assert torch.equal(l0.params[k], l1.params[k])
    rows0, rows1 = list(r0.rows), list(r1.rows)
    assert len(rows0) == len(rows1) == 6
    for x, y in zip(rows0, rows1):
        assert list(x) == list(y) and not any(str(k).startswith("mismatch/") for k in y)
        for k in x:
            assert _same(x[k], y[k]), k


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b) or bool(torch.isnan(a).all() and torch.isnan(b).all())
    if isinstance(a, float) and a != a:
        return b != b
    try:
        import numpy as np

        return bool(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True))
    except TypeError:
        return a == b


def test_a_noisy_engine_stores_the_version_logp_and_keeps_it_through_partial_rollouts():
    """With an engine, every consumed token has a version_logp (0 on padding), and the mismatch columns appear."""
    _, learner, _ = _run({**BASE, "engine": {"name": "logit_noise", "scale": 0.5}})
    ro = learner.last_batch
    assert ro.version_logp is not None and ro.version_logp.shape == ro.behaviour_logp.shape
    assert torch.all(ro.version_logp[ro.mask == 0] == 0)
    valid = ro.mask > 0
    assert not torch.equal(ro.version_logp[valid], ro.behaviour_logp[valid])  # σ = 0.5: they differ
