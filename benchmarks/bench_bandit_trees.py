"""Rows 1 and 11 against another tree: the bandit benchmark of ``bench_learner.py`` run alternately from
two source trees (the tree before a change and the tree after it), each in its own process.

Two versions of the ``sandbox`` package cannot share one process, so each round starts one child per
tree, in alternating order (before, after; then after, before; ...), so that load from other processes
hits both alike. Each child times the bare loop and the sandbox run at each ``--levels`` metric level,
interleaved, ``--repeats`` times after one untimed warm-up run of each, and reports its times, the final
expected rewards (the same learning in both trees: equal to the bit) and the load average. The summary
gives, per tree and level, the min and median run time and the ratio to the bare loop measured in the
same child (min-vs-min and the median of paired ratios), and the after/before speed-up of the run.

``--phases`` prints instead a per-step cost breakdown of one lean run (the repeat with the smallest
total) from one tree: the workers' sampling and rewards, the learner's pieces, and the rest (the
simulated cluster, simpy, the run's setup and results), beside the bare loop's sampling, loss, backward
and Adam. The timers wrap the functions, so the shares are estimates (each wrapped call costs ≈ 0.2 µs).

Usage:
  python benchmarks/bench_bandit_trees.py --trees /path/before,/path/after [--rounds 4] [--repeats 3]
  python benchmarks/bench_bandit_trees.py --phases /path/tree [--repeats 5]
(a tree is a checkout or ``git archive <commit> | tar -x -C <dir>``; run with the Python environment of both).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def child(tree: str, repeats: int, levels: list[str]) -> None:
    sys.path[:0] = [tree, str(Path(tree) / "benchmarks")]
    import torch

    torch.set_num_threads(1)  # as bench_learner.py: both sides single-threaded
    from bench_learner import bandit_scenario, bare_bandit, sandbox_bandit

    steps = 500
    seed = bandit_scenario(steps).run.seeds()["sampling"]
    rewards = {level: sandbox_bandit(steps, level) for level in levels}  # warm-up, untimed
    rewards["bare"] = bare_bandit(steps, seed)
    times: dict[str, list[float]] = {"bare": [], **{level: [] for level in levels}}
    for _ in range(repeats):
        for name in times:
            t = time.perf_counter()
            bare_bandit(steps, seed) if name == "bare" else sandbox_bandit(steps, name)
            times[name].append(time.perf_counter() - t)
    print(json.dumps({"times": times, "rewards": rewards, "load": os.getloadavg()[0]}))


def compare(trees: list[str], rounds: int, repeats: int, levels: list[str]) -> None:
    runs: dict[str, list[dict]] = {t: [] for t in trees}
    for r in range(rounds):
        for tree in trees if r % 2 == 0 else trees[::-1]:
            env = {**os.environ, "PYTHONPATH": tree}
            out = subprocess.run(
                [sys.executable, __file__, "--child", tree, "--repeats", str(repeats), "--levels", ",".join(levels)],
                capture_output=True,
                text=True,
                env=env,
            )
            if out.returncode:
                sys.exit(f"{tree}: the child failed:\n{out.stderr[-3000:]}")
            d = json.loads(out.stdout.strip().splitlines()[-1])
            runs[tree].append(d)
            tm = d["times"]
            print(
                f"round {r + 1} {tree}: load {d['load']:.1f}; "
                + ", ".join(f"{k} {min(v):.3f} s" for k, v in tm.items())
                + "; final rewards "
                + ", ".join(f"{k} {v:.9f}" for k, v in d["rewards"].items()),
                flush=True,
            )
    print(f"\nsoftmax bandit (bench_learner.py), {rounds} rounds x {repeats} interleaved repeats per tree:")
    medians: dict[tuple[str, str], float] = {}
    for tree, ds in runs.items():
        bare = [x for d in ds for x in d["times"]["bare"]]
        for level in levels:
            ts = [x for d in ds for x in d["times"][level]]
            paired = [a / b for d in ds for a, b in zip(d["times"][level], d["times"]["bare"])]
            medians[tree, level] = statistics.median(ts)
            print(
                f"  {tree} {level:8s}: min {min(ts):.3f} s, median {statistics.median(ts):.3f} s; bare min "
                f"{min(bare):.3f} s, median {statistics.median(bare):.3f} s; ratio min-vs-min "
                f"{min(ts) / min(bare):.2f}x, median of paired {statistics.median(paired):.2f}x"
            )
    if len(trees) == 2:
        for level in levels:
            print(
                f"  {level}: {trees[1]} runs {medians[trees[0], level] / medians[trees[1], level]:.2f}x "
                f"as fast as {trees[0]} (medians)"
            )


def phases(tree: str, repeats: int) -> None:
    sys.path[:0] = [tree, str(Path(tree) / "benchmarks")]
    import collections

    import torch

    torch.set_num_threads(1)
    from bench_learner import ARMS, GROUP_SIZE, GROUPS, LR, bandit_scenario, sandbox_bandit

    import sandbox.algorithms.policy_loss as PL
    import sandbox.learner.trainer as T
    import sandbox.system.workload as W
    import sandbox.tasks.bandit as B
    import sandbox.tasks.rollouts as RO

    acc: collections.Counter = collections.Counter()
    clock = time.perf_counter

    def timed(obj, name, key, static=False):
        fn = getattr(obj, name)

        def wrapper(*a, **k):
            t = clock()
            try:
                return fn(*a, **k)
            finally:
                acc[key] += clock() - t

        setattr(obj, name, staticmethod(wrapper) if static else wrapper)

    timed(W.PolicyWorkload, "sample", "workers: sample a group")
    timed(W.PolicyWorkload, "finish", "workers: rewards")
    timed(T.Learner, "train", "learner: train (all)")
    timed(RO.Rollouts, "cat", "  loss: Rollouts.cat", static=True)
    timed(B.BanditTask, "logprobs", "  loss: logprobs")
    timed(PL.PolicyLoss, "__call__", "  loss: policy loss")
    timed(torch.Tensor, "backward", "  step: backward")
    if hasattr(T, "_one_replica_values"):  # the one-replica row as floats (wrapping _metrics_to_numpy turns it off)
        timed(T, "_one_replica_values", "  step: metrics row")
    else:
        timed(T, "_metrics_to_numpy", "  step: metrics to numpy")
    if hasattr(T, "unhooked_step"):
        unhooked = T.unhooked_step

        def timed_step(opt):
            fn = unhooked(opt)

            def step():
                t = clock()
                try:
                    return fn()
                finally:
                    acc["  step: optimizer"] += clock() - t

            return step

        T.unhooked_step = timed_step

    def bare(steps: int, seed: int, parts: collections.Counter) -> None:  # bench_learner.bare_bandit, timed in parts
        means = torch.linspace(0.1, 0.9, ARMS)
        logits = torch.zeros(1, ARMS, requires_grad=True)
        opt = torch.optim.Adam([logits], lr=LR)
        gen = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            t0 = clock()
            with torch.no_grad():
                probs = torch.softmax(logits, -1)
            actions = torch.cat(
                [torch.multinomial(probs, GROUP_SIZE, replacement=True, generator=gen) for _ in range(GROUPS)], 1
            )
            m = means[actions]
            rewards = torch.cat(
                [
                    (torch.rand(1, GROUP_SIZE, generator=gen) < m[:, g * GROUP_SIZE : (g + 1) * GROUP_SIZE]).float()
                    for g in range(GROUPS)
                ],
                1,
            )
            t1 = clock()
            groups = rewards.view(1, GROUPS, GROUP_SIZE)
            adv = (groups - groups.mean(-1, keepdim=True)).view(1, -1)
            loss = -(adv * torch.log_softmax(logits, -1).gather(-1, actions)).mean()
            opt.zero_grad()
            t2 = clock()
            loss.backward()
            t3 = clock()
            opt.step()
            t4 = clock()
            parts["sampling and rewards"] += t1 - t0
            parts["loss"] += t2 - t1
            parts["backward"] += t3 - t2
            parts["Adam"] += t4 - t3

    steps = 500
    seed = bandit_scenario(steps).run.seeds()["sampling"]
    sandbox_bandit(steps, "lean")
    bare(steps, seed, collections.Counter())
    best = best_bare = None
    for _ in range(repeats):
        parts: collections.Counter = collections.Counter()
        t = clock()
        bare(steps, seed, parts)
        tb = clock() - t
        if best_bare is None or tb < best_bare[0]:
            best_bare = (tb, parts)
        acc.clear()
        t = clock()
        sandbox_bandit(steps, "lean")
        tl = clock() - t
        if best is None or tl < best[0]:
            best = (tl, dict(acc))
    (tl, a), (tb, b) = best, best_bare

    def us(x: float) -> str:
        return f"{x / steps * 1e6:7.1f} us/step ({x / tb:5.2f}x the bare step)"

    print(f"lean run of {tree}: {us(tl)}; bare loop {tb / steps * 1e6:.1f} us/step; load {os.getloadavg()[0]:.1f}")
    for k, v in a.items():
        print(f"  {k:38s} {us(v)}")
    rest = tl - a.get("workers: sample a group", 0) - a.get("workers: rewards", 0) - a.get("learner: train (all)", 0)
    print(f"  {'rest: cluster, simpy, setup, results':38s} {us(rest)}")
    print("bare loop:")
    for k, v in b.items():
        print(f"  {k:38s} {us(v)}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trees", help="two (or more) source trees, comma-separated: before,after")
    ap.add_argument("--phases", help="one source tree: per-step cost breakdown of a lean run")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--levels", default="standard,lean")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    levels = args.levels.split(",")
    if args.child:
        child(args.child, args.repeats, levels)
    elif args.phases:
        phases(args.phases, args.repeats)
    elif args.trees:
        trees = [str(Path(t).resolve()) for t in args.trees.split(",")]
        compare(trees, args.rounds, args.repeats, levels)
    else:
        ap.error("give --trees before,after or --phases tree")


if __name__ == "__main__":
    main()
