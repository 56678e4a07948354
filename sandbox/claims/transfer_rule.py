"""Does preflight's transfer rule hold across LM sizes? (docs/preflight.md#the-transfer-rule)

``sandbox preflight`` places the user's learning rate on the LM proxy by matching the per-step relative
update size u = lr / RMS(θ) (Adam; :mod:`sandbox.preflight.transfer`). If that is the right quantity, LMs of
different sizes and weight scales become unstable at different learning rates but at about the same u.
Measured here on the LM task (3-digit addition, warm-started base models) at :data:`WIDTHS` residual widths,
each initialised at the fan-in scale std = 1/√d (LeCun et al. 1998) so the weight scales differ, trained at a
fixed lag of :data:`LAG` versions on a grid of u values (:data:`U_GRID`, lr = u · RMS(θ) of that model's base
weights). Per seed, the **critical u** is the smallest grid value at which that seed collapses (its final
expected reward falls min(0.2, half its best) below its best, or it diverges — preflight's rule); a seed that
never collapses is censored at twice the largest grid value (said in the row's note). Rows, paired by seed:

* the critical learning rate differs between the smallest and the largest width by more than the grid's
  resolution (one grid step, a factor 2): |log2(lr*_large / lr*_small)| > 1;
* the critical u of each other width is within a factor 2 of the middle width's:
  log2(u*_w / u*_mid) within [−1, 1] (:data:`FACTOR`).

Where the first row is not reproduced the widths' weight scales did not separate the learning rates, and the
second row cannot tell u from lr: the verdicts say so as measured.
"""

from __future__ import annotations

import copy
import math
from functools import partial

import numpy as np
import torch

from sandbox.analysis.collapse import replica_reward_drops
from sandbox.base.processes import forked_map
from sandbox.claims.base import ClaimResult, Curve, Row, t_interval
from sandbox.preflight.transfer import params_rms
from sandbox.run.runner import run_scenario
from sandbox.scenario.api import validate_scenario
from sandbox.scenario.load import read_toml
from sandbox.scenario.shipped import shipped_root
from sandbox.tasks import TASKS

WIDTHS = (32, 64, 128)
LAG = 4
U_GRID = (2.5e-3, 5e-3, 1e-2, 2e-2, 4e-2)
FACTOR = 2.0
FULL = {"seeds": 4, "steps": 60}
QUICK = {"seeds": 2, "steps": 30}


def scenario(width: int, seeds: int, steps: int, lr: float | None = None) -> dict:
    """The LM proxy of ``lm_mission`` at residual width ``width`` (fan-in init), ``seeds`` replicas, fixed lag
    :data:`LAG`, learning rate ``lr`` (None: the shipped one)."""
    base = read_toml(shipped_root() / "lm_mission.toml")
    d = {k: copy.deepcopy(v) for k, v in base.items() if k not in ("variants", "title", "description")}
    d["task"]["model"] = {"d_model": width, "n_layers": 2, "n_heads": 4, "init_std": round(1 / math.sqrt(width), 6)}
    d["task"]["replicas"] = seeds
    d["run"].update(steps=steps, eval_every=5, schedules="shared")
    d["system"]["staleness"] = {"kind": "fixed_lag", "k": LAG}
    if lr is not None:
        d["algorithm"]["optimizer"]["lr"] = lr
    return d


def base_rms(width: int) -> float:
    """RMS(θ) of the weight matrices of the width's warm-started base model."""
    scn = validate_scenario(scenario(width, 1, 1), f"transfer_rule width {width}")
    task = TASKS[scn.task.name].impl(scn.task.model_copy(update={"replicas": 1}))
    return params_rms(task.init_params(torch.Generator().manual_seed(0)))


def critical(width: int, seeds: int, steps: int) -> tuple[float, list[float], list[list[bool]]]:
    """RMS(θ), the per-seed critical u (censored at 2 x the largest grid value) and the collapse table (grid x seeds)."""
    rms = base_rms(width)
    table = []
    for u in U_GRID:
        res = run_scenario(
            validate_scenario(scenario(width, seeds, steps, u * rms), f"transfer_rule width {width} u {u:g}")
        )
        table.append(replica_reward_drops(res))
    crit = []
    for s in range(seeds):
        hit = next((u for u, row in zip(U_GRID, table) if row[s]), None)
        crit.append(hit if hit is not None else 2 * U_GRID[-1])
    return rms, crit, table


