"""The groups dispatched after the learner's last step (``Cluster._after_end``,
``PolicyWorkload.dispatched_after_end``): recorded in the jobs table and the event log as before, never decoded,
and nothing of them read but their response count; a run's tables and numbers are those of the run that decodes
and times them, on the heap loop and on simpy; the shortcut stands down when ``sample`` or ``_draw`` is replaced."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _tiny_lm import GROUPS_PER_STEP, tiny_lm_scenario

import sandbox.run.runner as runner
from sandbox.run.runner import run_scenario
from sandbox.scenario.api import validate_scenario
from sandbox.system import workload as wl
from sandbox.system.cluster import Cluster, ReleasedPayload, released
from sandbox.system.heap_loop import HeapCluster
from sandbox.tasks.lm import LMTask

STALENESS = [{"kind": "sync"}, {"kind": "max_lag", "k_max": 1}, {"kind": "fixed_lag", "k": 2}]
B = GROUPS_PER_STEP


@pytest.fixture(autouse=True)
def _cache_and_threads(tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOX_CACHE_DIR", str(tmp_path / "cache"))
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def lm_run(staleness: dict, steps: int = 3):
    """A tiny LM run whose generation time reads the decoded length (``cost_model``)."""
    return tiny_lm_scenario(
        staleness,
        steps,
        generation_time={"kind": "cost_model", "prefill": 0.05, "per_token": 0.02, "jitter": 0.2},
        train_time={"kind": "constant", "value": 0.2},
    )


@pytest.fixture
def counts(monkeypatch) -> dict:
    """Groups decoded (``LMTask.sample_groups``) and groups handed out undecoded, counted."""
    seen = {"decoded": 0, "after_end": 0}
    decode, after_end = LMTask.sample_groups, wl.PolicyWorkload.dispatched_after_end

    def counted_decode(self, params, groups, version):
        seen["decoded"] += len(groups)
        return decode(self, params, groups, version)

    def counted_after_end(self, group_size):
        out = after_end(self, group_size)
        seen["after_end"] += out is not None
        return out

    monkeypatch.setattr(LMTask, "sample_groups", counted_decode)
    monkeypatch.setattr(wl.PolicyWorkload, "dispatched_after_end", counted_after_end)
    return seen


def _assert_same_run(a, b) -> None:
    for name in ("jobs", "events", "metrics"):
        x, y = getattr(a, name), getattr(b, name)
        assert list(x.columns) == list(y.columns), name
        for col in x.columns:
            np.testing.assert_array_equal(x[col].to_numpy(), y[col].to_numpy(), err_msg=f"{name}.{col}")
    for k in a.replica_metrics:
        np.testing.assert_array_equal(a.replica_metrics[k], b.replica_metrics[k], err_msg=k)


@pytest.mark.parametrize("staleness", STALENESS, ids=[s["kind"] for s in STALENESS])
def test_a_runs_tables_are_those_of_the_run_that_decodes_every_dispatch(monkeypatch, counts, staleness):
    short = run_scenario(lm_run(staleness), force=True)
    decoded, skipped = counts["decoded"], counts["after_end"]
    own = wl.PolicyWorkload.sample
    monkeypatch.setattr(wl.PolicyWorkload, "sample", lambda self, w, v, g: own(self, w, v, g))  # stands down
    counts.update(decoded=0, after_end=0)
    full = run_scenario(lm_run(staleness), force=True)
    assert counts["after_end"] == 0 and counts["decoded"] >= decoded + skipped  # (and the groups made ahead)
    _assert_same_run(short, full)
    jobs = short.jobs
    last_publish = short.events.loc[short.events.kind == "publish", "time"].max()
    after = jobs[(jobs.dispatch_time == last_publish) & jobs.finish_time.isna()]
    assert skipped <= len(after)  # only jobs dispatched at the last publication, never finished, are skipped
    if staleness["kind"] == "sync":  # the last publication dispatches a whole step's groups
        assert skipped == len(after) == B and (after.samples == 4).all()


def test_a_group_dispatched_after_the_end_is_never_decoded_nor_read(monkeypatch):
    """Every dispatch after the end gets a payload that raises on any read but its response count
    (:class:`ReleasedPayload`): the run completes with the tables of a run that decodes them, so the cluster
    reads nothing else of it; the groups handed out are the ones begun (prompt, seed), width 0."""
    scn = lm_run({"kind": "sync"})
    begun = []
    after_end = wl.PolicyWorkload.dispatched_after_end

    def guarded(self, group_size):
        group = after_end(self, group_size)
        begun.append(group)
        return released(group.num_responses)

    monkeypatch.setattr(wl.PolicyWorkload, "dispatched_after_end", guarded)
    _, _, cluster = runner.prepare_run(scn)
    cluster.keep_payloads = True
    res = cluster.run(scn.run.steps)
    after = [j for j in res.jobs if isinstance(j.payload, ReleasedPayload)]
    assert len(after) == len(begun) == B
    assert all(math.isnan(j.finish_time) and j.consume_step == -1 for j in after)
    assert all(g.width == 0 and not bool(g.ended.any()) for g in begun)
    monkeypatch.setattr(wl.PolicyWorkload, "dispatched_after_end", after_end)
    own = wl.PolicyWorkload.sample
    monkeypatch.setattr(wl.PolicyWorkload, "sample", lambda self, w, v, g: own(self, w, v, g))
    _, _, full = runner.prepare_run(scn)
    assert full.run(scn.run.steps).jobs.to_frame().equals(res.jobs.to_frame())


@pytest.mark.parametrize("staleness", STALENESS, ids=[s["kind"] for s in STALENESS])
def test_the_simpy_cluster_skips_the_same_dispatches(monkeypatch, counts, staleness):
    def tables(cls):
        scn = lm_run(staleness)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(runner, "HeapCluster", cls)  # the class prepare_run builds
            _, _, cluster = runner.prepare_run(scn)
        res = cluster.run(scn.run.steps)
        return res.jobs.to_frame(), res.events.to_frame(["t", "kind", "worker", "job", "version", "step"])

    heap = tables(HeapCluster)
    on_heap = dict(counts)
    ref = tables(Cluster)
    assert counts["after_end"] == 2 * on_heap["after_end"] and counts["decoded"] == 2 * on_heap["decoded"]
    assert heap[0].equals(ref[0]) and heap[1].equals(ref[1])


def test_the_shortcut_stands_down_for_a_replaced_draw_or_sample(monkeypatch, counts):
    scn = lm_run({"kind": "sync"})
    run_scenario(scn, force=True)
    assert counts["after_end"] == B
    draw = Cluster._draw
    with monkeypatch.context() as patch:
        patch.setattr(Cluster, "_draw", lambda self, name, tokens=0, speed=1.0: draw(self, name, tokens, speed))
        counts.update(after_end=0)
        run_scenario(scn, force=True)
        assert counts["after_end"] == 0  # the cluster never asked: every dispatch is sampled and timed
    task, _, cluster = runner.prepare_run(scn)
    assert cluster.workload.dispatched_after_end(4) is not None
    cluster.workload.sample = lambda w, v, g: None  # replaced on the instance
    assert cluster.workload.dispatched_after_end(4) is None
    bandit = validate_scenario({"task": {"name": "bandit"}, "run": {"steps": 2, "figures": False}})
    assert runner.prepare_run(bandit)[2].workload.dispatched_after_end(4) is None  # sampled group by group
