"""Timing-only simulations of two whole trees, each in fresh interpreters, the trees alternately: how much
faster ``simulate_timing`` is in this tree than in another (row 6; issue 48's "timing-only runs ≥ 3× faster"
read against the tree the issue was filed on, 814a4b3).

Each round starts one interpreter per tree (``PYTHONPATH=<tree>``, the trees in turn, the order swapped every
round so neither always runs first); an interpreter imports the tree's ``simulate_timing``, runs each case once
to warm up, then ``--repeats`` times, and reports the fastest time per case and a digest of the run's jobs
table, event log and metric rows (column names and values as text, SHA-256): the same digest in both trees
says the two compute the same simulation, so the speed-up is for the same numbers. A case the other tree
cannot build (a field it lacks) is reported as such and not compared.

The ratio per case is other tree / this tree: of each round's two fastest times (median over rounds) and of the
minima over rounds. Both trees run with the garbage collector as their ``simulate_timing`` leaves it.

Usage: python benchmarks/bench_timing_trees.py --other TREE [--rounds 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

CHILD = r"""
import hashlib, json, sys, time
import numpy as np
from sandbox.system.config import SystemConfig
from sandbox.system.timing_only import simulate_timing

def plain(workers, cap):
    return SystemConfig(
        num_workers=workers,
        generation_time={"kind": "exponential", "mean": 1.0},
        train_time={"kind": "constant", "value": 0.2},
        staleness={"kind": "max_lag", "k_max": 10_000, "enforcement": "drop", "queue_capacity": cap},
    )

def engines(sync):
    return SystemConfig(
        num_workers=64,
        generation_time={
            "kind": "continuous_batching", "step_base": 0.01, "step_per_sequence": 0.0001,
            "workers_per_engine": 8, "max_sequences": 256, "sync": sync,
            "length_median": 200.0, "length_sigma": 1.0, "max_tokens": 2048,
        },
        train_time={"kind": "constant", "value": 5.0},
        staleness={"kind": "max_lag", "k_max": 1},
    )

CASES = {
    "16 workers, B = 8, capacity 64, 1,000 steps, event log": lambda: simulate_timing(plain(16, 64), 1000, 8, record_events=True),
    "16 workers, B = 8, capacity 64, 1,000 steps, no event log": lambda: simulate_timing(plain(16, 64), 1000, 8, record_events=False),
    "1,024 workers, B = 64, capacity 128, 10 steps": lambda: simulate_timing(plain(1024, 128), 10, 64, record_events=True),
    "max_lag 2 throttle, 8 workers, lognormal, 1,000 steps": lambda: simulate_timing(
        SystemConfig(num_workers=8, generation_time={"kind": "lognormal", "median": 1.0, "sigma": 0.5},
                     staleness={"kind": "max_lag", "k_max": 2}), 1000, 4, record_events=True),
    "sync, 32 workers in 2 groups of 16, 200 steps": lambda: simulate_timing(
        SystemConfig(num_workers=32, generation_time={"kind": "exponential", "mean": 1.0}, staleness={"kind": "sync"}),
        200, 2, 16, record_events=True),
    "continuous-batching engines, partial syncs, 40 steps": lambda: simulate_timing(engines("partial"), 40, 16, 8, record_events=True),
    "continuous-batching engines, drain syncs, 40 steps": lambda: simulate_timing(engines("drain"), 40, 16, 8, record_events=True),
}

def table_text(table):
    if hasattr(table, "to_frame"):
        try:
            table = table.to_frame()
        except TypeError:  # the event log names its columns
            table = table.to_frame(["t", "kind", "worker", "job", "version", "step"])
    if hasattr(table, "to_csv"):
        return table.to_csv(index=False, float_format="%.17g")
    return repr(list(table))

def digest(result):
    h = hashlib.sha256()
    for part in (result.jobs, result.events, result.rows):
        h.update(table_text(part).encode())
    h.update(repr(float(result.sim_time)).encode())
    return h.hexdigest()[:16]

repeats = int(sys.argv[1])
out = {}
for name, case in CASES.items():
    try:
        result = case()
    except Exception as exc:  # a field this tree lacks
        out[name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"}
        continue
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        case()
        best = min(best, time.perf_counter() - t)
    out[name] = {"seconds": best, "digest": digest(result)}
print(json.dumps(out))
"""


def run_tree(tree: Path, repeats: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(repeats)], env=env, cwd=tree, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"the run in {tree} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--other", type=Path, required=True, help="the other tree (a checkout or `git worktree`)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3, help="runs per case in each interpreter (its fastest counts)")
    args = ap.parse_args()
    trees = {"this": HERE, "other": args.other.resolve()}
    results: dict[str, list[dict]] = {"this": [], "other": []}
    for r in range(args.rounds):
        order = ("other", "this") if r % 2 == 0 else ("this", "other")
        for side in order:
            results[side].append(run_tree(trees[side], args.repeats))
        print(f"round {r + 1}/{args.rounds} done (load average {os.getloadavg()[0]:.1f})", file=sys.stderr)
    print(f"timing-only simulate_timing: this tree {HERE} vs other {trees['other']}")
    print(f"{args.rounds} rounds, each tree's fastest of {args.repeats} runs per round (ms); ratio = other / this")
    for name in results["this"][0]:
        mine = [r[name] for r in results["this"]]
        theirs = [r[name] for r in results["other"]]
        if "error" in theirs[0] or "error" in mine[0]:
            print(f"  {name}: not compared ({theirs[0].get('error') or mine[0].get('error')})")
            continue
        a = [x["seconds"] for x in theirs]
        b = [x["seconds"] for x in mine]
        same = {x["digest"] for x in mine} == {x["digest"] for x in theirs} and len({x["digest"] for x in mine}) == 1
        paired = statistics.median(x / y for x, y in zip(a, b))
        print(
            f"  {name}: other {min(a) * 1e3:8.1f} / {statistics.median(a) * 1e3:8.1f}, this {min(b) * 1e3:8.1f} / "
            f"{statistics.median(b) * 1e3:8.1f}; other / this {min(a) / min(b):5.2f}x (min/min), {paired:5.2f}x "
            f"(median paired); same tables: {'yes' if same else 'NO'}"
        )


if __name__ == "__main__":
    main()
