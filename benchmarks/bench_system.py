"""Simulator benchmark: ratios measured in one run on this machine.

1. System-only simulation (timing, no learning) with the sandbox's Cluster against a lean bare
   simpy model of the same process graph (N workers -> bounded buffer -> learner taking B groups ->
   next version): a plain list as the buffer and one broadcast wake-up event that every change
   fires, which every waiting process re-checks. Ratio = sandbox time / lean bare time: the price
   of the staleness control, job records, metrics rows and events. The older baseline, the same
   graph on a ``simpy.Store`` (queue get/put, which wakes exactly the process that can go on), is
   a second row. With 16 workers and capacity 64 no worker ever waits for admission; a second
   table, many workers held back by a small capacity (1024 workers, capacity 128, B=64), is where
   the broadcast pays a wake-up per waiting worker per change and the Cluster's ``Signal``
   (which resumes only the waiters that can go on, in the broadcast's order) does not. The sandbox is
   timed on both of its engines: the simpy ``Cluster`` and the plain heap event loop
   (``sandbox/system/heap_loop.py``, the same tables to the bit), with the ratio between them.
2. One run carrying R replicas in a batched tensor against R separate runs of one replica
   (same task, same schedule). Ratio = separate / batched: the speed-up replicas buy.

Row 1 reports min and median over ``--repeats`` interleaved repeats (lean, store, sandbox, ... in
turn), so that load on a shared machine hits every side alike.

A third table times the systems the heap loop covers since it runs the cluster's own processes
(continuous-batching engines, a split synchronous step) on simpy and on the heap loop.

Usage: python benchmarks/bench_system.py [--steps 2000] [--large-steps 20] [--replicas 16] [--repeats 5] [--only system]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import simpy
from _timing import interleaved

from sandbox.run.runner import run_scenario
from sandbox.scenario.api import validate_scenario
from sandbox.system.config import SystemConfig
from sandbox.system.timing_only import simulate_timing


def bare_simpy_lean(steps: int, workers: int, B: int, capacity: int, seed: int) -> float:
    """Hand-written lean model: exponential(1) generation, constant 0.2 s training, at most
    ``capacity`` groups queued or running (the max_lag 'drop' admission); the buffer is a list and
    every change fires one shared wake-up event that the waiting processes re-check."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    buffer: list[int] = []
    state = {"version": 0, "running": 0}
    wake = [env.event()]

    def notify():
        event, wake[0] = wake[0], env.event()
        event.succeed()

    def worker():
        while True:
            if len(buffer) + state["running"] >= capacity:
                yield wake[0]
                continue
            v = state["version"]
            state["running"] += 1
            yield env.timeout(rng.exponential(1.0))
            state["running"] -= 1
            buffer.append(v)
            notify()

    def learner():
        for _ in range(steps):
            while len(buffer) < B:
                yield wake[0]
            del buffer[:B]
            notify()
            yield env.timeout(0.2)
            state["version"] += 1
            notify()

    for _ in range(workers):
        env.process(worker())
    done = env.process(learner())
    env.run(until=done)
    return env.now


def bare_simpy(steps: int, workers: int, B: int, capacity: int, seed: int) -> float:
    """Hand-written minimal loop on a ``simpy.Store``: exponential(1) generation, constant 0.2 s training."""
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


def system_table(W: int, B: int, cap: int, steps: int, repeats: int) -> None:
    """Print one table of row 1: lean, Store and sandbox, ``repeats`` interleaved runs each."""
    cfg = plain(W, cap)
    times = interleaved(
        {
            "lean bare simpy (broadcast wake-up)": lambda: bare_simpy_lean(steps, W, B, cap, 0),
            "bare simpy on a Store (get/put)": lambda: bare_simpy(steps, W, B, cap, 0),
            "sandbox simpy Cluster (events)": lambda: simulate_timing(
                cfg, steps, B, record_events=True, engine="simpy"
            ),
            "sandbox heap loop (events)": lambda: simulate_timing(cfg, steps, B, record_events=True, engine="heap"),
            "sandbox simpy Cluster (no events)": lambda: simulate_timing(
                cfg, steps, B, record_events=False, engine="simpy"
            ),
            "sandbox heap loop (no events)": lambda: simulate_timing(cfg, steps, B, record_events=False, engine="heap"),
        },
        repeats,
    )
    lean = times["lean bare simpy (broadcast wake-up)"]
    store = times["bare simpy on a Store (get/put)"]
    print(
        f"system-only simulation, {steps} learner steps, {W} workers, B={B}, capacity {cap}, "
        f"{repeats} interleaved repeats (min / median ms):"
    )
    for name, ts in times.items():
        line = f"  {name:38s} {min(ts) * 1e3:8.1f} {statistics.median(ts) * 1e3:8.1f}"
        if name.startswith("sandbox"):
            paired = statistics.median(t / b for t, b in zip(ts, lean))
            line += (
                f"   vs lean: {min(ts) / min(lean):5.2f}x (min/min), {paired:5.2f}x (median paired)"
                f";  vs Store: {min(ts) / min(store):5.2f}x"
            )
        if name.startswith("sandbox heap"):
            simpy_ts = times[name.replace("heap loop", "simpy Cluster")]
            faster = statistics.median(a / b for a, b in zip(simpy_ts, ts))
            line += f";  simpy Cluster / heap loop: {min(simpy_ts) / min(ts):5.2f}x (min/min), {faster:5.2f}x (median paired)"
        print(line)


