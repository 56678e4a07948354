"""Published asynchronous speed-ups predicted with the continuous-batching engine (docs/claims.md,
section published_speedups_engine).

Every published setup (:data:`sandbox.claims.published.SETUPS`, :data:`ENGINE_SETUPS`) is run with its
generation on inference engines (``docs/system.md#continuous_batching``), everything else (sync time,
staleness control, batch, lengths) as its scenario states; the scenario files hold the same engine and
trainer (``tools/published_generation.py`` writes them from this module, a test keeps them equal):

* the training time: a consistency check's is the scenario's (the source's measured seconds); a
  prediction's is the trainer of ``sandbox plan`` on :attr:`EngineMapping.train_gpus` GPUs
  (:func:`with_trainer`: ``(6 + 2·r)·N·T / (gpus · peak · MFU)``, MFU 0.4 an assumption, ``r`` the
  log-prob recompute passes the framework runs, :attr:`EngineMapping.recompute_passes`);
* one engine per ``tp`` generating GPUs (the scenario's ``num_workers / slots_per_gpu`` GPUs, the
  scenarios' convention being ``256 / group_size`` group slots per GPU), at most ``max_sequences``
  sequences in flight: 256, vLLM's default ``max_num_seqs``, unless the framework's run sets its own
  (:attr:`EngineMapping.cap_source`: verl's one-step-off runs, 1024 from verl's rollout defaults);
* every group the staleness control admits is submitted at once (the frameworks hand the engine
  the whole batch): workers = the control's in-flight bound, or the framework's own cap on groups in
  flight when lower (:attr:`EngineMapping.max_concurrent`: AReaL admits a prompt only while fewer than
  ``max_concurrent_rollouts`` run, AReaL ``realhf/system/gserver_manager.py`` at 4d67c421d), spread
  evenly over the engines;
* the engine's step costs, prefill and KV capacity from the one timing model of ``sandbox plan`` and
  ``sandbox preflight`` (:class:`sandbox.system.delays.continuous_batching.EngineHardware`;
  ``docs/system.md#hardware``): decode step ``a + b·n`` from the GPU's bandwidth and FLOP/s and the
  model's weights (all parameters read, active parameters computed), KV bytes and attention at the
  mean context of a sequence in flight (prompt + E[L'²] / 2E[L'] of the length model), prefill at the
  active parameters; :data:`PROMPT_TOKENS` prompt tokens per sequence (an assumption);
* each sequence's length drawn from the scenario's stated length model (log-normal, median,
  σ, cut at the maximum response length), so a group's sequences end separately and free the
  engine for others;
* verl's one-step-off rows as verl's own scripts of the documented runs ran them (volcengine/verl,
  ``recipe/one_step_off_policy/dapo_7b_math_{fsdp2,megatron}_4_12.sh``, July 2025): 512 prompts x 12,
  vLLM tensor parallel 2, and verl's rollout defaults (``verl/trainer/config/ppo_trainer.yaml``:
  ``max_num_seqs`` 1024, ``enforce_eager`` True, so the eager step floor on both sides); the training
  time is every second of the source's step not spent on generation (docs/claims.md);
* weight sync as the setup's system does it (:attr:`EngineMapping.sync`): ``drain`` for verl's
  one-step-off recipe (it syncs between batches), ``partial`` for the systems with interruptible or
  partial rollouts (AReaL, verl fully-async, PipelineRL under VCPO: in-flight sequences pause and
  resume under the new weights); the transfer time is the scenario's ``sync_delay`` (kept as the
  visibility delay, no extra pause). ROLL Flash: ``partial``, from ROLL's own code (alibaba/ROLL at
  8eb27cc, ``docs/claims.md``): before a model update its RLVR pipeline aborts every running request and
  re-sends each with its partial output appended, so the response continues under the new weights;
  its agentic pipeline aborts the running turn and regenerates that turn only (earlier turns kept),
  which ``partial`` understates by the discarded turn's tokens (named in the row's note).

**What a row is.** Each row names its inputs (:attr:`EngineMapping.inputs`): a *prediction* when no
component time measured by the source enters it (the training time is the scenario's assumption);
a *consistency check* when the source's own measured component times (verl's ``update_actor``
seconds) are inputs; *not comparable* when the published figure is a wall time to a score and the
prediction a throughput (the row is capped at inconclusive and does not count).

Predicted speed-up per seed = mean baseline step time / mean asynchronous step time (steps after
the first 20%); rows: predicted / published within [0.8, 1.25]. A prediction on the other side of 1
from the published figure is never reproduced (:func:`sandbox.claims.published.side_of_one`).

**AReaL's synchronous baseline as AReaL runs it.** AReaL's Table 2 compares with "Synchronous AReaL",
which is not colocated: AReaL's synchronous PPO (``training/main_sync_ppo.py`` at v0.3.0) with its
shipped 16-node configuration for R1-Distill-Qwen-1.5B/7B (``examples/configs/v0.2-qwen2-math/*/
ppo-*-distill-gpus-128.yaml``: ``allocation_mode sglang.d64p1m1+d32p2m1``) generates on 64 SGLang GPUs
(CUDA graphs on) and trains on the other 64, one after the other (the ``decoupled_sync`` variant:
half the GPUs generate, half train, staleness sync); with ``kl_ctl`` 0 it loads no reference model
and with ``recompute_logprob`` false (``training/configs/sync-ppo.yaml``) it recomputes no log-probs
(r = 0). Asynchronous AReaL (``training/configs/async-ppo.yaml``) recomputes the proximal log-probs of
its decoupled loss (r = 1), bounds staleness with ``max_head_offpolicyness`` 4, and gives 3/4 of the
GPUs to SGLang in AReaL's own benchmark (``benchmark/verl_v0_3_0_post1_76084d3/build_cmd.py``), the
rule the Table 2 rows use as the scaling rows do (Table 2's own asynchronous split is not published).

verl's own ablation of fully_async_policy (:data:`VERL_ABLATION`; verl documentation advance/fully_async,
"128-card 7B Asynchronous Mode Experiment" and "128-card Stale Ablation Experiment": Qwen2.5-Math-7B, 128
H20 split 64:64, 400 steps of 512 prompts x 16) adds one row per published mode on the same mapping as
the ``verl_fully_async`` setup (its engines, lengths, sync delay and colocated baseline), each with its
own published ``update_actor`` time as the training time and its own staleness rule: the stream
off-policy pipeline (``stream_sync``, 4 local updates of 128 prompts per sync; the engine drains, as
nothing is in flight at a round's end) and staleness_threshold 0.1 and 0.3 with partial rollout
(``stream_sync`` with ``staleness_threshold``, engine ``partial``); 0.5 is the ``verl_fully_async`` row
itself, run as verl runs it (:attr:`EngineMapping.schedule`): 4 local updates of ``require_batches`` 4 x
32 prompts per parameter sync (``trigger_parameter_sync_step`` 4), the rollout side up to
``(1 + 0.5)·512`` prompts ahead of each sync with the synced weights (docs/system.md#stream_sync).
Published number: total time of the colocated baseline over that of the mode, at 400 steps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from sandbox.claims.base import INCONCLUSIVE, ClaimResult, Curve, Row, t_interval
from sandbox.claims.published import (
    FULL_STEPS,
    QUICK_STEPS,
    SETUPS,
    WARMUP_FRACTION,
    Published,
    capped_mean_length,
    max_in_flight,
    mean_step_time,
    setup_variants,
    side_of_one,
)
from sandbox.system.config import SystemConfig
from sandbox.system.delays.continuous_batching import ContinuousBatchingDelay
from sandbox.system.delays.hardware import HardwareDelay
from sandbox.system.hardware import eager_step_floor, kv_capacity_tokens, sglang_max_running_requests

BAND = (0.8, 1.25)


PROMPT_TOKENS = 256
"""Prompt tokens per sequence (prefill and KV): an assumption (the sources give the response lengths only)."""
PREDICTION, CONSISTENCY, NOT_COMPARABLE = "prediction", "consistency check", "not comparable"
SCENARIO_SEQUENCES_PER_GPU = 256
"""The published scenarios' convention for their generating GPUs: ``num_workers / (256 / group_size)`` GPUs,
whatever the engines' cap (:attr:`EngineMapping.max_sequences`)."""


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
    tp: int = 1
    """GPUs per engine (tensor parallel)."""
    prompt_tokens: int = PROMPT_TOKENS
    facts: str = ""
    """The inputs that are the source's facts."""
    measured: str = ""
    """The source's measured component times used as inputs ("" = none: the row is a prediction)."""
    assumed: str = ""
    """The inputs that are assumptions."""
    schedule: dict | None = None
    """The framework's own schedule when the scenario's control only approximates it: the asynchronous
    variant's ``system.staleness`` (None = the scenario's)."""
    local_updates: int = 1
    """Learner steps per published step under :attr:`schedule` (the step's training time split evenly)."""
    train_gpus: tuple[int, int] | None = None
    """Training GPUs of the asynchronous variant and of the baseline: the training time is then the trainer of
    ``sandbox plan`` (:func:`with_trainer`); None = the scenario's training time (a consistency check's measured
    one)."""
    max_concurrent: int | None = None
    """The framework's cap on groups in flight on top of its staleness control (AReaL's
    ``max_concurrent_rollouts``, prompts); None = the control's bound alone."""
    recompute_passes: tuple[int, int] = (1, 1)
    """Log-prob recompute passes of the trainer of the asynchronous variant and of the baseline (with
    :attr:`train_gpus`): AReaL's synchronous PPO recomputes none, its decoupled loss one (module docstring)."""
    baseline_step_floor: float = 0.0
    """Least seconds of a decode step of the baseline's engines (``ContinuousBatchingDelay.step_floor``: an
    engine in eager mode, docs/system.md#step_floor); 0 = none."""
    step_floor: float = 0.0
    """Least seconds of a decode step of the asynchronous variant's engines (as :attr:`baseline_step_floor`)."""
    cap_source: str = "vLLM's default max_num_seqs"
    """Where :attr:`max_sequences` comes from (the scenario's mapping paragraph says it)."""
    baseline_max_sequences: int | None = None
    """The baseline's engines' cap when its engine is another (verl's vLLM against AReaL's SGLang); None = the
    same as :attr:`max_sequences`."""

    def kind(self, measure: str) -> str:
        """:data:`PREDICTION`, :data:`CONSISTENCY` or :data:`NOT_COMPARABLE` (module docstring)."""
        if measure != "throughput":
            return NOT_COMPARABLE
        return CONSISTENCY if self.measured else PREDICTION


