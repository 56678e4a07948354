"""``sandbox plan --gpus``, ``sandbox preflight`` (Q3/Q4/Q7) and the published-speed-up claim time generation
with one model (docs/system.md#hardware): for the same GPU, model, tensor parallel, length model and batch, their
engines have the same step costs, prefill and KV capacity, and one batch of groups takes the same time on each."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from sandbox.claims.published import ResponseLengths
from sandbox.claims.published_engine import PROMPT_TOKENS, EngineMapping, engine
from sandbox.plan.split import SplitOptions, split_configurations
from sandbox.preflight.system import Facts, make_system_plan
from sandbox.system.hardware import decode_step_costs, mean_context, prefill_seconds_per_token

GPU, MODEL, G, CONCURRENCY = "H20", "qwen2.5-7b", 16, 256
LENGTHS = ResponseLengths(median=1000, sigma=0.819, max_tokens=20480, group_size=G)


def _scenario() -> dict:
    """A system-only scenario whose engine states the length model and prompt (plan and preflight keep them)."""
    gen = {
        "kind": "continuous_batching",
        "length_median": LENGTHS.median,
        "length_sigma": LENGTHS.sigma,
        "max_tokens": LENGTHS.max_tokens,
        "prompt_tokens": PROMPT_TOKENS,
    }
    return {
        "task": {"name": "bitstring", "horizon": 16, "threshold": 0.75},
        "system": {
            "num_workers": 16,
            "generation_time": gen,
            "train_time": {"kind": "constant", "value": 1.0},
            "staleness": {"kind": "max_lag", "k_max": 1},
        },
        "algorithm": {
            "group_size": G,
            "groups_per_step": 64,
            "objective": {"name": "grpo"},
            "optimizer": {"name": "adam", "lr": 0.05},
        },
        "run": {"steps": 4},
    }


def _engines():
    claims = engine(EngineMapping(gpu=GPU, model=MODEL), LENGTHS, CONCURRENCY // G)
    plan = split_configurations(
        _scenario(), "test", SplitOptions(gpus=16, gpu=GPU, model=MODEL, concurrency=[CONCURRENCY], trainer_gpus=[12])
    )[0].scenario.system.generation_time
    facts = Facts(
        gpus=16,
        gpu=GPU,
        model=MODEL,
        max_tokens=LENGTHS.max_tokens,
        length_median=LENGTHS.median,
        length_sigma=LENGTHS.sigma,
        trainer_gpus=12,
    )
    sp = make_system_plan(_scenario(), facts, quick=True, bound=1)
    preflight = next(c for c in sp.asynchronous if c.trainer_gpus == 12 and c.concurrency == CONCURRENCY)
    return {"claims": claims, "plan": plan, "preflight": preflight.scenario.system.generation_time}


class _Job:
    def __init__(self):
        self.tail_version, self.segments, self.head_version = 0, 1, 0


def _batch_time(cfg, groups: list[list[int]]) -> float:
    """Seconds until the last of ``groups`` (all submitted at 0 to one engine) ends."""
    env = simpy.Environment()
    eng = cfg.build_engines(env, 1, None)[0]
    done = []

    def worker(lengths):
        yield eng.submit(_Job(), lengths, 0)
        done.append(env.now)

    for lengths in groups:
        env.process(worker(lengths))
    env.run()
    return max(done)


def test_plan_preflight_and_claims_time_generation_alike():
    engines = _engines()
    fields = (
        "step_base",
        "step_per_sequence",
        "prefill_per_token",
        "prompt_tokens",
        "kv_capacity_tokens",
        "max_sequences",
        "length_median",
        "length_sigma",
        "max_tokens",
    )
    rows = {name: tuple(getattr(e, f) for f in fields) for name, e in engines.items()}
    assert rows["plan"] == rows["claims"] == rows["preflight"], rows
    # the values are the hardware table's at the length model's mean context
    context = mean_context(LENGTHS.median, LENGTHS.sigma, LENGTHS.max_tokens, PROMPT_TOKENS)
    a, b = decode_step_costs(GPU, MODEL, 1, context)
    assert (engines["claims"].step_base, engines["claims"].step_per_sequence) == (a, b)
    assert engines["claims"].prefill_per_token == prefill_seconds_per_token(GPU, MODEL, 1)
    # one batch of 16 groups of 16 sequences (lengths from a fixed generator): the same seconds on each engine
    rng = np.random.default_rng(7)
    groups = [engines["claims"].lengths(rng, None, G) for _ in range(CONCURRENCY // G)]
    times = {name: _batch_time(e, groups) for name, e in engines.items()}
    assert times["plan"] == times["claims"] == times["preflight"] > 0


def test_context_grows_the_per_sequence_cost():
    # attention reads and FLOPs grow with the context: b at 8k cached tokens exceeds b at 1k, a is unchanged
    a1, b1 = decode_step_costs(GPU, MODEL, 1, 1000)
    a8, b8 = decode_step_costs(GPU, MODEL, 1, 8000)
    assert a1 == a8 and b8 > b1


def test_mixture_of_experts_decodes_at_active_and_holds_total_parameters():
    from sandbox.system.hardware import MODELS, kv_capacity_tokens

    moe = MODELS["qwen3-30b-a3b"]
    assert (moe.params, moe.active_params) == (30.5e9, 3.3e9)
    # the weights read per step are all 30.5 B (every expert touched at RL batch sizes): a = 61 GB / (3.35 TB/s · 0.75)
    a, b = decode_step_costs("H100", "qwen3-30b-a3b", 1, 0.0)
    assert a == pytest.approx(61e9 / (3.35e12 * 0.75))
    # per token: 2 · 3.3e9 FLOPs (active), not 2 · 30.5e9
    assert b == pytest.approx(2 * 3.3e9 / (989e12 * 0.5))
    # memory holds all 30.5 B: 0.9 · 80 GB − 61 GB leaves 11 GB of KV at 2·48·4·128·2 = 98,304 B per token
    assert kv_capacity_tokens("H100", "qwen3-30b-a3b", 1) == int((0.9 * 80e9 - 61e9) // 98_304)


def test_mean_context_matches_sampled_lengths():
    # the length-biased mean position of a capped log-normal, R = E[L'^2] / 2E[L'], against its Monte Carlo
    # ratio estimate over 400k lengths, within 4 delta-method standard errors: se = sd(L'^2/2 - R L') / (E[L'] sqrt n)
    rng = np.random.default_rng(0)
    L = np.minimum(1000 * np.exp(0.819 * rng.standard_normal(400_000)), 20480)
    ratio = (L**2).mean() / (2 * L.mean())
    se = (L**2 / 2 - ratio * L).std() / (L.mean() * np.sqrt(len(L)))
    assert mean_context(1000, 0.819, 20480) == pytest.approx(ratio, abs=4 * se)
    assert mean_context(1000, 0.819, 20480, prompt_tokens=256) == pytest.approx(mean_context(1000, 0.819, 20480) + 256)


def test_claims_prediction_rows_train_on_the_plan_trainer():
    # a prediction row's training time (claims with_trainer) and plan's split trainer on the same GPUs charge the
    # same tokens the same seconds: one trainer model, (6 + 2)·N·T / (gpus · peak · MFU) with plan's default MFU
    from sandbox.claims.published import SETUPS, setup_variants
    from sandbox.claims.published_engine import ENGINE_SETUPS, with_trainer

    pub = next(p for p in SETUPS if p.scenario == "roll_flash_rlvr")
    claims = with_trainer(setup_variants(pub.scenario), pub, ENGINE_SETUPS[pub.scenario])["async"].system.train_time
    plan = split_configurations(
        _scenario(),
        "test",
        SplitOptions(gpus=128, gpu="H20", model=MODEL, concurrency=[CONCURRENCY], trainer_gpus=[64]),
    )[0].scenario.system.train_time
    tokens = float(claims.tokens_per_step)
    assert claims.gpus == plan.gpus == 64 and claims.seconds(tokens) == pytest.approx(plan.seconds(tokens), rel=1e-12)
