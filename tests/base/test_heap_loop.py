"""The heap event loop (``sandbox/system/heap_loop.py``) against the simpy cluster (issue 48): the jobs
table, the event log, the rows, the clock, the status and the engines' counters are the simpy cluster's
to the bit on every shipped scenario (timing-only, and as learning runs where the workers generate in
segments), on continuous-batching engines of every sync mode with batch and KV-cache caps, and on split
synchronous steps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import sandbox.run.runner as runner
from sandbox.scenario.api import load_scenario
from sandbox.system.cluster import Cluster
from sandbox.system.config import SystemConfig
from sandbox.system.delays.continuous_batching import ContinuousBatchingDelay, Engine
from sandbox.system.heap_loop import EngineSteps, HeapCluster
from sandbox.system.timing_only import CountingTrainer, TimingOnlyWorkload, simulate_timing

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p for p in (ROOT / "scenarios").rglob("*.toml") if "sweeps" not in p.parts)
STEPS = 40
EVENT_COLUMNS = ["t", "kind", "worker", "job", "version", "step"]


def _tables(cluster, steps: int) -> tuple:
    res = cluster.run(steps)
    engines = [(e.busy, e.steps, e.syncs, e.kv_used) for e in cluster.engines or []]
    return (res.jobs.to_frame(), res.events.to_frame(EVENT_COLUMNS), res.rows.to_frame(), res.sim_time,
            res.status, res.steps_done, res.dropped, dict(res.lengths), engines)  # fmt: skip


def _assert_same(got: tuple, ref: tuple, where: str) -> None:
    assert len(got[0]) > 0 and len(got[1]) > 0, where
    assert got[0].equals(ref[0]), f"{where}: jobs"
    assert got[1].equals(ref[1]), f"{where}: events"
    assert got[2].equals(ref[2]), f"{where}: rows"
    assert got[3:] == ref[3:], f"{where}: clock, status, counts, lengths, engines"


def _timing(cls, cfg, B: int, G: int, seed: int, steps: int = STEPS) -> tuple:
    return _tables(cls(cfg, TimingOnlyWorkload(), CountingTrainer(), B, G, seed, record_events=True), steps)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: str(p.relative_to(ROOT / "scenarios")))
def test_the_simpy_clusters_tables_on_every_shipped_scenario(path):
    scn, _ = load_scenario(path, [])
    a = scn.algorithm
    if scn.system.partial_rollouts:  # generation in segments needs the task's payloads: a learning run
        return _learning_run_matches(path)
    for seed in (0, 7):
        ref = _timing(Cluster, scn.system, a.groups_per_step, a.group_size, seed, min(scn.run.steps, STEPS))
        got = _timing(HeapCluster, scn.system, a.groups_per_step, a.group_size, seed, min(scn.run.steps, STEPS))
        _assert_same(got, ref, f"{path.name} seed {seed}")


def _learning_run_matches(path: Path, steps: int = 8) -> None:
    def run(cls):
        scn, _ = load_scenario(path, [f"run.steps={steps}", "run.figures=false"])
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(runner, "HeapCluster", cls)  # the class prepare_run builds
            _, _, cluster = runner.prepare_run(scn)
        return _tables(cluster, steps)

    got, ref = run(HeapCluster), run(Cluster)
    _assert_same(got, ref, path.name)
    if path.name == "partial_rollouts.toml":  # the segments really happened (a weight switch mid-generation)
        assert "switch" in set(got[1]["kind"]) and got[0]["segments"].max() > 1


def _engine_systems(n: int):
    """Random continuous-batching systems: every sync mode, with and without batch and KV-cache caps,
    prefill and sync time, several workers per engine, every staleness control."""
    rng = np.random.default_rng(48)
    for i in range(n):
        gen = {
            "kind": "continuous_batching",
            "step_base": float(rng.choice([0.0, 0.01, 0.02])),
            "step_per_sequence": float(rng.choice([0.0, 0.001, 0.0005])),
            "workers_per_engine": int(rng.integers(1, 4)),
            "sync": ["drain", "abort", "partial"][i % 3],
            "sync_time": float(rng.choice([0.0, 0.05])),
            "length_median": float(rng.integers(3, 40)),
            "length_sigma": float(rng.choice([0.0, 0.5, 1.0])),
            "max_tokens": 64,
            "prefill_per_token": float(rng.choice([0.0, 0.0001])),
            "prompt_tokens": int(rng.choice([0, 10])),
            "max_sequences": [None, 3, 8][i % 3 if i % 5 else 0],
            "kv_capacity_tokens": [None, 200, 500][(i // 3) % 3],
        }
        kind = ["max_lag", "sync", "async_ratio", "fixed_lag", "stream_sync"][i % 5]
        staleness = {"kind": kind, **({"k_max": int(rng.integers(0, 3))} if kind == "max_lag" else {})}
        cfg = SystemConfig(
            num_workers=int(rng.integers(1, 12)),
            generation_time=gen,
            train_time={"kind": "exponential", "mean": 0.3},
            sync_delay={"kind": "constant", "value": float(rng.choice([0.0, 0.1]))},
            staleness=staleness,
        )
        yield i, cfg, int(rng.integers(1, 5)), int(rng.integers(1, 6))


@pytest.mark.parametrize("chunk", range(2))
def test_the_simpy_clusters_tables_on_continuous_batching_engines(chunk):
    modes = set()
    for i, cfg, B, G in _engine_systems(40):
        if i % 2 != chunk:
            continue
        ref, got = _timing(Cluster, cfg, B, G, i, 12), _timing(HeapCluster, cfg, B, G, i, 12)
        _assert_same(got, ref, f"engine system {i}: {cfg.generation_time.model_dump()} {cfg.staleness.kind}")
        modes.add(cfg.generation_time.sync)
        assert got[8] and sum(e[1] for e in got[8]) > 0  # the engines stepped
    assert modes == {"drain", "abort", "partial"}


def test_split_synchronous_steps_run_on_the_heap_loop():
    cfg = SystemConfig(num_workers=12, generation_time={"kind": "exponential", "mean": 1.0}, staleness={"kind": "sync"})
    ref, got = _timing(Cluster, cfg, 2, 8, 5, 20), _timing(HeapCluster, cfg, 2, 8, 5, 20)
    _assert_same(got, ref, "sync, 2 groups of 8 over 12 workers")
    events = got[1]
    assert events[events["kind"] == "dispatch"]["worker"].nunique() == 12  # the groups' parts on every worker


def test_without_events_and_through_simulate_timing():
    scn, _ = load_scenario(ROOT / "scenarios" / "max_lag_drop.toml", [])
    a = scn.algorithm
    ref = simulate_timing(
        scn.system, STEPS, a.groups_per_step, a.group_size, seed=3, record_events=False, engine="simpy"
    )
    got = simulate_timing(scn.system, STEPS, a.groups_per_step, a.group_size, seed=3, record_events=False)
    assert len(got.events) == 0 and got.dropped == ref.dropped
    assert got.jobs.to_frame().equals(ref.jobs.to_frame()) and got.rows.to_frame().equals(ref.rows.to_frame())
    other = simulate_timing(scn.system, STEPS, a.groups_per_step, a.group_size, seed=4, record_events=False)
    assert not got.jobs.to_frame().equals(other.jobs.to_frame())  # the comparison can fail
    with pytest.raises(ValueError, match="engine"):
        simulate_timing(scn.system, 2, 1, engine="fast")


def test_a_stuck_system_is_reported_by_both_loops():
    cfg = SystemConfig(
        num_workers=2, staleness={"kind": "max_lag", "k_max": 0, "enforcement": "drop", "queue_capacity": 2}
    )
    for engine in ("heap", "simpy"):
        with pytest.raises(Exception, match="can make no progress"):
            simulate_timing(cfg, 3, 3, engine=engine)


def test_a_processed_condition_is_freed_without_the_collector(monkeypatch):
    """An ``a | b`` of the heap loop holds no reference cycle of its own once processed: with the cyclic
    collector off, a run leaves alive only the conditions its engines still wait on, not one per engine step."""
    import gc

    from sandbox.system.heap_loop import AnyOf

    cfg = SystemConfig(
        num_workers=8,
        generation_time={"kind": "continuous_batching", "workers_per_engine": 4, "length_median": 20.0,
                         "length_sigma": 0.5, "max_tokens": 64},
        staleness={"kind": "max_lag", "k_max": 1},
    )  # fmt: skip
    original_run = Engine._run

    def run(self):  # the engine's process itself (the engine steps stand down): it waits on ``a | b``
        return (yield from original_run(self))

    monkeypatch.setattr(Engine, "_run", run)
    gc.collect()
    gc.disable()
    try:
        cluster = HeapCluster(cfg, TimingOnlyWorkload(), CountingTrainer(), 4, 4, 0, record_events=False)
        cluster.run(20)
        alive = sum(type(o) is AnyOf for o in gc.get_objects())
    finally:
        gc.enable()
    assert sum(e.steps for e in cluster.engines) > 100 and alive <= len(cluster.engines)


def test_the_plain_steps_follow_a_replaced_draw_or_worker(monkeypatch):
    """The loop's plain-worker steps copy ``Cluster._worker`` and draw through ``Cluster._draw``: a replaced
    draw changes the heap loop's jobs as it changes simpy's, and a replaced worker process is run (the plain
    steps stand down) — a planted bug or a subclass is never bypassed by the fast path."""
    cfg = SystemConfig(num_workers=4, generation_time={"kind": "exponential", "mean": 1.0}, staleness={"kind": "sync"})
    plain = _timing(HeapCluster, cfg, 2, 4, 1, 10)
    original_draw = Cluster._draw
    monkeypatch.setattr(
        Cluster, "_draw", lambda self, name, tokens=0, speed=1.0: 2.0 * original_draw(self, name, tokens, speed)
    )
    doubled, ref = _timing(HeapCluster, cfg, 2, 4, 1, 10), _timing(Cluster, cfg, 2, 4, 1, 10)
    _assert_same(doubled, ref, "a replaced draw")
    assert not doubled[0].equals(plain[0])
    monkeypatch.undo()
    calls = []
    original_worker = Cluster._worker

    def worker(self, wid):
        calls.append(wid)
        return (yield from original_worker(self, wid))

    monkeypatch.setattr(Cluster, "_worker", worker)
    _assert_same(_timing(HeapCluster, cfg, 2, 4, 1, 10), plain, "a replaced worker process")
    assert sorted(set(calls)) == [0, 1, 2, 3]


def _engine_system(sync: str, **gen) -> SystemConfig:
    return SystemConfig(
        num_workers=6,
        generation_time={"kind": "continuous_batching", "step_base": 0.01, "step_per_sequence": 0.001,
                         "workers_per_engine": 3, "sync": sync, "sync_time": 0.05, "length_median": 12.0,
                         "length_sigma": 0.7, "max_tokens": 64, "max_sequences": 8, **gen},
        train_time={"kind": "exponential", "mean": 0.3},
        staleness={"kind": "max_lag", "k_max": 1},
    )  # fmt: skip


def _counting_starts(monkeypatch) -> list:
    starts = []
    start = EngineSteps.start
    monkeypatch.setattr(EngineSteps, "start", lambda self: (starts.append(self.engine.index), start(self))[1])
    return starts


def test_the_engine_steps_stand_down_when_the_engine_process_is_replaced(monkeypatch):
    """The engine steps copy ``Engine._run``: they run the engines of an unchanged model (the tables are the
    simpy cluster's, tested above), and a replaced ``_run`` is run as the engine's process instead."""
    cfg = _engine_system("partial")
    starts = _counting_starts(monkeypatch)
    steps = _timing(HeapCluster, cfg, 2, 4, 3, 10)
    assert sorted(starts) == [0, 1]  # the engine steps ran both engines
    calls = []
    original_run = Engine._run

    def run(self):
        calls.append(self.index)
        return (yield from original_run(self))

    monkeypatch.setattr(Engine, "_run", run)
    starts.clear()
    _assert_same(_timing(HeapCluster, cfg, 2, 4, 3, 10), steps, "a replaced engine process")
    assert sorted(calls) == [0, 1] and starts == []


def _sync_after_the_batch_drains(original):
    def sync_needed(self):  # "partial" behaves as "drain": a sync waits for the sequences in flight
        return original(self) and not self.running

    return sync_needed


def _sync_held_longer(original):
    def do_sync(self):  # an extra hold before every sync
        yield self.env.timeout(0.5)
        return (yield from original(self))

    return do_sync


def _admit_two_at_most(original):
    def admit(self):  # the engine admits as if max_sequences were 2
        most = self.cfg.max_sequences
        object.__setattr__(self.cfg, "max_sequences", 2)
        try:
            return original(self)
        finally:
            object.__setattr__(self.cfg, "max_sequences", most)

    return admit


def _least_left_one_more(original):
    return lambda self: original(self) + 1  # the engine steps one past the first end


def _finish_a_step_early(original):
    def finish_ended(self):  # sequences leave the batch one step before their last token
        self.decoded += 1
        try:
            original(self)
        finally:
            self.decoded -= 1

    return finish_ended


@pytest.mark.parametrize(
    "cls, method, bug",
    [
        (
            ContinuousBatchingDelay,
            "step_cost",
            lambda original: lambda self, n: self.step_base + self.step_per_sequence,
        ),
        (Engine, "_sync_needed", _sync_after_the_batch_drains),
        (Engine, "_do_sync", _sync_held_longer),
        (Engine, "_admit", _admit_two_at_most),
        (Engine, "_least_left", _least_left_one_more),
        (Engine, "_finish_ended", _finish_a_step_early),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_a_planted_bug_in_a_method_the_engine_steps_call_changes_both_loops(monkeypatch, cls, method, bug):
    """Each engine method the engine steps call is the model's own: a planted bug in it changes the heap
    loop's tables as it changes simpy's (and the tables do change)."""
    cfg = _engine_system("partial")
    clean = _timing(HeapCluster, cfg, 2, 4, 3, 10)
    starts = _counting_starts(monkeypatch)
    monkeypatch.setattr(cls, method, bug(getattr(cls, method)))
    planted, ref = _timing(HeapCluster, cfg, 2, 4, 3, 10), _timing(Cluster, cfg, 2, 4, 3, 10)
    assert starts, "the engine steps stood down"
    _assert_same(planted, ref, f"{method} planted")
    assert not (planted[0].equals(clean[0]) and planted[8] == clean[8]), f"{method}: the planted bug changed nothing"


def test_a_learning_run_with_mixed_version_engines_matches_simpy(tmp_path, monkeypatch):
    """An LM learning run on a ``partial`` engine with ``mixed_versions`` (the engine steps call the cluster's
    ``resume`` hook inside ``_do_sync``): the heap loop's tables and the payload-dependent lengths are simpy's."""
    import torch

    from sandbox.scenario.model import Scenario

    monkeypatch.setenv("SANDBOX_CACHE_DIR", str(tmp_path / "cache"))
    threads = torch.get_num_threads()
    scn = Scenario.model_validate(
        dict(
            task=dict(name="lm", problem=dict(kind="sort", min_len=2, max_len=4),
                      model=dict(d_model=16, n_layers=1, n_heads=2), warmstart=dict(enabled=False),
                      train_size=64, eval_size=16, eval_samples=1),
            system=dict(num_workers=3, train_time=dict(kind="constant", value=0.1),
                        staleness=dict(kind="max_lag", k_max=2),
                        generation_time=dict(kind="continuous_batching", step_base=0.05, step_per_sequence=0.01,
                                             workers_per_engine=3, sync="partial", sync_time=0.05,
                                             mixed_versions=True)),
            algorithm=dict(group_size=4, groups_per_step=2, optimizer=dict(name="adam", lr=1e-3),
                           correction=dict(name="tis", level="token")),
            run=dict(steps=6, eval_every=3, figures=False),
        )
    )  # fmt: skip
    starts = _counting_starts(monkeypatch)

    def run(cls):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(runner, "HeapCluster", cls)  # the class prepare_run builds
            _, _, cluster = runner.prepare_run(scn)
        return _tables(cluster, scn.run.steps)

    try:
        got, ref = run(HeapCluster), run(Cluster)
    finally:
        torch.set_num_threads(threads)
    _assert_same(got, ref, "mixed-version engine, LM learning run")
    assert starts == [0] and (got[1]["kind"] == "switch").any()  # the engine steps ran; sequences were resumed


def _refuse_with_a_group_waiting(original):
    def admit(self, visible, buffer_len):  # pure: a function of the control's state and its arguments
        return None if buffer_len >= 1 else original(self, visible, buffer_len)

    return admit


def test_a_gated_worker_is_tried_once_and_the_plan_stands_down_for_a_replaced_test(monkeypatch):
    """On a plain system a round tries each parked worker with its dispatch step's own ``control.admit`` (no
    separate ``_admissible`` call): a planted bug in ``admit`` changes the heap loop's tables as it changes
    simpy's; a replaced ``Cluster._admissible`` is asked before each dispatch again (the plan stands down)."""
    from sandbox.system.staleness.max_lag import MaxLagControl

    cfg = SystemConfig(
        num_workers=6, generation_time={"kind": "exponential", "mean": 1.0}, staleness={"kind": "max_lag", "k_max": 1}
    )
    plain = _timing(HeapCluster, cfg, 2, 4, 3, 15)
    assert HeapCluster(cfg, TimingOnlyWorkload(), CountingTrainer(), 2, 4, 3)._plain_admits
    monkeypatch.setattr(MaxLagControl, "admit", _refuse_with_a_group_waiting(MaxLagControl.admit))
    bugged = _timing(HeapCluster, cfg, 2, 4, 3, 15)
    _assert_same(bugged, _timing(Cluster, cfg, 2, 4, 3, 15), "a planted bug in admit")
    assert not bugged[0].equals(plain[0])
    monkeypatch.undo()
    asked = []

    class Asking(HeapCluster):
        def _admissible(self):
            asked.append(self.env.now)
            return super()._admissible()

    assert not Asking(cfg, TimingOnlyWorkload(), CountingTrainer(), 2, 4, 3)._plain_admits
    _assert_same(_timing(Asking, cfg, 2, 4, 3, 15), plain, "a replaced admission test")
    assert asked


