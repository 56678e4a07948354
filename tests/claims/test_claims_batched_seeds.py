"""The claims simulate the seeds of one variant as one independent-schedules run
(``sandbox/claims/_runs.py``); each per-seed run cut from it must be bitwise the separate run."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from sandbox.claims import _runs as R
from sandbox.learner.trainer import _metrics_to_numpy
from sandbox.run.runner import run_scenario
from sandbox.scenario.api import load_scenario

SEEDS = 3


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    R.clear_cache()
    yield
    R.clear_cache()
    torch.set_num_threads(previous)


def separate(overrides: dict, seed: int) -> tuple[R.Run, object]:
    """The run of ``seed`` alone, read as the claims read it before seeds were batched."""
    scn, _ = load_scenario(R.SCENARIO, {**R.settings(overrides, quick=True), "run.seed": seed})
    res = run_scenario(scn)
    m = res.metrics
    return R.Run(m["step"].to_numpy(), {k: m[k].to_numpy(dtype=float) for k in R.KEPT if k in m}, res.summary), res


def assert_same_run(batched: R.Run, alone: R.Run, seed: int) -> None:
    np.testing.assert_array_equal(batched.steps, alone.steps, err_msg=f"seed {seed}: steps")
    assert batched.metrics.keys() == alone.metrics.keys()
    for k, a in alone.metrics.items():
        np.testing.assert_array_equal(batched.metrics[k], a, err_msg=f"seed {seed}: {k}")  # NaN == NaN here
    b, a = batched.summary["final_expected_reward"], alone.summary["final_expected_reward"]
    assert b == a or (np.isnan(a) and np.isnan(b)), (seed, b, a)


DIVERGING = {**R.lag(16), "run.max_param_norm": 4.5, "run.steps": 20}
"""Parameter norms cross 4.5 at steps 6 and 4 for seeds 0 and 2; seed 1's never does."""
MINIBATCH_DIVERGING = {**R.lag(1), "algorithm.minibatches": 4, "run.max_param_norm": 4.5, "run.steps": 16}
"""Four optimizer steps per batch; the seeds diverge inside a batch (steps 13, 4 and 15)."""

CASES = {
    "sync": {**R.SYNC, "run.steps": 12},
    "fixed lag 16": {**R.lag(16), "run.steps": 20},
    "TIS + GAC + VCPO, lag 16": {**R.lag(16), **R.GAC_VCPO, "run.steps": 20},
    "M2PO, lag 4": {**R.lag(4), **R.M2PO, "run.steps": 12},
    "diverging": DIVERGING,
    "mini-batches + GAC, lag 16": {**R.lag(4), "algorithm.minibatches": 4, **R.GAC, "run.steps": 20},
    "mini-batches, diverging": MINIBATCH_DIVERGING,
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_seed_of_a_batch_is_its_separate_run(name):
    overrides = CASES[name]
    batched = R.runs(overrides, SEEDS, quick=True)
    for seed in range(SEEDS):
        alone, res = separate(overrides, seed)
        assert_same_run(batched[seed], alone, seed)
        assert batched[seed].summary["status"] == res.status
    # the cache holds the split runs under the keys of the separate runs
    assert all(R.run(overrides, s, quick=True) is batched[s] for s in range(SEEDS))


def test_the_diverging_cases_diverge_where_the_truncation_matters():
    """A replica that diverges keeps producing rows in the batched run; its separate run stops."""
    plain = R.runs(DIVERGING, SEEDS, quick=True)
    assert [r.summary["status"] for r in plain] == ["diverged", "completed", "diverged"]
    assert [int(r.steps[-1]) for r in plain] == [6, 19, 4]
    mini = R.runs(MINIBATCH_DIVERGING, SEEDS, quick=True)
    assert [r.summary["status"] for r in mini] == ["diverged"] * 3
    assert [int(r.steps[-1]) for r in mini] == [13, 4, 15]  # 13 and 4: inside a batch of four optimizer steps


def test_a_non_finite_replica_value_is_what_a_one_replica_row_holds():
    """No claim run produces an infinite metric, so the rule (a one-replica row holds NaN where the
    replica's value is not finite) is checked against the trainer's own row reduction."""
    values = np.array([1.5, np.inf, -np.inf, np.nan, -0.25])
    res = SimpleNamespace(
        metrics=pd.DataFrame({"step": np.arange(5)}),
        status="completed",
        diverged_at=np.array([-1, 3]),
        replica_metrics={"grad/norm": np.stack([values, values[::-1]], 1)},
    )
    first, second = R.split_block(res)
    for run, column in ((first, values), (second, values[::-1][:4])):
        rows = [
            _metrics_to_numpy({"grad/norm": torch.tensor([v], dtype=torch.float64)}, 1, np.ones(1, bool))[1][
                "grad/norm"
            ]
            for v in column
        ]
        np.testing.assert_array_equal(run.metrics["grad/norm"], rows)
    np.testing.assert_array_equal(second.steps, [0, 1, 2, 3])
    assert (first.summary["status"], second.summary["status"]) == ("completed", "diverged")


def test_blocks_follow_the_uncached_consecutive_seeds(monkeypatch):
    calls = []
    real = R._simulate_block
    monkeypatch.setattr(R, "_simulate_block", lambda seedless, s0, n: calls.append((s0, n)) or real(seedless, s0, n))
    ov = {**R.SYNC, "run.steps": 3}
    R.run(ov, 2, quick=True)  # cached alone: the block around it splits
    assert R.prefetch([(ov, s) for s in (0, 1, 2, 3, 5)], quick=True) == 4
    assert calls == [(0, 2), (3, 1), (5, 1)]
    assert R.prefetch([(ov, s) for s in range(4)], quick=True) == 0


def test_a_variant_independent_schedules_refuse_runs_seed_by_seed():
    """A fixed ``run.system_seed`` cannot be replayed per replica: the seeds run one at a time."""
    ov = {**R.lag(4), "run.system_seed": 7, "run.steps": 6}
    batched = R.runs(ov, 2, quick=True)
    for seed in range(2):
        assert_same_run(batched[seed], separate(ov, seed)[0], seed)
