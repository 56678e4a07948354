"""T15: a synchronous step spread over the whole fleet (no learning involved).

* ``split_sync_step`` (T15): ``B = 4`` groups of ``G = 8`` samples per step on ``W`` identical
  Exp(μ) workers under ``sync`` (work-conserving dispatch, no training or sync time). With ``W > B``
  the cluster splits each group into ``p = min(G, ceil(W/B))`` parts of ``G/p`` samples, each taking
  ``1/p`` of a group's time; the step lasts the makespan of ``m = B·p`` parts on ``W`` workers:
  ``s·(H_W + (m − W)/W)`` (``s·H_m`` when ``m <= W``) with ``s = 1/(pμ)`` (``theory.split_batch``).
  Steps are i.i.d. (every step starts with all workers free), so the SE is the step-time std / √steps.
  The point ``W = 16, group_per_worker`` is the old dispatch, predicted ``H_B/μ`` (idle workers).
"""

from __future__ import annotations

import math

import numpy as np

from sandbox.checks.base import CheckResult, Point, sweeps
from sandbox.system.config import SystemConfig
from sandbox.system.timing_only import simulate_timing
from theory.order_statistics import exp_expected_max
from theory.split_batch import exp_split_step_mean

GROUPS, GROUP_SIZE, RATE = 4, 8, 2.0


@sweeps("W", "workers")
def run(quick: bool = False, perturb: float = 1.0) -> CheckResult:
    ws = [2, 6, 16] if quick else [1, 2, 4, 6, 8, 16, 32]
    steps = 1500 if quick else 3000
    result = CheckResult(
        name="split_sync_step",
        claim="work-conserving synchronous step time with W Exp(μ) workers, B = 4 groups split into "
        "p = min(G, ⌈W/B⌉) parts: s·(H_W + (m − W)/W), s = 1/(pμ), m = B·p",
        x_label="workers W (B = 4 groups of G = 8 per step)",
        y_label="mean step time (s)",
        justification=f"4·SE over {steps} i.i.d. steps",
        log_x=True,
    )
    for W in ws:
        for dispatch in ("work_conserving", "group_per_worker") if W == 16 else ("work_conserving",):
            cfg = SystemConfig(
                num_workers=W,
                generation_time={"kind": "exponential", "mean": 1.0 / RATE},
                train_time={"kind": "constant", "value": 0.0},
                staleness={"kind": "sync", "dispatch": dispatch},
            )
            res = simulate_timing(cfg, steps, GROUPS, group_size=GROUP_SIZE, seed=W, record_events=False)
            durations = np.diff([0.0] + [r["time"] for r in res.rows])
            measured = float(durations.mean())
            se = float(durations.std(ddof=1) / math.sqrt(len(durations)))
            if dispatch == "work_conserving":
                predicted = exp_split_step_mean(GROUPS, GROUP_SIZE, W, rate=RATE)
            else:  # one group per worker: the maximum of B whole groups (W >= B: W − B workers idle)
                predicted = exp_expected_max(GROUPS, RATE)
            predicted *= perturb
            result.points.append(
                Point(W, predicted, measured, se, 4 * se, abs(measured - predicted) <= 4 * se, series=dispatch)
            )
    return result
