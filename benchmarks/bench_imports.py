"""Fixed cost per process: what a training process pays beyond ``import torch`` (issue 48).

Each side is a fresh interpreter (``python -c``), timed from outside, the sides interleaved:

- ``import torch`` alone (the baseline);
- torch's ``Adam`` built and stepped once (its constructor imports ``torch._dynamo``);
- the sandbox's ``build_optimizer`` Adam built and stepped once (``sandbox/learner/optim.py: without_dynamo``);
- a backward with an explicit gradient tensor (imports ``torch.fx.experimental.symbolic_shapes`` and
  sympy) against the backward of a scalar (the learner's ``loss.sum().backward()``);
- ``import matplotlib.pyplot`` (what a figures-off ``sandbox run`` no longer imports).

Prints min and median seconds and the extra over ``import torch``.

``--commands --before TREE``: whole commands that need no torch (``sandbox scenario <file>``, ``sandbox list``,
``sandbox plan`` on the quickstart with a small grid and with ``--gpus``), each a fresh interpreter, this tree
and the checkout ``TREE`` (the same commands, e.g. ``git worktree add /tmp/before <commit>``) interleaved, each
with its own ``PYTHONPATH``; plan outputs go to a temporary directory. Prints min and median seconds per tree,
the ratio of the medians and whether each tree's run imported torch.

Usage: python benchmarks/bench_imports.py [--repeats 5]
       python benchmarks/bench_imports.py --commands --before /tmp/before [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _timing import interleaved

ROOT = Path(__file__).resolve().parents[1]
SIDES = {
    "import torch": "import torch",
    "torch.optim.Adam": "import torch; w = torch.ones(3, requires_grad=True); o = torch.optim.Adam([w]); "
    "(w * w).sum().backward(); o.step()",
    "build_optimizer (adam)": "import torch; from sandbox.learner.optim import OptimizerConfig, build_optimizer; "
    "w = torch.ones(3, requires_grad=True); o = build_optimizer(OptimizerConfig(), [w]); "
    "(w * w).sum().backward(); o.step()",
    "backward(gradient tensor)": "import torch; w = torch.ones(3, requires_grad=True); (w * w).backward(torch.ones(3))",
    "backward of a scalar": "import torch; w = torch.ones(3, requires_grad=True); (w * w).sum().backward()",
    "import matplotlib.pyplot": "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot",
}


COMMAND_RUNNER = """
import contextlib, io, sys
from sandbox.cli import app
with contextlib.redirect_stdout(io.StringIO()):
    try:
        app(sys.argv[1:], standalone_mode=False)
    except SystemExit as exc:
        if exc.code:
            raise
print("torch imported:", "torch" in sys.modules)
"""

PLAN_GRID = ("--workers", "4,8", "--k-max", "0,1,2", "--seeds", "2", "--steps", "20")


def commands(out: Path) -> dict[str, list[str]]:
    """The torch-free commands timed by ``--commands`` (plan outputs under ``out``)."""
    return {
        "scenario <file>": ["scenario", "scenarios/quickstart.toml"],
        "list": ["list"],
        "plan (3 x 2 grid, 2 seeds)": [
            "plan",
            "scenarios/quickstart.toml",
            *PLAN_GRID,
            "--out",
            str(out / "plan"),
            "-q",
        ],
        "plan --gpus 8": ["plan", "scenarios/quickstart.toml", "--gpus", "8", "--out", str(out / "split"), "-q"],
    }


def main_commands(before: Path, repeats: int) -> None:
    if not (before / "sandbox" / "cli.py").is_file():
        raise SystemExit(f"--before: expected a checkout of this repository (with sandbox/cli.py), got {before}")
    trees = {"before": before.resolve(), "after": ROOT}
    torch_loaded: dict[str, bool] = {}
    cpu: dict[tuple[str, str], list[float]] = {}

    def side(name: str, tree: str, argv: list[str]):
        env = {**os.environ, "PYTHONPATH": str(trees[tree])}

        def call() -> None:
            start = resource.getrusage(resource.RUSAGE_CHILDREN)
            proc = subprocess.run(
                [sys.executable, "-c", COMMAND_RUNNER, *argv],
                cwd=trees[tree],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
            end = resource.getrusage(resource.RUSAGE_CHILDREN)
            used = end.ru_utime - start.ru_utime + end.ru_stime - start.ru_stime
            cpu.setdefault((name, tree), []).append(used)
            torch_loaded[f"{tree} {argv[0]}"] = "torch imported: True" in proc.stdout

        return call

    with tempfile.TemporaryDirectory() as tmp:
        fns = {}
        for name, argv in commands(Path(tmp)).items():
            for tree in trees:
                fns[(name, tree)] = side(name, tree, argv)
        times = interleaved(fns, repeats)
    print(f"fresh interpreters, {repeats} interleaved repeats (min / median s; CPU: user + system); before = {before}")
    for name in commands(Path(".")):
        b, a = times[(name, "before")], times[(name, "after")]
        ratio = statistics.median(b) / statistics.median(a)
        cb, ca = cpu[(name, "before")], cpu[(name, "after")]
        print(
            f"  {name:28s} wall before {min(b):6.2f} {statistics.median(b):6.2f}  after {min(a):6.2f} "
            f"{statistics.median(a):6.2f}  {ratio:4.2f}x faster (medians);  CPU before {min(cb):6.2f} "
            f"{statistics.median(cb):6.2f}  after {min(ca):6.2f} {statistics.median(ca):6.2f}"
        )
    print("  torch imported:", ", ".join(f"{k}={v}" for k, v in sorted(torch_loaded.items())))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--commands", action="store_true", help="time whole torch-free commands against --before")
    ap.add_argument("--before", type=Path, help="with --commands: the checkout to compare against")
    args = ap.parse_args()
    if args.commands:
        if args.before is None:
            ap.error("--commands needs --before TREE")
        main_commands(args.before, args.repeats)
        return

    def side(code: str):
        return lambda: subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)

    times = interleaved({name: side(code) for name, code in SIDES.items()}, args.repeats)
    base = times["import torch"]
    print(
        f"fresh interpreters, {args.repeats} interleaved repeats (min / median s; extra over import torch, medians of pairs):"
    )
    for name, ts in times.items():
        extra = statistics.median(t - b for t, b in zip(ts, base))
        print(f"  {name:28s} {min(ts):6.2f} {statistics.median(ts):6.2f}   +{extra:5.2f} s")


if __name__ == "__main__":
    main()
