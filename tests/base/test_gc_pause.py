"""The cyclic collector is paused around timing-only simulations and the dead cluster is freed at
the end of the block, whatever the collector's thresholds."""

import gc
import weakref

import pytest

from sandbox.base.gc_pause import paused_cyclic_gc
from sandbox.system import cluster as cluster_module
from sandbox.system.config import SystemConfig
from sandbox.system.schedule import record_schedule
from sandbox.system.timing_only import CountingTrainer, TimingOnlyWorkload, simulate_timing

CFG = SystemConfig(
    num_workers=4, generation_time={"kind": "exponential", "mean": 1.0}, train_time={"kind": "constant", "value": 0.2}
)


@pytest.fixture
def no_automatic_collection():
    """Thresholds no allocation reaches: only an explicit collection frees a cycle."""
    old = gc.get_threshold()
    gc.collect()
    gc.set_threshold(10**9, 10**9, 10**9)
    yield
    gc.set_threshold(*old)


@pytest.fixture
def clusters(monkeypatch):
    """Weak references to every Cluster built during the test."""
    refs = []
    init = cluster_module.Cluster.__init__

    def tracking_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        refs.append(weakref.ref(self))

    monkeypatch.setattr(cluster_module.Cluster, "__init__", tracking_init)
    return refs


@pytest.mark.parametrize(
    "simulate",
    [
        lambda: simulate_timing(CFG, 50, 2, record_events=False),
        lambda: record_schedule(CFG, 50, 2, 4, 3, seed=1),
    ],
)
def test_dead_cluster_is_freed_when_the_block_ends(simulate, clusters, no_automatic_collection):
    result = simulate()
    assert result is not None and len(clusters) == 1
    assert clusters[0]() is None  # a cycle (processes refer back to it): freed by the block's collection


def test_the_cluster_is_a_cycle_without_the_block(clusters, no_automatic_collection):
    """What the pause's final collection is for: run bare, the cluster outlives its last reference."""

    def bare():
        cluster_module.Cluster(CFG, TimingOnlyWorkload(), CountingTrainer(), 2, 1, 0).run(20)

    bare()
    assert clusters[0]() is not None
    gc.collect()
    assert clusters[0]() is None


@pytest.mark.parametrize("enabled", [True, False])
def test_collector_state_is_restored(enabled):
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        with paused_cyclic_gc():
            assert not gc.isenabled()
            with paused_cyclic_gc():
                assert not gc.isenabled()
            assert not gc.isenabled()  # the inner block leaves the state to the outer one
        assert gc.isenabled() is enabled
        with pytest.raises(ValueError), paused_cyclic_gc():
            raise ValueError("an error inside the block")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_same_numbers_with_and_without_the_pause():
    paused = record_schedule(CFG, 40, 2, 4, 3, seed=5)
    bare = record_schedule.__wrapped__(CFG, 40, 2, 4, 3, seed=5)  # the undecorated function
    assert (paused.ops == bare.ops).all() and (paused.args == bare.args).all()
    assert (paused.system == bare.system).all() and paused.sim_time == bare.sim_time


class _Node:
    """A reference cycle: freed only by the cyclic collector."""

    def __init__(self):
        self.me = self


def test_collected_on_exit_frees_the_blocks_cycles_and_unfreezes(no_automatic_collection):
    from sandbox.base.gc_pause import collected_on_exit

    before = _Node()
    alive_before = weakref.ref(before)
    old_garbage = _Node()
    old_ref = weakref.ref(old_garbage)
    del old_garbage  # dead before the block: frozen with the rest, so left to a later collection
    kept_inside = []
    with collected_on_exit():
        assert gc.get_freeze_count() > 0
        dead = _Node()
        dead_ref = weakref.ref(dead)
        del dead
        kept = _Node()
        kept_inside.append(kept)  # reachable from an object older than the block: must survive
        kept_ref = weakref.ref(kept)
        del kept
    assert dead_ref() is None  # the block's dead cycle is freed when it ends
    assert kept_ref() is not None and alive_before() is not None
    assert old_ref() is not None  # older garbage is not scanned by that collection ...
    assert gc.get_freeze_count() == 0  # ... but is back in the collector's generations
    gc.collect()
    assert old_ref() is None


def test_collected_on_exit_leaves_an_earlier_freeze_alone(no_automatic_collection):
    from sandbox.base.gc_pause import collected_on_exit

    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collected_on_exit():
            dead = _Node()
            dead_ref = weakref.ref(dead)
            del dead
        assert dead_ref() is None  # a plain full collection
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
