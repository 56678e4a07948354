"""LM replicas: one run carrying R tiny-transformer learners against R separate one-replica runs.

    python benchmarks/bench_lm_replicas.py [--replicas 8] [--steps 8] [--repeats 3] [--profile]

The scenario is ``scenarios/lm_mission.toml``'s sync variant (3-digit addition, the 2-layer d=64
transformer warm-started from the cached base model, 8 prompts x 8 responses per step, Adam) cut to
``--steps`` steps with an evaluation every ``--eval-every`` steps. The batched side is one
``run_scenario`` with ``task.replicas = R``; the baseline is R runs with ``replicas = 1`` and seeds
0 .. R-1, in the same process. The two are timed interleaved (batched, separate, batched, ...), min
and median over ``--repeats``; the ratio separate / batched is the speed-up replicas buy. The warm
start is trained (or loaded) once before timing. The load average is printed: the machine is shared.

``--eval-processes P`` (default 2) also times the one run with ``task.eval_processes = P``: its
evaluation split over P processes (forked children; the same numbers), the use of the second core.
After the wall times, each side's CPU time (min over ``--repeats``): this process's and its forked
children's. On a loaded machine the wall time of the forked side shows no gain when no core is idle;
with an idle core its wall time is about this process's CPU time (``benchmarks/README.md`` row 8).

``--scaling 1,2,4,8``: the one run of R replicas at each of these step counts (interleaved, min and median
over ``--repeats`` of its wall time and of this process's CPU time, which a shared machine's load moves
far less: the run is one thread) with the evaluation cut to one held-out prompt and no sampled responses
(``task.eval_size = 1``, ``task.eval_samples = 0``: an evaluation of the mission's 256 prompts is work that
scales with ``eval_size``, not a per-step or per-run cost), and a least-squares line through the minima:
its slope over R is the **cost per replica-step** and its intercept the **fixed cost per run** (building
the task and the learner, the warm start loaded from its cache, the cluster, the result tables; after the
process has started and imported everything, and the warm start is cached; ``benchmarks/README.md`` row 13).
``--decode-after-end``: also, interleaved with it, the same runs decoding and timing the groups dispatched
after the learner's last step as every other (``PolicyWorkload.dispatched_after_end`` off: the work of the
tree before it), so that both fits come from the same run.

``--profile``: a cProfile (CPU time) of one batched run, the functions with the most cumulative time
(where the time of a replica goes: decoding, evaluation, the learner's forward/backward, the simulator).
Every builtin-LM run, R = 1 included, computes through one formulation batched over the replica
dimension (``sandbox.models.replicas``: one forward per decode step for all replicas, one learner forward
and backward for all), so replica r is its one-replica run to the bit (``tests/lm/test_lm_replicas.py``)
and a run of R replicas saves the per-call work of R runs; what it cannot save is the arithmetic, the
same per replica in both (``docs/tasks.md#replicas``, ``benchmarks/README.md`` row 8).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import os
import pstats
import resource
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from _timing import interleaved  # noqa: E402

from sandbox.run.runner import run_scenario  # noqa: E402
from sandbox.scenario.api import load_scenario  # noqa: E402
from sandbox.system.workload import PolicyWorkload  # noqa: E402

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "lm_mission.toml"


def scenario(replicas: int, seed: int, steps: int, eval_every: int, eval_processes: int = 1, eval_cut: bool = False):
    extra = {"task.eval_processes": eval_processes} if eval_processes != 1 else {}
    if eval_cut:
        extra.update({"task.eval_size": 1, "task.eval_samples": 0})
    scn, _ = load_scenario(
        SCENARIO,
        {
            "task.replicas": replicas,
            "run.seed": seed,
            "run.steps": steps,
            "run.eval_every": eval_every,
            "run.figures": False,
            "system.staleness": {"kind": "sync"},
            **extra,
        },
    )
    return scn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--eval-every", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--eval-processes", type=int, default=2, help="also time the one run with task.eval_processes = this (1: not)"
    )
    ap.add_argument("--profile", action="store_true")
    ap.add_argument(
        "--scaling",
        default="",
        help="comma-separated step counts: the cost per replica-step (slope / R) and the fixed cost per run "
        "(intercept) of the one run, evaluation cut to one prompt",
    )
    ap.add_argument(
        "--decode-after-end",
        action="store_true",
        help="with --scaling: also the runs that decode the groups dispatched after the last step (interleaved)",
    )
    args = ap.parse_args()
    if args.scaling:
        scaling(args.replicas, [int(n) for n in args.scaling.split(",")], args.repeats, args.decode_after_end)
        return
    R = args.replicas
    batched = scenario(R, 0, args.steps, args.eval_every)
    singles = [scenario(1, s, args.steps, args.eval_every) for s in range(R)]
    run_scenario(singles[0])  # trains or loads the base model; warms torch up
    print(
        f"LM replicas, {SCENARIO.name} (sync), {args.steps} steps, eval every {args.eval_every}; "
        f"torch threads {torch.get_num_threads()}, load average before {os.getloadavg()}"
    )
    if args.profile:
        prof = cProfile.Profile(time.process_time)
        prof.enable()
        run_scenario(batched)
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(40)
        print(out.getvalue())
        return
    cases = {"batched": lambda: run_scenario(batched), "separate": lambda: [run_scenario(s) for s in singles]}
    if args.eval_processes > 1:
        forked = scenario(R, 0, args.steps, args.eval_every, args.eval_processes)
        cases["forked"] = lambda: run_scenario(forked)
    times = interleaved(cases, args.repeats)
    s = times["separate"]
    print(f"  {R} separate runs         min {min(s):7.2f} s   median {statistics.median(s):7.2f} s")
    for name, what in [("batched", "in one run"), ("forked", f"eval_processes={args.eval_processes}")]:
        if name not in times:
            continue
        b = times[name]
        paired = statistics.median(x / y for x, y in zip(s, b))
        print(
            f"  {R} replicas {what:<20} min {min(b):7.2f} s   median {statistics.median(b):7.2f} s   "
            f"speed-up separate/this: {min(s) / min(b):5.2f}x (min/min), {paired:5.2f}x (median paired)"
        )
    # CPU time (less sensitive to the load than wall time on a shared machine): this process's, and that of
    # the evaluation's forked children; with an idle core for the children, the forked run's wall time is
    # about this process's CPU time (the children evaluate their chunks meanwhile)
    cpu = {}
    for name, fn in cases.items():
        best = None
        for _ in range(args.repeats):
            c0, k0 = time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
            fn()
            k1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            here, kids = time.process_time() - c0, (k1.ru_utime + k1.ru_stime) - (k0.ru_utime + k0.ru_stime)
            best = (here, kids) if best is None or here < best[0] else best
        cpu[name] = best
    sc = cpu["separate"][0]
    for name, (here, kids) in cpu.items():
        print(
            f"  CPU (min of {args.repeats}) {name:<9} this process {here:6.2f} s, forked children {kids:5.2f} s"
            + ("" if name == "separate" else f"; separate/this process: {sc / here:5.2f}x")
        )
    print(f"  load average after {os.getloadavg()}")


def scaling(R: int, steps: list[int], repeats: int, decode_after_end: bool = False) -> None:
    """Wall time of the one run of ``R`` replicas against its step count: slope / R and intercept (with
    ``decode_after_end``, also of the runs that decode the groups dispatched after the last step)."""
    runs = {n: scenario(R, 0, n, max(steps) + 1, eval_cut=True) for n in steps}
    run_scenario(runs[steps[0]])  # trains or loads the base model; warms torch up
    print(
        f"LM replicas, {SCENARIO.name} (sync), R = {R}, steps {steps}, evaluation cut to 1 prompt; "
        f"torch threads {torch.get_num_threads()}, load average before {os.getloadavg()}"
    )
    variants = {"this tree": contextlib.nullcontext}
    if decode_after_end:
        variants["decoding after the end"] = lambda: mock.patch.object(
            PolicyWorkload, "dispatched_after_end", lambda self, group_size: None
        )
    wall = {v: {n: [] for n in steps} for v in variants}
    cpu = {v: {n: [] for n in steps} for v in variants}
    for _ in range(repeats):  # interleaved: every step count (and variant) once per round
        for n in steps:
            for v, context in variants.items():
                with context():
                    gc.collect()
                    t, c = time.perf_counter(), time.process_time()
                    run_scenario(runs[n])
                    cpu[v][n].append(time.process_time() - c)
                    wall[v][n].append(time.perf_counter() - t)
    for v in variants:
        if len(variants) > 1:
            print(f" {v}:")
        for n in steps:
            w, c = wall[v][n], cpu[v][n]
            print(
                f"  {n:3d} steps   wall min {min(w):7.3f} s   median {statistics.median(w):7.3f} s   "
                f"CPU min {min(c):7.3f} s   median {statistics.median(c):7.3f} s"
            )
        for what, times in (("wall", wall[v]), ("CPU", cpu[v])):
            for label, pick in (("min", min), ("median", statistics.median)):
                y = [pick(times[n]) for n in steps]
                mx, my = statistics.fmean(steps), statistics.fmean(y)
                slope = sum((x - mx) * (t - my) for x, t in zip(steps, y)) / sum((x - mx) ** 2 for x in steps)
                print(
                    f"  {what:>4} ({label}s) cost per replica-step {1e3 * slope / R:6.2f} ms   fixed cost per run "
                    f"{1e3 * (my - slope * mx):6.1f} ms"
                )
    print(f"  load average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
