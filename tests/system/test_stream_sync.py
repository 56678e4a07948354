"""The ``stream_sync`` control (verl's stream off-policy pipeline, ``docs/system.md#stream_sync``): its
rules on a hand-worked call sequence, and the step times and lags of a constant-time run by hand."""

from __future__ import annotations

import numpy as np
import pytest
from _sim import lags, simulate
from test_control_rules import Harness

from sandbox.system.staleness import StreamSyncControlConfig


@pytest.mark.component("staleness", "stream_sync")
def test_stream_sync_admits_a_round_with_its_first_version_and_streams_it():
    h = Harness(StreamSyncControlConfig(sync_every=2), B=2)
    first = h.dispatch_all(visible=0)
    assert [j.head_version for j in first] == [0, 0, 0, 0]  # m·B = 4 groups of version 0, then wait
    h.finish(first[0])
    assert h.take(0).batch is None  # B = 2 needed
    h.finish(first[1])
    assert h.take(0).batch == first[:2]  # step 0 trains before the round has finished
    h.control.on_publish(1)
    assert h.dispatch(visible=1) is None  # mid-round: the rollout side does not sync to version 1
    h.finish(first[2], first[3])
    assert h.take(1).batch == first[2:]
    h.control.on_publish(2)
    assert h.dispatch(visible=1) is None  # round 1 generates with version 2: not visible yet
    assert h.control.oldest_needed_version(1) == 1
    assert [j.head_version for j in h.dispatch_all(visible=2)] == [2, 2, 2, 2]


@pytest.mark.component("staleness", "stream_sync")
def test_stream_sync_step_times_and_lags_by_hand():
    # constant generation g = 2 s, training t = 0.5 s, B = 2, m = 4, 8 workers: a round's 8 groups start
    # together at T and end at T + 2; steps 4r .. 4r + 3 then train back to back, and version 4r + 4
    # publishes at T + 2 + 4·0.5 = T + 4: step s ends at 4·⌊s/4⌋ + 2 + 0.5·(s mod 4 + 1).
    _, res = simulate(
        steps=12,
        B=2,
        num_workers=8,
        generation_time={"kind": "constant", "value": 2.0},
        train_time={"kind": "constant", "value": 0.5},
        staleness={"kind": "stream_sync", "sync_every": 4},
    )
    times = [r["time"] for r in res.rows]
    assert times == pytest.approx([4 * (s // 4) + 2 + 0.5 * (s % 4 + 1) for s in range(12)], abs=1e-12)
    lag, consumed = lags(res)
    steps = np.array([j.consume_step for j in consumed])
    assert (lag == steps % 4).all()  # lag j at the round's j-th step
    # sync with the same B waits g + t per step: 2.5 s against 1.0 s per step here
    _, sync = simulate(
        steps=12,
        B=2,
        num_workers=8,
        generation_time={"kind": "constant", "value": 2.0},
        train_time={"kind": "constant", "value": 0.5},
        staleness={"kind": "sync"},
    )
    assert sync.rows[-1]["time"] == pytest.approx(12 * 2.5)


def test_stream_sync_with_one_step_per_round_is_sync():
    common = dict(
        steps=40,
        B=3,
        num_workers=5,
        generation_time={"kind": "pareto", "alpha": 1.5, "scale": 0.2},
        sync_delay={"kind": "exponential", "mean": 0.3},
    )
    _, a = simulate(**common, staleness={"kind": "stream_sync", "sync_every": 1})
    _, b = simulate(**common, staleness={"kind": "sync"})
    assert [r["time"] for r in a.rows] == [r["time"] for r in b.rows]
    assert (lags(a)[0] == 0).all()


@pytest.mark.component("staleness", "stream_sync")
def test_stream_sync_staleness_threshold_generates_ahead_with_the_round_weights():
    # verl staleness_threshold s = 0.5, m = 2, B = 2: a round may admit (1 + s)·m·B = 6 groups with its weights
    cfg = StreamSyncControlConfig(sync_every=2, staleness_threshold=0.5)
    assert (cfg.max_in_flight(2), cfg.is_synchronous(), cfg.fixed_lag()) == (6, False, None)
    h = Harness(cfg, B=2)
    first = h.dispatch_all(visible=0)
    assert [j.head_version for j in first] == [0] * 6  # 4 of the round + 2 ahead, then wait
    h.finish(*first[:4])
    assert h.take(0).batch == first[:2]
    h.control.on_publish(1)
    assert h.take(1).batch == first[2:4]
    h.control.on_publish(2)
    # round 1 (version 2): the cumulative bound (2 + 2)·2 + 2 = 10, of which 6 already admitted: 4 more
    assert [j.head_version for j in h.dispatch_all(visible=2)] == [2] * 4
    h.finish(*first[4:])
    assert h.take(2).batch == first[4:]  # the two generated ahead with version 0: lag 2 = up to 2m − 1
    # staleness_threshold 0 is the stream off-policy pipeline exactly
    assert StreamSyncControlConfig(sync_every=2).max_in_flight(2) == 4


def test_stream_sync_staleness_threshold_hides_the_round_wait():
    # constant g = 2 s, t = 0.5 s, B = 2, m = 4: without staleness a step costs (g + m·t) / m = 1.0 s; with
    # s = 1 the next round's groups are generated during this round's training, so a step costs t = 0.5 s
    common = dict(
        steps=24,
        B=2,
        num_workers=16,
        generation_time={"kind": "constant", "value": 2.0},
        train_time={"kind": "constant", "value": 0.5},
    )
    _, zero = simulate(**common, staleness={"kind": "stream_sync", "sync_every": 4})
    _, ahead = simulate(**common, staleness={"kind": "stream_sync", "sync_every": 4, "staleness_threshold": 1.0})
    per_step = lambda res: (res.rows[-1]["time"] - res.rows[7]["time"]) / 16  # noqa: E731
    assert per_step(zero) == pytest.approx(1.0) and per_step(ahead) == pytest.approx(0.5)
