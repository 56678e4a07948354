"""Drop bias: does dropping over-stale groups bias training toward short responses?
(``sandbox.analysis.drop_bias``, docs/system.md#drop-bias)

System-only runs (:func:`sandbox.system.timing_only.simulate_timing`) of ``scenarios/max_lag_drop.toml``
(12 workers, 4 groups of 8 per step, ``max_lag`` with ``enforcement = "drop"``, constant training
time 0.25 s) with generation on continuous-batching engines whose time grows with the response
length: one engine per worker on an H100 serving Qwen2.5-7B (decode step ``a + b·n`` from the hardware
table, docs/system.md#hardware), log-normal response lengths (median 300 tokens, σ = 1, cut at 4096;
the length model of the engine), equal worker speeds (the engine times generation itself). A group
ends with its longest response, so a long group is in flight for more learner steps and arrives
staler. Per seed, from the jobs table and the engine's lengths: ``length_bias`` = mean consumed
response length / mean generated (consumed + dropped) − 1, and the dropped fraction among the groups
whose longest response is above the median minus that among the others.

Rows per bound k_max ∈ {1, 2, 4}: consumed responses at least 5% shorter than generated
(``length_bias < −0.05``) and long groups dropped more often than short ones (difference > 0); at
k_max = 8 (about 1% of groups dropped) the bias is negligible (``length_bias`` in [−0.05, 0.05]). The
appendix table also gives the quantiles, the KS distance and the AReaL-style ``throttle`` enforcement
at k_max = 2, whose hard drop of a job still over the bound selects the same way. A last variant
at k_max = 2 has problems: 256 prompts whose lengths persist across epochs (prompt medians spread
with σ 0.8, σ 0.5 within a prompt; docs/system.md#structured-lengths), with two more rows: consumed
responses shorter, and the Spearman correlation over prompts between a prompt's mean length and the
dropped fraction of its groups > 0 (the long problems are the ones trained on less). Why a timing-only
run and not the LM task: the bias is a selection by generation time, which the engine's length model
gives directly and cheaply (2000 steps, 8 seeds, seconds); the LM task's lengths are short and nearly
equal (the response difficulty is not measured here).
"""

from __future__ import annotations

import numpy as np

from sandbox.analysis.drop_bias import drop_bias
from sandbox.claims.base import ClaimResult, Curve, Row, t_interval
from sandbox.scenario.api import load_scenario
from sandbox.scenario.shipped import shipped_root
from sandbox.system.config import SystemConfig
from sandbox.system.timing_only import simulate_timing

BOUNDS = (1, 2, 4, 8)
BIASED = (1, 2, 4)
MATERIAL = -0.05
"""A consumed mean at least 5% shorter than the generated mean counts as a bias."""
NEGLIGIBLE = (-0.05, 0.05)
ENGINE = {
    "kind": "continuous_batching",
    "hardware": {"gpu": "H100", "model": "qwen2.5-7b"},
    "length_median": 300,
    "length_sigma": 1.0,
    "max_tokens": 4096,
}
PROMPTS = {"length_sigma": 0.5, "prompts": 256, "prompt_sigma": 0.8}
"""The problems variant: 256 prompts whose medians spread with σ 0.8 (persisting across epochs) and
σ 0.5 within a prompt (docs/system.md#structured-lengths)."""
QUICK_STEPS, FULL_STEPS = 300, 2000


def system(k_max: int, enforcement: str = "drop", prompts: bool = False) -> tuple[SystemConfig, int, int]:
    """The variant: ``max_lag_drop.toml`` on engines (module docstring) at bound ``k_max``; ``prompts``:
    with the structured lengths of :data:`PROMPTS`."""
    scn, _ = load_scenario(shipped_root() / "max_lag_drop.toml")
    gen = {**ENGINE, **PROMPTS} if prompts else ENGINE
    data = {
        **scn.system.model_dump(),
        "worker_speeds": None,
        "generation_time": gen,
        "staleness": {"kind": "max_lag", "k_max": k_max, "enforcement": enforcement},
    }
    return SystemConfig(**data), scn.algorithm.groups_per_step, scn.algorithm.group_size


def measure(k_max: int, enforcement: str, steps: int, seed: int, prompts: bool = False) -> dict:
    cfg, B, G = system(k_max, enforcement, prompts)
    res = simulate_timing(cfg, steps, B, G, seed=seed, record_events=False)
    return drop_bias(res.jobs.to_frame(), res.lengths, cfg.generation_time.prompt_of if prompts else None)


