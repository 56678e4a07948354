"""The simulator's learner resumed from :meth:`Learner.state_dict` (saved with ``torch.save`` and read back
with ``torch.load(weights_only=True)``) continues bitwise as the uninterrupted learner: weights, optimizer
moments, every stabilizer's state (GAC, VCPO, grad_norm_skip, staleness LR) and the ``grad/cos_prev``
monitor, so every metric row is the same; without the stabilizer state it is not."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from sandbox.learner.optim import OptimizerConfig
from sandbox.learner.trainer import DivergenceBounds, Learner

R, STEPS, RESUME_AT = 3, 12, 5
STABILIZERS = [
    {"name": "grad_norm_skip", "warmup": 3},
    {"name": "staleness_lr", "rule": "polynomial"},
    {"name": "vcpo_lr"},
    {"name": "gac", "c_thr": 0.2},
]


def _configs():
    from pydantic import TypeAdapter

    from sandbox.algorithms.stabilizers import StabilizerConfig

    return [TypeAdapter(StabilizerConfig).validate_python(s) for s in STABILIZERS]


def _learner() -> Learner:
    gen = torch.Generator().manual_seed(3)
    params = {"w": torch.randn(R, 4, 3, generator=gen), "b": torch.zeros(R, 3)}
    cfg = OptimizerConfig(name="adamw", lr=0.05, weight_decay=0.01, schedule="cosine", warmup_steps=2, grad_clip=3.0)
    return Learner(params, cfg, total_steps=STEPS, bounds=DivergenceBounds(), stabilizers=_configs())


def _step(learner: Learner, t: int) -> dict:
    """A least-squares loss per replica on fixed targets with fresh inputs each step: consecutive gradients
    are aligned (GAC projects); step 8 is a spike (grad_norm_skip)."""
    gen = torch.Generator().manual_seed(100 + t)
    x = torch.randn(R, 8, 4, generator=gen) + 1.0
    y = torch.ones(R, 8, 3) * (40.0 if t == 8 else 1.0)
    p = learner.params
    loss = ((x @ p["w"] + p["b"][:, None] - y) ** 2).mean((1, 2))
    learner._sample_lag = (torch.arange(R).double() + t % 3)[:, None].expand(R, 8)
    metrics = {"loss": loss.detach(), "is/ess_ratio": torch.full((R,), 1.0 - 0.04 * t).double()}
    return learner._optimizer_step(t, loss, metrics)


def _resumed(load: bool) -> tuple[Learner, list[dict]]:
    first = _learner()
    rows = [_step(first, t) for t in range(RESUME_AT)]
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    second = _learner()
    if load:
        second.load_state_dict(state)
    else:  # the weights and the inner optimizer only
        with torch.no_grad():
            for k, v in state["params"].items():
                second.params[k].copy_(v)
        second.optimizer.load_state_dict(state["optimizer"]["optimizer"])
        second.prev_grad, second._prev_grad_norm = state["prev_grad"], state["prev_grad_norm"]
    return second, rows + [_step(second, t) for t in range(RESUME_AT, STEPS)]


def _same_rows(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(np.array_equal(np.asarray(x[k]), np.asarray(y[k]), equal_nan=True) for k in x)
        for x, y in zip(a, b)
    )


def test_resumed_learner_is_bitwise_the_continuous_one():
    learner = _learner()
    rows = [_step(learner, t) for t in range(STEPS)]
    resumed, resumed_rows = _resumed(load=True)
    for k in learner.names:
        assert torch.equal(learner.params[k], resumed.params[k]), k
    assert _same_rows(rows, resumed_rows)
    assert _same_rows(learner.replica_rows[RESUME_AT:], resumed.replica_rows)
    assert not np.isnan(resumed_rows[RESUME_AT]["grad/cos_prev"])  # the monitor's previous gradient came along
    # the stabilizers really act after the resume (otherwise their state would not matter)
    assert sum(r["gac/projected"] for r in rows[RESUME_AT:]) >= 1 and rows[8]["step/skipped"] == 1.0
    assert min(r["lr/scale"] for r in rows[RESUME_AT:]) < 0.9


def test_without_the_stabilizer_state_the_resumed_learner_differs():
    learner = _learner()
    rows = [_step(learner, t) for t in range(STEPS)]
    resumed, resumed_rows = _resumed(load=False)
    assert not _same_rows(rows, resumed_rows)
    assert any(not torch.equal(learner.params[k], resumed.params[k]) for k in learner.names)


def test_a_state_of_other_parameters_is_refused():
    learner = _learner()
    state = learner.state_dict()
    state["params"]["extra"] = state["params"]["b"]
    with pytest.raises(ValueError, match="parameters"):
        _learner().load_state_dict(state)
