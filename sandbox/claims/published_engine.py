"""Published asynchronous speed-ups predicted with the continuous-batching engine (docs/claims.md,
section published_speedups_engine).

The claim ``published_speedups`` times generation per group at a fixed 0.03 s per token per slot,
the same at every load. Here the setups that opt in (:data:`ENGINE_SETUPS`) are run again with
their generation on inference engines (``docs/system.md#continuous_batching``), everything else
(training and sync times, staleness control, batch, lengths) as their scenario states:

* one engine per generating GPU: ``num_workers / slots_per_gpu`` of the scenario's variant (the
  shipped mapping is ``256 / group_size`` group slots per GPU), at most ``max_sequences = 256``
  sequences in flight (vLLM's default ``max_num_seqs``);
* every group the staleness control admits is submitted at once (the frameworks hand the engine
  the whole batch): workers = the control's in-flight bound, spread evenly over the engines;
* decode step ``a + b·n`` with ``a + 256·b`` = the scenario's 0.03 s per token at full load (what
  the shipped times assume) and ``a / b`` from the hardware table (``docs/system.md#hardware``: the
  GPU's and model's weight bytes over KV bytes of ``context_tokens`` cached tokens);
* each sequence's length drawn from the scenario's stated length model (log-normal, median,
  σ, cut at the maximum response length), so a group's sequences end separately and free the
  engine for others;
* weight sync as the setup's system does it (:attr:`EngineMapping.sync`): ``drain`` for verl's
  one-step-off recipe (it syncs between batches), ``partial`` for the systems with interruptible or
  partial rollouts (AReaL, verl fully-async, PipelineRL under VCPO: in-flight sequences pause and
  resume under the new weights); the transfer time is the scenario's ``sync_delay`` (kept as the
  visibility delay, no extra pause). ROLL Flash: ``partial``, from ROLL's own code (alibaba/ROLL at
  8eb27cc, ``docs/claims.md``): before a model update its RLVR pipeline aborts every running request and
  re-sends each with its partial output appended, so the response continues under the new weights;
  its agentic pipeline aborts the running turn and regenerates that turn only (earlier turns kept),
  which ``partial`` understates by the discarded turn's tokens (named in the row's note).

Predicted speed-up per seed = mean baseline step time / mean asynchronous step time (steps after
the first 20%), as in ``published_speedups``; rows: predicted / published within [0.8, 1.25].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..system.config import SystemConfig
from ..system.delays.continuous_batching import ContinuousBatchingDelay
from ..system.hardware import decode_step_costs
from .base import ClaimResult, Curve, Row, t_interval
from .published import FULL_STEPS, QUICK_STEPS, SETUPS, WARMUP_FRACTION, Published, max_in_flight, mean_step_time, setup_variants

BAND = (0.8, 1.25)


@dataclass(frozen=True)
class EngineMapping:
    """How a published setup's GPUs become engines (module docstring)."""

    gpu: str = "H20"
    model: str = "qwen2.5-7b"
    sync: str = "drain"
    """The engine's weight-sync mode (``docs/system.md#continuous_batching``)."""
    sync_note: str = ""
    """Where the sync mode comes from when it is not exactly the system's (the row's note says it)."""
    max_sequences: int = 256
    context_tokens: float = 1000.0
    """Mean cached tokens per sequence in flight, for the ratio a / b."""


ENGINE_SETUPS: dict[str, EngineMapping] = {
    "areal_fully_async": EngineMapping(sync="partial"),
    "verl_fully_async": EngineMapping(sync="partial"),
    "verl_one_step_off": EngineMapping(sync="drain"),
    "verl_one_step_off_megatron": EngineMapping(sync="drain"),
    "vcpo_multiturn": EngineMapping(sync="partial"),
    "pipelinerl": EngineMapping(gpu="H100", sync="partial"),
    "roll_flash_rlvr": EngineMapping(sync="partial"),
    "roll_flash_agentic": EngineMapping(
        sync="partial", sync_note="ROLL's agentic pipeline regenerates the interrupted turn: its tokens are not charged here"),
}
"""The published setups that opt in, by scenario name. Every engine has the same step costs (the
shipped per-token time at full load, the ratio of a 7B model: module docstring); the sync mode is
the system's own."""


