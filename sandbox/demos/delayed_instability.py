"""Demo: delayed-gradient instability and its threshold.

Gradient descent on f(x) = x^2/2 (Hessian eigenvalue 1) where each update uses a gradient that is
k steps old: x_{t+1} = x_t - lr * x_{t-k}. It converges only while lr < 2 sin(pi / (4k + 2))
(Levin & May 1976; theory.delayed_stability, docs/theory.md#t1). The safe step size shrinks roughly
like pi / (2k): a lag of 8 versions divides it by about 11.

This script runs the simulator on a noisy quadratic at several fixed lags k and step sizes around
the predicted threshold, marks each run stable or unstable from its measured loss, draws the
theory's curve through the measured map, and shows two runs at k = 8 just below and just above
the threshold (the unstable one oscillates with period 4k + 2 = 34 steps).

Run it:  sandbox demo delayed_instability      or      python examples/demo_delayed_instability.py
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from sandbox.demos._common import config_from_argv, save_figure  # noqa: E402
from sandbox.run.runner import run_scenario  # noqa: E402
from sandbox.scenario.api import validate_scenario  # noqa: E402
from theory.delayed_stability import critical_lr, oscillation_period  # noqa: E402

EXPLANATION = """\
Delayed-gradient instability. With asynchrony the learner applies gradients computed on weights
that are k updates old. On a quadratic that turns plain gradient descent into a delay equation,
x[t+1] = x[t] - lr * x[t-k], which is stable only for lr < 2 sin(pi/(4k+2)) / lambda_max.
Past that threshold the stale gradients keep pushing in the direction that was right k steps ago,
the iterate overshoots and oscillates with growing amplitude (period 4k+2 steps). We sweep the
lag k and the step size around the predicted threshold and compare what the simulator measures."""


@dataclass
class Config:
    out: str = "runs/demos"  # the figure is written here
    tiny: bool = False  # a few steps only (tests)
    lags: tuple[int, ...] = (0, 1, 2, 4, 8)
    ratios: tuple[float, ...] = (0.7, 0.9, 1.1, 1.4)  # step size / predicted threshold
    steps: int = 200
    show_lag: int = 8  # lag of the two trajectories in the right panel
    seed: int = 0


def scenario(lag: int, lr: float, steps: int, seed: int):
    """A one-dimensional-in-spirit noisy quadratic (4 coordinates, all with eigenvalue 1)."""
    return validate_scenario(
        {
            "title": f"k={lag} lr={lr:.3g}",
            "task": {"name": "quadratic", "dim": 4, "spectrum": "constant", "eig_max": 1.0, "noise_std": 0.01},
            "system": {
                "num_workers": lag + 1,
                "generation_time": {"kind": "constant", "value": 1.0},
                "train_time": {"kind": "constant", "value": 0.0},
                "staleness": {"kind": "fixed_lag", "k": lag},
            },
            "algorithm": {"group_size": 1, "groups_per_step": 1, "optimizer": {"name": "sgd", "lr": lr}},
            "run": {
                "steps": steps,
                "seed": seed,
                "eval_every": 1,
                "figures": False,
                "record_events": False,
                "max_loss": 1e6,
            },
        }
    )


def main(cfg: Config = Config()) -> Path:
    torch.set_num_threads(1)
    print(EXPLANATION + "\n")
    lags = (1, cfg.show_lag) if cfg.tiny else cfg.lags
    ratios = (0.7, 1.4) if cfg.tiny else cfg.ratios
    steps = 30 if cfg.tiny else cfg.steps
    t0 = time.time()
    points, traces = [], {}
    for k in lags:
        for r in ratios:
            lr = r * critical_lr(k, lam_max=1.0)
            res = run_scenario(scenario(k, lr, steps, cfg.seed))
            loss = res.metrics["eval/loss"].dropna().to_numpy()
            unstable = res.status == "diverged" or loss[-1] > loss[0]
            points.append((k, lr, unstable))
            if k == cfg.show_lag:
                traces[r] = loss
    agree = sum(u == (r > 1) for (k, lr, u), r in zip(points, [r for _ in lags for r in ratios]))
    print(
        f"  {len(points)} runs in {time.time() - t0:.1f} s: the measured verdict agrees with the theory in {agree}/{len(points)} runs."
    )
    for k in lags:
        print(f"  k = {k:2d}: predicted threshold lr* = {critical_lr(k, 1.0):.3f}")

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    kk = np.linspace(0, max(lags), 200)
    ax1.plot(kk, critical_lr(kk, 1.0), "k--", label="theory: 2 sin(pi/(4k+2)) / lambda_max")
    for unstable, marker, color, label in (
        (False, "o", "tab:green", "measured: converges"),
        (True, "x", "tab:red", "measured: blows up"),
    ):
        sel = [(k, lr) for k, lr, u in points if u == unstable]
        if sel:
            ax1.scatter(*zip(*sel), marker=marker, color=color, s=50, label=label, zorder=3)
    ax1.set_yscale("log")
    ax1.set_xlabel("lag k (versions)")
    ax1.set_ylabel("step size lr")
    ax1.set_title("stability map: stable below the curve")
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3)
    for r, loss in sorted(traces.items()):
        ax2.semilogy(loss, label=f"lr = {r:g} x threshold")
    ax2.set_xlabel("learner step")
    ax2.set_ylabel("loss")
    ax2.set_title(
        f"k = {cfg.show_lag}: x oscillates with period 4k+2 = {int(oscillation_period(cfg.show_lag))} (loss = x²: half)",
        fontsize=10,
    )
    ax2.legend(fontsize=8)
    ax2.grid(alpha=0.3)
    return save_figure(fig, cfg.out, "delayed_instability")


if __name__ == "__main__":
    main(config_from_argv(Config))
