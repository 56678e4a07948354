"""The gac_search claim: quick mode end to end, the selection protocol on a fake run function
(selection seeds only, the best setting chosen), the lag of the mini-batch schedule, and parallel
prefetching that gives bitwise the numbers of in-process runs."""

import json
import math

import numpy as np
import pytest
import torch

from sandbox.claims import _runs as R
from sandbox.claims import gac_search as G
from sandbox.claims.api import CLAIMS


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    R.clear_cache()
    yield
    R.clear_cache()
    torch.set_num_threads(previous)


def test_quick_mode_rows_table_and_disjoint_seeds():
    result = CLAIMS["gac_search"].run(quick=True, seeds=2)
    contexts = [G.Context(*c) for c in G.grid(G.QUICK_CONTEXTS)]
    settings = [G.Setting(*s) for s in G.grid(G.QUICK_SEARCH)]
    labels = [r.label for r in result.rows]
    assert labels[: len(contexts)] == [f"{c.name}: best GAC beats control" for c in contexts]
    assert labels[-2].endswith("best GAC matches sync") and labels[-1].endswith("control degraded vs sync")
    for row in result.rows:
        assert len(row.values) == 2 and all(math.isfinite(v) for v in row.values)
    s = result.settings
    assert s["selection seeds"] == list(G.QUICK_SELECTION_SEEDS) and s["evaluation seeds"] == [0, 1]
    assert not set(s["selection seeds"]) & set(s["evaluation seeds"])
    table = s["selection table (mean final expected reward over the selection seeds)"]
    for c in contexts:
        row = table[c.name]
        assert set(row) == {"control (no GAC)", "sync", *(g.name for g in settings)}
        assert row[s["chosen GAC setting"][c.name]] == max(row[g.name] for g in settings)
    assert [c.label for c in result.curves] == ["sync", "control (lag, no GAC)", "best GAC"]
    assert result.kind == "grouped" and result.x_ticks == [c.name for c in contexts]
    assert "**" in result.appendix and contexts[0].name in result.appendix
    json.dumps(result.to_dict())


def test_evaluation_seeds_overlapping_selection_seeds_are_refused():
    with pytest.raises(ValueError, match="--seeds 101 overlaps the selection seeds"):
        G.run(quick=True, seeds=101)


class _Fake:
    def __init__(self, value):
        self.value = value

    def final_reward(self):
        return self.value

    def collapse(self):
        return False, False


def test_selection_uses_selection_seeds_and_picks_the_best(monkeypatch):
    """A fake run function where setting ``target`` is best on the selection seeds but worst on the
    evaluation seeds, and ``decoy`` the opposite: the protocol must choose ``target`` (it never looks
    at evaluation seeds) and evaluate it; the mini-batch context gains most, so it is the most
    promising one."""
    target = G.Setting(G.ADAPTIVE, "prev_applied", "post_optimizer")
    decoy = G.Setting(0.3, "prev_applied", "pre_optimizer")
    calls = []

    def fake_run(overrides, seed, quick):
        stab = overrides.get("algorithm.stabilizers")
        mb4 = overrides.get("algorithm.minibatches") == 4
        calls.append((json.dumps(stab, sort_keys=True), seed))
        if overrides["system.staleness"]["kind"] == "sync":
            return _Fake(1.0)
        if stab is None:
            return _Fake(0.4)
        selection = seed >= 100
        if stab == target.overrides()["algorithm.stabilizers"]:
            return _Fake((0.95 if mb4 else 0.9) if selection else 0.2)
        if stab == decoy.overrides()["algorithm.stabilizers"]:
            return _Fake(0.1 if selection else 0.99)
        return _Fake(0.5)

    monkeypatch.setattr(R, "run", fake_run)
    result = G.run(quick=True, seeds=3)
    contexts = [G.Context(*c) for c in G.grid(G.QUICK_CONTEXTS)]
    assert result.settings["chosen GAC setting"] == {c.name: target.name for c in contexts}
    for row in result.rows[: len(contexts)]:
        assert row.values == pytest.approx([0.2 - 0.4] * 3)
    promising = next(c for c in contexts if c.schedule == "4 mini-batches")
    assert result.settings["most promising context"] == promising.name
    assert result.rows[-2].label == f"{promising.name}: best GAC matches sync"
    assert result.rows[-2].values == pytest.approx([0.2 - 1.0] * 3)
    # every GAC setting ran on the selection seeds only; on the evaluation seeds only the chosen one ran
    gac_calls = [(stab, seed) for stab, seed in calls if stab != "null"]
    assert {seed for _, seed in gac_calls if seed < 100} == {0, 1, 2}
    assert {stab for stab, seed in gac_calls if seed < 100} == {
        json.dumps(target.overrides()["algorithm.stabilizers"], sort_keys=True)
    }
    assert {seed for _, seed in gac_calls if seed >= 100} == set(G.QUICK_SELECTION_SEEDS)


def test_select_ties_go_first_and_nan_loses():
    assert G.select({"a": 0.5, "b": 0.7, "c": 0.7}) == "b"
    assert G.select({"a": math.nan, "b": 0.1}) == "b"


def test_mini_batch_context_has_the_same_learner_lag():
    """lag 16 with 4 mini-batches: fixed lag k = 4 batches, the learner's lag 16 … 19 optimizer steps."""
    ctx = G.Context(0.3, 16, "4 mini-batches")
    assert ctx.control()["system.staleness"] == {"kind": "fixed_lag", "k": 4}
    assert ctx.sync()["system.staleness"] == {"kind": "sync"}
    run = R.run(ctx.control(), 0, quick=True)
    lag = run.metrics["staleness/mean"][run.steps >= 20]
    assert lag.size and np.all((lag >= 16) & (lag <= 19))
    assert G.Context(0.3, 16, "1 step/batch").control()["system.staleness"] == {"kind": "fixed_lag", "k": 16}
    with pytest.raises(ValueError, match="lag 6 is not a multiple of the 4 optimizer steps"):
        G.Context(0.3, 6, "4 mini-batches").control()


def test_parallel_prefetch_matches_in_process_runs():
    """Two blocks over two processes: seeds 0 and 1 of lag 4 as one batched run, and one GAC seed;
    compared with each seed run alone in this process."""
    pairs = [(R.lag(4), 0), (R.lag(4), 1), ({**R.lag(4), **R.GAC}, 1)]
    assert R.prefetch(pairs, quick=True, workers=2) == 3
    parallel = [R.run(ov, seed, quick=True) for ov, seed in pairs]
    assert R.prefetch(pairs, quick=True, workers=2) == 0  # cached
    R.clear_cache()
    for (ov, seed), p in zip(pairs, parallel):
        s = R.run(ov, seed, quick=True)
        assert s.summary["final_expected_reward"] == p.summary["final_expected_reward"]
        np.testing.assert_array_equal(s.steps, p.steps)
        assert s.metrics.keys() == p.metrics.keys()
        for k, a in s.metrics.items():
            np.testing.assert_array_equal(a, p.metrics[k])