def step_costs(mapping: EngineMapping, seconds_per_token: float) -> tuple[float, float]:
    """``(a, b)`` with ``a + max_sequences·b = seconds_per_token`` and ``a / b`` from the hardware table."""
    a_hw, b_hw = decode_step_costs(mapping.gpu, mapping.model, 1, mapping.context_tokens)
    b = seconds_per_token / (a_hw / b_hw + mapping.max_sequences)
    return a_hw / b_hw * b, b


def engine_system(cfg: SystemConfig, pub: Published, mapping: EngineMapping, groups_per_step: int) -> SystemConfig:
    """The variant ``cfg`` with its generation on engines (module docstring)."""
    slots_per_gpu = max(mapping.max_sequences // pub.lengths.group_size, 1)
    engines = max(cfg.num_workers // slots_per_gpu, 1)
    per_engine = -(-max_in_flight(cfg, groups_per_step) // engines)
    a, b = step_costs(mapping, pub.lengths.seconds_per_token)
    gen = ContinuousBatchingDelay(
        step_base=a, step_per_sequence=b, max_sequences=mapping.max_sequences, workers_per_engine=per_engine,
        sync=mapping.sync if cfg.staleness.kind != "sync" else "drain", sync_time=0.0, length_median=pub.lengths.median, length_sigma=pub.lengths.sigma,
        max_tokens=pub.lengths.max_tokens,
    )
    return cfg.model_copy(update={"generation_time": gen, "num_workers": engines * per_engine})


def run(quick: bool = False, seeds: int = 8) -> ClaimResult:
    steps = QUICK_STEPS if quick else FULL_STEPS
    result = ClaimResult(
        name="published_speedups_engine",
        paper="AReaL, verl, ROLL Flash, PipelineRL, VCPO (published asynchronous speed-ups, continuous-batching engines)",
        definition=__doc__.split("\n\n", 1)[1].strip(),
        settings={"steps": steps, "warm-up fraction": WARMUP_FRACTION, "band": list(BAND)},
        x_label="published setup",
        y_label="speed-up over the baseline (x)",
        kind="bars",
    )
    setups = [p for p in SETUPS if p.scenario in ENGINE_SETUPS]
    for i, pub in enumerate(setups):
        mapping = ENGINE_SETUPS[pub.scenario]
        runs = setup_variants(pub.scenario)
        B, G = runs["async"].algorithm.groups_per_step, runs["async"].algorithm.group_size
        per_variant = {}
        for name in ("async", pub.baseline):
            cfg = engine_system(runs[name].system, pub, mapping, B)
            per_variant[name] = np.array([mean_step_time(cfg, steps, B, G, s) for s in range(seeds)])
        predicted = per_variant[pub.baseline] / per_variant["async"]
        a, b = step_costs(mapping, pub.lengths.seconds_per_token)
        steps_text = ", ".join(f"{k} {float(v.mean()):.0f} s" for k, v in per_variant.items())
        note = f"mean step: {steps_text}; sync {mapping.sync}; a = {a * 1e3:.2f} ms, b = {b * 1e6:.1f} us"
        if mapping.sync_note:
            note += f"; {mapping.sync_note}"
        result.settings[pub.scenario] = (
            f"{pub.system}: published {pub.text()} ({pub.measure}; {pub.source}); baseline variant '{pub.baseline}'; "
            f"engines on {mapping.gpu} x {mapping.model}, max_sequences {mapping.max_sequences}"
        )
        result.rows.append(
            Row(f"{pub.system} on engines: predicted / published ({pub.text()})",
                f"speed-up vs '{pub.baseline}' / {pub.value:.3g}", predicted / pub.value, BAND, "within", note)
        )
        m, lo, hi = t_interval(predicted)
        result.curves.append(Curve(f"{pub.system} (predicted, engine)", [float(i)], [m], [lo], [hi]))
        result.curves.append(Curve(f"{pub.system} (published)", [float(i)], [pub.value]))
    return result
