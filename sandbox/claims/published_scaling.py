"""AReaL against verl at 32 to 512 GPUs, three model sizes and two context lengths, predicted on the one
timing model (docs/claims.md, section published_speedups_engine, "AReaL vs verl scaling").

**Published.** AReaL's benchmark against verl v0.3.0.post1 (inclusionAI/AReaL at commit ad6e5bd,
``benchmark/verl_v0_3_0_post1_76084d3/``: ``README.md``, ``build_cmd.py``, ``areal_config.yaml`` and the
figure ``scaling_trend_vs_verl.png``): the effective training throughput (tokens used in a training step
over the step's time) of asynchronous AReaL and of synchronous verl on H800 nodes, DeepSeek-R1-Distill-Qwen
1.5B / 7B / 32B, 16,384 and 32,768 tokens of context, 32 to 512 GPUs. One row per point of the figure
where both systems have a marker: the published number is AReaL's throughput over verl's, the ratio of
their step times for the same batch (like with like: throughput with throughput). The figure gives no
table; the values are read from its log axis by the markers' pixel centres (46 pixels per tick interval;
markers that coincide read as the ratio 1.00, a marker half hidden to ±0.03).

**Source facts** (from the benchmark's files): 512 prompts x 16 responses per step; at most ``context −
1024`` new tokens; 3/4 of the GPUs run SGLang engines (tensor parallel 1, 8 for 32B), 1/4 train, each
engine capped as SGLang caps itself with ``max_running_requests`` unset (AReaL leaves it unset:
:func:`sandbox.claims.published_engine.sglang_cap`, 4096 requests here), verl's vLLM at its ``max_num_seqs``
default 1024;
``max_head_offpolicyness`` 4 and ``max_concurrent_rollouts`` 512. AReaL's admission as its code runs it
(``realhf/system/gserver_manager.py``, ``allocate_rollout``, AReaL at 4d67c421d): a prompt and its 16
samples are admitted while fewer than ``max_concurrent_rollouts`` prompts run and ``(trained + running) //
B <= η + version``: the sandbox's ``max_lag`` throttle with k_max = η, its in-flight groups capped at 512
(:attr:`sandbox.claims.published_engine.EngineMapping.max_concurrent`); the engines' sync is ``partial``
(AReaL's interruptible rollouts continue under the new weights). verl v0.3.0.post1 is synchronous and
colocated: all GPUs generate, then all train (the ``colocated_sync`` variant), on the same engines; its
rollout runs vLLM with ``enforce_eager: True``, the default of its ``verl/trainer/config/ppo_trainer.yaml``
at v0.3.0.post1 (the benchmark's own verl scripts are not in AReaL's repository: the default is assumed),
while AReaL's SGLang keeps its CUDA graphs (``disable_cuda_graph`` False, ``realhf/api/cli_args.py`` at
ad6e5bd). An eager engine's decode step takes at least the host's time to launch its kernels (the step
floor, ``docs/system.md#step_floor``), which binds where few sequences are left on an engine: the long
tail of verl's synchronous step, longer the more engines share the fixed batch (8,192 sequences over 32
GPUs: 256 per engine; over 256 GPUs: 32, and the last few alone for thousands of steps).

**Assumptions** (named in every row's note): response lengths log-normal with median 6,000 tokens and
σ 0.819 (the AReaL rows' rule, fixed before these rows were run), 256 prompt tokens, η_flop 0.5, the
trainer of ``sandbox plan`` (the ``hardware`` train time, ``(6 + 2)·N·T / (gpus · peak · MFU)`` with MFU
0.4, one log-prob recompute pass) charged the batch's prompt and response tokens, weight sync 5 s (the
AReaL scenario's), the R1-Distill models as the Qwen2.5 shapes of the hardware table, verl's engines with
AReaL's tensor parallel, verl's step floor :func:`sandbox.system.hardware.eager_step_floor` (0.15 ms per
layer, from one public measurement of a 28-layer model: 4.2 ms for the 28-layer 1.5B and 7B, 9.6 ms for the
64-layer 32B). No parameter was fitted to a row: every row is a prediction. Disclosure: the floor was added
after the rows without it were seen to miss the scaling trend, and its sensitivity (4, 8, 16 ms) run on
two points before the value was taken from the source's lower end (docs/claims.md).

Predicted speed-up per seed = mean verl step time / mean AReaL step time (steps after the first 20%);
rows: predicted / published within [0.8, 1.25].
"""

from __future__ import annotations

