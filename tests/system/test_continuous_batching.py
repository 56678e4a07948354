"""The continuous-batching engine (``docs/system.md#continuous_batching``) against step times
computed by hand: a decode step costs ``a + b·n`` for ``n`` sequences in flight, prefill is its own
step, the KV cache and ``max_sequences`` cap the batch, and the three weight-sync modes."""

from __future__ import annotations

import pytest
import simpy
from pydantic import ValidationError

from sandbox.system.config import SystemConfig
from sandbox.system.delays.continuous_batching import ContinuousBatchingDelay
from sandbox.system.timing_only import simulate_timing


class _Job:
    def __init__(self):
        self.tail_version, self.segments, self.head_version = 0, 1, 0


def _run(cfg, arrivals, resample=None):
    """``arrivals``: (name, lengths, at, version); returns each group's finish time and the engine."""
    env = simpy.Environment()
    engine = cfg.build_engines(env, 1, resample)[0]
    done, jobs = {}, {}

    def worker(name, lengths, at, version):
        yield env.timeout(at)
        jobs[name] = _Job()
        yield engine.submit(jobs[name], lengths, version)
        done[name] = env.now

    for a in arrivals:
        env.process(worker(*a))
    env.run()
    return done, engine, jobs


@pytest.mark.component("delay", "continuous_batching")
def test_two_sequences_share_the_steps():
    # a = 1, b = 0.5: steps 1-3 with two sequences cost 2 each (the 3-token one ends at 6), steps 4-5 with one cost 1.5
    cfg = ContinuousBatchingDelay(step_base=1.0, step_per_sequence=0.5)
    done, engine, _ = _run(cfg, [("a", [3], 0, 0), ("b", [5], 0, 0)])
    assert done == {"a": 6.0, "b": 9.0}
    assert (engine.steps, engine.busy) == (5, 9.0)
    # one group of both sequences ends with its last one
    done, _, _ = _run(cfg, [("g", [3, 5], 0, 0)])
    assert done == {"g": 9.0}
    # out of the engine: one sequence alone, 5 tokens · (1 + 0.5)
    assert cfg.expected(5) == cfg.sample(None, 5) == 7.5


@pytest.mark.component("delay", "continuous_batching")
def test_an_arrival_joins_at_the_next_step_boundary():
    # 'a' alone: steps of 1.5 from 0; 'b' arrives at 1.2 and joins at 1.5; then steps of 2: both end at 5.5
    cfg = ContinuousBatchingDelay(step_base=1.0, step_per_sequence=0.5)
    done, _, _ = _run(cfg, [("a", [3], 0, 0), ("b", [2], 1.2, 0)])
    assert done == {"a": 5.5, "b": 5.5}


@pytest.mark.component("delay", "continuous_batching")
def test_step_floor_binds_only_the_small_batches():
    # a = 1, b = 0.5, floor 1.8: steps of two sequences cost max(1.8, 2) = 2 (unchanged), steps of one cost
    # max(1.8, 1.5) = 1.8; 'a' (3 tokens) ends at 6 as without the floor, 'b' (5) at 6 + 2 x 1.8 = 9.6
    cfg = ContinuousBatchingDelay(step_base=1.0, step_per_sequence=0.5, step_floor=1.8)
    done, engine, _ = _run(cfg, [("a", [3], 0, 0), ("b", [5], 0, 0)])
    assert done == {"a": 6.0, "b": 9.6}
    assert [cfg.step_cost(n) for n in (0, 1, 2, 4)] == [1.8, 1.8, 2.0, 3.0]
    assert cfg.expected(5) == 5 * 1.8
    with pytest.raises(ValidationError, match="step_floor"):
        ContinuousBatchingDelay(step_floor=-1.0)


@pytest.mark.component("delay", "continuous_batching")
def test_prefill_kv_capacity_and_sequence_cap():
    # prefill 0.1 s/token x 10 prompt tokens, both admitted together: 2 s of prefill, then as above (+2)
    cfg = ContinuousBatchingDelay(step_base=1.0, step_per_sequence=0.5, prefill_per_token=0.1, prompt_tokens=10)
    assert _run(cfg, [("a", [3], 0, 0), ("b", [5], 0, 0)])[0] == {"a": 8.0, "b": 11.0}
    # KV cache of 8 tokens: 'a' reserves 3, 'b' (5) waits until it ends: 3 steps of 1.5, then 5 steps of 1.5
    for cap in ({"kv_capacity_tokens": 7}, {"max_sequences": 1}):
        cfg = ContinuousBatchingDelay(step_base=1.0, step_per_sequence=0.5, **cap)
        assert _run(cfg, [("a", [3], 0, 0), ("b", [5], 0, 0)])[0] == {"a": 4.5, "b": 12.0}
    # capacity 8 holds both (3 + 5): the shared schedule again
    cfg = ContinuousBatchingDelay(step_base=1.0, step_per_sequence=0.5, kv_capacity_tokens=8)
    assert _run(cfg, [("a", [3], 0, 0), ("b", [5], 0, 0)])[0] == {"a": 6.0, "b": 9.0}


