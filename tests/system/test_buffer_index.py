"""The staleness controls' index of buffered head versions (``BufferIndex``): a learner wake-up that
can drop or take nothing skips the buffer scan, and every take is the one the full scan makes
(docs/system.md#staleness-controls)."""

from __future__ import annotations

import random

import pytest

from sandbox.system.cluster import Job
from sandbox.system.staleness import AsyncRatioControlConfig, FixedLagControlConfig, MaxLagControlConfig, make_control
from sandbox.system.staleness.base import BufferIndex


def test_index_tracks_the_smallest_head_version_of_the_buffer():
    idx = BufferIndex()
    jobs = [Job(id=i, worker=0, head_version=v, dispatch_time=0.0) for i, v in enumerate([5, 2, 7, 2])]
    for j in jobs:
        idx.add(j)
    assert idx.min_head() == 2 and len(idx) == 4
    idx.discard([jobs[1]])
    assert idx.min_head() == 2  # job 3 still holds version 2
    idx.discard([jobs[3], jobs[0]])
    assert idx.min_head() == 7 and idx.covers([jobs[2]]) and not idx.covers([])
    idx.discard([jobs[2]])
    assert idx.min_head() == float("inf")


class ScanOnly(BufferIndex):
    """Forces the full scan: the index never claims to cover the buffer."""

    def covers(self, buffer):
        return False


def _play(cfg, B, seed, scan: bool):
    """A random interleaving of admissions, finishes (in random order) and takes; returns every
    take's (batch ids, dropped ids) and the final counts."""
    rng = random.Random(seed)
    ctl = make_control(cfg, B)
    if scan:
        ctl.buffered = ScanOnly()
    buffer, running, out, step, visible, ids = [], [], [], 0, 0, 0
    for _ in range(400):
        move = rng.random()
        if move < 0.45:
            adm = ctl.admit(visible, len(buffer))
            if adm is not None:
                job = Job(id=ids, worker=0, head_version=adm.version, dispatch_time=0.0, target_step=adm.target_step)
                ids += 1
                ctl.on_dispatch(job)
                running.append(job)
        elif move < 0.8 and running:
            job = running.pop(rng.randrange(len(running)))
            ctl.on_finish(job)
            buffer.append(job)
        else:
            taken = ctl.take(step, buffer)
            out.append(
                ([j.id for j in taken.batch] if taken.batch is not None else None, [j.id for j in taken.dropped])
            )
            if taken.batch is not None:
                step += 1
                ctl.on_publish(step)
                visible = step
    return out, ctl.dropped, ctl.consumed, [j.id for j in buffer]


@pytest.mark.parametrize(
    "cfg",
    [
        MaxLagControlConfig(k_max=1, enforcement="drop", queue_capacity=12),
        MaxLagControlConfig(k_max=2),
        AsyncRatioControlConfig(alpha=1.5),
        AsyncRatioControlConfig(alpha=0.0),
        AsyncRatioControlConfig(alpha=2.0),
        FixedLagControlConfig(k=2),
    ],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_takes_with_the_index_equal_the_full_scan(cfg, seed):
    indexed = _play(cfg, 4, seed, scan=False)
    scanned = _play(cfg, 4, seed, scan=True)
    assert indexed == scanned
    assert sum(t[0] is not None for t in indexed[0]) >= 5  # the sequence really consumed batches


def test_the_random_sequences_drop_stale_jobs():
    for cfg in (
        MaxLagControlConfig(k_max=1, enforcement="drop", queue_capacity=12),
        AsyncRatioControlConfig(alpha=1.5),
    ):
        takes, dropped, _, _ = _play(cfg, 4, 0, scan=False)
        assert dropped > 0 and sum(len(d) for _, d in takes) == dropped


@pytest.mark.parametrize("slack", [0, BufferIndex.SLACK])
def test_the_heap_stays_bounded_and_its_minimum_exact(slack, monkeypatch):
    """Issue 28: discarded entries are dropped once they outnumber the live ones (a ``sync`` control
    never asks for the minimum, so none would leave otherwise); the minimum stays the brute-force one
    through every rebuild (slack 0: a rebuild on most discards)."""
    monkeypatch.setattr(BufferIndex, "SLACK", slack)
    rng = random.Random(3)
    idx, live, peak = BufferIndex(), {}, 0
    for i in range(20_000):
        job = Job(id=i, worker=0, head_version=rng.randrange(i // 8 + 1, i // 8 + 6), dispatch_time=0.0)
        idx.add(job)
        live[i] = job
        if len(live) > 8 and rng.random() < 0.55:
            gone = rng.sample(sorted(live), rng.randrange(1, 8))
            idx.discard([live.pop(k) for k in gone])
        peak = max(peak, len(idx._heap) - 2 * len(live))
        if i % 1000 == 999:  # asked rarely (a sync control never asks)
            assert idx.min_head() == min(j.head_version for j in live.values())
    assert peak <= slack + 8  # the live ones, twice, plus the slack (and one add since the last discard)
    assert idx.min_head() == min(j.head_version for j in live.values()) and len(idx) == len(live)
