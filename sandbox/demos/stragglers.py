"""Demo: synchronous stragglers against asynchronous throughput.

P rollout workers each generate one group per step; response times are long-tailed (log-normal,
sigma = 1: a few responses take many times the median). Synchronous training waits for the
slowest of the P groups every step, so its throughput is P / E[max of P times] and most workers
sit idle; asynchronous training (bounded lag, AReaL-style) restarts every worker at once, giving
P / E[time]. The ratio E[max] / E[time] grows with P (theory.order_statistics, docs/theory.md#t6) --
that is what asynchrony buys. What it costs is staleness: the consumed rollouts are a few policy
versions old (see the other demos for what that does to learning).

This demo uses the timing-only simulator (the cluster without learning), so it takes seconds.

Run it:  sandbox demo stragglers      or      python examples/demo_stragglers.py
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from sandbox.demos._common import config_from_argv, save_figure  # noqa: E402
from sandbox.system.config import SystemConfig  # noqa: E402
from sandbox.system.timing_only import simulate_timing  # noqa: E402
from theory.order_statistics import expected_max, expected_value, lognormal_cdf  # noqa: E402

EXPLANATION = """\
Stragglers. In synchronous RL every training step waits for the slowest response of the batch.
With long-tailed generation times (some responses are much longer than others) the slowest of P
workers takes far longer than the average one, and the other workers sit idle meanwhile. An
asynchronous system lets each worker start its next response immediately and trains on whatever
has arrived, within a bound on how many versions old it may be. Its throughput grows with P
almost linearly; the synchronous one only like P / (expected maximum of P times). (The bound on
the lag throttles the workers now and then, so bounded asynchrony gets a few percent less than the
unbounded prediction.) The price of the extra throughput is staleness: rollouts are consumed a
version or two after the policy that generated them."""


@dataclass
class Config:
    out: str = "runs/demos"
    tiny: bool = False
    workers: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    sigma: float = 1.0  # log-normal shape of the generation time (median 1 s)
    k_max: int = 2  # bound on the lag in the asynchronous system
    steps: int = 400
    seed: int = 0


def system(P: int, staleness: dict, cfg: Config) -> SystemConfig:
    return SystemConfig.model_validate(
        {
            "num_workers": P,
            "generation_time": {"kind": "lognormal", "median": 1.0, "sigma": cfg.sigma},
            "train_time": {"kind": "constant", "value": 0.0},
            "staleness": staleness,
        }
    )


def main(cfg: Config = Config()) -> Path:
    print(EXPLANATION + "\n")
    workers = (1, 4, 16) if cfg.tiny else cfg.workers
    steps = 20 if cfg.tiny else cfg.steps
    t0 = time.time()
    rows = []
    for P in workers:
        out = {}
        for name, st in (("sync", {"kind": "sync"}), ("async", {"kind": "max_lag", "k_max": cfg.k_max})):
            res = simulate_timing(system(P, st, cfg), steps, groups_per_step=P, seed=cfg.seed, record_events=False)
            last = res.rows[-1]
            lags = [
                j.consume_step - j.head_version for j in res.jobs if j.consume_step is not None and j.consume_step >= 0
            ]
            out[name] = (last["throughput/samples_per_s"], last["util/workers"], float(np.mean(lags)) if lags else 0.0)
        rows.append((P, out))
    cdf = lognormal_cdf(median=1.0, sigma_log=cfg.sigma)
    mean_time = expected_value(cdf)
    print(f"  {2 * len(workers)} timing simulations in {time.time() - t0:.1f} s; batch = P groups, {steps} steps")
    print(
        f"  {'P':>4s} {'sync /s':>9s} {'async /s':>9s} {'speed-up':>9s} {'theory':>7s} {'sync busy':>10s} {'async lag':>10s}"
    )
    for P, o in rows:
        ratio = expected_max(cdf, P) / mean_time
        print(
            f"  {P:4d} {o['sync'][0]:9.2f} {o['async'][0]:9.2f} {o['async'][0] / o['sync'][0]:8.2f}x {ratio:6.2f}x"
            f" {o['sync'][1]:9.0%} {o['async'][2]:10.2f}"
        )

    Ps = np.array(workers, dtype=float)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.loglog(Ps, [o["sync"][0] for _, o in rows], "o", color="tab:blue", label="sync, measured")
    ax1.loglog(Ps, [o["async"][0] for _, o in rows], "s", color="tab:red", label=f"async (k_max={cfg.k_max}), measured")
    ax1.loglog(
        Ps,
        Ps / np.array([expected_max(cdf, int(P)) for P in Ps]),
        "--",
        color="tab:blue",
        label="theory: P / E[max of P]",
    )
    ax1.loglog(Ps, Ps / mean_time, "--", color="tab:red", label="theory: P / E[time] (no lag bound)")
    ax1.set_xlabel("rollout workers P (one group each per step)")
    ax1.set_ylabel("throughput (groups per simulated second)")
    ax1.set_title(f"what asynchrony buys (log-normal times, sigma={cfg.sigma:g})", fontsize=10)
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3, which="both")
    ax2.plot(Ps, [o["sync"][1] for _, o in rows], "o-", color="tab:blue", label="sync: workers busy")
    ax2.plot(Ps, [o["async"][1] for _, o in rows], "s-", color="tab:red", label="async: workers busy")
    ax2.set_xscale("log")
    ax2.set_ylim(0, 1.05)
    ax2.set_xlabel("rollout workers P")
    ax2.set_ylabel("fraction of time workers generate")
    ax3 = ax2.twinx()
    ax3.plot(Ps, [o["async"][2] for _, o in rows], "^:", color="k", label="async: mean lag (versions)")
    ax3.set_ylabel("mean lag of consumed rollouts (versions)")
    ax3.set_ylim(0, cfg.k_max + 0.5)
    h1, l1 = ax2.get_legend_handles_labels()
    h2, l2 = ax3.get_legend_handles_labels()
    ax2.legend(h1 + h2, l1 + l2, fontsize=8, loc="lower left")
    ax2.set_title("idle stragglers vs what asynchrony costs (staleness)", fontsize=10)
    ax2.grid(alpha=0.3)
    return save_figure(fig, cfg.out, "stragglers")


if __name__ == "__main__":
    main(config_from_argv(Config))