def test_the_plain_steps_draw_through_the_delay_and_a_sync_is_the_stores_own(monkeypatch):
    """The plain steps' generation time is the cluster's ``_draw`` body with the delay's ``sample`` bound once
    per run, and a publication's sync is one heap entry that runs ``WeightStore._sync``: a planted bug in the
    delay's ``sample`` or in the store's ``_sync`` changes the heap loop's tables as it changes simpy's."""
    from sandbox.system.cluster import WeightStore
    from sandbox.system.delays.exponential import ExponentialDelay

    cfg = SystemConfig(num_workers=4, generation_time={"kind": "exponential", "mean": 1.0}, staleness={"kind": "sync"})
    plain = _timing(HeapCluster, cfg, 2, 4, 5, 12)
    original_sample, original_sync = ExponentialDelay.sample, WeightStore._sync
    monkeypatch.setattr(
        ExponentialDelay, "sample", lambda self, rng, tokens=0: 1.5 * original_sample(self, rng, tokens)
    )
    bugged = _timing(HeapCluster, cfg, 2, 4, 5, 12)
    _assert_same(bugged, _timing(Cluster, cfg, 2, 4, 5, 12), "a planted bug in the delay's sample")
    assert not bugged[0].equals(plain[0])
    monkeypatch.undo()
    monkeypatch.setattr(WeightStore, "_sync", lambda self, version, delay: original_sync(self, version, delay + 0.25))
    late = _timing(HeapCluster, cfg, 2, 4, 5, 12)
    _assert_same(late, _timing(Cluster, cfg, 2, 4, 5, 12), "a planted bug in the store's sync")
    assert not late[0].equals(plain[0])


