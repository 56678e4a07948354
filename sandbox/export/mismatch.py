"""The rollout engine's row in an export (``docs/engines.md``): what the GPU run's
inference engine must be set to for its training–inference mismatch to be the one simulated.

The exact engine has no row (the scenario models no mismatch: the exported files are those of a
scenario without ``[engine]``). A mismatch correction is exported by the correction's own mapping
(``algorithm.correction``: verl ``algorithm.rollout_correction``, TRL ``vllm_importance_sampling_*``,
prime-rl's); the row says when none is configured. Engine settings are named as vLLM 0.11 spells them
(``LLM(dtype=..., quantization=...)``, ``SamplingParams(temperature, top_k, top_p)``, ``logprobs_mode``).
"""

from __future__ import annotations

from sandbox.engines import ENGINES


def _setting(scn) -> tuple[str, str]:
    """(row kind: a :class:`~sandbox.export.plan.ExportPlan` method, what the GPU run's inference engine must use) for the
    scenario's engine."""
    e = scn.engine
    name = e.name
    if name == "precision":
        serve = {
            "bfloat16": "dtype = 'bfloat16'",
            "float16": "dtype = 'float16'",
            "fp8_e4m3": "quantization = 'fp8' (per-tensor e4m3 weights, bfloat16 compute)",
        }[e.dtype]
        return "setup", (
            f"serve the policy with vLLM {serve} while the trainer computes log-probs in float32 "
            "(the simulated sampler/learner precisions)"
        )
    if name == "processed_logprobs":
        temp = getattr(scn.task, "temperature", 1.0) * e.temperature
        parts = (
            [f"temperature = {temp:g}"]
            + ([f"top_k = {e.top_k}"] if e.top_k is not None else [])
            + ([f"top_p = {e.top_p:g}"] if e.top_p < 1 else [])
        )
        mode = "processed_logprobs" if e.logprobs == "processed" else "raw_logprobs"
        return "setup", (
            f"sample with vLLM SamplingParams({', '.join(parts)}) and logprobs_mode = '{mode}' (the "
            f"trainer at temperature {getattr(scn.task, 'temperature', 1.0):g}, no truncation)"
        )
    if name == "routing":
        return "sandbox_only", (
            f"a mixture-of-experts policy whose sampler routes {e.flip_prob:.0%} of decisions "
            "differently: no engine setting sets the rate; compare the GPU run's measured mismatch "
            "(verl rollout_corr/k3_kl, prime-rl mismatch_kl/all/mean) with this run's mismatch/kl_k3"
        )
    return "sandbox_only", (
        f"a synthetic stand-in for an engine's numerics ({name}): no engine setting reproduces it; "
        "compare the GPU run's measured mismatch (verl rollout_corr/k3_kl, prime-rl mismatch_kl/all/mean, "
        "TRL sampling/sampling_logp_difference) with this run's mismatch/* metrics"
    )


def engine_row(plan, scn) -> None:
    """Add the ``engine`` row to ``plan`` unless the engine is exact (then nothing: no mismatch modelled)."""
    if ENGINES.entry_for(scn.engine).impl.exact:
        return
    kind, note = _setting(scn)
    if scn.algorithm.correction.name == "none":
        note += (
            "; no mismatch correction is configured (algorithm.correction = none): the GPU run will not "
            "correct it either (TIS/MIS: verl rollout_correction, TRL vllm_importance_sampling_correction)"
        )
    getattr(plan, kind)("engine", ", ".join(f"{k} = {v!r}" for k, v in scn.engine.model_dump().items()), note)


def exact_engine(scn) -> set[str]:
    """``{"engine"}`` when the scenario's engine is exact (its section then has no leaves to export), else empty."""
    return {"engine"} if ENGINES.entry_for(scn.engine).impl.exact else set()