from dataclasses import dataclass

from sandbox.claims.base import ClaimResult, Curve, Row, t_interval
from sandbox.claims.published import Published, ResponseLengths, capped_mean_length, setup_variants, side_of_one
from sandbox.claims.published_engine import BAND, SCENARIO_SEQUENCES_PER_GPU, EngineMapping, sglang_cap, step_times
from sandbox.claims.published_engine import run as engine_rows
from sandbox.system.delays.hardware import HardwareDelay
from sandbox.system.hardware import eager_step_floor

SCENARIO = "areal_fully_async"
"""The shipped scenario whose task, algorithm, staleness control and sync delay the rows start from."""
GROUPS, GROUP_SIZE = 512, 16
ROLLOUT_SHARE = 3 / 4
"""The GPUs AReaL's benchmark gives SGLang (``build_cmd.py``: ``n_nodes * 8 // 4 * 3``)."""
MAX_CONCURRENT = 512
"""AReaL's ``max_concurrent_rollouts`` (``areal_config.yaml``), prompts (groups) in flight at most."""
LENGTH_MEDIAN, LENGTH_SIGMA = 6000, 0.819
VERL_MAX_NUM_SEQS = 1024
"""verl's vLLM cap on sequences in flight per engine: ``max_num_seqs`` 1024 in its ``verl/trainer/config/
ppo_trainer.yaml`` (rollout section), the default the benchmark's verl runs are assumed to keep."""
SOURCE = "AReaL benchmark vs verl v0.3.0.post1 (inclusionAI/AReaL ad6e5bd, benchmark/verl_v0_3_0_post1_76084d3)"


@dataclass(frozen=True)
class ScalingPoint:
    """One point of AReaL's scaling figure where both systems have a marker."""

    size: str
    """The model size as the figure names it."""
    model: str
    """The hardware table's model of that shape."""
    gpus: int
    context: int
    published: float
    """AReaL's effective throughput over verl's, read from the figure (module docstring)."""

    @property
    def tp(self) -> int:
        return 8 if self.size == "32B" else 1

    @property
    def name(self) -> str:
        return f"AReaL vs verl, {self.size}, {self.gpus} H800, context {self.context // 1024}k"


def _points(size: str, model: str, context: int, values: dict[int, float]) -> tuple[ScalingPoint, ...]:
    return tuple(ScalingPoint(size, model, g, context, v) for g, v in values.items())


POINTS: tuple[ScalingPoint, ...] = (
    _points("1.5B", "qwen2.5-1.5b", 16384, {32: 1.00, 64: 1.21, 128: 1.70, 256: 1.90})
    + _points("7B", "qwen2.5-7b", 16384, {64: 0.84, 128: 1.06, 256: 1.32, 512: 1.47})
    + _points("32B", "qwen2.5-32b", 16384, {256: 1.57, 512: 1.89})
    + _points("1.5B", "qwen2.5-1.5b", 32768, {32: 1.17, 64: 1.40, 128: 2.36, 256: 2.57})
    + _points("7B", "qwen2.5-7b", 32768, {64: 1.00, 128: 1.31, 256: 1.85, 512: 2.31})
)
"""The figure's points (the 32B model at 32k context has no verl marker: not scored)."""
QUICK_POINTS = (POINTS[13],)
"""``--quick`` runs one point: the 1.5B model on 256 GPUs at 32k context."""


def lengths(point: ScalingPoint) -> ResponseLengths:
    return ResponseLengths(
        median=LENGTH_MEDIAN, sigma=LENGTH_SIGMA, max_tokens=point.context - 1024, group_size=GROUP_SIZE
    )


def mapping(point: ScalingPoint) -> EngineMapping:
    return EngineMapping(
        gpu="H800",
        model=point.model,
        sync="partial",
        tp=point.tp,
        max_sequences=sglang_cap("H800", point.model, point.tp, point.context),
        cap_source="SGLang's own cap with max_running_requests unset, as AReaL leaves it: SGLang v0.4.6",
        baseline_max_sequences=VERL_MAX_NUM_SEQS,
        max_concurrent=MAX_CONCURRENT,
        baseline_step_floor=eager_step_floor(point.model),
        facts=f"{point.size}, {point.gpus} H800, batch 512 x 16, max {point.context - 1024} new tokens, 3/4 rollout GPUs "
        f"(tp {point.tp}), max_head_offpolicyness 4, max_concurrent_rollouts 512, interruptible rollouts; verl colocated sync",
        assumed=f"median {LENGTH_MEDIAN:,} tokens, sigma {LENGTH_SIGMA}, trainer (6+2)NT/(gpus peak MFU 0.4), sync 5 s, "
        f"η_flop 0.5, 256 prompt tokens, verl's engines eager (enforce_eager default) with a step floor of "
        f"{eager_step_floor(point.model) * 1e3:.1f} ms",
    )


