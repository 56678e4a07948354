"""Timing shared by the benchmarks: every side timed in turn, ``repeats`` times (baseline, measured,
baseline, measured, ...), so load from other processes hits every side alike."""

from __future__ import annotations

import gc
import time


def interleaved(fns: dict, repeats: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            gc.collect()  # the previous call's garbage (simpy processes hold cycles) is not charged to this one
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return times
