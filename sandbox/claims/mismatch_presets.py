"""The calibrated rollout-engine presets (``scenarios/engines/*.toml``) against the published mismatch
magnitudes they cite (docs/engines.md#calibrated-presets).

Each preset is the LM task (the warm-started 2-layer transformer on 3-digit addition) sampled through
one engine, synchronous, for ``run.steps`` optimizer steps; per seed (``run.seed``) one run, reduced to

* ``k3``: the mean over steps of ``mismatch/kl_k3`` (per-token k3 KL of the trainer's log-prob at the
  sampling version against the engine's reported one, ``mean_t(ρ − 1 − log ρ)``, ρ = π_v/μ; verl logs the
  whole-ratio version as ``rollout_corr/k3_kl``, equal to it at staleness 0);
* ``gap_mean``: the mean over steps of ``mismatch/prob_gap_mean`` (mean over tokens of |π_v(y) − μ(y)|);
* ``gap_max``: the largest ``mismatch/prob_gap_max`` of the run;
* ``k3_first``/``k3_last``: the mean of ``mismatch/kl_k3`` over the first and the last quarter of the steps
  (the drifting engine);
* ``router_flip_frac``: router decisions the sampler sent to another expert / all its router decisions
  (the ``routing`` engine's counters, every sampler forward of the run).

A row per calibrated target: the statistic over seeds, reproduced when its 95% interval lies within
[target / 1.5, target × 1.5] (the factor the issue asks for). The targets and their sources are in
:data:`PRESETS`; the sampling error of one seed's ``k3`` (per-step relative standard deviation about
0.3 for the Student-t preset, 12 steps: about 0.09 relative standard error) is several times smaller
than the band's half-width (ln 1.5 = 0.41 in log terms), so a correct preset passes and an engine off
by more than the factor fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sandbox.claims.base import ClaimResult, Curve, Row, t_interval
from sandbox.run.runner import _result, prepare_run
from sandbox.scenario.api import load_scenario
from sandbox.scenario.shipped import shipped_root

FACTOR = 1.5
"""A preset is calibrated when its measured statistic lies within [target / FACTOR, target × FACTOR]."""
QUICK_STEPS = 8

YAO = "Yao, Liu et al., 'Your Efficient RL Framework Secretly Brings You Off-Policy RL Training' (blog, Aug 2025)"
LIU = "Liu, Li et al., 'When Speed Kills Stability' (blog, Sep 2025)"
R3 = "Ma et al., Rollout Routing Replay (arXiv 2510.11370)"
ZHANG = "Zhang, Li et al., 'Beyond Precision' (Dec 2025)"


@dataclass(frozen=True)
class Target:
    statistic: str
    value: float
    source: str


@dataclass(frozen=True)
class Preset:
    file: str
    knobs: str
    targets: tuple[Target, ...]


PRESETS: dict[str, Preset] = {
    "dense_bf16": Preset(
        "engines/dense_bf16.toml",
        "precision bf16, noise_scale 0.09 (tuned), noise_dof 3",
        (
            Target("k3", 3e-3, f"k3 KL 1e-3 to 5e-3 per token, dense models ({LIU}; {YAO})"),
            Target("gap_mean", 0.015, f"mean token-probability gap ~0.015, Qwen2.5-32B dense ({YAO})"),
        ),
    ),
    "processed_topp": Preset(
        "engines/processed_topp.toml",
        "top_p 0.85 (tuned), processed log-probs",
        (Target("k3", 3e-3, f"dense k3 KL range 1e-3 to 5e-3 ({LIU})"),),
    ),
    "moe_routing": Preset(
        "engines/moe_routing.toml",
        "4 experts, flip_prob 0.1",
        (Target("router_flip_frac", 0.10, f"~10% of router decisions differ ({R3})"),),
    ),
    "drifting_engine": Preset(
        "engines/drifting_engine.toml",
        "logit_noise scale 0.07 + 0.01 v (drift tuned), lr 1e-9",
        (
            Target("k3_first", 1e-3, f"low end of the dense range ({LIU})"),
            Target("k3_last", 5e-3, f"high end of the dense range, reached at lr ~0 as the gap grows ({ZHANG})"),
        ),
    ),
}


def measure(name: str, seed: int = 0, steps: int | None = None) -> dict[str, float]:
    """The statistics of the module docstring for one run of preset ``name`` with ``run.seed = seed``
    (``steps``: override ``run.steps``)."""
    overrides = {"run.seed": seed, "run.figures": False, "run.record_events": False}
    if steps is not None:
        overrides.update({"run.steps": steps, "run.eval_every": steps})
    scn, _ = load_scenario(shipped_root() / PRESETS[name].file, overrides)
    task, learner, cluster = prepare_run(scn)
    m = _result(scn, cluster.run(scn.run.steps), learner).metrics
    k3 = m["mismatch/kl_k3"].to_numpy(dtype=float)
    q = max(1, len(k3) // 4)
    engine = task.engine
    return {
        "k3": float(np.mean(k3)),
        "gap_mean": float(m["mismatch/prob_gap_mean"].mean()),
        "gap_max": float(m["mismatch/prob_gap_max"].max()),
        "k3_first": float(np.mean(k3[:q])),
        "k3_last": float(np.mean(k3[-q:])),
        "router_flip_frac": engine.flips / engine.decisions if engine.decisions else math.nan,
    }


STATISTIC = {
    "k3": "mean over steps of mismatch/kl_k3",
    "gap_mean": "mean over steps of mismatch/prob_gap_mean",
    "gap_max": "largest mismatch/prob_gap_max of the run",
    "k3_first": "mismatch/kl_k3, mean of the first quarter of steps",
    "k3_last": "mismatch/kl_k3, mean of the last quarter of steps",
    "router_flip_frac": "flipped / all router decisions of the sampler",
}


def band_of(target: float) -> tuple[float, float]:
    return (target / FACTOR, target * FACTOR)


def _fmt(x: float) -> str:
    return "—" if not math.isfinite(x) else f"{x:.3g}"


def _mean_of_measured(values: list[float]) -> float:
    """The mean over seeds of a measure that is NaN where it does not apply (router flips of a dense model)."""
    measured = [v for v in values if not math.isnan(v)]
    return float(np.mean(measured)) if measured else math.nan


def run(quick: bool = False, seeds: int = 8) -> ClaimResult:
    steps = QUICK_STEPS if quick else None
    values = {name: [measure(name, s, steps) for s in range(seeds)] for name in PRESETS}
    result = ClaimResult(
        name="mismatch_presets",
        paper="published training-inference mismatch magnitudes (docs/engines.md#calibrated-presets)",
        definition=__doc__.split("\n\n", 1)[1].strip(),
        settings={
            name: {"file": f"scenarios/{p.file}", "knobs": p.knobs, "run.steps": steps or "the file's"}
            for name, p in PRESETS.items()
        },
        x_label="preset: statistic",
        y_label="measured / published target (band ×1.5: 0.67–1.5)",
        kind="bars",
    )
    i = 0
    for name, p in PRESETS.items():
        for t in p.targets:
            vals = np.array([v[t.statistic] for v in values[name]])
            result.rows.append(
                Row(
                    f"{name} {t.statistic} ≈ {t.value:g}",
                    STATISTIC[t.statistic],
                    vals,
                    band_of(t.value),
                    "within",
                    note=t.source,
                )
            )
            m, lo, hi = t_interval(vals / t.value)
            result.curves.append(
                Curve(
                    f"{name}: {t.statistic}",
                    [float(i)],
                    [m],
                    [lo if math.isfinite(lo) else m],
                    [hi if math.isfinite(hi) else m],
                )
            )
            result.curves.append(Curve(f"{name}: {t.statistic} (published target = 1)", [float(i)], [1.0]))
            i += 1
    lines = ["| preset | knobs | k3 KL | mean prob gap | max prob gap | router flips |", "|---|---|---|---|---|---|"]
    for name, p in PRESETS.items():
        col = lambda k: _fmt(_mean_of_measured([v[k] for v in values[name]]))  # noqa: E731
        lines.append(
            f"| {name} | {p.knobs} | {col('k3')} | {col('gap_mean')} | {col('gap_max')} | {col('router_flip_frac')} |"
        )
    result.appendix = "Measured per preset (mean over seeds):\n\n" + "\n".join(lines)
    return result
