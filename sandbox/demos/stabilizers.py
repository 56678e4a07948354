"""Demo: what each stabilizer does to the same stale run.

One stale run (GRPO on the bit-string task, every step trains on rollouts 16 versions old) is
repeated with each stabilizer, under the same seeds (same schedule, same sampling stream), next to
a synchronous reference. Each stabilizer acts on a different part of the update:

* TIS (truncated importance sampling): reweights each response by min(pi/mu, C) -- fixes the bias
  of stale data, caps the variance by truncating the largest weights.
* M2PO: masks the tokens with the largest squared log-ratio until the batch's second moment is
  under a budget -- drops the most off-policy tokens instead of reweighting them.
* GAC (gradient alignment control): when the new gradient is too aligned with the previous update
  (the stale signature, see the stale_alignment demo), removes the parallel component.
* VCPO's ESS learning rate: scales the step size by sqrt(ESS/N) -- smaller steps when the batch
  is worth fewer effective samples.

Run it:  sandbox demo stabilizers      or      python examples/demo_stabilizers.py
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from sandbox.demos._common import config_from_argv, save_figure  # noqa: E402
from sandbox.run.runner import run_scenario  # noqa: E402
from sandbox.scenario.api import validate_scenario  # noqa: E402

EXPLANATION = """\
What each stabilizer does. We take one stale run (every update uses responses sampled 16 policy
versions ago) and repeat it with one stabilizer at a time, with the same random seeds, next to a
synchronous run. Watch three things: how fast the reward rises (per learner step), the effective
sample size of the importance weights (how off-policy the batch is), and what the stabilizer
itself did each step: TIS truncates the largest weights, M2PO masks the most off-policy tokens,
GAC projects out the part of the gradient aligned with the previous update, VCPO lowers the
learning rate when the ESS is low."""

# name -> (staleness, correction, stabilizers, the metric that shows what the method did)
METHODS = {
    "sync (reference)": ({"kind": "sync"}, {"name": "none"}, [], None),
    "stale, no stabilizer": (None, {"name": "none"}, [], None),
    "TIS (sequence, C=8)": (None, {"name": "tis", "level": "sequence", "C": 8.0}, [], "is/trunc_frac"),
    "M2PO mask": (None, {"name": "m2po_mask"}, [], "mask/frac"),
    "GAC": (None, {"name": "none"}, [{"name": "gac"}], "gac/projected"),
    "VCPO ESS lr": (None, {"name": "tis", "level": "sequence", "C": 8.0}, [{"name": "vcpo_lr"}], "lr/vcpo_scale"),
}
ACTION_LABEL = {
    "is/trunc_frac": "TIS: fraction of weights truncated",
    "mask/frac": "M2PO: fraction of tokens masked",
    "gac/projected": "GAC: fraction of steps projected",
    "lr/vcpo_scale": "VCPO: learning-rate scale",
}


@dataclass
class Config:
    out: str = "runs/demos"
    tiny: bool = False
    lag: int = 16
    horizon: int = 32
    lr: float = 0.3
    steps: int = 100
    seed: int = 0


def scenario(staleness, correction, stabilizers, cfg: Config, steps: int, lag: int):
    return validate_scenario(
        {
            "task": {"name": "bitstring", "horizon": cfg.horizon, "threshold": 0.7},
            "system": {
                "num_workers": 8,
                "generation_time": {"kind": "constant", "value": 1.0},
                "train_time": {"kind": "constant", "value": 0.2},
                "staleness": staleness or {"kind": "fixed_lag", "k": lag},
            },
            "algorithm": {
                "group_size": 8,
                "groups_per_step": 4,
                "objective": {"name": "grpo"},
                "correction": correction,
                "stabilizers": stabilizers,
                "optimizer": {"name": "adam", "lr": cfg.lr},
            },
            "run": {"steps": steps, "seed": cfg.seed, "eval_every": 5, "figures": False, "record_events": False},
        }
    )


def main(cfg: Config = Config()) -> Path:
    torch.set_num_threads(1)
    print(EXPLANATION + "\n")
    steps = 12 if cfg.tiny else cfg.steps
    lag = 4 if cfg.tiny else cfg.lag
    t0 = time.time()
    runs = {}
    for name, (staleness, corr, stab, _) in METHODS.items():
        runs[name] = run_scenario(scenario(staleness, corr, stab, cfg, steps, lag)).metrics
    print(f"  {len(runs)} runs in {time.time() - t0:.1f} s (lag {lag}, {steps} steps)")
    print(f"  {'method':24s} {'mean reward':>12s} {'final':>7s} {'ESS/N':>7s}  what it did")
    for name, m in runs.items():
        action = METHODS[name][3]
        did = f"{ACTION_LABEL[action]}: {m[action].mean():.2f} on average" if action in m else ""
        r = m["eval/expected_reward"].dropna()
        print(f"  {name:24s} {r.mean():12.3f} {r.iloc[-1]:7.3f} {m['is/ess_ratio'].mean():7.2f}  {did}")

    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for i, (name, m) in enumerate(runs.items()):
        style = dict(color=f"C{i}", lw=2 if i < 2 else 1.3, ls="--" if i == 0 else "-")
        r = m[["step", "eval/expected_reward"]].dropna()
        axes[0, 0].plot(r.step, r["eval/expected_reward"], label=name, **style)
        axes[0, 1].plot(m.step, m["is/ess_ratio"].rolling(5, min_periods=1).mean(), **style)
        cos = m["gac/cos_post"] if "gac/cos_post" in m else m["grad/cos_prev"]
        axes[1, 0].plot(m.step, cos.rolling(5, min_periods=1).mean(), **style)
        action = METHODS[name][3]
        if action in m:
            axes[1, 1].plot(
                m.step, m[action].rolling(5, min_periods=1).mean(), color=f"C{i}", label=ACTION_LABEL[action]
            )
    axes[0, 0].set_ylabel("expected reward (exact)")
    axes[0, 0].legend(fontsize=7)
    axes[0, 1].set_ylabel("ESS / N of the importance weights")
    axes[0, 1].set_ylim(0, 1.05)
    axes[1, 0].set_ylabel("cosine with the previous update\n(GAC: after projection)")
    axes[1, 1].set_ylabel("what the stabilizer did (rolling mean 5)")
    axes[1, 1].legend(fontsize=7)
    for ax in axes.flat:
        ax.set_xlabel("learner step")
        ax.grid(alpha=0.3)
    fig.suptitle(f"one stale run (lag {lag}), one stabilizer at a time, same seeds", fontsize=11)
    return save_figure(fig, cfg.out, "stabilizers")


if __name__ == "__main__":
    main(config_from_argv(Config))