_ASSUMED = f"η_flop 0.5, {PROMPT_TOKENS} prompt tokens, tp 1"
AREAL_MAX_NEW_TOKENS = 27_648
"""AReaL v0.3.0's ``max_new_tokens`` for the Table 2 runs (``ppo-*-distill-gpus-128.yaml``)."""


def sglang_cap(gpu_name: str, model_name: str, tp: int, context_len: int) -> int:
    """An SGLang engine's request cap with ``max_running_requests`` unset, as AReaL runs it
    (:func:`sandbox.system.hardware.sglang_max_running_requests` on the engine's KV pool, :func:`kv_capacity_tokens`;
    the context length ``context_len`` = prompt + new tokens at most, an assumption: SGLang takes the model's own
    unless told, which gives the same cap, 4096, for every AReaL setup here but one, 3,867 for 7B at 131,072)."""
    return sglang_max_running_requests(kv_capacity_tokens(gpu_name, model_name, tp), context_len)


_SGLANG_CAP = (
    "SGLang's own cap with max_running_requests unset, as AReaL leaves it: SGLang v0.4.6 model_runner.py, tp_worker.py"
)
_TRAINER = "training: the trainer of sandbox plan, (6+2)NT/(gpus peak MFU 0.4)"
_VERL_FACTS = "Qwen2.5-Math-7B, H20, GPU split, batch 512 x 16, max response, staleness rule"
_ONE_STEP_OFF = EngineMapping(
    sync="drain",
    tp=2,
    max_sequences=1024,
    cap_source="verl's rollout default max_num_seqs 1024, verl/trainer/config/ppo_trainer.yaml",
    step_floor=eager_step_floor("qwen2.5-7b"),
    baseline_step_floor=eager_step_floor("qwen2.5-7b"),
    facts="Qwen2.5-Math-7B, H20, 4 rollout : 12 trainer GPUs, max response; verl's own scripts of the runs "
    "(recipe/one_step_off_policy/dapo_7b_math_{fsdp2,megatron}_4_12.sh): 512 prompts x 12 responses, vLLM tensor "
    "parallel 2; verl's rollout defaults: max_num_seqs 1024, enforce_eager True (eager step floor on both sides)",
    measured="per step, every non-generation second: step - wait_prev_gen (one-step-off), step - "
    "generate_sequences (colocated: log-probs, update, reward and the hybrid engine's weight resharding)",
    assumed=f"median 1,000 tokens, eager step floor 0.15 ms per layer, η_flop 0.5, {PROMPT_TOKENS} prompt tokens",
)
"""verl's one_step_off_policy recipe as its documented runs ran it (docs/claims.md, "verl one-step-off as verl
runs it"): both variants on vLLM engines of 2 GPUs in eager mode, 4 GPUs generating one-step-off, 16 colocated."""
ENGINE_SETUPS: dict[str, EngineMapping] = {
    "areal_fully_async": EngineMapping(
        gpu="H800",
        model="qwen2.5-1.5b",
        sync="partial",
        max_sequences=sglang_cap("H800", "qwen2.5-1.5b", 1, PROMPT_TOKENS + AREAL_MAX_NEW_TOKENS),
        cap_source=_SGLANG_CAP,
        train_gpus=(32, 64),
        recompute_passes=(1, 0),
        max_concurrent=512,
        facts="1.5B (R1-Distill-Qwen-1.5B), 16 nodes of 8 H800, batch 512 x 16, max 27,648 tokens, interruptible "
        "rollouts, eta 4 (async-ppo.yaml); synchronous AReaL on 64 SGLang : 64 trainer GPUs, no log-prob recompute "
        "(ppo-1.5B-distill-gpus-128.yaml, sync-ppo.yaml); async recomputes once (decoupled loss)",
        assumed=f"async 96 SGLang : 32 trainer GPUs (3/4, AReaL's benchmark rule), max_concurrent_rollouts = the "
        f"batch (AReaL's default), median 6,000 tokens, training MFU 0.4, {_ASSUMED}",
    ),
    "areal_fully_async_7b": EngineMapping(
        gpu="H800",
        model="qwen2.5-7b",
        sync="partial",
        max_sequences=sglang_cap("H800", "qwen2.5-7b", 1, PROMPT_TOKENS + AREAL_MAX_NEW_TOKENS),
        cap_source=_SGLANG_CAP,
        train_gpus=(48, 96),
        recompute_passes=(1, 0),
        max_concurrent=512,
        facts="7B (R1-Distill-Qwen-7B), 24 nodes of 8 H800, batch 512 x 16, max 27,648 tokens, interruptible "
        "rollouts, eta 4 (async-ppo.yaml); synchronous AReaL on disjoint pools without log-prob recompute "
        "(sync-ppo.yaml); async recomputes once (decoupled loss)",
        assumed=f"synchronous pools 96 : 96 (the 1:1 split of AReaL's shipped 16-node configs), async 144 SGLang : "
        f"48 trainer GPUs (3/4, AReaL's benchmark rule), max_concurrent_rollouts = the batch, median 6,000 tokens, "
        f"training MFU 0.4, {_ASSUMED}",
    ),
    "verl_fully_async": EngineMapping(
        sync="partial",
        facts=_VERL_FACTS + ", require_batches 4 x 32 prompts, trigger_parameter_sync_step 4, "
        "staleness_threshold 0.5, partial rollout",
        measured="update_actor (+ old_log_prob for colocated) seconds",
        assumed=f"median 1,000 tokens, {_ASSUMED}",
        schedule={"kind": "stream_sync", "sync_every": 4, "staleness_threshold": 0.5},
        local_updates=4,
    ),
    "verl_one_step_off": _ONE_STEP_OFF,
    "verl_one_step_off_megatron": _ONE_STEP_OFF,
    "vcpo_multiturn": EngineMapping(
        sync="partial", train_gpus=(8, 8), facts="lag bound, pools", assumed=f"7B, 8:8, lengths, {_TRAINER}, {_ASSUMED}"
    ),
    "pipelinerl": EngineMapping(
        gpu="H100",
        sync="partial",
        train_gpus=(64, 128),
        facts="128 H100, in-flight updates",
        assumed=f"64:64, 7B, lengths, {_TRAINER}, {_ASSUMED}",
    ),
    "roll_flash_rlvr": EngineMapping(
        sync="partial",
        train_gpus=(64, 128),
        facts="asynchronous ratio, same GPU budget",
        assumed=f"8B as Qwen2.5-7B on H20, 64:64, alpha 1, median 4,000, {_TRAINER}, {_ASSUMED}",
    ),
    "roll_flash_agentic": EngineMapping(
        sync="partial",
        sync_note="ROLL's agentic pipeline regenerates the interrupted turn: its tokens are not charged here",
        train_gpus=(64, 128),
        facts="environment-level async, same GPU budget",
        assumed=f"7B on H20, 64:64, alpha 1, median 8,000, sigma 1, {_TRAINER}, {_ASSUMED}",
    ),
}
"""The published setups that opt in, by scenario name, with the GPU and model of their engines and the
provenance of their inputs (module docstring, What a row is); the sync mode is the system's own."""


