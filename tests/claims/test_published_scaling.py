"""AReaL against verl at several GPU counts (sandbox/claims/published_scaling.py) and the framework details the
engine claim takes from the frameworks' code: AReaL's cap on prompts in flight and the trainer of ``sandbox plan``
(docs/claims.md, section published_speedups_engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.claims import published_scaling as S
from sandbox.claims.published import SETUPS, capped_mean_length, setup_variants
from sandbox.claims.published_engine import ENGINE_SETUPS, EngineMapping, engine_system, with_trainer

DOCS = Path(__file__).resolve().parents[2] / "docs" / "claims.md"


def test_points_are_the_figure_points_once_each():
    keys = [(p.size, p.gpus, p.context) for p in S.POINTS]
    assert len(keys) == len(set(keys)) == 18
    assert all(p.published > 0 and p.gpus % 4 == 0 for p in S.POINTS)
    assert set(S.QUICK_POINTS) <= set(S.POINTS)


def test_variants_by_hand_7b_on_64_gpus():
    """3/4 of 64 GPUs generate (48 engines of tp 1, 16 group slots each), 16 train; verl: 64 generate, then 64
    train; both trainers charged 8,192 x (prompt + mean response) tokens at (6 + 2)·N·T / (gpus · peak · 0.4)."""
    point = next(p for p in S.POINTS if (p.size, p.gpus, p.context) == ("7B", 64, 32768))
    runs = S.variants(point)
    assert runs["async"].system.num_workers == 48 * 16 and runs["colocated_sync"].system.num_workers == 64 * 16
    tokens = 512 * 16 * (capped_mean_length(6000, 0.819, 32768 - 1024) + 256)
    per_gpu = 8 * 7.61e9 * tokens / (989e12 * 0.4)
    assert runs["async"].system.train_time.expected() == pytest.approx(per_gpu / 16, rel=1e-6)
    assert runs["colocated_sync"].system.train_time.expected() == pytest.approx(per_gpu / 64, rel=1e-6)
    assert runs["async"].system.staleness.kind == "max_lag" and runs["async"].system.staleness.k_max == 4
    assert S.mapping(point).tp == 1 and S.mapping(next(p for p in S.POINTS if p.size == "32B")).tp == 8


def test_areal_cap_admits_exactly_max_concurrent_groups():
    """AReaL admits a prompt only while fewer than max_concurrent_rollouts run (realhf gserver_manager): with
    eta = 4 the throttle alone would let (4 + 1)·512 groups run; the cap keeps 512, spread over the 96 engines."""
    point = next(p for p in S.POINTS if (p.size, p.gpus, p.context) == ("1.5B", 128, 32768))
    runs, pub, mapping = S.variants(point), S.published(point), S.mapping(point)
    cfg = engine_system(runs["async"].system, pub, mapping, 512)
    assert cfg.num_workers == 512 and cfg.generation_time.workers_per_engine == -(-512 // 96)
    uncapped = engine_system(
        runs["async"].system, pub, EngineMapping(gpu="H800", model=point.model, sync="partial"), 512
    )
    assert uncapped.num_workers == 96 * -(-5 * 512 // 96)
    baseline = engine_system(runs["colocated_sync"].system, pub, mapping, 512)
    assert baseline.num_workers == 128 * -(-512 // 128)  # sync: one batch in flight, the cap does not bind


def test_only_verls_eager_engines_have_the_step_floor():
    """verl v0.3.0.post1 runs vLLM with enforce_eager (its ppo_trainer.yaml default): its engines' decode steps take at
    least layers x 0.15 ms (docs/system.md#step_floor); AReaL's SGLang keeps CUDA graphs: no floor."""
    from sandbox.system.hardware import eager_step_floor

    assert eager_step_floor("qwen2.5-1.5b") == pytest.approx(4.2e-3) and eager_step_floor(
        "qwen2.5-32b"
    ) == pytest.approx(64 * 4.2e-3 / 28)
    for point in (S.POINTS[0], next(p for p in S.POINTS if p.size == "32B")):
        runs, pub, mapping = S.variants(point), S.published(point), S.mapping(point)
        areal = engine_system(runs["async"].system, pub, mapping, 512).generation_time
        verl = engine_system(
            runs["colocated_sync"].system, pub, mapping, 512, mapping.baseline_step_floor
        ).generation_time
        assert areal.step_floor == 0 and verl.step_floor == eager_step_floor(point.model)
        # the floor binds the tail (one sequence left) and not a full engine (256 sequences)
        assert verl.step_cost(1) == verl.step_floor > areal.step_cost(1)
        assert verl.step_cost(256) == areal.step_cost(256) > verl.step_floor


def test_prediction_rows_train_on_the_plan_trainer_and_checks_on_measured_times():
    """A row with train_gpus gets the hardware trainer on those GPUs; verl's consistency checks keep their measured
    training seconds."""
    pub = next(p for p in SETUPS if p.scenario == "roll_flash_rlvr")
    mapping = ENGINE_SETUPS["roll_flash_rlvr"]
    runs = with_trainer(setup_variants(pub.scenario), pub, mapping)
    n = pub.lengths
    algo = runs["async"].algorithm
    tokens = round(algo.groups_per_step * algo.group_size * (capped_mean_length(n.median, n.sigma, n.max_tokens) + 256))
    assert runs["async"].system.train_time.expected() == pytest.approx(
        8 * 7.61e9 * tokens / (64 * 148e12 * 0.4), rel=1e-9
    )
    assert runs["colocated_sync"].system.train_time.expected() == pytest.approx(
        8 * 7.61e9 * tokens / (128 * 148e12 * 0.4), rel=1e-9
    )
    for name, m in ENGINE_SETUPS.items():
        assert (m.train_gpus is None) == bool(m.measured), name


def test_docs_list_every_point_with_its_published_figure():
    text = DOCS.read_text()
    for p in S.POINTS:
        assert f"| {p.size} | {p.context // 1024}k | {p.gpus} | {p.published:.2f}× |" in text, p.name