def run(quick: bool = False, seeds: int | None = None, lm_seeds: int | None = None) -> ClaimResult:
    """The claim over ``lm_seeds`` seeds (None: :data:`FULL` or :data:`QUICK`'s; 0: not run, every row inconclusive
    and saying so); ``seeds`` (the bit-string seed count of the other claims) is not used: this claim is LM only."""
    size = QUICK if quick else FULL
    n = size["seeds"] if lm_seeds is None else int(lm_seeds)
    result = ClaimResult(
        name="transfer_rule",
        paper="preflight's transfer rule (Adam: relative update ≈ lr / RMS(θ), Kingma & Ba 2015)",
        definition=__doc__.split("\n\n", 1)[1].strip(),
        settings={
            "widths": list(WIDTHS),
            "lag": LAG,
            "u_grid": list(U_GRID),
            "seeds": n,
            "steps": size["steps"],
            "init_std": {w: round(1 / math.sqrt(w), 6) for w in WIDTHS},
        },
        x_label="LM residual width d_model",
        y_label="critical value (mean over seeds, 95% CI): u = lr/RMS(θ) and lr",
        kind="grouped",
        x_ticks=[str(w) for w in WIDTHS],
    )
    if n == 0:
        why = "not run: --lm-seeds 0 (this claim runs only in the LM context)"
        result.rows = [
            Row(label, stat, [], thr, d, note=why, forced_inconclusive=True)
            for label, stat, thr, d in (
                ("the critical learning rate differs across widths", "|log2(lr*(large) / lr*(small))|", 1.0, ">"),
                ("the critical u is within 2x across widths", "log2(u*(d) / u*(middle))", (-1.0, 1.0), "within"),
            )
        ]
        nan = [math.nan] * len(WIDTHS)
        result.curves = [
            Curve(label, [float(i) for i in range(len(WIDTHS))], nan, nan, nan)
            for label in ("critical u (not run)", "critical lr (not run)")
        ]
        return result
    # the widths' runs are independent and seeded by their scenarios: one process each (two cores busy)
    per = dict(zip(WIDTHS, forked_map([partial(critical, w, n, size["steps"]) for w in WIDTHS])))
    result.settings["rms"] = {w: per[w][0] for w in WIDTHS}
    censored = {w: sum(c >= 2 * U_GRID[-1] for c in per[w][1]) for w in WIDTHS}
    note = "; ".join(f"d={w}: RMS {per[w][0]:.3g}, censored {censored[w]}/{n}" for w in WIDTHS)
    small, mid, large = WIDTHS[0], WIDTHS[len(WIDTHS) // 2], WIDTHS[-1]
    lr = {w: np.array(per[w][1]) * per[w][0] for w in WIDTHS}
    result.rows.append(
        Row(
            "the critical learning rate differs across widths",
            f"|log2(lr*(d={large}) / lr*(d={small}))|",
            list(np.abs(np.log2(lr[large] / lr[small]))),
            math.log2(U_GRID[1] / U_GRID[0]),
            ">",
            note=note,
            context="lm",
        )
    )
    for w in WIDTHS:
        if w == mid:
            continue
        result.rows.append(
            Row(
                f"the critical u of d={w} is within {FACTOR:g}x of d={mid}'s",
                f"log2(u*(d={w}) / u*(d={mid}))",
                list(np.log2(np.array(per[w][1]) / np.array(per[mid][1]))),
                (-math.log2(FACTOR), math.log2(FACTOR)),
                "within",
                note=note,
                context="lm",
            )
        )
    for label, values in (
        ("critical u", {w: per[w][1] for w in WIDTHS}),
        ("critical lr", {w: list(lr[w]) for w in WIDTHS}),
    ):
        cis = [t_interval(values[w]) for w in WIDTHS]
        result.curves.append(
            Curve(
                label,
                [float(i) for i in range(len(WIDTHS))],
                [c[0] for c in cis],
                [c[1] if math.isfinite(c[1]) else c[0] for c in cis],
                [c[2] if math.isfinite(c[2]) else c[0] for c in cis],
            )
        )
    return result