def published(point: ScalingPoint) -> Published:
    return Published(
        SCENARIO, point.name, point.published, point.published, "colocated_sync", "throughput", SOURCE, lengths(point)
    )


def trainer(point: ScalingPoint, gpus: int, prompt_tokens: int) -> dict:
    """The ``hardware`` train time of ``sandbox plan`` on ``gpus`` GPUs, charged the batch's tokens."""
    n = lengths(point)
    tokens = GROUPS * GROUP_SIZE * (capped_mean_length(n.median, n.sigma, n.max_tokens) + prompt_tokens)
    return HardwareDelay(
        gpu="H800", model=point.model, gpus=gpus, recompute_passes=1, tokens_per_step=round(tokens)
    ).model_dump()


def variants(point: ScalingPoint) -> dict:
    """The ``async`` (AReaL) and ``colocated_sync`` (verl) variants of the point on :data:`SCENARIO`'s task."""
    runs = setup_variants(SCENARIO)
    prompt = mapping(point).prompt_tokens
    rollout = int(point.gpus * ROLLOUT_SHARE)
    slots = SCENARIO_SEQUENCES_PER_GPU // GROUP_SIZE
    out = {}
    for name, gpus, workers in (
        ("async", point.gpus - rollout, rollout * slots),
        ("colocated_sync", point.gpus, point.gpus * slots),
    ):
        run = runs[name]
        system = run.system.model_copy(
            update={"num_workers": workers, "train_time": HardwareDelay.model_validate(trainer(point, gpus, prompt))}
        )
        out[name] = run.model_copy(update={"system": system})
    return out


FULL_STEPS, QUICK_STEPS = 12, 4
"""Learner steps per run (the first 20% discarded): a step holds 8,192 sequences, and a full run of the 18
points stays within minutes."""
MAX_SEEDS = 2
"""Seeds per row at most (measured: a row's two seeds differ by at most 2% at 8,192 sequences a step)."""


def add_rows(result: ClaimResult, quick: bool, seeds: int) -> None:
    """One row and its curves per point (:data:`QUICK_POINTS` with ``quick``) appended to ``result`` (the
    ``published_speedups_engine`` claim), run through :func:`sandbox.claims.published_engine.step_times`
    with :data:`FULL_STEPS` (``quick``: :data:`QUICK_STEPS`) steps and at most :data:`MAX_SEEDS` seeds."""
    steps, seeds = (QUICK_STEPS if quick else FULL_STEPS), min(seeds, MAX_SEEDS)
    for point in QUICK_POINTS if quick else POINTS:
        pub, engines = published(point), mapping(point)
        mode, base = step_times(pub, engines, None, steps, seeds, runs=variants(point))
        predicted = base / mode
        note = (
            f"{engines.kind(pub.measure)}; facts: {engines.facts}; measured: none; assumed: {engines.assumed}; "
            f"mean step: AReaL {float(mode.mean()):.0f} s, verl {float(base.mean()):.0f} s; {steps} steps"
        )
        result.settings[point.name] = f"published {point.published:g}x ({SOURCE}, read from scaling_trend_vs_verl.png)"
        cap, side = side_of_one(predicted, point.published)
        note = f"{side}; {note}" if side else note
        result.rows.append(
            Row(
                f"{point.name}: predicted / published ({point.published:g}x)",
                f"speed-up vs verl / {point.published:g}",
                predicted / point.published,
                BAND,
                "within",
                note,
                cap=cap,
            )
        )
        m, lo, hi = t_interval(predicted)
        x = float(len(result.curves) // 2)
        result.curves.append(Curve(f"{point.name} (predicted, engine)", [x], [m], [lo], [hi]))
        result.curves.append(Curve(f"{point.name} (published)", [x], [point.published]))


def run(quick: bool = False, seeds: int = 8) -> ClaimResult:
    """The ``published_speedups_engine`` claim: the rows of :func:`sandbox.claims.published_engine.run`, then one
    row per scaling point (:func:`add_rows`)."""
    result = engine_rows(quick, seeds)
    add_rows(result, quick, seeds)
    return result