@pytest.mark.component("delay", "continuous_batching")
def test_weight_sync_modes():
    # a = 1, b = 0, sync 0.5 s. 'old' (version 0, 4 tokens) from 0; 'new' (version 1, 1 token) arrives at 1.
    arrivals = [("old", [4], 0, 0), ("new", [1], 1.0, 1)]
    base = dict(step_base=1.0, step_per_sequence=0.0, sync_time=0.5)
    # drain: 'old' ends at 4 under version 0, sync 4 -> 4.5, 'new' 4.5 -> 5.5
    done, engine, jobs = _run(ContinuousBatchingDelay(sync="drain", **base), arrivals)
    assert done == {"old": 4.0, "new": 5.5} and engine.syncs == 1 and jobs["old"].tail_version == 0
    # abort: at the boundary t = 1 'old' is thrown away and regenerated (4 tokens again) under version 1 after the
    # sync (1 -> 1.5), ahead of 'new': both run from 1.5, 'new' ends at 2.5, 'old' at 5.5
    calls = []

    def resample(job, version, weights):
        calls.append(version)
        job.head_version = job.tail_version = version
        return [4]

    done, engine, jobs = _run(ContinuousBatchingDelay(sync="abort", **base), arrivals, resample)
    assert done == {"old": 5.5, "new": 2.5} and calls == [1] and jobs["old"].head_version == 1
    # partial: 'old' pauses at 1 (1 token done), sync 1 -> 1.5, resumes with its 3 tokens under version 1: ends at 4.5
    done, engine, jobs = _run(ContinuousBatchingDelay(sync="partial", **base), arrivals)
    assert done == {"old": 4.5, "new": 2.5}
    assert (jobs["old"].tail_version, jobs["old"].segments) == (1, 2)


@pytest.mark.component("delay", "continuous_batching")
def test_in_the_cluster_the_step_time_is_the_batched_decode():
    # sync control, 2 workers on one engine, G = 1, every response 10 tokens: a step is 10 steps of a + 2b plus
    # training 1 s; a = 0.1, b = 0.05: 2 s of decode + 1 s = 3 s per learner step
    cfg = SystemConfig(
        num_workers=2,
        generation_time={
            "kind": "continuous_batching",
            "step_base": 0.1,
            "step_per_sequence": 0.05,
            "workers_per_engine": 2,
            "length_median": 10,
        },
        train_time={"kind": "constant", "value": 1.0},
        staleness={"kind": "sync"},
    )
    res = simulate_timing(cfg, 4, 2, group_size=1, seed=0)
    assert [round(r["time"], 9) for r in res.rows] == [3.0, 6.0, 9.0, 12.0]
    # one engine per worker: each decodes alone, 10 · (0.1 + 0.05) = 1.5 s, so 2.5 s a step
    cfg2 = cfg.model_copy(update={"generation_time": cfg.generation_time.model_copy(update={"workers_per_engine": 1})})
    res = simulate_timing(cfg2, 2, 2, group_size=1, seed=0)
    assert [round(r["time"], 9) for r in res.rows] == [2.5, 5.0]


def test_engine_runs_are_deterministic_with_drawn_lengths():
    for sync in ("drain", "abort", "partial"):
        cfg = SystemConfig(
            num_workers=8,
            generation_time={
                "kind": "continuous_batching",
                "step_base": 0.01,
                "step_per_sequence": 0.001,
                "workers_per_engine": 4,
                "length_median": 100,
                "length_sigma": 0.8,
                "max_tokens": 1000,
                "sync": sync,
                "sync_time": 0.5,
                "kv_capacity_tokens": 3000,
            },
            train_time={"kind": "constant", "value": 1.0},
            staleness={"kind": "max_lag", "k_max": 2},
        )
        a, b = (simulate_timing(cfg, 30, 4, group_size=4, seed=3) for _ in range(2))
        assert a.sim_time == b.sim_time and list(a.events) == list(b.events)


