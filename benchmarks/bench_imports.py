"""Fixed cost per process: what a training process pays beyond ``import torch`` (issue 48).

Each side is a fresh interpreter (``python -c``), timed from outside, the sides interleaved:

- ``import torch`` alone (the baseline);
- torch's ``Adam`` built and stepped once (its constructor imports ``torch._dynamo``);
- the sandbox's ``build_optimizer`` Adam built and stepped once (``sandbox/learner/optim.py: without_dynamo``);
- a backward with an explicit gradient tensor (imports ``torch.fx.experimental.symbolic_shapes`` and
  sympy) against the backward of a scalar (the learner's ``loss.sum().backward()``);
- ``import matplotlib.pyplot`` (what a figures-off ``sandbox run`` no longer imports).

Prints min and median seconds and the extra over ``import torch``.

Usage: python benchmarks/bench_imports.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

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
