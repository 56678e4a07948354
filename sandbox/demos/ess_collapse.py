"""Demo: ESS collapse of sequence-level importance weights with lag and length.

Asynchronous RL trains on responses sampled by an older policy mu, so the policy gradient is
reweighted by w = pi_theta(y) / mu(y). For a response of L tokens the sequence weight is a
product of L per-token ratios, so its log is a sum of L small terms and its variance grows like
L x (per-token log-ratio variance), which itself grows with the lag. The Kish effective sample size
ESS / N = (sum w)^2 / (N sum w^2) then falls roughly like exp(-L v) (theory.importance_weights,
docs/theory.md#t8 item 7): long responses and stale policies leave a batch of 64 responses worth a handful.

This script trains GRPO on the bit-string task with fixed lags k and sequence lengths H and plots
the measured ESS / N of the unclipped sequence weights.

Run it:  sandbox demo ess_collapse      or      python examples/demo_ess_collapse.py
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

EXPLANATION = """\
ESS collapse. An asynchronous learner corrects for stale data with importance weights
w = pi_new(response) / pi_old(response). For a whole response that weight is a product over its
tokens, so small per-token differences compound: its spread grows with the response length and
with how many updates old the sampling policy is. The effective sample size (ESS) measures how
many equally weighted samples the weighted batch is worth; ESS/N near 1 means the correction is
harmless, near 0 means a few responses dominate the gradient (high variance, or heavy truncation
if the weights are clipped). We train the same task at several lags and lengths and measure it."""


@dataclass
class Config:
    out: str = "runs/demos"
    tiny: bool = False
    lags: tuple[int, ...] = (0, 1, 2, 4, 8, 16)
    horizons: tuple[int, ...] = (8, 32, 128)  # response lengths (tokens)
    steps: int = 40
    lr: float = 0.1
    seed: int = 0


def scenario(lag: int, horizon: int, cfg: Config, steps: int):
    return validate_scenario(
        {
            "title": f"k={lag} H={horizon}",
            "task": {"name": "bitstring", "horizon": horizon, "threshold": 0.6},
            "system": {
                "num_workers": 8,
                "generation_time": {"kind": "constant", "value": 1.0},
                "train_time": {"kind": "constant", "value": 0.1},
                "staleness": {"kind": "fixed_lag", "k": lag},
            },
            "algorithm": {
                "group_size": 8,
                "groups_per_step": 8,
                "objective": {"name": "grpo"},
                "correction": {"name": "tis", "level": "sequence"},
                "optimizer": {"name": "adam", "lr": cfg.lr},
            },
            "run": {"steps": steps, "seed": cfg.seed, "figures": False, "record_events": False},
        }
    )


def main(cfg: Config = Config()) -> Path:
    torch.set_num_threads(1)
    print(EXPLANATION + "\n")
    lags = (0, 4) if cfg.tiny else cfg.lags
    horizons = (8, 32) if cfg.tiny else cfg.horizons
    steps = 8 if cfg.tiny else cfg.steps
    t0 = time.time()
    ess = np.full((len(horizons), len(lags)), np.nan)
    for i, h in enumerate(horizons):
        for j, k in enumerate(lags):
            m = run_scenario(scenario(k, h, cfg, steps)).metrics
            ess[i, j] = m["is/ess_ratio"].iloc[min(k, steps - 1) :].mean()  # after the warm-up steps
    print(f"  {ess.size} runs in {time.time() - t0:.1f} s. Mean ESS/N of the sequence weights (batch of 64):")
    print("  " + "lag k:".rjust(10) + "".join(f"{k:>7d}" for k in lags))
    for i, h in enumerate(horizons):
        print("  " + f"H = {h:4d}".rjust(10) + "".join(f"{v:7.2f}" for v in ess[i]))

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, h in enumerate(horizons):
        ax.plot(lags, ess[i], "o-", label=f"H = {h} tokens")
    ax.set_xlabel("lag k (versions)")
    ax.set_ylabel("ESS / N of the sequence weights")
    ax.set_ylim(0, 1.05)
    ax.set_title("longer responses and older policies: fewer effective samples", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save_figure(fig, cfg.out, "ess_collapse")


if __name__ == "__main__":
    main(config_from_argv(Config))
