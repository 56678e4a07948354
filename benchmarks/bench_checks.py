"""Time and power of every theory check: ``sandbox check`` (or ``--quick``) judged as stated and perturbed.

    python benchmarks/bench_checks.py [--quick] [--only NAME ...]

For each check, one simulation (``Check.run_perturbed``: the perturbed judgement reads the same runs) is
judged twice: with the prediction as stated (it must pass) and multiplied by the check's ``perturbation``
(it must fail). Printed per check: the seconds it took (what ``sandbox check`` spends on it: the
perturbed judgement reuses every run), whether it passed, how many of its points the perturbed prediction
fails, and the power margin ``max |measured − f·predicted| / tolerance`` over the points, f the
perturbation: the factor by which the worst-missed point exceeds its tolerance (> 1 fails; the larger,
the further the check is from passing a prediction off by that factor). The simulator bugs each check
must catch are in ``tests/checks/test_checks_injected_bugs.py``. One intra-op thread, as the tests use.
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from sandbox.checks import CHECKS


def margin(point) -> float:
    if not math.isfinite(point.measured):
        return math.inf
    return abs(point.measured - point.predicted) / point.tolerance if point.tolerance > 0 else math.inf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the checks' quick sizes (sandbox check --quick)")
    parser.add_argument("--only", nargs="*", default=None, help="check names (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(1)
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
        print(f"{name:22s} {seconds:8.1f} {'PASS' if stated.passed else 'FAIL':>7s} "
              f"{f'{len(failed)}/{len(perturbed.points)} (×{check.perturbation:g})':>16s} {worst:13.1f}")
    print(f"{'total':22s} {total:8.1f}")


if __name__ == "__main__":
    main()
