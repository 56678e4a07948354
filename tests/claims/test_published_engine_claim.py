"""The published_speedups_engine claim: its engine mapping by hand (its quick run's rows are asserted in
``test_claims_run.py::test_cli_quick_all_claims``, which runs every claim)."""

from __future__ import annotations

import pytest

from sandbox.claims.published import SETUPS, setup_variants
from sandbox.claims.published_engine import ENGINE_SETUPS, EngineMapping, engine_runs, engine_system, step_costs
from sandbox.system.hardware import mean_context


def test_step_costs_are_the_hardware_table_at_the_mean_context():
    # H20 / Qwen2.5-7B, verl one-step-off lengths (median 1000, σ 0.819, cut 20480) and 256 prompt tokens:
    # context C = 256 + E[L'^2] / 2E[L'] = 1,613.4 tokens;
    # a = 15.22e9 B / (4.0e12 B/s · 0.75) = 5.07 ms; b = 57,344 C / 3e12 + (2 · 7.61e9 + 4 · 28 · 3584 · C) / (148e12 · 0.5)
    pub = next(p for p in SETUPS if p.scenario == "verl_one_step_off")
    a, b = step_costs(EngineMapping(), pub.lengths)
    C = mean_context(1000, 0.819, 20480, 256)
    assert round(C, 1) == 1613.4
    assert a == pytest.approx(15.22e9 / 3.0e12, rel=1e-12)
    assert b == pytest.approx(57_344 * C / 3.0e12 + (2 * 7.61e9 + 4 * 28 * 3584 * C) / 74e12, rel=1e-12)
    assert (round(a * 1e3, 2), round(b * 1e6, 1)) == (5.07, 245.3)


def test_engine_mapping_of_verl_one_step_off_by_hand():
    pub = next(p for p in SETUPS if p.scenario == "verl_one_step_off")
    runs = setup_variants(pub.scenario)
    # G = 12, the scenarios' 256 / 12 = 21 group slots per GPU; async: 84 slots = 4 GPUs -> 2 engines of tensor
    # parallel 2;
    # fixed_lag k = 1 admits 2·512 groups -> 512 workers per engine (1024 sequences in flight at most)
    both = engine_runs(pub, ENGINE_SETUPS[pub.scenario], runs=runs)
    cfg = both.mode
    gen = cfg.generation_time
    assert (cfg.num_workers, gen.workers_per_engine, gen.max_sequences, gen.sync) == (1024, 512, 1024, "drain")
    assert (gen.step_base, gen.step_per_sequence) == step_costs(ENGINE_SETUPS[pub.scenario], pub.lengths)
    assert (gen.length_median, gen.length_sigma, gen.max_tokens) == (1000, 0.819, 20480)
    assert gen.step_floor == pytest.approx(28 * 0.15e-3)  # eager: 0.15 ms per layer, 28 layers
    # colocated sync: 336 slots = 16 GPUs -> 8 engines; sync admits 512 groups -> 64 per engine
    cfg = both.baseline
    assert (cfg.num_workers, cfg.generation_time.workers_per_engine) == (512, 64)
    assert cfg.generation_time.step_floor == pytest.approx(28 * 0.15e-3)


# verl documentation advance/one_step_off (07/17/2025), per-step seconds: (step, gen, wait_prev_gen,
# generate_sequences, old_log_prob, update_actor) for colocate sync and one-step-overlap async
VERL_ONE_STEP_OFF_TABLE = {
    "verl_one_step_off": {"colocated_sync": (749, 321, None, 247, 88, 286), "async": (520, None, 45, 458, 108, 337)},
    "verl_one_step_off_megatron": {
        "colocated_sync": (699, 207, None, 162, 119, 344),
        "async": (566, None, 59, 501, 120, 347),
    },
}


@pytest.mark.parametrize("name", sorted(VERL_ONE_STEP_OFF_TABLE))
def test_verl_one_step_off_as_verl_runs_it(name):
    """The one-step-off rows hold verl's facts: its scripts of the runs (recipe/one_step_off_policy/
    dapo_7b_math_{fsdp2,megatron}_4_12.sh: 512 prompts x 12, vLLM tensor parallel 2, 4 rollout GPUs of 16) and its
    rollout defaults (max_num_seqs 1024, enforce_eager True); the training time is every second of the source's
    step not spent waiting for generation: step - wait_prev_gen one-step-off (generation overlaps), step -
    generate_sequences colocated (its gen timer also holds the hybrid engine's resharding, not generation)."""
    pub = next(p for p in SETUPS if p.scenario == name)
    mapping = ENGINE_SETUPS[name]
    runs = setup_variants(name)
    assert (mapping.tp, mapping.max_sequences, pub.lengths.group_size) == (2, 1024, 12)
    assert mapping.step_floor == mapping.baseline_step_floor > 0
    assert runs["async"].algorithm.group_size == 12 and runs["async"].algorithm.groups_per_step == 512
    slots = 256 // 12  # the scenarios' convention: num_workers / (256 / G) generating GPUs
    table = VERL_ONE_STEP_OFF_TABLE[name]
    step, _, wait, generate, logp, update = table["async"]
    assert runs["async"].system.num_workers // slots == 4
    assert runs["async"].system.train_time.value == step - wait
    assert step - wait >= logp + update  # the rest: reward, advantages, the sync call
    step, gen, _, generate, logp, update = table["colocated_sync"]
    assert runs["colocated_sync"].system.num_workers // slots == 16
    assert runs["colocated_sync"].system.train_time.value == step - generate
    assert step - generate >= (gen - generate) + logp + update


