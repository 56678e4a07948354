"""Demo: the stale-aligned gradient signature.

Measure the cosine between consecutive gradients, cos(g_t, g_{t-1}), while SGD runs on a noisy
quadratic, synchronously (lag 0) and with a fixed lag of 8 versions. Synchronous SGD in its
stationary regime gives a slightly *negative* cosine (each step overshoots a little, the next
gradient points back). With stale gradients the stationary cosine turns *positive* and rises with
the step size, but stays small below the delayed-stability threshold (+0.06 at 0.95x the threshold
with the default settings; theory.gradient_cosine, docs/theory.md#t3, gives the exact values, which
rise steeply only in the last few percent). Past the threshold the delayed oscillation grows, takes
over the gradient, and the cosine climbs towards cos(π/(2k+1)), close to 1 (+0.78 averaged over the
last steps of the 1.15x run, still rising). The stationary signature is what GAC (arXiv 2603.01501)
monitors; a cosine that keeps climbing is the instability itself.

Run it:  sandbox demo stale_alignment      or      python examples/demo_stale_alignment.py
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
from theory.delayed_stability import critical_lr  # noqa: E402
from theory.gradient_cosine import expected_cosine  # noqa: E402

EXPLANATION = """\
The stale-aligned gradient signature. Each learner step we record the cosine between this
gradient and the previous one. Synchronous SGD that has settled near the optimum bounces around
it: consecutive gradients point slightly against each other (cosine a little below 0). With a lag
of k versions, each gradient was computed on weights k updates old, so consecutive gradients share
almost the same stale starting point and lean the same way: the cosine turns positive and rises
with the step size, yet stays small below the stability threshold (a few hundredths, right panel).
Only past the threshold, where the delayed oscillation grows and dominates the gradient, does it
climb towards cos(pi/(2k+1)), close to 1 (left panel, black). A small positive cosine is the steady
signature of staleness (what GAC monitors); one that keeps climbing is the instability itself."""


@dataclass
class Config:
    out: str = "runs/demos"
    tiny: bool = False
    lag: int = 8
    ratios: tuple[float, ...] = (0.3, 0.6, 0.85, 0.95)  # step size / threshold of the lagged run
    unstable_ratio: float = 1.15  # one lagged run past the threshold
    dim: int = 500
    noise_std: float = 0.05
    steps: int = 400
    seed: int = 0


def scenario(lag: int, lr: float, cfg: Config, steps: int):
    return validate_scenario(
        {
            "title": f"k={lag} lr={lr:.3g}",
            # start at the optimum (x0_std = 0): the noise builds the stationary regime quickly
            "task": {
                "name": "quadratic",
                "dim": cfg.dim,
                "eig_min": 0.01,
                "eig_max": 1.0,
                "noise_std": cfg.noise_std,
                "x0_std": 0.0,
            },
            "system": {
                "num_workers": lag + 1,
                "generation_time": {"kind": "constant", "value": 1.0},
                "train_time": {"kind": "constant", "value": 0.0},
                "staleness": {"kind": "fixed_lag", "k": lag},
            },
            "algorithm": {"group_size": 1, "groups_per_step": 1, "optimizer": {"name": "sgd", "lr": lr}},
            "run": {"steps": steps, "seed": cfg.seed, "figures": False, "record_events": False},
        }
    )


def main(cfg: Config = Config()) -> Path:
    torch.set_num_threads(1)
    print(EXPLANATION + "\n")
    ratios = (0.3, 0.95) if cfg.tiny else cfg.ratios
    steps = 40 if cfg.tiny else cfg.steps
    lams = np.logspace(-2, 0, cfg.dim)
    crit = critical_lr(cfg.lag, lam_max=1.0)
    t0 = time.time()
    measured: dict[int, list[tuple[float, float]]] = {0: [], cfg.lag: []}
    traces = {}
    for lag in (0, cfg.lag):
        for r in ratios:
            lr = r * crit  # the same step sizes for both: only the lag differs
            res = run_scenario(scenario(lag, lr, cfg, steps))
            cos = res.metrics["grad/cos_prev"].dropna()
            measured[lag].append((r, float(cos.iloc[len(cos) // 4 :].mean())))
            if r == max(ratios):
                traces[lag] = cos
    unstable = run_scenario(scenario(cfg.lag, cfg.unstable_ratio * crit, cfg, steps)).metrics["grad/cos_prev"].dropna()
    print(f"  {2 * len(ratios) + 1} runs in {time.time() - t0:.1f} s (lag {cfg.lag}: threshold lr* = {crit:.3f})")
    print(f"  step size      sync cosine (measured / theory)   lag-{cfg.lag} cosine (measured / theory)")
    for (r, c0), (_, ck) in zip(measured[0], measured[cfg.lag]):
        t_0 = expected_cosine(r * crit, lams, cfg.noise_std, 0)
        t_k = expected_cosine(r * crit, lams, cfg.noise_std, cfg.lag)
        print(f"  {r:4.2f} x lr*     {c0:+.3f} / {t_0:+.3f}                   {ck:+.3f} / {t_k:+.3f}")
    print(
        f"  past the threshold ({cfg.unstable_ratio:g} x lr*, lag {cfg.lag}): cosine {unstable.iloc[-len(unstable) // 8 :].mean():+.3f} over the last steps"
        f" (limit cos(pi/(2k+1)) = {np.cos(np.pi / (2 * cfg.lag + 1)):.3f})"
    )

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for lag, color in ((0, "tab:blue"), (cfg.lag, "tab:red")):
        cos = traces[lag]
        ax1.plot(
            cos.index,
            cos.rolling(10, min_periods=1).mean(),
            color=color,
            label=f"lag {lag}" + (" (sync)" if lag == 0 else ""),
        )
    ax1.plot(
        unstable.index,
        unstable.rolling(10, min_periods=1).mean(),
        color="k",
        lw=1,
        label=f"lag {cfg.lag}, {cfg.unstable_ratio:g} x threshold (unstable)",
    )
    ax1.axhline(0, color="k", lw=0.5)
    ax1.set_xlabel("learner step")
    ax1.set_ylabel("cos(g_t, g_t-1), rolling mean 10")
    ax1.set_title(f"sync vs lag {cfg.lag} at the same step size ({max(ratios):g} x threshold)", fontsize=10)
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3)
    rr = np.linspace(0.05, 0.98, 25)
    for lag, color in ((0, "tab:blue"), (cfg.lag, "tab:red")):
        ax2.plot(
            rr,
            [expected_cosine(r * crit, lams, cfg.noise_std, lag) for r in rr],
            color=color,
            ls="--",
            label=f"theory, lag {lag}",
        )
        ax2.plot(*zip(*measured[lag]), "o", color=color, label=f"measured, lag {lag}")
    ax2.axhline(0, color="k", lw=0.5)
    ax2.set_xlabel(f"step size / threshold of lag {cfg.lag} ({crit:.3f})")
    ax2.set_ylabel("stationary consecutive-gradient cosine")
    ax2.set_title("below the threshold: sync slightly negative, stale small, positive, rising", fontsize=10)
    ax2.legend(fontsize=8)
    ax2.grid(alpha=0.3)
    return save_figure(fig, cfg.out, "stale_alignment")


if __name__ == "__main__":
    main(config_from_argv(Config))
