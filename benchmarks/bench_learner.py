"""Learner and run-output benchmark: ratios against a baseline measured in the same process.

1. A sandbox run of the softmax bandit (K = 10 arms, one replica, 4 groups × 8 responses per step,
   REINFORCE with the group-mean baseline, Adam, synchronous control, constant delays) against a
   bare hand-written torch REINFORCE loop doing the same learning: the same draws from the same
   sampling stream in the same order, the same advantages, loss and Adam steps. The loop's final
   expected reward is checked against the run's (they agree to float rounding), so the two really
   learn the same thing. Ratio = sandbox time / bare time: the price of the simulator, the method
   library's loss and the per-step metrics. Timed twice: at ``run.metrics = "standard"`` (the default)
   and at ``"lean"`` (only what the run reads: docs/system.md#metric-levels), interleaved with the bare loop.
2. The share of a default ``sandbox run`` of ``scenarios/quickstart.toml`` (three variants, run
   directories and figures written) spent drawing figures, in-process: the whole command timed with
   ``run.figures = true`` and with ``run.figures = false`` (share = 1 − t_false / t_true; no figure
   at all is drawn in the second, the comparison figures included), and the time spent inside the figure
   functions called in the command's process of a figures-on run (share = t_figures / t_true; the
   variants' own figures are drawn in worker processes since issue 32, sandbox/base/figure_worker.py, so
   only the comparison figures count there), and the CPU time of the command with its workers. The
   first command of the process also pays the imports (matplotlib, pandas, pyarrow), so it is run
   once before the timed repeats.

Each row reports the min and the median over ``--repeats`` interleaved repeats (baseline, sandbox,
baseline, sandbox, ...), so that load on a shared machine hits both sides alike.

Usage: python benchmarks/bench_learner.py [--steps 500] [--repeats 5] [--only bandit|figures]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

import torch
from _timing import interleaved

ROOT = Path(__file__).resolve().parents[1]
ARMS, GROUPS, GROUP_SIZE, LR = 10, 4, 8, 0.05


def bandit_scenario(steps: int, metrics: str = "standard"):
    from sandbox.scenario.api import validate_scenario

    return validate_scenario(
        {
            "task": {"name": "bandit", "num_arms": ARMS, "replicas": 1},
            "system": {
                "num_workers": GROUPS,
                "generation_time": {"kind": "constant", "value": 1.0},
                "train_time": {"kind": "constant", "value": 0.2},
                "staleness": {"kind": "sync"},
            },
            "algorithm": {
                "group_size": GROUP_SIZE,
                "groups_per_step": GROUPS,
                "objective": {"name": "reinforce", "baseline": "group_mean"},
                "optimizer": {"name": "adam", "lr": LR},
            },
            "run": {"steps": steps, "seed": 0, "figures": False, "metrics": metrics},
        }
    )


def sandbox_bandit(steps: int, metrics: str = "standard") -> float:
    """Final expected reward of the sandbox run (evaluated at its last step) at ``run.metrics = metrics``."""
    from sandbox.run.runner import run_scenario

    res = run_scenario(bandit_scenario(steps, metrics), force=True)
    return float(res.metrics["eval/expected_reward"].iloc[-1])


def bare_bandit(steps: int, sampling_seed: int) -> float:
    """The same learning by hand: per step, each of the 4 workers draws its group of 8 arms from the
    current softmax policy, then the 4 Bernoulli rewards are drawn in the same order (the sandbox's
    synchronous schedule); loss = −(1/32) Σ_i (R_i − mean_group R) log π(a_i); one Adam step."""
    means = torch.linspace(0.1, 0.9, ARMS)
    logits = torch.zeros(1, ARMS, requires_grad=True)
    opt = torch.optim.Adam([logits], lr=LR)
    gen = torch.Generator().manual_seed(sampling_seed)
    for _ in range(steps):
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
        groups = rewards.view(1, GROUPS, GROUP_SIZE)
        adv = (groups - groups.mean(-1, keepdim=True)).view(1, -1)
        logp = torch.log_softmax(logits, -1).gather(-1, actions)
        loss = -(adv * logp).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return float(torch.softmax(logits, -1) @ means)


def bare_bandit_batched(steps: int, sampling_seed: int) -> float:
    """:func:`bare_bandit` drawing the step's batch at once: one ``multinomial`` of 4 × 8 arms and one
    ``rand`` of 32 uniforms (the floor of a loop that ignores that each worker samples its own group)."""
    means = torch.linspace(0.1, 0.9, ARMS)
    logits = torch.zeros(1, ARMS, requires_grad=True)
    opt = torch.optim.Adam([logits], lr=LR)
    gen = torch.Generator().manual_seed(sampling_seed)
    n = GROUPS * GROUP_SIZE
    for _ in range(steps):
        with torch.no_grad():
            probs = torch.softmax(logits, -1)
        actions = torch.multinomial(probs, n, replacement=True, generator=gen)
        rewards = (torch.rand(1, n, generator=gen) < means[actions]).float()
        groups = rewards.view(1, GROUPS, GROUP_SIZE)
        adv = (groups - groups.mean(-1, keepdim=True)).view(1, -1)
        logp = torch.log_softmax(logits, -1).gather(-1, actions)
        loss = -(adv * logp).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return float(torch.softmax(logits, -1) @ means)


def fmt(ts: list[float]) -> str:
    return f"min {min(ts):8.3f} s  median {statistics.median(ts):8.3f} s"


def bench_bandit(steps: int, repeats: int) -> None:
    seed = bandit_scenario(steps).run.seeds()["sampling"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the bandit task's default_threads: both sides run single-threaded
    try:
        sandbox_reward, bare_reward = sandbox_bandit(steps), bare_bandit(steps, seed)
        lean_reward, batched_reward = sandbox_bandit(steps, "lean"), bare_bandit_batched(steps, seed)
        times = interleaved(
            {
                "bare": lambda: bare_bandit(steps, seed),
                "sandbox": lambda: sandbox_bandit(steps),
                "lean": lambda: sandbox_bandit(steps, "lean"),
                "bare_batch": lambda: bare_bandit_batched(steps, seed),
            },
            repeats,
        )
    finally:
        torch.set_num_threads(threads)
    print(
        f"softmax bandit K={ARMS}, {GROUPS}x{GROUP_SIZE} per step, Adam, {steps} steps, {repeats} interleaved repeats:"
    )
    print(
        f"  final expected reward: sandbox {sandbox_reward.hex()}, lean {lean_reward.hex()}, bare loop {bare_reward.hex()}, "
        f"bare loop drawing the batch at once {batched_reward.hex()}"
    )
    for name in ("bare", "bare_batch", "sandbox", "lean"):
        ts = times[name]
        print(f"  {name:8s} {fmt(ts)}   {steps / min(ts):8.0f} steps/s (best)")
    for name, label in (("sandbox", "sandbox (run.metrics = standard)"), ("lean", "sandbox (run.metrics = lean)")):
        ratios = [s / b for s, b in zip(times[name], times["bare"])]
        print(
            f"  ratio {label}/bare: min-vs-min {min(times[name]) / min(times['bare']):5.2f}x, "
            f"median of paired ratios {statistics.median(ratios):5.2f}x"
        )
        ratios = [s / b for s, b in zip(times[name], times["bare_batch"])]
        print(
            f"  ratio {label}/bare drawing the batch at once: min-vs-min "
            f"{min(times[name]) / min(times['bare_batch']):5.2f}x, median of paired ratios {statistics.median(ratios):5.2f}x"
        )


class FigureTimer:
    """Accumulates the wall time spent inside the figure functions the run command calls."""

    NAMES = (
        ("sandbox.run.plots", "default_figures"),
        ("sandbox.run.plots", "comparison_figure"),
        ("sandbox.report.figures", "time_to_target_figure"),
    )

    def __init__(self):
        self.total = 0.0

    @contextlib.contextmanager
    def patched(self):
        import importlib

        saved = []
        for mod_name, fn_name in self.NAMES:
            mod = importlib.import_module(mod_name)
            fn = getattr(mod, fn_name)
            saved.append((mod, fn_name, fn))

            def timed(*a, _fn=fn, **kw):
                t = time.perf_counter()
                try:
                    return _fn(*a, **kw)
                finally:
                    self.total += time.perf_counter() - t

            setattr(mod, fn_name, timed)
        try:
            yield self
        finally:
            for mod, fn_name, fn in saved:
                setattr(mod, fn_name, fn)


def cli_run(out: Path, figures: bool) -> None:
    from sandbox.run.command import run

    run(
        scenario=ROOT / "scenarios" / "quickstart.toml",
        set_=[f"run.figures={str(figures).lower()}"],
        out=out,
        quiet=True,
        force=False,
    )


def bench_figures(repeats: int) -> None:
    import io
    import os
    import resource

    timer = FigureTimer()
    in_figures: dict[str, list[float]] = {"figures off": [], "figures on": []}
    cpu: dict[str, list[float]] = {"figures off": [], "figures on": []}

    def cpu_seconds() -> float:  # this process and its reaped children (the figure workers)
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    def timed_run(name: str, out: Path, figures: bool):
        def call():
            before, c0 = timer.total, cpu_seconds()
            cli_run(out, figures)
            in_figures[name].append(timer.total - before)
            cpu[name].append(cpu_seconds() - c0)

        return call

    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
        from sandbox.cli_support import console

        console.quiet = True  # the summary table is printed by rich
        cli_run(Path(tmp) / "warm", True)  # imports and first-use caches, not timed
        with timer.patched():
            times = interleaved(
                {
                    "figures off": timed_run("figures off", Path(tmp) / "off", False),
                    "figures on": timed_run("figures on", Path(tmp) / "on", True),
                },
                repeats,
            )
        console.quiet = False
    load.append(os.getloadavg()[0])
    print(
        f"default `sandbox run` of scenarios/quickstart.toml (3 variants), in-process, {repeats} interleaved repeats "
        f"(load average {load[0]:.1f} before, {load[1]:.1f} after, {os.cpu_count()} CPUs):"
    )
    for name, ts in times.items():
        print(
            f"  {name:12s} {fmt(ts)}   CPU (with worker processes) median {statistics.median(cpu[name]):.3f} s; "
            f"in figure functions in this process: median {statistics.median(in_figures[name]):.3f} s"
        )
    on, off = times["figures on"], times["figures off"]
    shares = [1 - f / o for f, o in zip(off, on)]
    inside = [f / t for f, t in zip(in_figures["figures on"], on)]
    print(
        f"  share of the run spent on figures (1 - off/on): min-vs-min {1 - min(off) / min(on):6.1%}, "
        f"median of paired {statistics.median(shares):6.1%}"
    )
    print(
        f"  share inside the figure functions called in this process (figures on; the comparison figure and, where "
        f"variants' figures are drawn in worker processes, not those): median {statistics.median(inside):6.1%}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", choices=["bandit", "figures"], default=None)
    args = ap.parse_args()
    if args.repeats < 3:
        ap.error("--repeats must be at least 3 (min and median of interleaved repeats)")
    if args.only in (None, "bandit"):
        bench_bandit(args.steps, args.repeats)
    if args.only in (None, "figures"):
        bench_figures(args.repeats)


if __name__ == "__main__":
    main()
