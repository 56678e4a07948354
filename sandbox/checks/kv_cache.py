"""T13 with a KV-cache limit: the throughput of a continuous-batching engine whose KV cache, not its
clients, caps the batch (``theory.engine_batching``, "KV-cache limit"; docs/theory.md#t13).

One engine shared by ``c`` workers (far more than fit: ``c`` = 4 × the predicted concurrency + 32), groups of
one sequence, log-normal lengths (median 100, σ = 0.5, cut at 300 tokens), no prompt, a zero-time learner, a
control that never throttles (``max_lag`` with ``k_max = c``) and syncs that keep the batch. The cache holds
``K`` tokens and each sequence reserves its length ``L``. Little's law in decode steps gives the mean number
in flight ``n̄ = K̄·E[L]/E[L²]`` (long sequences are over-represented in flight) and the throughput
``X = n̄/(E[L](a + b·n̄))`` exactly, with ``E[L]``, ``E[L²]`` summed over the integers of the length model;
first-come-first-served admission leaves less than one waiting reservation free, ``K − 300 < K̄ ≤ K``, which
brackets ``X``. Predicted: the middle of that bracket; tolerance: its half-width + 4·SE (batch means over 20
sub-windows of the window ``[0.2 T, 0.9 T]``). An engine that ignored its cache would run all ``c``.
"""

from __future__ import annotations

import numpy as np

from sandbox.checks.base import CheckResult, Point, sweeps
from sandbox.checks.batching import measured_throughput
from sandbox.system.config import SystemConfig
from sandbox.system.timing_only import simulate_timing
from theory.engine_batching import (
    kv_limited_concurrency,
    kv_limited_throughput,
    rounded_lognormal_mean,
)

A, B_SEQ, MEDIAN, SIGMA, MAX_TOKENS = 0.01, 0.0001, 100.0, 0.5, 300


def moments() -> tuple[float, float]:
    """``(E[L], E[L²])`` of the length model."""
    return (
        rounded_lognormal_mean(MEDIAN, SIGMA, MAX_TOKENS),
        rounded_lognormal_mean(MEDIAN, SIGMA, MAX_TOKENS, power=2),
    )


def engine_scenario(kv_tokens: int, workers: int) -> SystemConfig:
    return SystemConfig(
        num_workers=workers,
        generation_time={
            "kind": "continuous_batching",
            "step_base": A,
            "step_per_sequence": B_SEQ,
            "workers_per_engine": workers,
            "sync": "partial",
            "sync_time": 0.0,
            "kv_capacity_tokens": kv_tokens,
            "length_median": MEDIAN,
            "length_sigma": SIGMA,
            "max_tokens": MAX_TOKENS,
        },
        train_time={"kind": "constant", "value": 0.0},
        staleness={"kind": "max_lag", "k_max": workers, "enforcement": "throttle"},
    )


@sweeps("K", "KV-cache tokens")
def run(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    capacities = [4000, 16000] if quick else [2000, 4000, 8000, 16000, 32000]
    completions = 6000 if quick else 16000
    group_steps = 4
    mean, square = moments()
    result = CheckResult(
        name="kv_throughput",
        claim="KV-limited continuous batching: n̄ = K·E[L]/E[L²] in flight, X = n̄/(E[L](a + b·n̄)) sequences/s",
        x_label="KV-cache capacity K (tokens; lengths log-normal, median 100, cut at 300)",
        y_label="throughput (sequences/s)",
        justification="half-width of the FCFS packing bracket K − 300 < K̄ ≤ K, + 4·SE (batch means over 20 sub-windows)",
        log_x=True,
    )
    for K in capacities:
        workers = int(4 * kv_limited_concurrency(K, mean, square)) + 32
        res = simulate_timing(
            engine_scenario(K, workers),
            completions // group_steps,
            group_steps,
            group_size=1,
            seed=K,
            record_events=False,
        )
        finish = np.array([j.finish_time for j in res.jobs])
        finish = finish[np.isfinite(finish)]
        measured, se = measured_throughput(finish, 0.2 * res.sim_time, 0.9 * res.sim_time)
        hi = kv_limited_throughput(K, A, B_SEQ, mean, square)
        lo = kv_limited_throughput(K - MAX_TOKENS, A, B_SEQ, mean, square)
        predicted = perturb * (hi + lo) / 2
        tol = (hi - lo) / 2 + 4 * se
        n = kv_limited_concurrency(K, mean, square)
        result.points.append(
            Point(
                K,
                predicted,
                measured,
                se,
                tol,
                abs(measured - predicted) <= tol,
                note=f"n̄ ≈ {n:.1f} of {workers} clients in flight",
                series="KV-limited",
            )
        )
    return result