@dataclass(frozen=True)
class Ablation:
    """One mode of verl's fully_async ablation, run as a variant of a published setup (module docstring)."""

    label: str
    setup: str
    """The published setup (scenario) whose mapping and baseline it shares."""
    hours: float
    """The mode's published total time, hours, for the same steps as :attr:`baseline_hours`."""
    baseline_hours: float
    staleness: dict
    sync: str
    train_time: float
    """Published update_actor seconds per sync step (512 prompts)."""
    local_updates: int = 1
    """Learner steps per published step (the stream mode's trigger_parameter_sync_step)."""

    @property
    def value(self) -> float:
        return self.baseline_hours / self.hours


VERL_COLOCATED_400 = 40 + 48 / 60  # colocate sync, 128 GPUs: 1d 16h 48m for 400 steps
VERL_ABLATION: tuple[Ablation, ...] = (
    Ablation(
        "stream off-policy pipeline (sync every 4 updates, staleness 0)",
        "verl_fully_async",
        25 + 53 / 60,
        VERL_COLOCATED_400,
        {"kind": "stream_sync", "sync_every": 4},
        "drain",
        98.77,
        4,
    ),
    Ablation(
        "+ staleness 0.1 + partial rollout",
        "verl_fully_async",
        19 + 59 / 60,
        VERL_COLOCATED_400,
        {"kind": "stream_sync", "sync_every": 4, "staleness_threshold": 0.1},
        "partial",
        109.12,
        4,
    ),
    Ablation(
        "+ staleness 0.3 + partial rollout",
        "verl_fully_async",
        17 + 20 / 60,
        VERL_COLOCATED_400,
        {"kind": "stream_sync", "sync_every": 4, "staleness_threshold": 0.3},
        "partial",
        103.22,
        4,
    ),
)
"""verl's ablation (module docstring): the published total times at 400 steps and training times. Its
staleness-0.5 mode is the ``verl_fully_async`` setup itself (same scenario, same run: 17h 22m), scored
once, in that setup's row."""


