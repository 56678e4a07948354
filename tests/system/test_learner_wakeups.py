"""The heap event loop skips a learner wake-up when the control says its take could change nothing
(``Control.could_take``); every skipped take, made anyway on a copy of the buffer, finds nothing to drop
and no batch, for every staleness control, and the tables stay the simpy cluster's (which never skips)."""

from __future__ import annotations

import numpy as np
import pytest
from test_cluster_wakeups import _job_table, _random_config

from sandbox.system.config import SystemConfig
from sandbox.system.staleness.base import Control
from sandbox.system.timing_only import simulate_timing


def test_every_skipped_take_would_have_found_nothing(monkeypatch):
    skipped, kinds = [0], set()
    could_take = Control.could_take

    def checked(self, step, buffer):
        out = could_take(self, step, buffer)
        if not out:
            skipped[0] += 1
            kinds.add(self.cfg.kind)
            copy = list(buffer)
            dropped, consumed = self.dropped, self.consumed
            assert self.take(step, copy) == (None, []), f"{self.cfg.model_dump()} step {step}"
            assert copy == buffer and (self.dropped, self.consumed) == (dropped, consumed)
        return out

    rng = np.random.default_rng(48)
    for _ in range(40):
        cfg, groups = _random_config(rng)
        seed = int(rng.integers(0, 2**31))
        with monkeypatch.context() as patch:
            patch.setattr(Control, "could_take", checked)
            heap = simulate_timing(cfg, 12, groups, seed=seed)
        ref = simulate_timing(cfg, 12, groups, seed=seed, engine="simpy")
        where = f"{cfg.model_dump()} B={groups} seed={seed}"
        assert _job_table(heap) == _job_table(ref) and heap.events == ref.events and heap.rows == ref.rows, where
    assert skipped[0] > 100
    assert kinds == {"max_lag", "async_ratio", "fixed_lag", "sync"}


@pytest.mark.parametrize(
    "staleness",
    [
        {"kind": "max_lag", "k_max": 2},
        {"kind": "max_lag", "k_max": 0, "enforcement": "drop"},
        {"kind": "async_ratio", "alpha": 1.5},
        {"kind": "fixed_lag", "k": 2},
        {"kind": "sync"},
        {"kind": "stream_sync", "sync_every": 2},
    ],
)
def test_a_take_that_could_act_is_never_skipped(staleness):
    """Whenever ``take`` would drop or select something, ``could_take`` says so (checked on every state
    the learner waits in, through the simpy cluster, which calls ``take`` on every wake-up)."""
    import sandbox.system.staleness.base as base

    seen = {"acted": 0}
    take = base.Control.take

    def checked(self, step, buffer):
        could = self.could_take(step, buffer)
        out = take(self, step, buffer)
        if out.batch is not None or out.dropped:
            seen["acted"] += 1
            assert could, f"{self.cfg.model_dump()} step {step}: take acted where could_take said no"
        return out

    cfg = SystemConfig(
        num_workers=12,
        generation_time={"kind": "exponential", "mean": 1.0},
        train_time={"kind": "constant", "value": 0.3},
        staleness=staleness,
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(base.Control, "take", checked)
        simulate_timing(cfg, 30, 4, seed=1, engine="simpy")
    assert seen["acted"] >= 30


def test_a_control_with_its_own_take_is_always_woken():
    from sandbox.system.staleness.max_lag import MaxLagControl, MaxLagControlConfig

    class OwnTake(MaxLagControl):
        def take(self, step, buffer):
            return super().take(step, buffer)

    plain = MaxLagControl(MaxLagControlConfig(k_max=2), 4)
    own = OwnTake(MaxLagControlConfig(k_max=2), 4)
    assert not plain.could_take(0, []) and own.could_take(0, [])
