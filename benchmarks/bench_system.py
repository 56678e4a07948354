"""Simulator benchmark: ratios measured in one run on this machine.

1. System-only simulation (timing, no learning) with the sandbox's Cluster against a bare simpy
   loop of the same process graph (N workers -> bounded queue -> learner taking B groups -> sync).
   Ratio = sandbox time / bare time: the price of staleness bookkeeping, job records and events.
2. One run carrying R replicas in a batched tensor against R separate runs of one replica
   (same task, same schedule). Ratio = separate / batched: the speed-up replicas buy.

Usage: python benchmarks/bench_system.py [--steps 2000] [--replicas 16]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import simpy

from sandbox.runner import run_scenario
from sandbox.scenario import validate_scenario
from sandbox.system.config import SystemConfig
from sandbox.system.timing_only import simulate_timing


def bare_simpy(steps: int, workers: int, B: int, capacity: int, seed: int) -> float:
    """Hand-written minimal loop: exponential(1) generation, constant 0.2 s training."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    queue = simpy.Store(env, capacity=capacity)
    version = [0]

    def worker():
        while True:
            v = version[0]
            yield env.timeout(rng.exponential(1.0))
            yield queue.put(v)

    def learner():
        for _ in range(steps):
            for _ in range(B):
                yield queue.get()
            yield env.timeout(0.2)
            version[0] += 1

    for _ in range(workers):
        env.process(worker())
    done = env.process(learner())
    env.run(until=done)
    return env.now


def best_of(fn, repeats=3) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--replicas", type=int, default=16)
    ap.add_argument("--learn-steps", type=int, default=60)
    args = ap.parse_args()

    W, B, cap = 16, 8, 64
    cfg = SystemConfig(
        num_workers=W,
        generation_time={"kind": "exponential", "mean": 1.0},
        train_time={"kind": "constant", "value": 0.2},
        staleness={"kind": "max_lag", "k_max": 10_000, "enforcement": "drop", "queue_capacity": cap},
    )
    t_bare = best_of(lambda: bare_simpy(args.steps, W, B, cap, 0))
    t_sys = best_of(lambda: simulate_timing(cfg, args.steps, B, record_events=True))
    t_sys_noev = best_of(lambda: simulate_timing(cfg, args.steps, B, record_events=False))
    print(f"system-only simulation, {args.steps} learner steps, {W} workers, B={B}:")
    print(f"  bare simpy loop            {t_bare * 1e3:8.1f} ms")
    print(f"  sandbox Cluster (events)   {t_sys * 1e3:8.1f} ms   ratio {t_sys / t_bare:5.2f}x")
    print(f"  sandbox Cluster (no events){t_sys_noev * 1e3:8.1f} ms   ratio {t_sys_noev / t_bare:5.2f}x")

    def scenario(replicas: int, seed: int):
        return validate_scenario(
            {
                "task": {"name": "bitstring", "horizon": 32, "threshold": 0.7, "replicas": replicas},
                "system": {"num_workers": 8, "staleness": {"kind": "max_lag", "k_max": 4}},
                "algorithm": {"group_size": 8, "groups_per_step": 4, "correction": {"name": "tis", "level": "sequence"}},
                "run": {"steps": args.learn_steps, "seed": seed, "figures": False, "record_events": False},
            }
        )

    R = args.replicas
    t_batched = best_of(lambda: run_scenario(scenario(R, 0)), repeats=2)
    t_separate = best_of(lambda: [run_scenario(scenario(1, 0)) for _ in range(R)], repeats=1)
    print(f"learning run, bit-string H=32, {args.learn_steps} steps:")
    print(f"  {R} replicas in one run      {t_batched:8.2f} s")
    print(f"  {R} separate runs            {t_separate:8.2f} s   ratio separate/batched {t_separate / t_batched:5.2f}x")


if __name__ == "__main__":
    main()