def ablation_system(cfg: SystemConfig, ab: Ablation) -> SystemConfig:
    """The setup's asynchronous variant ``cfg`` with the ablation mode's staleness rule and training time."""
    staleness = SystemConfig(staleness=ab.staleness).staleness  # validated as a scenario's would be
    train = cfg.train_time.model_copy(update={"value": ab.train_time / ab.local_updates})
    return cfg.model_copy(update={"staleness": staleness, "train_time": train})


def engine_fields(
    mapping: EngineMapping, lengths, workers_per_engine: int = 1, sync: str = "drain", step_floor: float = 0.0
) -> dict:
    """The ``continuous_batching`` generation time of a published setup as a scenario states it (the inputs
    :func:`engine` validates; ``tools/published_generation.py`` writes them into the scenario files)."""
    fields = {
        "kind": "continuous_batching",
        "hardware": {"gpu": mapping.gpu, "model": mapping.model, "gpus": mapping.tp},
        "sync_time": 0.0,
        "max_sequences": mapping.max_sequences,
        "workers_per_engine": workers_per_engine,
        "sync": sync,
        "kv_capacity_tokens": kv_capacity_tokens(mapping.gpu, mapping.model, mapping.tp),
        "prompt_tokens": mapping.prompt_tokens,
        "length_median": lengths.median,
        "length_sigma": lengths.sigma,
        "max_tokens": lengths.max_tokens,
    }
    if step_floor:
        fields["step_floor"] = step_floor
    return fields


