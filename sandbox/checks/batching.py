"""T13: throughput of a continuous-batching engine (``theory.engine_batching``) against the cluster.

One engine shared by ``c`` workers (``workers_per_engine = c``), groups of one sequence, log-normal
lengths from the engine's length model, a zero-time learner and a control that never throttles
(``max_lag`` with ``k_max = c``), weight syncs that keep the batch (``sync = "partial"``, no pause):
the engine is saturated at ``c`` and T13 gives its throughput ``X(c) = c / (E[L](a + b·c) + c·P)``
exactly, with ``E[L]`` the length model's mean summed over the integers. Two settings: decode only,
and with a prefill. Measured: sequences finished per second in the window ``[0.2 T, 0.9 T]``; SE by
batch means over 20 consecutive sub-windows (each holds hundreds of completions, so their
correlation is small); tolerance 4·SE. A simulator that charged ``a + b`` per step whatever the
batch (batching ignored) would finish ``(a + b·c)/(a + b)`` times more, which is rejected at every
``c > 1``.
"""

from __future__ import annotations

import numpy as np

from sandbox.checks.base import CheckResult, Point, sweeps
from sandbox.system.config import SystemConfig
from sandbox.system.timing_only import simulate_timing
from theory.engine_batching import engine_throughput, rounded_lognormal_mean

A, B_SEQ, MEDIAN, SIGMA = 0.01, 0.001, 100.0, 0.5
SETTINGS = {"decode": (0.0, 0), "prefill": (1e-4, 200)}
"""Series: (prefill seconds per prompt token, prompt tokens): the prefill series pays 20 ms per sequence."""


def engine_scenario(c: int, prefill_per_token: float, prompt_tokens: int) -> SystemConfig:
    """The saturated single-engine cluster of the check (module docstring)."""
    return SystemConfig(
        num_workers=c,
        generation_time={
            "kind": "continuous_batching",
            "step_base": A,
            "step_per_sequence": B_SEQ,
            "prefill_per_token": prefill_per_token,
            "prompt_tokens": prompt_tokens,
            "workers_per_engine": c,
            "sync": "partial",
            "sync_time": 0.0,
            "length_median": MEDIAN,
            "length_sigma": SIGMA,
        },
        train_time={"kind": "constant", "value": 0.0},
        staleness={"kind": "max_lag", "k_max": c, "enforcement": "throttle"},
    )


def measured_throughput(finish: np.ndarray, t0: float, t1: float, parts: int = 20) -> tuple[float, float]:
    """Completions per second in ``[t0, t1)`` and its batch-means standard error over ``parts``."""
    edges = np.linspace(t0, t1, parts + 1)
    counts, _ = np.histogram(finish, bins=edges)
    rates = counts / np.diff(edges)
    return float(counts.sum() / (t1 - t0)), float(rates.std(ddof=1) / np.sqrt(parts))


@sweeps(
    "c",
    "sequences in flight",
    series={"decode": "decode only", "prefill": "with 20 ms prefill"},
)
def run(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    concurrencies = [1, 8, 64] if quick else [1, 4, 16, 64, 128]
    completions = 4000 if quick else 12000
    group_steps = 4  # groups per learner step
    mean_length = rounded_lognormal_mean(MEDIAN, SIGMA)
    result = CheckResult(
        name="engine_batching",
        claim="saturated continuous-batching engine: X(c) = c / (E[L](a + b·c) + c·P) sequences/s (Little)",
        x_label="sequences in flight c (one engine, a = 10 ms, b = 1 ms, log-normal lengths)",
        y_label="throughput (sequences/s)",
        justification=f"4·SE, batch means over 20 sub-windows of ~{int(0.7 * completions / 20)} completions each",
        log_x=True,
    )
    for series, (per_token, prompt) in SETTINGS.items():
        for c in concurrencies:
            cfg = engine_scenario(c, per_token, prompt)
            res = simulate_timing(
                cfg, completions // group_steps, group_steps, group_size=1, seed=c, record_events=False
            )
            finish = np.array([j.finish_time for j in res.jobs])
            finish = finish[np.isfinite(finish)]
            t0, t1 = 0.2 * res.sim_time, 0.9 * res.sim_time
            measured, se = measured_throughput(finish, t0, t1)
            predicted = perturb * engine_throughput(c, A, B_SEQ, mean_length, per_token * prompt)
            tol = 4 * se
            result.points.append(
                Point(c, predicted, measured, se, tol, abs(measured - predicted) <= tol, series=series)
            )
    return result
