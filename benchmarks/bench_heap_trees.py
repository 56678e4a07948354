"""Row 6's timing engine against another tree's, in one process: the heap event loop
(``sandbox/system/heap_loop.py``) and the continuous-batching engine of a tree before a change, loaded from
its files onto this tree's cluster, against this tree's, with this tree's simpy cluster as the third side.

Two versions of the ``sandbox`` package cannot share one process, but these two modules only subclass
and plug into the cluster, so the old ones run on this tree's :class:`~sandbox.system.cluster.Cluster`:
what differs between the sides is the event loop and the engine. Every side's jobs table, rows and clock
are checked equal to the simpy cluster's before timing. Each case runs the three sides interleaved
(simpy, before, after; ``--repeats`` times) and prints the min and the median, and the ratios min-vs-min
and median of paired.

``--claim``: instead, the timing-only simulations of the ``published_speedups_engine`` claim (``--quick``, one
seed), recorded once and replayed on both heap loops, each the min of ``--repeats`` interleaved runs; the
totals and their ratio.

Usage: python benchmarks/bench_heap_trees.py --before /path/to/tree [--repeats 5] [--claim]
(a tree is a checkout or ``git archive <commit> | tar -x -C <dir>``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import types
from pathlib import Path

from bench_system import engine_system, plain  # the cases both scripts time

import sandbox.system.delays.continuous_batching as engine_module
from sandbox.base.gc_pause import paused_cyclic_gc
from sandbox.system.cluster import Cluster
from sandbox.system.config import SystemConfig
from sandbox.system.heap_loop import HeapCluster
from sandbox.system.timing_only import CountingTrainer, TimingOnlyWorkload


def load_module(name: str, path: Path) -> types.ModuleType:
    """The module at ``path`` under ``name``, without its registration in the delay registry (the name
    is this tree's already)."""
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    source = path.read_text().replace("DELAYS.register(ContinuousBatchingDelay, ContinuousBatchingDelay)", "")
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


CASES = {  # name: (system, steps, groups per step, group size, record events)
    "16 workers, B=8, capacity 64, 1000 steps, events": (plain(16, 64), 1000, 8, 1, True),
    "the same without events": (plain(16, 64), 1000, 8, 1, False),
    "1024 workers, B=64, capacity 128, 10 steps": (plain(1024, 128), 10, 64, 1, True),
    "engines, sync partial (64 workers on 8 engines, B=16, G=8), 40 steps": (
        engine_system("partial"),
        40,
        16,
        8,
        False,
    ),
    "engines, sync drain, 40 steps": (engine_system("drain"), 40, 16, 8, False),
    "engines, sync abort, 40 steps": (engine_system("abort"), 40, 16, 8, False),
    "split synchronous step (32 workers, B=2, G=16), 200 steps": (
        SystemConfig(num_workers=32, generation_time={"kind": "exponential", "mean": 1.0}, staleness={"kind": "sync"}),
        200,
        2,
        16,
        False,
    ),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="the tree before (its sandbox/system/heap_loop.py and engine)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--claim", action="store_true", help="the published_speedups_engine claim's simulations")
    args = ap.parse_args()
    root = Path(args.before) / "sandbox" / "system"
    old_loop = load_module("before_heap_loop", root / "heap_loop.py")
    old_engine = load_module("before_continuous_batching", root / "delays" / "continuous_batching.py")
    new_engine = engine_module.Engine
    sides = {"simpy": Cluster, "before": old_loop.HeapCluster, "after": HeapCluster}

    @paused_cyclic_gc()  # as simulate_timing
    def simulate(side: str, cfg, steps: int, B: int, G: int, events: bool):
        engine_module.Engine = old_engine.Engine if side == "before" else new_engine
        try:
            cluster = sides[side](cfg, TimingOnlyWorkload(), CountingTrainer(), B, G, 0, record_events=events)
            return cluster.run(steps)
        finally:
            engine_module.Engine = new_engine

    print(f"load average {os.getloadavg()[0]:.1f}; {args.repeats} interleaved repeats; ms min / median")
    if args.claim:
        return claim_simulations(args.repeats, old_loop.HeapCluster, old_engine.Engine)
    for name, (cfg, steps, B, G, events) in CASES.items():
        ref = simulate("simpy", cfg, steps, B, G, events)
        for side in ("before", "after"):
            got = simulate(side, cfg, steps, B, G, events)
            same = got.jobs.to_frame().equals(ref.jobs.to_frame()) and got.rows.to_frame().equals(ref.rows.to_frame())
            if not (same and got.sim_time == ref.sim_time):
                raise SystemExit(f"{name}: the {side} heap loop's tables differ from the simpy cluster's")
        times: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(args.repeats):
            for side in sides:
                t = time.perf_counter()
                simulate(side, cfg, steps, B, G, events)
                times[side].append(time.perf_counter() - t)

        def ratio(a: str, b: str) -> str:
            x, y = times[a], times[b]
            return f"{min(x) / min(y):.2f}x / {statistics.median(p / q for p, q in zip(x, y)):.2f}x"

        cells = ", ".join(f"{s} {min(t) * 1e3:.1f} / {statistics.median(t) * 1e3:.1f}" for s, t in times.items())
        print(
            f"{name}: {cells}; simpy/after {ratio('simpy', 'after')}, simpy/before {ratio('simpy', 'before')}, "
            f"before/after {ratio('before', 'after')} (min-vs-min / median of paired)",
            flush=True,
        )


def claim_simulations(repeats: int, old_cluster, old_engine) -> None:
    """The ``published_speedups_engine`` claim's simulations (quick, one seed) on the tree before's heap loop
    and engine and on this tree's: the total of each simulation's fastest run."""
    import sandbox.claims.published as published
    import sandbox.system.timing_only as timing_only
    from sandbox.claims import published_engine

    calls, simulate = [], timing_only.simulate_timing
    published.simulate_timing = lambda *a, **k: calls.append((a, k)) or simulate(*a, **k)
    try:
        published_engine.run(quick=True, seeds=1)
    finally:
        published.simulate_timing = simulate
    new = (timing_only.HeapCluster, engine_module.Engine)
    total = {"before": 0.0, "after": 0.0}
    for a, k in calls:
        best = {}
        for _ in range(repeats):
            for side in total:
                timing_only.HeapCluster, engine_module.Engine = (old_cluster, old_engine) if side == "before" else new
                try:
                    t = time.perf_counter()
                    simulate(*a, **k)
                    best[side] = min(best.get(side, float("inf")), time.perf_counter() - t)
                finally:
                    timing_only.HeapCluster, engine_module.Engine = new
        for side in total:
            total[side] += best[side]
    print(
        f"published_speedups_engine (quick, 1 seed): {len(calls)} simulations, before {total['before']:.2f} s, "
        f"after {total['after']:.2f} s (each the min of {repeats}): {total['before'] / total['after']:.2f}x"
    )


if __name__ == "__main__":
    main()
