"""The claims table's "collapsed k/R" column counts the seeds whose runs collapsed or diverged, so that
a row's mean over seeds never hides them: a planted dead run (reward 0, gradient norm 0) and a planted
diverged run are counted through the per-seed arithmetic of a claim row (docs/claims.md#collapsed-runs)."""

from __future__ import annotations

import numpy as np
import pytest

from sandbox.claims import _runs
from sandbox.claims.base import ClaimResult, Row
from sandbox.claims.report import COLUMNS, collapsed_text, collapsed_title, markdown
from sandbox.claims.seed_values import SeedValues

STEPS = 30


def _run(kind: str) -> _runs.Run:
    """A run that learns, one that is dead (reward 0 with a zero gradient at the end) or one that diverged."""
    steps = np.arange(STEPS)
    reward = np.linspace(0.1, 0.9, STEPS) if kind != "dead" else np.linspace(0.1, 0.0, STEPS)
    grad = np.ones(STEPS)
    if kind == "dead":
        grad[-12:] = 0.0
    metrics = {"eval/expected_reward": reward, "reward/mean": reward, "grad/norm": grad}
    status = "diverged" if kind == "diverged" else "completed"
    return _runs.Run(steps, metrics, {"status": status, "final_expected_reward": float(reward[-3:].mean())})


PLANTED = {"variant": ["learns", "dead", "learns", "learns"], "sync": ["learns", "learns", "learns", "diverged"]}


@pytest.fixture
def planted(monkeypatch):
    def runs(overrides, seeds, quick, ctx=_runs.BITSTRING):
        return [_run(k) for k in PLANTED[overrides["name"]][:seeds]]

    monkeypatch.setattr(_runs, "runs", runs)


def test_run_collapse_rule():
    assert _runs.Run.collapse(_run("learns")) == (False, False)
    assert _runs.Run.collapse(_run("dead")) == (True, False)
    assert _runs.Run.collapse(_run("diverged")) == (True, True)


def test_column_counts_planted_collapsed_seeds_through_a_difference(planted):
    a = _runs.per_seed({"name": "variant"}, 4, True, _runs.Run.final_reward)
    b = _runs.per_seed({"name": "sync"}, 4, True, _runs.Run.final_reward)
    row = Row("variant matches sync", "final reward: variant − sync", a - b, -0.05, ">", context="bitstring")
    assert row.collapsed == [False, True, False, True] and row.diverged == [False, False, False, True]
    assert collapsed_text(row) == "2/4, 1 diverged"
    # the numbers are numpy's own: the flags never touch them
    assert row.values == (np.asarray(a, float) - np.asarray(b, float)).tolist()
    result = ClaimResult("planted", "test", "", {}, rows=[row])
    md = markdown([(result, 0.0)], "sandbox claims")
    header = "| " + " | ".join(COLUMNS) + " |"
    assert header in md and "collapsed k/R" in COLUMNS
    line = next(x for x in md.splitlines() if x.startswith("| planted: variant matches sync"))
    assert line.split(" | ")[COLUMNS.index("collapsed k/R")] == "2/4, 1 diverged"
    # the figure, a band over seeds, names them in its title
    assert "1 row(s) average over collapsed runs (most: 2/4 seeds" in collapsed_title(result)


def test_values_without_records_give_a_lower_bound_or_a_dash(planted):
    a = _runs.per_seed({"name": "variant"}, 4, True, _runs.Run.final_reward)
    by_hand = np.array([0.5, 0.5, 0.5, 0.5])  # e.g. a control computed run by run
    assert collapsed_text(Row("mixed", "s", a - by_hand, 0.0, ">")) == "≥1/4"
    assert collapsed_text(Row("plain", "s", [1.0, 2.0, 3.0], 0.0, ">")) == "—"
    # reductions and slices are plain numbers, never a row's flags
    assert not isinstance(np.nanmean(a), SeedValues)
    assert collapsed_text(Row("sliced", "s", a[1:], 0.0, ">")) == "—"


def _learning_run(dead: bool) -> _runs.Run:
    """A run with every series the vcpo claim reads; ``dead``: reward falls to 0 with a zero gradient."""
    run = _run("dead" if dead else "learns")
    run.metrics["is/ess_ratio"] = np.linspace(1.0, 0.2, STEPS)
    run.metrics["lr/scale"] = np.full(STEPS, 0.5)
    return run


def test_vcpo_rows_built_from_single_runs_count_planted_collapses(monkeypatch):
    """The matched-constant-lr control (built run by run), the ESS lead and the reward null: a planted dead
    run behind each of them is counted, and every learning row of the claim has complete flags."""
    from sandbox.claims import vcpo

    dead_control_seed, dead_lag16_seed, dead_null_seed = 1, 2, 3

    def runs(overrides, seeds, quick, ctx=_runs.BITSTRING):
        return [_learning_run(overrides == _runs.lag(16) and s == dead_lag16_seed) for s in range(seeds)]

    def null_runs(overrides, seeds, quick, ctx=_runs.BITSTRING):
        return [_learning_run(s == dead_null_seed) for s in range(seeds)]

    monkeypatch.setattr(_runs, "runs", runs)
    monkeypatch.setattr(_runs, "null_runs", null_runs)
    monkeypatch.setattr(_runs, "run", lambda overrides, seed, quick: _learning_run(seed == dead_control_seed))
    result = vcpo.run(quick=True, seeds=4, lm_seeds=0)
    rows = {row.label: row for row in result.rows}
    assert rows["VCPO beats matched constant lr"].collapsed == [False, True, False, False]
    lead = next(row for label, row in rows.items() if label.startswith("ESS drop precedes"))
    assert lead.collapsed == [False, False, True, False] and lead.collapse_complete
    assert rows["null: sync reseeded"].collapsed == [False, False, False, True]
    assert all(collapsed_text(row) not in ("—",) and not collapsed_text(row).startswith("≥") for row in result.rows)
