"""``opob_grad_norms = "ghost"`` reaches the learner: on the LM task the OPOB norms come from the ghost
path (one batched forward and backward) and equal the exact per-sequence norms to float tolerance on
the real rollouts of a run; the default stays the exact path."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import sandbox.algorithms.ghost_norms as ghost_norms
from sandbox.algorithms.opob import per_sequence_grad_sq_norms
from sandbox.run.runner import run_scenario
from sandbox.scenario.api import load_scenario, variant_scenarios

LM = Path(__file__).resolve().parents[2] / "scenarios" / "lm_mission.toml"


def vcpo(grad_norms: str | None):
    objective = {"name": "reinforce", "baseline": "opob", "normalize_std": True, "aggregation": "seq_mean_token_mean"}
    if grad_norms is not None:
        objective["opob_grad_norms"] = grad_norms
    scn, raw = load_scenario(
        LM, {"run.steps": 3, "run.figures": False, "run.eval_every": 3, "algorithm.objective": objective}
    )
    return next(iter(variant_scenarios(scn, {k: v for k, v in raw.items() if k != "variants"}).values()))


def test_ghost_norms_are_used_and_equal_the_exact_ones(monkeypatch):
    calls = []
    ghost = ghost_norms.ghost_sequence_grad_sq_norms

    def spy(batch_fn, params, inputs, seq_fn, replica_dims):
        got = ghost(batch_fn, params, inputs, seq_fn, replica_dims=replica_dims)
        exact = per_sequence_grad_sq_norms(seq_fn, params, inputs, replica_dims=replica_dims)
        calls.append(got.shape)
        torch.testing.assert_close(got, exact, rtol=1e-4, atol=1e-6)
        return got

    monkeypatch.setattr(ghost_norms, "ghost_sequence_grad_sq_norms", spy)
    res = run_scenario(vcpo("ghost"), force=True)
    assert res.status == "completed" and len(calls) >= 3  # one per optimizer step


def test_exact_is_the_default(monkeypatch):
    monkeypatch.setattr(ghost_norms, "ghost_sequence_grad_sq_norms", lambda *a, **k: pytest.fail("ghost path taken"))
    assert vcpo(None).algorithm.objective.opob_grad_norms == "exact"
    assert run_scenario(vcpo(None), force=True).status == "completed"
