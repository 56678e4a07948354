"""Consecutive-gradient cosine (``grad/cos_prev``) under mini-batch updates vs a fixed lag vs sync,
on the bit-string task (GAC's "persistently high cosine" signature; docs/system.md#mini-batches).

    python benchmarks/minibatch_cosine.py [--seeds 3] [--steps 240] [--replicas 8] [--burn 40]

Settings (all Adam, lr 0.01, bit-string H = 32, threshold 0.6, fair-coin start, G = 8; constant
generation time so the schedules are exact; at this lr the reward rises over ~300 steps):

* ``sync``: B = 4 groups per step, one step per batch;
* ``fixed lag 3``: the same with ``fixed_lag`` k = 3;
* ``sync, m = 4``: B = 4, four mini-batches of one group (lags 0..3 within the batch);
* ``sync, B = 1``: one group per step, one step per batch (the mini-batches' size, fresh data);
* ``sync, E = 4``: B = 4, one mini-batch, four epochs (the same data four times in a row).

Per setting: the mean of ``grad/cos_prev`` over steps after ``--burn`` (per replica; pairs where
either gradient is exactly zero, i.e. every group had equal rewards, are left out: their cosine is 0
by definition), then mean ± SE across the seeds × replicas independent learners; for ``m = 4`` and ``E = 4`` also split into
pairs inside one batch and pairs across batches. Also the mean per-token lag and the final exact
expected reward. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch

from sandbox.run.runner import run_scenario
from sandbox.scenario.api import validate_scenario

SETTINGS = {
    "sync": dict(B=4),
    "fixed lag 3": dict(B=4, k=3),
    "sync, m = 4": dict(B=4, m=4),
    "sync, B = 1": dict(B=1),
    "sync, E = 4": dict(B=4, E=4),
}


def scenario(B: int, steps: int, seed: int, replicas: int, k: int = 0, m: int = 1, E: int = 1):
    staleness = {"kind": "fixed_lag", "k": k} if k else {"kind": "sync"}
    return validate_scenario(
        {
            "task": {"name": "bitstring", "horizon": 32, "threshold": 0.6, "replicas": replicas},
            "system": {
                "num_workers": 4 * (k + 1),
                "generation_time": {"kind": "constant", "value": 1.0},
                "staleness": staleness,
            },
            "algorithm": {
                "group_size": 8,
                "groups_per_step": B,
                "minibatches": m,
                "epochs": E,
                "optimizer": {"name": "adam", "lr": 0.01},
            },
            "run": {"steps": steps, "seed": seed, "figures": False, "record_events": False, "eval_every": steps},
        }
    )


def _mean_se(per_learner: list[float]) -> str:
    a = np.asarray(per_learner)
    return f"{a.mean():+.3f} ± {a.std(ddof=1) / math.sqrt(a.size):.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=320)
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--burn", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("| setting | cos_prev (all pairs) | inside a batch | across batches | token lag | final E[reward] |")
    print("|---|---|---|---|---|---|")
    for name, kw in SETTINGS.items():
        S = kw.get("m", 1) * kw.get("E", 1)
        every, inside, across, lags, rewards = [], [], [], [], []
        for seed in range(args.seeds):
            res = run_scenario(scenario(steps=args.steps, seed=seed, replicas=args.replicas, **kw))
            norm = res.replica_metrics["grad/norm"]
            both = np.vstack([np.zeros((1, norm.shape[1]), bool), (norm[1:] > 0) & (norm[:-1] > 0)])
            cos = np.where(both, res.replica_metrics["grad/cos_prev"], np.nan)[args.burn :]  # (steps, R)
            first = (np.arange(args.burn, args.steps) % S == 0)[:, None]  # pair across batches
            every += list(np.nanmean(cos, 0))
            if S > 1:
                inside += list(np.nanmean(np.where(~first, cos, np.nan), 0))
                across += list(np.nanmean(np.where(first, cos, np.nan), 0))
            lags.append(float(res.metrics["staleness/token_mean"].iloc[args.burn :].mean()))
            rewards += list(res.replica_metrics["eval/expected_reward"][-1])
        split = (_mean_se(inside), _mean_se(across)) if S > 1 else ("", "")
        print(f"| {name} | {_mean_se(every)} | {split[0]} | {split[1]} | {np.mean(lags):.2f} | {_mean_se(rewards)} |")


if __name__ == "__main__":
    main()
