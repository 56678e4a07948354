"""Many independent seeds of the softmax bandit: each seed its own event schedule.

The scenario is the bandit of ``bench_learner.py`` (K = 10 arms, 4 groups × 8 responses per step,
REINFORCE with the group-mean baseline, Adam) on an asynchronous cluster whose timing differs per
seed: 4 workers with exponential generation times (mean 1 s), 0.2 s training steps and at most 2
versions of lag (``max_lag``). ``--seeds`` N seeds of ``--steps`` steps are run three ways:

* **separate** (the baseline): one ordinary run per seed. Only ``--sample`` seeds are timed, and the
  time per seed is multiplied by N (an estimate, printed as such);
* **one process**: one run with ``task.replicas = N`` and ``run.schedules = "independent"``
  (``docs/system.md#independent-schedules``): replica r is the run with seed r;
* **run.processes**: the same run with its replicas' schedules simulated in ``--workers`` processes
  (checked to give the same numbers);
* **sweep, 2 processes**: ``sandbox sweep`` with seeds ``[0, N/2]`` and N/2 independent replicas
  each, on ``--workers`` local processes: the same N runs, split over the cores, as a user would
  on a machine with more than one (process start and run directories included).

The sampled separate runs are checked against the matching replicas of the one-process run (final
expected reward, to the bit), so the three really compute the same thing. Each side is timed
``--repeats`` times, interleaved; min and median are printed.

Usage: python benchmarks/bench_seeds.py [--seeds 1000] [--steps 500] [--sample 20] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _timing import interleaved

ROOT = Path(__file__).resolve().parents[1]


def scenario_data(replicas: int, steps: int, seed: int, schedules: str) -> dict:
    return {
        "title": "bandit seeds",
        "task": {"name": "bandit", "num_arms": 10, "replicas": replicas},
        "system": {
            "num_workers": 4,
            "generation_time": {"kind": "exponential", "mean": 1.0},
            "train_time": {"kind": "constant", "value": 0.2},
            "staleness": {"kind": "max_lag", "k_max": 2},
        },
        "algorithm": {
            "group_size": 8,
            "groups_per_step": 4,
            "objective": {"name": "reinforce", "baseline": "group_mean"},
            "optimizer": {"name": "adam", "lr": 0.05},
        },
        "run": {
            "steps": steps,
            "seed": seed,
            "figures": False,
            "record_events": False,
            "schedules": schedules,
            "eval_every": 10,
        },
    }


def final_rewards(res) -> np.ndarray:
    return res.replica_metrics["eval/expected_reward"][-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--sample", type=int, default=20, help="separate runs timed for the baseline estimate")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    if args.seeds % 2:
        raise SystemExit("--seeds: must be even (the sweep splits the seeds in two)")

    from sandbox.run.runner import run_scenario
    from sandbox.scenario.api import validate_scenario

    n, steps = args.seeds, args.steps
    batched = validate_scenario(scenario_data(n, steps, 0, "independent"))
    found: dict[str, np.ndarray] = {}

    def separate():
        found["separate"] = np.array(
            [
                final_rewards(run_scenario(validate_scenario(scenario_data(1, steps, s, "shared")), force=True))[0]
                for s in range(args.sample)
            ]
        )

    def one_process():
        found["batched"] = final_rewards(run_scenario(batched, force=True))

    spread = validate_scenario(
        {
            **scenario_data(n, steps, 0, "independent"),
            "run": {**scenario_data(n, steps, 0, "independent")["run"], "processes": args.workers},
        }
    )

    def schedules_in_workers():
        found["spread"] = final_rewards(run_scenario(spread, force=True))

    tmp = Path(tempfile.mkdtemp(prefix="bench_seeds_"))
    base = tmp / "base.toml"
    import tomli_w

    base.write_text(tomli_w.dumps(scenario_data(n // 2, steps, 0, "independent")))
    sweep = tmp / "seeds.toml"
    sweep.write_text(f'base = "base.toml"\nseeds = [0, {n // 2}]\n\n[sweep]\nname = "bench_seeds"\n')
    counter = iter(range(10**6))

    def sweep_two_processes():
        out = tmp / f"out{next(counter)}"
        subprocess.run(
            [
                sys.executable,
                "-c",
                "from sandbox.cli import app; app()",
                "sweep",
                str(sweep),
                "--out",
                str(out),
                "-j",
                str(args.workers),
                "-q",
            ],
            check=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
        )

    run_scenario(
        validate_scenario(scenario_data(1, 2, 0, "shared")), force=True
    )  # imports, and torch.optim's first step
    times = interleaved(
        {
            "separate": separate,
            "one process": one_process,
            "processes": schedules_in_workers,
            "sweep": sweep_two_processes,
        },
        args.repeats,
    )
    if not np.array_equal(found["batched"], found["spread"]):
        raise SystemExit("run.processes changed the numbers")
    if not np.array_equal(found["separate"], found["batched"][: args.sample]):  # docs/system.md#independent-schedules
        raise SystemExit("the separate runs and the matching replicas differ: the timings compare different work")
    per_seed = [t / args.sample for t in times["separate"]]
    estimate = [p * n for p in per_seed]
    print(f"{n} seeds x {steps} bandit steps, each seed its own schedule ({args.repeats} repeat(s), min / median)")
    print(
        f"  separate runs (estimate from {args.sample}):  {min(estimate):8.1f} s / {statistics.median(estimate):8.1f} s"
        f"   ({min(per_seed) * 1000:.0f} ms per seed)"
    )
    for name, label in (
        ("one process", "independent replicas, 1 process"),
        ("processes", f"same, run.processes = {args.workers}"),
        ("sweep", f"sweep, {args.workers} processes"),
    ):
        t = times[name]
        print(
            f"  {label:<34} {min(t):8.1f} s / {statistics.median(t):8.1f} s   speed-up vs separate "
            f"{min(estimate) / min(t):5.1f}x (min) / {statistics.median(estimate) / statistics.median(t):5.1f}x (median)"
        )
    print("  check: the sampled separate runs reach the final expected reward of their replicas, to the bit")


if __name__ == "__main__":
    main()
