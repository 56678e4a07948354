"""Time and power of every theory check: ``sandbox check`` (or ``--quick``) judged as stated and perturbed.

    python benchmarks/bench_checks.py [--quick] [--only NAME ...]
    python benchmarks/bench_checks.py --gac-runs [--steps 500] [--repeats 3]

For each check, one simulation (``Check.run_perturbed``: the perturbed judgement reads the same runs) is
judged twice: with the prediction as stated (it must pass) and multiplied by the check's ``perturbation``
(it must fail). Printed per check: the seconds it took (what ``sandbox check`` spends on it: the
perturbed judgement reuses every run), whether it passed, how many of its points the perturbed prediction
fails, and the power margin ``max |measured − f·predicted| / tolerance`` over the points, f the
perturbation: the factor by which the worst-missed point exceeds its tolerance (> 1 fails; the larger,
the further the check is from passing a prediction off by that factor). The simulator bugs each check
must catch are in ``tests/checks/test_checks_injected_bugs.py``. One intra-op thread, as the tests use.

``--gac-runs``: the cost of splitting a stability map into runs, interleaved in one process: ``gac_boundary``'s
quick plain map (232 replicas, d = 100; ``--steps`` steps) simulated as four runs of at most 58 replicas (the
split of ``REPLICA_VALUES_PER_RUN`` = 12M before issue 32) against one run of 232 (now).
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from sandbox.checks.api import CHECKS


def margin(point) -> float:
    if not math.isfinite(point.measured):
        return math.inf
    return abs(point.measured - point.predicted) / point.tolerance if point.tolerance > 0 else math.inf


def bench_gac_runs(steps: int, repeats: int) -> None:
    import statistics

    import numpy as np
    from _timing import interleaved

    from sandbox.checks import gac

    cfg = gac.QUICK
    grid = np.repeat(np.round(np.arange(0.14, 0.42 + 1e-9, cfg["spacing"]), 4), cfg["per_point"])
    saved = gac.REPLICA_VALUES_PER_RUN

    def timed(per_run: int):
        def call():
            gac.REPLICA_VALUES_PER_RUN = per_run
            try:
                gac._stability_map(grid, cfg["dim"], steps, [])
            finally:
                gac.REPLICA_VALUES_PER_RUN = saved

        return call

    four = 58 * cfg["dim"] * steps  # at most 58 replicas a run: 4 runs for 232, as 12M values gave at 2,000 steps
    timed(saved)()  # first use: imports, the optimizer's first construction
    times = interleaved({"four runs": timed(four), "one run": timed(saved)}, repeats)
    print(
        f"gac_boundary quick plain map: {len(grid)} replicas, d = {cfg['dim']}, {steps} steps, {repeats} interleaved repeats"
    )
    for name, ts in times.items():
        print(f"  {name:10s} min {min(ts):7.2f} s  median {statistics.median(ts):7.2f} s")
    ratios = [f / o for f, o in zip(times["four runs"], times["one run"])]
    print(
        f"  four runs / one run: min-vs-min {min(times['four runs']) / min(times['one run']):.2f}x, "
        f"median of paired {statistics.median(ratios):.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the checks' quick sizes (sandbox check --quick)")
    parser.add_argument("--only", nargs="*", default=None, help="check names (default: all)")
    parser.add_argument("--gac-runs", action="store_true", help="gac_boundary's map as four runs vs one (see above)")
    parser.add_argument("--steps", type=int, default=500, help="--gac-runs: steps of the map")
    parser.add_argument("--repeats", type=int, default=3, help="--gac-runs: interleaved repeats")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.gac_runs:
        bench_gac_runs(args.steps, args.repeats)
        return
    names = args.only or list(CHECKS)
    print(f"{'check':22s} {'seconds':>8s} {'stated':>7s} {'perturbed fails':>16s} {'power margin':>13s}")
    total = 0.0
    for name in names:
        check = CHECKS[name]
        t = time.perf_counter()
        stated, perturbed = check.run_perturbed(quick=args.quick, perturbs=(1.0, check.perturbation))
        seconds = time.perf_counter() - t
        total += seconds
        failed = [p for p in perturbed.points if not p.ok]
        worst = max((margin(p) for p in failed), default=0.0)
        print(
            f"{name:22s} {seconds:8.1f} {'PASS' if stated.passed else 'FAIL':>7s} "
            f"{f'{len(failed)}/{len(perturbed.points)} (×{check.perturbation:g})':>16s} {worst:13.1f}"
        )
    print(f"{'total':22s} {total:8.1f}")


if __name__ == "__main__":
    main()