def test_engine_mapping_of_vcpo_by_hand():
    pub = next(p for p in SETUPS if p.scenario == "vcpo_multiturn")
    runs = setup_variants(pub.scenario)
    # G = 8: 256 / 8 = 32 slots per GPU; 256 workers = 8 GPUs; max_lag k_max = 2 admits 3·64 = 192 groups -> 24 each
    cfg = engine_system(runs["async"].system, pub, ENGINE_SETUPS[pub.scenario], 64)
    assert (cfg.num_workers, cfg.generation_time.workers_per_engine, cfg.generation_time.sync) == (192, 24, "partial")
    # the synchronous baseline never syncs mid-batch: drain
    cfg = engine_system(runs["sync"].system, pub, ENGINE_SETUPS[pub.scenario], 64)
    assert (cfg.num_workers, cfg.generation_time.workers_per_engine, cfg.generation_time.sync) == (64, 8, "drain")


# The quick claim's rows (one finite, positive row per opted-in setup naming the mean step) are asserted on the
# quick run of every claim in tests/claims/test_claims_run.py::test_cli_quick_all_claims: running it twice cost 34 s.


def test_verl_ablation_stream_row_mapping_by_hand():
    from sandbox.claims.published_engine import VERL_ABLATION, ablation_system

    stream = VERL_ABLATION[0]
    # 400-step total times: colocated 1d 16h 48m over stream 1d 1h 53m = 40.8 h / 25.883 h
    assert stream.value == pytest.approx(40.8 / (25 + 53 / 60), rel=1e-12)
    assert round(stream.value, 3) == 1.576
    pub = next(p for p in SETUPS if p.scenario == "verl_fully_async")
    runs = setup_variants(pub.scenario)
    cfg = ablation_system(runs["async"].system, stream)
    # 4 local updates of 512 / 4 = 128 prompts, each a quarter of the published update_actor 98.77 s
    assert cfg.staleness.kind == "stream_sync" and cfg.staleness.sync_every == 4
    assert cfg.train_time.value == pytest.approx(98.77 / 4)
    cfg = engine_system(cfg, pub, ENGINE_SETUPS[pub.scenario], 128)
    # 1024 slots / 16 per GPU = 64 engines; a round admits 4 · 128 = 512 groups -> 8 per engine (128 sequences)
    assert (cfg.num_workers, cfg.generation_time.workers_per_engine) == (512, 8)
    assert [round(a.value, 3) for a in VERL_ABLATION[1:]] == [2.042, 2.354]
    # staleness 0.5 + partial rollout is the verl_fully_async setup's own run: scored once, there
    assert all(a.staleness.get("staleness_threshold") != 0.5 for a in VERL_ABLATION)
    # verl's schedule: 4 local updates of 128 prompts per sync, staleness_threshold s = 0.1 / 0.3 over the round
    assert [(a.staleness, a.local_updates) for a in VERL_ABLATION[1:]] == [
        ({"kind": "stream_sync", "sync_every": 4, "staleness_threshold": s}, 4) for s in (0.1, 0.3)
    ]
    main = ENGINE_SETUPS["verl_fully_async"]
    assert (main.schedule, main.local_updates) == (
        {"kind": "stream_sync", "sync_every": 4, "staleness_threshold": 0.5},
        4,
    )


def test_rows_name_their_kind():
    # verl's rows take the source's measured training times: consistency checks; time-to-score rows are not comparable
    pubs = {p.scenario: p for p in SETUPS}
    kinds = {name: m.kind(pubs[name].measure) for name, m in ENGINE_SETUPS.items()}
    assert kinds["verl_fully_async"] == kinds["verl_one_step_off"] == "consistency check"
    assert kinds["areal_fully_async"] == kinds["areal_fully_async_7b"] == kinds["roll_flash_rlvr"] == "prediction"
    assert kinds["vcpo_multiturn"] == kinds["pipelinerl"] == "not comparable"
    # the AReaL rows: 1.5B on 16 nodes against 41.0 h / 14.8 h, 7B on 24 nodes against 57.7 h / 25.4 h
    assert (ENGINE_SETUPS["areal_fully_async"].model, round(pubs["areal_fully_async"].value, 2)) == (
        "qwen2.5-1.5b",
        2.77,
    )
    assert (ENGINE_SETUPS["areal_fully_async_7b"].model, round(pubs["areal_fully_async_7b"].value, 2)) == (
        "qwen2.5-7b",
        2.27,
    )


