"""The published asynchronous speed-ups and the setups they were measured on (docs/claims.md, section
published_speedups_engine).

Each public system that reports a speed-up of asynchronous over synchronous RL training has one
scenario in ``scenarios/published/`` describing its setup as far as the public text allows (every
published number and every assumption is stated in the scenario's ``description``) and one entry in
:data:`SETUPS` (the figure, what it measures, its source, the variant that plays the source's
synchronous baseline, the response-length model). The claim ``published_speedups_engine``
(:mod:`sandbox.claims.published_engine`) predicts them on the one timing model of ``sandbox plan``
(``docs/system.md#hardware``). Its helpers here: :func:`mean_step_time` (mean simulated seconds per
learner step after the first 20%), :func:`capped` (workers a control can never admit left out),
:func:`capped_mean_length` (the mean capped response length that the trainer is charged).

Response lengths: L ~ LogNormal(ln m, s) cut at the maximum length c, L' = min(L, c), each sequence its
own length (:class:`ResponseLengths`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from sandbox.claims.base import INCONCLUSIVE, NOT_REPRODUCED, t_interval
from sandbox.scenario.api import load_scenario, variant_scenarios
from sandbox.scenario.shipped import shipped_root
from sandbox.system.config import SystemConfig
from sandbox.system.timing_only import simulate_timing

ROOT = shipped_root() / "published"
BAND = (0.8, 1.25)
WARMUP_FRACTION = 0.2
FULL_STEPS, QUICK_STEPS = 40, 4


def capped_mean_length(median: float, sigma: float, max_tokens: float) -> float:
    """E[min(L, c)] for L ~ LogNormal(μ = ln ``median``, ``sigma``) and c = ``max_tokens``, in closed form:

        E[min(L, c)] = e^(μ + σ²/2) · Φ((ln c − μ − σ²)/σ) + c · (1 − Φ((ln c − μ)/σ))

    (the log-normal's limited expected value, Klugman, Panjer & Willmot, Loss Models, appendix A);
    σ = 0 gives min(median, c).
    """
    if not (median > 0 and sigma >= 0 and max_tokens > 0):
        raise ValueError(
            f"capped_mean_length: expected median > 0, sigma >= 0, max_tokens > 0; got {median}, {sigma}, {max_tokens}"
        )
    if sigma == 0:
        return float(min(median, max_tokens))
    mu, z = math.log(median), math.log(max_tokens)
    return float(
        math.exp(mu + sigma**2 / 2) * norm.cdf((z - mu - sigma**2) / sigma) + max_tokens * norm.sf((z - mu) / sigma)
    )


@dataclass(frozen=True)
class ResponseLengths:
    """The response-length model of a published setup: the engines' ``length_median``, ``length_sigma`` and
    ``max_tokens`` (``docs/system.md#continuous_batching``) and the tokens the trainer is charged."""

    median: float
    """Median response length, tokens (m)."""
    sigma: float
    """Log-normal shape (s): 0.819 ≈ ln 20 / Φ⁻¹(1 − 1/8192), the longest of ~8k responses about 20x the median."""
    max_tokens: int
    """The maximum response length (c), tokens."""
    group_size: int
    """Responses per group (G), the scenario's ``algorithm.group_size``."""

    def mean_response_tokens(self) -> float:
        """The mean capped response length, tokens (:func:`capped_mean_length`)."""
        return capped_mean_length(self.median, self.sigma, self.max_tokens)


@dataclass(frozen=True)
class Published:
    """One published speed-up: the number (or range), what it measures and where it is stated."""

    scenario: str
    system: str
    low: float
    high: float
    baseline: str
    """The variant of the scenario that plays the paper's synchronous baseline."""
    measure: str
    """``throughput`` (time per step or total time for the same steps) or ``time_to_score``."""
    source: str
    lengths: ResponseLengths
    """The response-length model of the setup's engines."""

    @property
    def value(self) -> float:
        """The published number; a range's geometric mean."""
        return math.sqrt(self.low * self.high)

    def text(self) -> str:
        return f"{self.low:g}x" if self.low == self.high else f"{self.low:g}-{self.high:g}x"


SETUPS: tuple[Published, ...] = (
    Published(
        "areal_fully_async",
        "AReaL 1.5B (16 nodes)",
        2.77,
        2.77,
        "decoupled_sync",
        "throughput",
        "AReaL v0.3 blog, Table 2: R1-Distill-Qwen-1.5B, 16 nodes, 1000 steps, 41.0 h sync vs 14.8 h async",
        ResponseLengths(median=6000, sigma=0.819, max_tokens=27648, group_size=16),
    ),
    Published(
        "areal_fully_async_7b",
        "AReaL 7B (24 nodes)",
        2.27,
        2.27,
        "decoupled_sync",
        "throughput",
        "AReaL v0.3 blog, Table 2: R1-Distill-Qwen-7B, 24 nodes, 1000 steps, 57.7 h sync vs 25.4 h async",
        ResponseLengths(median=6000, sigma=0.819, max_tokens=27648, group_size=16),
    ),
    Published(
        "verl_fully_async",
        "verl fully_async_policy",
        2.35,
        2.67,
        "colocated_sync",
        "throughput",
        "verl documentation advance/fully_async (10/18/2025): 128 H20, total time for 100-400 steps",
        ResponseLengths(median=1000, sigma=0.819, max_tokens=28672, group_size=16),
    ),
    Published(
        "verl_one_step_off",
        "verl one_step_off_policy (FSDP2)",
        1.23,
        1.23,
        "colocated_sync",
        "throughput",
        "verl documentation advance/one_step_off (07/17/2025): total time, +23%",
        ResponseLengths(median=1000, sigma=0.819, max_tokens=20480, group_size=12),
    ),
    Published(
        "verl_one_step_off_megatron",
        "verl one_step_off_policy (Megatron)",
        1.40,
        1.40,
        "colocated_sync",
        "throughput",
        "verl documentation advance/one_step_off (07/17/2025): total time, +40%",
        ResponseLengths(median=1000, sigma=0.819, max_tokens=8192, group_size=12),
    ),
    Published(
        "roll_flash_rlvr",
        "ROLL Flash RLVR",
        2.24,
        2.24,
        "colocated_sync",
        "throughput",
        "arXiv 2510.11345 (abstract: up to 2.24x on RLVR, same GPU budget)",
        ResponseLengths(median=4000, sigma=0.819, max_tokens=32768, group_size=8),
    ),
    Published(
        "roll_flash_agentic",
        "ROLL Flash agentic",
        2.72,
        2.72,
        "colocated_sync",
        "throughput",
        "arXiv 2510.11345 (abstract: up to 2.72x on agentic tasks, same GPU budget)",
        ResponseLengths(median=8000, sigma=1.0, max_tokens=65536, group_size=8),
    ),
    Published(
        "pipelinerl",
        "PipelineRL",
        2.0,
        2.0,
        "colocated_sync",
        "time_to_score",
        "arXiv 2509.19128 (abstract: ~2x faster learning than conventional RL, 128 H100)",
        ResponseLengths(median=2048, sigma=0.819, max_tokens=8192, group_size=8),
    ),
    Published(
        "vcpo_multiturn",
        "VCPO multi-turn",
        2.5,
        2.5,
        "sync",
        "time_to_score",
        "arXiv 2602.17616 (Fig. 1: best sync AIME-2025 accuracy in ~42 h vs ~105 h)",
        ResponseLengths(median=8000, sigma=0.819, max_tokens=32768, group_size=8),
    ),
)
"""The published numbers: the one source of truth for the claim's rows and the docs table
(tests/claims/test_published_claims.py compares them with docs/claims.md)."""


def max_in_flight(cfg: SystemConfig, groups_per_step: int) -> int:
    """The most groups the staleness control ever lets run at once (docs/system.md#staleness-controls)."""
    st = cfg.staleness
    bound = st.max_in_flight(groups_per_step)  # the control's declaration (ControlConfig.max_in_flight)
    if bound is not None:
        return bound
    raise ValueError(f"system.staleness.kind: no in-flight bound known for {st.kind!r}")


def capped(cfg: SystemConfig, groups_per_step: int) -> SystemConfig:
    """``cfg`` with ``num_workers`` capped at :func:`max_in_flight` (identical workers only)."""
    if cfg.worker_speeds is not None:
        return cfg
    workers = min(cfg.num_workers, max_in_flight(cfg, groups_per_step))
    return cfg.model_copy(update={"num_workers": workers})


def mean_step_time(cfg: SystemConfig, steps: int, groups_per_step: int, group_size: int, seed: int) -> float:
    """Mean simulated seconds per learner step after the first 20% of ``steps``."""
    res = simulate_timing(
        capped(cfg, groups_per_step), steps, groups_per_step, group_size, seed=seed, record_events=False
    )
    times = np.array([r["time"] for r in res.rows])
    start = int(len(times) * WARMUP_FRACTION)
    return float((times[-1] - times[start]) / (len(times) - 1 - start))


def side_of_one(predicted: np.ndarray, published: float) -> tuple[str, str]:
    """``(cap, note)``: a published speed-up (> 1) and a prediction whose 95% interval lies below 1 (a
    predicted slowdown) or contains 1 cannot agree, whatever their ratio: the row is capped at ``not
    reproduced`` or ``inconclusive`` (no cap and no note when the interval lies on the published side, or
    when the published figure is exactly 1: no side to be on)."""
    m, lo, hi = t_interval(predicted)
    if published == 1 or not (math.isfinite(lo) and math.isfinite(hi)):
        return "", ""
    same_side = (lo > 1) if published > 1 else (hi < 1)
    if same_side:
        return "", ""
    if (hi < 1) if published > 1 else (lo > 1):
        return NOT_REPRODUCED, (
            f"predicted {m:.2f}x [{lo:.2f}, {hi:.2f}] is on the other side of 1 from the published "
            f"{published:.3g}x: never reproduced"
        )
    return INCONCLUSIVE, f"predicted {m:.2f}x [{lo:.2f}, {hi:.2f}] contains 1: at best inconclusive"


def setup_variants(name: str) -> dict:
    scn, raw = load_scenario(ROOT / f"{name}.toml")
    return variant_scenarios(scn, raw)


def docs_table() -> str:
    """The published-numbers table of docs/claims.md, section published_speedups, rendered from :data:`SETUPS`
    (a test keeps the page equal to it)."""
    lines = [
        "| scenario | system | published | measures | compared with variant | source |",
        "|---|---|---|---|---|---|",
    ]
    for p in SETUPS:
        measure = "throughput (same steps)" if p.measure == "throughput" else "wall time to a score"
        lines.append(f"| `{p.scenario}` | {p.system} | {p.text()} | {measure} | `{p.baseline}` | {p.source} |")
    return "\n".join(lines)