def test_the_learner_tries_a_replaced_take_as_on_simpy(monkeypatch):
    """The learner skips the first take of a step only when ``Control.could_take`` says it would change nothing;
    a control whose ``take`` is replaced is always asked, on both loops the same number of times."""
    from sandbox.system.staleness.sync import SyncControl

    cfg = SystemConfig(num_workers=4, generation_time={"kind": "exponential", "mean": 1.0}, staleness={"kind": "sync"})
    plain = _timing(HeapCluster, cfg, 2, 4, 2, 10)
    takes: dict[str, int] = {}
    original_take = SyncControl.take

    def counted(name):
        def take(self, step, buffer):
            takes[name] = takes.get(name, 0) + 1
            return original_take(self, step, buffer)

        return take

    monkeypatch.setattr(SyncControl, "take", counted("simpy"))
    ref = _timing(Cluster, cfg, 2, 4, 2, 10)
    monkeypatch.setattr(SyncControl, "take", counted("heap"))
    got = _timing(HeapCluster, cfg, 2, 4, 2, 10)
    _assert_same(got, ref, "a replaced take")
    _assert_same(got, plain, "a replaced take (same rule)")
    assert takes["heap"] == takes["simpy"] > 10


def test_the_stores_changed_event_is_made_when_asked_for():
    """``WeightStore.changed`` is made on demand: a visibility nobody waits on schedules no event, and one
    asked for is triggered with the version, as the event it replaces."""
    import simpy

    from sandbox.system.cluster import WeightStore

    env = simpy.Environment()
    seen = []
    store = WeightStore(env, "w0", seen.append)
    store.publish(1, "w1", 0.0)
    env.run()
    assert seen == [1] and store.visible == 1 and store._changed is None
    changed = store.changed
    assert store.changed is changed and not changed.triggered
    store.publish(2, "w2", 0.5)
    env.run()
    assert seen == [1, 2] and changed.processed and changed.value == 2 and store.get(2) == "w2"