def plain(workers: int, capacity: int) -> SystemConfig:
    """``workers`` plain workers (exponential generation, mean 1), constant training 0.2, ``max_lag`` that only
    drops beyond ``capacity`` waiting groups: the system of row 6 and of the lean bare simpy model."""
    return SystemConfig(
        num_workers=workers,
        generation_time={"kind": "exponential", "mean": 1.0},
        train_time={"kind": "constant", "value": 0.2},
        staleness={"kind": "max_lag", "k_max": 10_000, "enforcement": "drop", "queue_capacity": capacity},
    )


def engine_system(sync: str) -> SystemConfig:
    """64 workers on 8 continuous-batching engines (up to 256 sequences each, log-normal lengths), max_lag 1,
    weight syncs in mode ``sync``."""
    return SystemConfig(
        num_workers=64,
        generation_time={
            "kind": "continuous_batching",
            "step_base": 0.01,
            "step_per_sequence": 0.0001,
            "workers_per_engine": 8,
            "max_sequences": 256,
            "sync": sync,
            "length_median": 200.0,
            "length_sigma": 1.0,
            "max_tokens": 2048,
        },
        train_time={"kind": "constant", "value": 5.0},
        staleness={"kind": "max_lag", "k_max": 1},
    )


def engine_table(steps: int, repeats: int) -> None:
    """Timing-only runs where simpy's cost was more than the heap loop's share: continuous-batching engines
    (64 workers on 8 engines, up to 256 sequences each, log-normal lengths, max_lag 1 with ``partial``
    syncs) and a split synchronous step (2 groups of 16 over 32 workers), simpy against the heap loop."""
    engines = engine_system("partial")
    split = SystemConfig(
        num_workers=32, generation_time={"kind": "exponential", "mean": 1.0}, staleness={"kind": "sync"}
    )
    cases = {
        "engines (B=16, G=8)": lambda engine: simulate_timing(
            engines, steps, 16, 8, record_events=False, engine=engine
        ),
        "split sync step (B=2, G=16)": lambda engine: simulate_timing(
            split, 20 * steps, 2, 16, record_events=False, engine=engine
        ),
    }
    for name, fn in cases.items():
        times = interleaved({"simpy": lambda fn=fn: fn("simpy"), "heap": lambda fn=fn: fn("heap")}, repeats)
        sp, hp = times["simpy"], times["heap"]
        paired = statistics.median(a / b for a, b in zip(sp, hp))
        print(
            f"timing-only {name}: simpy {min(sp) * 1e3:8.1f} / {statistics.median(sp) * 1e3:8.1f} ms, "
            f"heap loop {min(hp) * 1e3:8.1f} / {statistics.median(hp) * 1e3:8.1f} ms (min / median); "
            f"simpy / heap {min(sp) / min(hp):5.2f}x (min/min), {paired:5.2f}x (median paired)"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--large-steps", type=int, default=20, help="learner steps of the many-workers table")
    ap.add_argument("--replicas", type=int, default=16)
    ap.add_argument("--learn-steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", choices=["system", "replicas"], default=None)
    args = ap.parse_args()

    if args.only in (None, "system"):
        for W, B, cap, steps in [(16, 8, 64, args.steps), (1024, 64, 128, args.large_steps)]:
            system_table(W, B, cap, steps, args.repeats)
        engine_table(args.large_steps, args.repeats)
    if args.only == "system":
        return

    def scenario(replicas: int, seed: int):
        return validate_scenario(
            {
                "task": {"name": "bitstring", "horizon": 32, "threshold": 0.7, "replicas": replicas},
                "system": {"num_workers": 8, "staleness": {"kind": "max_lag", "k_max": 4}},
                "algorithm": {
                    "group_size": 8,
                    "groups_per_step": 4,
                    "correction": {"name": "tis", "level": "sequence"},
                },
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