def test_roll_flash_and_pipelinerl_opt_in_with_partial_sync():
    assert {name: ENGINE_SETUPS[name].sync for name in ("roll_flash_rlvr", "roll_flash_agentic", "pipelinerl")} == {
        "roll_flash_rlvr": "partial",
        "roll_flash_agentic": "partial",
        "pipelinerl": "partial",
    }
    assert "turn" in ENGINE_SETUPS["roll_flash_agentic"].sync_note


def test_engine_rows_on_the_wrong_side_of_1_are_never_reproduced(monkeypatch):
    """Every row of the claim, its table rows and its scaling rows, carries the side-of-1 cap: a predicted 0.9x
    slowdown (tight interval) against a published speed-up is not reproduced even where the ratio is in the band;
    a wall-time-to-score row stays inconclusive; a published 1.00 has no side."""
    import numpy as np

    from sandbox.claims import published_engine, published_scaling
    from sandbox.claims.base import INCONCLUSIVE, NOT_REPRODUCED

    def slow(pub, mapping, ab, steps, seeds, runs=None):
        return np.array([100.0, 100.0, 100.0]), np.array([89.9, 90.0, 90.1])

    monkeypatch.setattr(published_engine, "step_times", slow)
    monkeypatch.setattr(published_scaling, "step_times", slow)
    monkeypatch.setattr(published_scaling, "variants", lambda point: None)
    result = published_scaling.run(quick=False, seeds=3)
    caps = {row.label: row.cap for row in result.rows}
    kinds = {p.system: ENGINE_SETUPS[p.scenario].kind(p.measure) for p in SETUPS}
    for label, cap in caps.items():
        system = next((s for s in kinds if label.startswith(f"{s} on engines")), None)
        if system is not None and kinds[system] == "not comparable":
            assert cap == INCONCLUSIVE, label
        elif "(1x)" in label:  # a published 1.00 (AReaL vs verl, coinciding markers): no side to be on
            assert cap == "", label
        elif "(0.84x)" in label:  # a published slowdown: a predicted slowdown is on its side
            assert cap == "", label
        else:
            assert cap == NOT_REPRODUCED, label
    assert sum(cap == NOT_REPRODUCED for cap in caps.values()) >= 20


def test_sglang_cap_is_sglangs_rule_with_max_running_requests_unset():
    from sandbox.system.hardware import sglang_max_running_requests

    # min(K // 2, min(max(int(K / C * 512), 2048), 4096)): SGLang's request pool and half its KV pool
    assert sglang_max_running_requests(990_164, 131_072) == int(990_164 / 131_072 * 512) == 3867
    assert sglang_max_running_requests(990_164, 16_384) == 4096  # clamped above
    assert sglang_max_running_requests(100_000, 32_768) == 2048  # clamped below
    assert sglang_max_running_requests(3_000, 32_768) == 1500  # half the KV pool binds
    with pytest.raises(ValueError, match="kv_tokens"):
        sglang_max_running_requests(1, 100)


def test_sglang_engines_take_sglangs_cap_and_verls_take_vllms():
    from sandbox.claims import published_scaling as S
    from sandbox.system.hardware import kv_capacity_tokens, sglang_max_running_requests

    for name in ("areal_fully_async", "areal_fully_async_7b"):
        m = ENGINE_SETUPS[name]
        kv = kv_capacity_tokens("H800", m.model, 1)
        assert m.max_sequences == sglang_max_running_requests(kv, 256 + 27_648) == 4096
        assert m.baseline_max_sequences is None  # synchronous AReaL runs SGLang too
    point = S.POINTS[0]  # 1.5B, 32 H800, 16k: 8,192 sequences over 24 SGLang engines, 341 each (above vLLM's 256)
    pub, mapping = S.published(point), S.mapping(point)
    assert (mapping.max_sequences, mapping.baseline_max_sequences) == (4096, 1024)
    both = engine_runs(pub, mapping, runs=S.variants(point))
    assert both.mode.generation_time.max_sequences == 4096
    assert both.baseline.generation_time.max_sequences == 1024
    # engine counts unchanged by the caps: 24 AReaL engines, 32 verl engines
    assert -(-both.mode.num_workers // both.mode.generation_time.workers_per_engine) == 24
    assert -(-both.baseline.num_workers // both.baseline.generation_time.workers_per_engine) == 32
