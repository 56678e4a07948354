"""Throughput: the asynchronous speed-up over synchronous training for the shipped system scenarios,
against the order-statistics prediction (``theory/order_statistics.py``, T6).

System-only runs (:func:`sandbox.system.timing_only.simulate_timing`, no learning) of each shipped
scenario with an asynchronous staleness control, and of the same system with ``staleness = sync``.
Measured speed-up per seed: mean synchronous step time / mean asynchronous step time, over the steps
after the first 10%. Prediction (B groups per step on P ≥ B workers, constant training and
weight-sync times t_train, t_sync, i.i.d. generation times X): the work-conserving synchronous step
splits each group into p = min(G, ⌈P/B⌉) parts (T15, ``theory/split_batch.py``), so it lasts
E[max over the B·p parts of (n_i/G)·X] + t_train + t_sync (E[max of B X] when p = 1); asynchronous step = max(B·E[X]/P, t_train) (renewal throughput of P busy workers,
training overlapped). Rows per scenario: speed-up > 1, and measured / predicted in [0.9, 1.1].
A scenario with B > P, more parts than workers, non-constant training time or a per-token
generation model is skipped (the settings say why).
"""

from __future__ import annotations

import numpy as np

from sandbox.claims.base import ClaimResult, Curve, Row, t_interval
from sandbox.scenario.api import load_scenario
from sandbox.scenario.shipped import shipped_root
from sandbox.system.config import SystemConfig
from sandbox.system.timing_only import simulate_timing
from theory.order_statistics import expected_value
from theory.split_batch import parts_per_group, split_step_mean

SCENARIOS = ("async_ratio", "max_lag", "max_lag_drop", "fixed_lag")
BAND = (0.9, 1.1)
ROOT = shipped_root()


def generation_cdf(delay):
    """CDF of a generation-time distribution, or None when the theory has no closed form here: what
    the delay model declares (``Delay.cdf``)."""
    return delay.cdf()


def predicted_speedup(cfg: SystemConfig, groups_per_step: int, group_size: int) -> float | None:
    cdf = generation_cdf(cfg.generation_time)
    t_train, t_sync = cfg.train_time.fixed_value(), cfg.sync_delay.fixed_value()
    if cdf is None or groups_per_step > cfg.num_workers or t_train is None or t_sync is None:
        return None
    parts = parts_per_group(groups_per_step, group_size, cfg.num_workers)
    if groups_per_step * parts > cfg.num_workers:
        return None  # more parts than workers: no closed form for a general law (T15)
    sync_step = split_step_mean(cdf, groups_per_step, group_size, cfg.num_workers) + t_train + t_sync
    async_step = max(groups_per_step * expected_value(cdf) / cfg.num_workers, t_train)
    return sync_step / async_step


def mean_step_time(cfg: SystemConfig, steps: int, groups_per_step: int, group_size: int, seed: int) -> float:
    res = simulate_timing(cfg, steps, groups_per_step, group_size, seed=seed, record_events=False)
    times = np.array([r["time"] for r in res.rows])
    start = len(times) // 10
    return float((times[-1] - times[start]) / (len(times) - 1 - start))


def run(quick: bool = False, seeds: int = 8) -> ClaimResult:
    steps = 300 if quick else 2000
    result = ClaimResult(
        name="throughput",
        paper="asynchronous RL systems; T6 order statistics and T15 split batches (docs/theory.md#t6, #t15)",
        definition=__doc__.split("\n\n", 1)[1].strip(),
        settings={"steps": steps},
        x_label="shipped scenario",
        y_label="speed-up async / sync (mean, 95% CI)",
        kind="bars",
    )
    for i, name in enumerate(SCENARIOS):
        scn, _ = load_scenario(ROOT / f"{name}.toml")
        cfg, B, G = scn.system, scn.algorithm.groups_per_step, scn.algorithm.group_size
        pred = predicted_speedup(cfg, B, G)
        if pred is None:
            result.settings[name] = "skipped: outside the prediction's assumptions"
            continue
        sync_cfg = SystemConfig(**{**cfg.model_dump(), "staleness": {"kind": "sync"}})
        speedup = np.array(
            [mean_step_time(sync_cfg, steps, B, G, s) / mean_step_time(cfg, steps, B, G, s) for s in range(seeds)]
        )
        result.settings[name] = (
            f"P = {cfg.num_workers}, B = {B}, staleness = {cfg.staleness.kind}, predicted speed-up {pred:.3f}"
        )
        result.rows += [
            Row(f"{name}: async faster than sync", "speed-up = sync step time / async step time", speedup, 1.0, ">"),
            Row(
                f"{name}: speed-up matches theory", f"measured / predicted ({pred:.3f})", speedup / pred, BAND, "within"
            ),
        ]
        m, lo, hi = t_interval(speedup)
        result.curves.append(Curve(name, [float(i)], [m], [lo], [hi]))
        result.curves.append(Curve(f"{name} (theory)", [float(i)], [pred]))
    return result