def _fmt(values) -> str:
    a = np.asarray(values, dtype=float)
    return f"{np.nanmean(a):.3g}" if np.isfinite(a).any() else "-"


def run(quick: bool = False, seeds: int = 8) -> ClaimResult:
    steps = QUICK_STEPS if quick else FULL_STEPS
    result = ClaimResult(
        name="drop_bias",
        paper="dropping stale groups: drop-on-dequeue as in prime-rl and TRL AsyncGRPO, hard drop as in AReaL",
        definition=__doc__.split("\n\n", 1)[1].strip(),
        settings={
            "steps": steps,
            "generation_time": ENGINE,
            "prompts variant": PROMPTS,
            "scenario": "max_lag_drop.toml",
        },
        x_label="staleness bound k_max (versions)",
        y_label="length shortfall: 1 − mean consumed / mean generated",
        kind="grouped",
        x_ticks=[str(k) for k in BOUNDS],
    )
    curves = {e: Curve(f"enforcement = {e} (mean, 95% CI)", [], []) for e in ("drop", "throttle")}
    curves["prompts"] = Curve(f"drop, {PROMPTS['prompts']} prompts with persistent lengths (mean, 95% CI)", [], [])
    table = [
        "| variant | dropped groups | long dropped | short dropped | mean length generated | consumed | "
        "p90 generated | p90 consumed | KS | length bias | prompt Spearman | prompts never trained on |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    variants = [(k, "drop", False) for k in BOUNDS] + [(2, "throttle", False), (2, "drop", True)]
    for k, enforcement, prompts in variants:
        per_seed = [measure(k, enforcement, steps, s, prompts) for s in range(seeds)]
        col = lambda key: np.array([d[key] for d in per_seed], dtype=float)  # noqa: E731
        bias, gap = col("length_bias"), col("dropped_fraction_long") - col("dropped_fraction_short")
        label = f"k_max = {k} ({enforcement}" + (f", {PROMPTS['prompts']} prompts)" if prompts else ")")
        table.append(
            f"| {label} | {_fmt(col('dropped_fraction'))} | {_fmt(col('dropped_fraction_long'))} | "
            f"{_fmt(col('dropped_fraction_short'))} | {_fmt(col('length_generated_mean'))} | "
            f"{_fmt(col('length_consumed_mean'))} | {_fmt(col('length_generated_p90'))} | "
            f"{_fmt(col('length_consumed_p90'))} | {_fmt(col('length_ks'))} | {_fmt(bias)} | "
            + (f"{_fmt(col('prompt_spearman'))} | {_fmt(col('prompts_never_consumed'))} |" if prompts else "- | - |")
        )
        note = f"dropped fraction {_fmt(col('dropped_fraction'))}"
        if prompts:
            result.rows += [
                Row(
                    f"k_max = {k}, {PROMPTS['prompts']} prompts: consumed responses shorter",
                    "mean consumed / mean generated length − 1",
                    bias,
                    MATERIAL,
                    "<",
                    note,
                ),
                Row(
                    f"k_max = {k}, {PROMPTS['prompts']} prompts: long problems dropped more",
                    "Spearman(prompt mean length, prompt dropped fraction)",
                    col("prompt_spearman"),
                    0.0,
                    ">",
                    f"{note}; prompts never trained on {_fmt(col('prompts_never_consumed'))}",
                ),
            ]
        elif enforcement == "drop" and k in BIASED:
            result.rows += [
                Row(
                    f"k_max = {k}: consumed responses shorter",
                    "mean consumed / mean generated length − 1",
                    bias,
                    MATERIAL,
                    "<",
                    note,
                ),
                Row(
                    f"k_max = {k}: long groups dropped more",
                    "dropped fraction (longest > median) − (≤ median)",
                    gap,
                    0.0,
                    ">",
                    note,
                ),
            ]
        elif enforcement == "drop":
            result.rows.append(
                Row(
                    f"k_max = {k}: bias negligible",
                    "mean consumed / mean generated length − 1",
                    bias,
                    NEGLIGIBLE,
                    "within",
                    note,
                )
            )
        m, lo, hi = t_interval(-bias)  # drawn as the shortfall 1 − consumed / generated (bars upward)
        c = curves["prompts" if prompts else enforcement]
        c.x.append(float(BOUNDS.index(k)))
        c.y.append(m)
        c.low.append(lo)
        c.high.append(hi)
    result.curves = list(curves.values())
    result.appendix = (
        "Mean over seeds of each run's drop-bias summary (sandbox.analysis.drop_bias):\n\n" + "\n".join(table) + "\n"
    )
    return result