def test_a_control_rule_replaced_after_its_class_was_defined_is_always_asked(monkeypatch):
    """``Control.could_take`` vouches for the rules as their classes define them: a drop or selection rule patched
    onto a control class afterwards (a planted bug) is asked at every take, so the heap loop, which skips the takes
    ``could_take`` rules out, changes its tables exactly as the simpy cluster (which always takes) does."""
    from sandbox.system.staleness.base import Control
    from sandbox.system.staleness.max_lag import MaxLagControl
    from sandbox.system.staleness.sync import SyncControl

    cfg = SystemConfig(
        num_workers=6,
        generation_time={"kind": "exponential", "mean": 1.0},
        staleness={"kind": "max_lag", "k_max": 2, "enforcement": "drop"},
    )
    plain = _timing(HeapCluster, cfg, 2, 4, 3, 30)
    original_drop = MaxLagControl.drop_stale

    def drops_one_step_early(self, step, buffer):  # lag > k_max - 1: the bound off by one
        return original_drop(self, step + 1, buffer)

    monkeypatch.setattr(MaxLagControl, "drop_stale", drops_one_step_early)
    assert MaxLagControl(cfg.staleness, 2).could_take(0, [])  # the rule as written no longer answers for it
    bugged = _timing(HeapCluster, cfg, 2, 4, 3, 30)
    _assert_same(bugged, _timing(Cluster, cfg, 2, 4, 3, 30), "a drop rule replaced on its class")
    assert not bugged[0].equals(plain[0])
    monkeypatch.undo()

    def newest_first(self, step, buffer):  # LIFO instead of FIFO
        if len(buffer) < self.B:
            return None
        return [buffer.pop() for _ in range(self.B)]

    sync = SystemConfig(num_workers=4, generation_time={"kind": "exponential", "mean": 1.0}, staleness={"kind": "sync"})
    assert not SyncControl(sync.staleness, 2).could_take(0, [])
    monkeypatch.setattr(Control, "select", newest_first)
    assert SyncControl(sync.staleness, 2).could_take(0, [])  # a base rule replaced: always asked
    _assert_same(_timing(HeapCluster, sync, 2, 4, 2, 10), _timing(Cluster, sync, 2, 4, 2, 10), "a base select replaced")