@pytest.mark.parametrize(
    "system,field",
    [
        ({"train_time": {"kind": "continuous_batching"}}, "train_time"),
        (
            {
                "generation_time": {"kind": "continuous_batching"},
                "partial_rollouts": True,
                "staleness": {"kind": "max_lag"},
            },
            "partial_rollouts",
        ),
        (
            {
                "generation_time": {
                    "kind": "continuous_batching",
                    "kv_capacity_tokens": 100,
                    "prompt_tokens": 50,
                    "length_median": 10,
                    "max_tokens": 60,
                }
            },
            "kv_capacity_tokens",
        ),
        ({"generation_time": {"kind": "continuous_batching", "length_sigma": 0.5}}, "length_median"),
    ],
)
def test_bad_engine_settings_are_refused_naming_the_field(system, field):
    with pytest.raises(ValidationError, match=field):
        SystemConfig(**system)


def test_a_sequence_larger_than_the_kv_cache_is_a_simulation_error():
    from sandbox.system.cluster import SimulationError

    cfg = SystemConfig(
        num_workers=1,
        generation_time={
            "kind": "continuous_batching",
            "kv_capacity_tokens": 50,
            "length_median": 40,
            "length_sigma": 2.0,
        },
    )
    with pytest.raises(SimulationError, match="kv_capacity_tokens"):
        simulate_timing(cfg, 20, 1, group_size=8, seed=0)


@pytest.mark.component("delay", "hardware")
def test_hardware_train_time_by_hand():
    from sandbox.system.delays.hardware import HardwareDelay

    # Qwen2.5-7B (7.61e9 parameters), 1e6 tokens, 8 H100 (989e12) at MFU 0.4, one recompute pass: (6 + 2)·N·T / ...
    d = HardwareDelay(gpu="H100", model="qwen2.5-7b", gpus=8, mfu=0.4, recompute_passes=1)
    assert d.expected(1_000_000) == pytest.approx(8 * 7.61e9 * 1e6 / (8 * 989e12 * 0.4), rel=1e-12)
    assert d.sample(None, 1_000_000) == d.expected(1_000_000) and d.fixed_value() is None and d.cdf() is None
    # no recompute, H20 (148e12), 2 GPUs, MFU 0.5, 1000 tokens fixed: 6·7.61e9·1000 / (2·148e12·0.5) = 0.30851 s
    f = HardwareDelay(gpu="H20", model="qwen2.5-7b", gpus=2, mfu=0.5, recompute_passes=0, tokens_per_step=1000)
    assert f.fixed_value() == pytest.approx(0.308513513513, rel=1e-9) == f.expected(123)
    assert f.cdf()([0.3, 0.31]).tolist() == [0.0, 1.0]
    with pytest.raises(ValidationError, match="gpu"):
        HardwareDelay(gpu="B200")


@pytest.mark.component("delay", "continuous_batching")
def test_engine_costs_from_the_hardware_table():
    # H20 4.0e12 B/s at η_mem 0.75, 148e12 FLOP/s at η_flop 0.5; Qwen2.5-7B 7.61e9 params (bf16: 15.22e9 B),
    # KV 2·28·4·128·2 = 57,344 B per token, attention width 28·128 = 3,584
    cfg = ContinuousBatchingDelay(hardware={"gpu": "H20", "model": "qwen2.5-7b", "gpus": 2, "context_tokens": 500})
    bandwidth, flops = 2 * 4.0e12 * 0.75, 2 * 148e12 * 0.5
    assert cfg.step_base == pytest.approx(15.22e9 / bandwidth)
    assert cfg.step_per_sequence == pytest.approx(57_344 * 500 / bandwidth + (2 * 7.61e9 + 4 * 28 * 3584 * 500) / flops)
    assert cfg.prefill_per_token == pytest.approx(2 * 7.61e9 / flops)
    assert cfg.sync_time == pytest.approx(15.22e9 / 450e9)
    # without context_tokens: the length model's mean context, prompt + E[L'^2] / 2E[L'] (σ = 0: 100 + 800 / 2)
    cfg = ContinuousBatchingDelay(hardware={"gpu": "H20", "model": "qwen2.5-7b"}, length_median=800, prompt_tokens=100)
    same = ContinuousBatchingDelay(hardware={"gpu": "H20", "model": "qwen2.5-7b", "context_tokens": 500})
    assert cfg.step_per_sequence == same.step_per_sequence
    assert ContinuousBatchingDelay(hardware={"gpu": "H20"}, step_base=0.5).step_base == 0.5  # what is set wins


