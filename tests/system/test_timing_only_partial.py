"""A timing-only run of a partial-rollout system (``system.partial_rollouts``): the timing workload
generates in segments (``begin``/``extend``), one version per token position, and both event loops
give the same tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.scenario.api import load_scenario
from sandbox.system.timing_only import TimingOnlyWorkload, simulate_timing

ROOT = Path(__file__).resolve().parents[2]
EVENT_COLUMNS = ["t", "kind", "worker", "job", "version", "step"]


def _run(engine: str, decode_steps: int = 64, seed: int = 1):
    scn, _ = load_scenario(ROOT / "scenarios" / "partial_rollouts.toml", [])
    a = scn.algorithm
    return simulate_timing(
        scn.system, 30, a.groups_per_step, a.group_size, seed=seed, engine=engine, decode_steps=decode_steps
    )


def test_a_partial_rollout_system_runs_timing_only_on_both_loops():
    heap, ref = _run("heap"), _run("simpy")
    jobs, events = heap.jobs.to_frame(), heap.events.to_frame(EVENT_COLUMNS)
    assert jobs.equals(ref.jobs.to_frame()) and events.equals(ref.events.to_frame(EVENT_COLUMNS))
    assert heap.rows.to_frame().equals(ref.rows.to_frame()) and heap.sim_time == ref.sim_time
    assert heap.status == "completed" and heap.steps_done == 30
    switched = jobs[jobs["segments"] > 1]
    assert len(switched) > 0 and (events["kind"] == "switch").sum() == (jobs["segments"] - 1).sum()
    # jobs spanning versions: the head is the oldest version that produced a token, the tail the newest
    # (a switch before the segment's first token leaves one version)
    assert (switched["tail_version"] > switched["head_version"]).any()
    done = jobs[jobs["finish_time"].notna()]  # (a job still generating at the end has no tail yet)
    assert len(done) > 100 and (done["tail_version"] >= done["head_version"]).all()


def test_the_segments_follow_the_tokens():
    w = TimingOnlyWorkload(decode_steps=5)
    p = w.begin(3)
    assert p.width == 0 and p.num_responses == 3
    full = w.extend(1, p, 1)
    assert full.width == 5 and full.decode_steps == 5 and full.token_count == 15
    mixed = w.extend(2, full.truncate(2), 2)
    assert mixed.versions == (1, 1, 2, 2, 2) and mixed.token_count == 15
    assert mixed.oldest_version().min().item() == 1 and mixed.newest_version().max().item() == 2
    with pytest.raises(AssertionError, match="weights"):
        w.extend(1, p, 2)  # the worker must hold the weights of the version it generates with


def test_without_tokens_a_segment_is_its_prefill_and_the_version_its_own():
    res = _run("heap", decode_steps=0)
    jobs = res.jobs.to_frame()
    done = jobs[jobs["finish_time"].notna()]
    assert res.status == "completed" and (jobs["segments"] == 1).all()
    assert len(done) > 100 and (done["tail_version"] == done["head_version"]).all()


def test_decode_steps_is_checked():
    with pytest.raises(ValueError, match="decode_steps"):
        _run("heap", decode_steps=-1)