def engine(
    mapping: EngineMapping, lengths, workers_per_engine: int = 1, sync: str = "drain", step_floor: float = 0.0
) -> ContinuousBatchingDelay:
    """The engine of a published setup: the hardware table's step costs, prefill and KV capacity for its
    GPU, model and tensor parallel (the same :class:`EngineHardware` path as ``sandbox plan``), its length
    model, :attr:`EngineMapping.prompt_tokens`, ``step_floor``; the sync transfer is the scenario's ``sync_delay``
    (0 here)."""
    return ContinuousBatchingDelay.model_validate(engine_fields(mapping, lengths, workers_per_engine, sync, step_floor))


def step_costs(mapping: EngineMapping, lengths) -> tuple[float, float]:
    """``(a, b)`` of the setup's engine (:func:`engine`)."""
    gen = engine(mapping, lengths)
    return gen.step_base, gen.step_per_sequence


def engine_system(
    cfg: SystemConfig, pub: Published, mapping: EngineMapping, groups_per_step: int, step_floor: float = 0.0
) -> SystemConfig:
    """The variant ``cfg`` with its generation on engines (module docstring), decode steps of at least
    ``step_floor`` seconds."""
    slots_per_gpu = max(SCENARIO_SEQUENCES_PER_GPU // pub.lengths.group_size, 1)
    engines = max(cfg.num_workers // slots_per_gpu // mapping.tp, 1)
    in_flight = max_in_flight(cfg, groups_per_step)
    capped = mapping.max_concurrent is not None and mapping.max_concurrent < in_flight
    if capped:
        in_flight = mapping.max_concurrent
    per_engine = -(-in_flight // engines)
    sync = "drain" if cfg.staleness.is_synchronous() else mapping.sync
    gen = engine(mapping, pub.lengths, per_engine, sync, step_floor)
    workers = in_flight if capped else engines * per_engine  # a cap admits exactly that many groups at once
    return cfg.model_copy(update={"generation_time": gen, "num_workers": workers})


def with_trainer(runs: dict, pub: Published, mapping: EngineMapping) -> dict:
    """``runs`` with the training time of ``async`` and of the baseline on :attr:`EngineMapping.train_gpus` GPUs
    from the one trainer model of ``sandbox plan`` (the ``hardware`` train time, ``(6 + 2·r)·N·T / (gpus · peak ·
    MFU)``, MFU 0.4 an assumption, ``r`` :attr:`EngineMapping.recompute_passes`), ``T`` the batch's prompt and mean response
    tokens, ``groups · group size · (prompt + E[min(L, c)])`` (docs/system.md#hardware)."""
    algo = runs["async"].algorithm
    n = pub.lengths
    mean = capped_mean_length(n.median, n.sigma, n.max_tokens)
    tokens = round(algo.groups_per_step * algo.group_size * (mean + mapping.prompt_tokens))
    out = dict(runs)
    for name, gpus, passes in zip(("async", pub.baseline), mapping.train_gpus, mapping.recompute_passes):
        train = HardwareDelay(
            gpu=mapping.gpu, model=mapping.model, gpus=gpus, recompute_passes=passes, tokens_per_step=tokens
        )
        out[name] = runs[name].model_copy(update={"system": runs[name].system.model_copy(update={"train_time": train})})
    return out


@dataclass(frozen=True)
class EngineRuns:
    """The two systems a row compares, on engines (:func:`engine_runs`)."""

    mode: SystemConfig
    """The asynchronous variant (or ablation mode) on engines."""
    baseline: SystemConfig
    """The baseline variant on engines."""
    groups_per_step: int
    group_size: int
    local_updates: int
    """Learner steps of the mode per published step (its groups per step are ``groups_per_step / k``)."""


def engine_runs(
    pub: Published, mapping: EngineMapping, ab: Ablation | None = None, runs: dict | None = None
) -> EngineRuns:
    """The asynchronous variant on engines (ablation mode ``ab``: its rule and training time, ``local_updates``
    learner steps per published step; the framework's own :attr:`EngineMapping.schedule` when set) and the
    baseline on engines. ``runs``: the setup's variants (default: those of the shipped scenario ``pub.scenario``)."""
    runs = runs if runs is not None else setup_variants(pub.scenario)
    if mapping.train_gpus is not None:
        runs = with_trainer(runs, pub, mapping)
    B, G = runs["async"].algorithm.groups_per_step, runs["async"].algorithm.group_size
    if ab is None and mapping.schedule is not None:  # the framework's own schedule, the scenario's training time
        cfg = runs["async"].system
        ab = Ablation(
            "", pub.scenario, 1.0, 1.0, mapping.schedule, mapping.sync, cfg.train_time.value, mapping.local_updates
        )
    k = 1 if ab is None else ab.local_updates
    cfg = runs["async"].system if ab is None else ablation_system(runs["async"].system, ab)
    mode = engine_system(cfg, pub, mapping, B // k, mapping.step_floor)
    base_mapping = (
        mapping
        if mapping.baseline_max_sequences is None
        else replace(mapping, max_sequences=mapping.baseline_max_sequences)
    )
    base = engine_system(runs[pub.baseline].system, pub, base_mapping, B, mapping.baseline_step_floor)
    return EngineRuns(mode, base, B, G, k)


def step_times(
    pub: Published, mapping: EngineMapping, ab: Ablation | None, steps: int, seeds: int, runs: dict | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per seed, the mean step time of :func:`engine_runs`' two systems: ``(async, baseline)``, the asynchronous
    one per published step (``local_updates`` learner steps)."""
    r = engine_runs(pub, mapping, ab, runs)
    B, G, k = r.groups_per_step, r.group_size, r.local_updates
    mode = np.array([k * mean_step_time(r.mode, steps * k, B // k, G, s) for s in range(seeds)])
    return mode, np.array([mean_step_time(r.baseline, steps, B, G, s) for s in range(seeds)])


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
    cases = [(p, ENGINE_SETUPS[p.scenario], None) for p in SETUPS if p.scenario in ENGINE_SETUPS] + [
        (next(p for p in SETUPS if p.scenario == ab.setup), replace(ENGINE_SETUPS[ab.setup], sync=ab.sync), ab)
        for ab in VERL_ABLATION
    ]
    for i, (pub, mapping, ab) in enumerate(
        cases
    ):  # the setups that opt in, then verl's ablation on its setup's mapping
        mode, base = step_times(pub, mapping, ab, steps, seeds)
        predicted = base / mode
        kind = mapping.kind(pub.measure)
        provenance = (
            f"{kind}; facts: {mapping.facts}; measured: {mapping.measured or 'none'}; assumed: {mapping.assumed}"
            if ab is None
            else f"{kind}; measured: the mode's update_actor seconds"
        )
        cap = ""
        if ab is None:
            name, value = pub.system, pub.value
            a, b = step_costs(mapping, pub.lengths)
            note = (
                f"{provenance}; mean step: async {float(mode.mean()):.0f} s, {pub.baseline} {float(base.mean()):.0f} s; sync "
                f"{mapping.sync}; {mapping.gpu} x {mapping.model}: a = {a * 1e3:.2f} ms, b = {b * 1e6:.1f} us"
                + (f"; {mapping.sync_note}" if mapping.sync_note else "")
            )
            if kind == NOT_COMPARABLE:
                cap = INCONCLUSIVE
                note = (
                    "not comparable: the published figure is a wall time to a score, the prediction a throughput; "
                    + note
                )
            result.settings[pub.scenario] = (
                f"{pub.system}: published {pub.text()} ({pub.measure}; {pub.source}); baseline variant '{pub.baseline}'; "
                f"engines on {mapping.gpu} x {mapping.model}, max_sequences {mapping.max_sequences}"
            )
            label = f"{pub.system} on engines: predicted / published ({pub.text()})"
        else:
            name, value = f"verl {ab.label}", ab.value
            kind = CONSISTENCY
            note = (
                f"{provenance}; mean step (512 prompts): mode {float(mode.mean()):.0f} s, '{pub.baseline}' {float(base.mean()):.0f} s; "
                f"sync {ab.sync}"
            )
            result.settings[f"verl ablation: {ab.label}"] = (
                f"published {ab.value:.3g}x (total time {ab.baseline_hours:.2f} h / {ab.hours:.2f} h at 400 steps; verl "
                f"documentation advance/fully_async); staleness {ab.staleness}, training {ab.train_time} s per 512 prompts "
                f"in {ab.local_updates} update(s), engine sync {ab.sync}"
            )
            label = f"verl ablation on engines, {ab.label}: predicted / published ({ab.value:.3g}x)"
        if not cap:
            cap, side = side_of_one(predicted, value)
            note = f"{side}; {note}" if side else note
        result.rows.append(
            Row(label, f"speed-up vs '{pub.baseline}' / {value:.3g}", predicted / value, BAND, "within", note, cap=cap)
        )
        m, lo, hi = t_interval(predicted)
        result.curves.append(Curve(f"{name} (predicted, engine)", [float(i)], [m], [lo], [hi]))
        result.curves.append(Curve(f"{name} (published)", [float(i)], [value]))
    return result