def test_zero_cost_steps_finish_at_the_prefill():
    # a = b = 0: decoding is free, only prefill costs (0.5 s per sequence, both admitted together: 1 s)
    cfg = ContinuousBatchingDelay(step_base=0.0, step_per_sequence=0.0, prefill_per_token=0.05, prompt_tokens=10)
    assert _run(cfg, [("a", [3], 0, 0), ("b", [5], 0, 0), ("c", [2], 0.0, 0)])[0] == {"a": 1.5, "b": 1.5, "c": 1.5}
    cfg = ContinuousBatchingDelay(step_base=0.0, step_per_sequence=0.0)
    assert _run(cfg, [("a", [3], 0, 0), ("b", [5], 0.0, 0)])[0] == {"a": 0.0, "b": 0.0}


@pytest.mark.component("delay", "continuous_batching")
def test_mixed_versions_resume_cuts_each_sequence_at_its_decoded_tokens():
    # a = 1, b = 0, sync 0.5 s; 'old' (version 0) from 0, 'new' (version 1, 1 token) arrives at 1.
    base = dict(step_base=1.0, step_per_sequence=0.0, sync_time=0.5, sync="partial", mixed_versions=True)
    calls = []

    def hook(new_lengths):
        def resume(job, version, weights, positions):
            calls.append((version, list(positions)))
            job.segments += 1
            return new_lengths

        return resume

    def run(cfg, arrivals, resume):
        env = simpy.Environment()
        engine = cfg.build_engines(env, 1, None, resume)[0]
        done = {}

        def worker(name, lengths, at, version):
            yield env.timeout(at)
            yield engine.submit(_Job(), lengths, version)
            done[name] = env.now

        for a in arrivals:
            env.process(worker(*a))
        env.run()
        return done, engine

    # 'old' (4 tokens) has decoded 1 token at the sync (t = 1): cut at 1, continued to 6 tokens under version 1,
    # 5 steps left after the sync (1 -> 1.5): ends at 6.5; 'new' 1.5 -> 2.5
    done, engine = run(ContinuousBatchingDelay(**base), [("old", [4], 0, 0), ("new", [1], 1.0, 1)], hook([6]))
    assert done == {"old": 6.5, "new": 2.5} and calls == [(1, [1])] and engine.kv_used == 0
    # 'old' = [1, 4], 'new' at 2: at the sync sequence 0 has ended (kept whole, position 1), sequence 1 has decoded
    # 2 tokens; new lengths [1, 6]: 4 steps left after the sync (2 -> 2.5), 'old' ends at 6.5, 'new' at 3.5
    calls.clear()
    done, engine = run(ContinuousBatchingDelay(**base), [("old", [1, 4], 0, 0), ("new", [1], 2.0, 1)], hook([1, 6]))
    assert done == {"old": 6.5, "new": 3.5} and calls == [(1, [1, 2])] and engine.kv_used == 0
    # a group of an older version queued behind the sync's target ('late', version 0, arrives with 'new') is
    # regenerated from its first token (position 0); each resumed sequence gets 3 tokens more than its cut:
    # 'old' 1 + 3 (3 left), 'late' 0 + 3; after the sync (1 -> 1.5) 'new' ends at 2.5, 'old' and 'late' at 4.5
    calls.clear()

    def plus3(job, version, weights, positions):
        calls.append((version, list(positions)))
        return [p + 3 for p in positions]

    done, engine = run(
        ContinuousBatchingDelay(**base), [("old", [4], 0, 0), ("new", [1], 1.0, 1), ("late", [2], 1.0, 0)], plus3
    )
    assert done == {"old": 4.5, "new": 2.5, "late": 4.5} and calls == [(1, [1]), (1, [0])]
    # off (the default): timing only, no hook called, the 3 tokens left resume (ends at 4.5 as in sync = partial)
    calls.clear()
    done, _ = run(
        ContinuousBatchingDelay(**{**base, "mixed_versions": False}),
        [("old", [4], 0, 0), ("new", [1], 1.0, 1)],
        hook([6]),
    )
    assert done == {"old": 4.5, "new": 2.5} and calls == []


@pytest.mark.parametrize(
    "over, field",
    [
        ({"sync": "drain"}, "sync = 'partial'"),
        ({"length_median": 10}, "length_median"),
        ({"kv_capacity_tokens": 100}, "kv_capacity_tokens"),
    ],
)
def test_mixed_versions_refuses_what_it_cannot_honour(over, field):
    with pytest.raises(ValidationError, match=field):
        ContinuousBatchingDelay(**{"sync": "partial", "mixed_versions": True, **over})
