"""A systematic search for a setting where GAC (arXiv 2603.01501) rescues an asynchronous run.

Scenario: ``scenarios/fixed_lag.toml`` with the ``methods_bitstring`` settings (docs/claims.md#scenario),
no off-policy correction, 100 optimizer steps (40 with ``--quick``), one run per seed.
Search space (:data:`SEARCH`, crossed): GAC's threshold (fixed ``c_thr`` 0.1, 0.3, 0.5, or the
adaptive ``ema_mean_std`` threshold mean + 1·std of the last 50 cosines), its ``reference``
(``prev_raw``, ``prev_applied``, ``ema``) and its ``placement`` (``pre_optimizer``,
``post_optimizer``); other knobs at their defaults. Contexts (:data:`CONTEXTS`, crossed): Adam
learning rate 0.1, 0.3, 1.0; learner lag L = 4 or 16 optimizer steps; update schedule one optimizer
step per batch, or ``algorithm.minibatches = 4`` (four steps per batch, one group each). The lag is a
``fixed_lag`` control with k = L / S batches for S optimizer steps per batch, so the learner's lag is
L … L + S − 1 optimizer steps (docs/system.md#mini-batches) and both schedules see the same lag.
Protocol (no selection bias): in every context, each GAC setting runs on the selection seeds
100, 101, 102; the setting with the highest mean final expected reward is chosen (ties: the first in
search order). The chosen setting then runs on the evaluation seeds 0 … S−1 (disjoint from the
selection seeds), paired by seed with the matched control (same context, no GAC) and with
synchronous training at the same learning rate and schedule. Rows (final expected reward differences,
paired by seed):

* per context: best GAC beats its matched control, GAC − control > 0.05;
* in the most promising context (the largest selection-seed gain of the best GAC over the control):
  best GAC matches sync, GAC − sync > −0.05, and the control is degraded there, control − sync < −0.05
  (whether there was anything to rescue).
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass

import numpy as np

from sandbox.claims import _runs as R
from sandbox.claims.base import ClaimResult, Curve, Row, t_interval

REWARD_MARGIN = 0.05
"""Margin of the reward rows, as in :mod:`.gac` (a difference of 0.05 in final expected reward)."""
SELECTION_SEEDS, QUICK_SELECTION_SEEDS = (100, 101, 102), (100,)
WORKERS = min(2, os.cpu_count() or 1)
"""Processes that simulate the full mode's runs (:func:`._runs.prefetch`); ``--quick`` runs in-process."""

ADAPTIVE = "adaptive"
ADAPTIVE_THRESHOLD = {"threshold_mode": "ema_mean_std", "kappa": 1.0, "window": 50}
SCHEDULES = {"1 step/batch": {}, "4 mini-batches": {"algorithm.minibatches": 4}}

SEARCH = {
    "threshold": (0.1, 0.3, 0.5, ADAPTIVE),
    "reference": ("prev_raw", "prev_applied", "ema"),
    "placement": ("pre_optimizer", "post_optimizer"),
}
"""GAC settings searched in every context (their cross product)."""
CONTEXTS = {"lr": (0.1, 0.3, 1.0), "lag": (4, 16), "schedule": tuple(SCHEDULES)}
"""Contexts (their cross product): Adam learning rate, learner lag in optimizer steps, update schedule."""
QUICK_SEARCH = {
    "threshold": (0.3, ADAPTIVE),
    "reference": ("prev_applied",),
    "placement": ("pre_optimizer", "post_optimizer"),
}
QUICK_CONTEXTS = {"lr": (0.3,), "lag": (16,), "schedule": tuple(SCHEDULES)}


@dataclass(frozen=True)
class Setting:
    """One GAC setting of the search."""

    threshold: float | str
    reference: str
    placement: str

    @property
    def name(self) -> str:
        thr = "mean+1σ" if self.threshold == ADAPTIVE else f"{self.threshold:g}"
        return f"thr {thr} · {self.reference} · {self.placement.split('_')[0]}"

    def overrides(self) -> dict:
        gac = {"name": "gac", "reference": self.reference, "placement": self.placement}
        gac.update(
            ADAPTIVE_THRESHOLD if self.threshold == ADAPTIVE else {"threshold_mode": "fixed", "c_thr": self.threshold}
        )
        return {"algorithm.stabilizers": [gac]}


@dataclass(frozen=True)
class Context:
    """Where a setting is tried: learning rate, learner lag (optimizer steps) and update schedule."""

    lr: float
    lag: int
    schedule: str

    @property
    def name(self) -> str:
        return f"lr {self.lr:g} · lag {self.lag} · {self.schedule}"

    def _schedule(self) -> tuple[dict, int]:
        ov = SCHEDULES[self.schedule]
        steps = ov.get("algorithm.minibatches", 1) * ov.get("algorithm.epochs", 1)
        if self.lag % steps:
            raise ValueError(
                f"gac_search: lag {self.lag} is not a multiple of the {steps} optimizer steps per batch "
                f"of schedule {self.schedule!r}"
            )
        return ov, steps

    def control(self) -> dict:
        """Uncorrected asynchronous run: fixed lag k = lag / (steps per batch) batches, no GAC."""
        ov, steps = self._schedule()
        return {**R.lag(self.lag // steps), **ov, "algorithm.optimizer.lr": self.lr}

    def sync(self) -> dict:
        ov, _ = self._schedule()
        return {**R.SYNC, **ov, "algorithm.optimizer.lr": self.lr}

    def gac(self, setting: Setting) -> dict:
        return {**self.control(), **setting.overrides()}


def grid(space: dict) -> list:
    return list(itertools.product(*space.values()))


def select(table: dict[str, float]) -> str:
    """The key of the highest mean (NaN counts as −∞); ties go to the first key in order."""
    best, best_value = None, -math.inf
    for name, value in table.items():
        v = value if math.isfinite(value) else -math.inf
        if best is None or v > best_value:
            best, best_value = name, v
    return best


def _rewards(overrides: dict, seeds, quick: bool) -> np.ndarray:
    """Final rewards of the given seeds' runs, with which of them collapsed (the rows' "collapsed k/R")."""
    return R.with_collapse([R.run(overrides, s, quick) for s in seeds], lambda run: run.final_reward())


def _ci(values) -> tuple[float, float, float]:
    m, lo, hi = t_interval(values)
    return m, (lo if math.isfinite(lo) else m), (hi if math.isfinite(hi) else m)


def _fmt(x: float) -> str:
    return f"{x:.3f}" if math.isfinite(x) else "—"


def run(quick: bool = False, seeds: int = R.FULL_SEEDS) -> ClaimResult:
    search, contexts = (QUICK_SEARCH, QUICK_CONTEXTS) if quick else (SEARCH, CONTEXTS)
    selection_seeds = QUICK_SELECTION_SEEDS if quick else SELECTION_SEEDS
    eval_seeds = tuple(range(seeds))
    if set(eval_seeds) & set(selection_seeds):
        raise ValueError(
            f"gac_search: --seeds {seeds} overlaps the selection seeds {selection_seeds}; "
            f"expected at most {min(selection_seeds)} evaluation seeds"
        )
    workers = 1 if quick else WORKERS
    settings = [Setting(*s) for s in grid(search)]
    ctxs = [Context(*c) for c in grid(contexts)]

    # selection: every setting (and the control and sync, for the table) on the selection seeds
    R.prefetch(
        [
            (ov, s)
            for c in ctxs
            for ov in [c.control(), c.sync(), *(c.gac(g) for g in settings)]
            for s in selection_seeds
        ],
        quick,
        workers,
    )
    table: dict[str, dict[str, float]] = {}
    chosen: dict[str, Setting] = {}
    for c in ctxs:
        means = {g.name: float(np.mean(_rewards(c.gac(g), selection_seeds, quick))) for g in settings}
        chosen[c.name] = next(g for g in settings if g.name == select(means))
        table[c.name] = {
            "control (no GAC)": float(np.mean(_rewards(c.control(), selection_seeds, quick))),
            "sync": float(np.mean(_rewards(c.sync(), selection_seeds, quick))),
            **means,
        }
    gain = {c.name: table[c.name][chosen[c.name].name] - table[c.name]["control (no GAC)"] for c in ctxs}
    promising = next(c for c in ctxs if c.name == select(gain))

    # evaluation: the chosen setting, the matched control and sync on the evaluation seeds
    R.prefetch(
        [(ov, s) for c in ctxs for ov in (c.gac(chosen[c.name]), c.control(), c.sync()) for s in eval_seeds],
        quick,
        workers,
    )
    reward = {
        c.name: {
            "sync": _rewards(c.sync(), eval_seeds, quick),
            "control": _rewards(c.control(), eval_seeds, quick),
            "best GAC": _rewards(c.gac(chosen[c.name]), eval_seeds, quick),
        }
        for c in ctxs
    }

    result = ClaimResult(
        name="gac_search",
        paper="GAC (arXiv 2603.01501)",
        definition=__doc__.split("\n\n", 1)[1].strip(),
        settings={
            "search space": {k: list(v) for k, v in search.items()},
            "adaptive threshold": ADAPTIVE_THRESHOLD,
            "contexts": {k: list(v) for k, v in contexts.items()},
            "schedules": SCHEDULES,
            "selection seeds": list(selection_seeds),
            "evaluation seeds": list(eval_seeds),
            "selection table (mean final expected reward over the selection seeds)": table,
            "chosen GAC setting": {name: g.name for name, g in chosen.items()},
            "most promising context": promising.name,
            "runs": {
                c.name: {
                    "control": R.settings(c.control(), quick),
                    "sync": R.settings(c.sync(), quick),
                    "best GAC": R.settings(c.gac(chosen[c.name]), quick),
                }
                for c in ctxs
            },
        },
        x_label="context: Adam learning rate · learner lag (optimizer steps) · update schedule",
        y_label="final expected reward (mean over evaluation seeds, 95% CI)",
        kind="grouped",
        x_ticks=[c.name for c in ctxs],
    )
    stat = "final expected reward: best GAC − {}"
    result.rows = [
        Row(
            f"{c.name}: best GAC beats control",
            stat.format("control"),
            reward[c.name]["best GAC"] - reward[c.name]["control"],
            REWARD_MARGIN,
            ">",
            note=f"GAC: {chosen[c.name].name}",
        )
        for c in ctxs
    ]
    p = reward[promising.name]
    note = f"most promising on selection seeds; GAC: {chosen[promising.name].name}"
    result.rows += [
        Row(
            f"{promising.name}: best GAC matches sync",
            stat.format("sync"),
            p["best GAC"] - p["sync"],
            -REWARD_MARGIN,
            ">",
            note=note,
        ),
        Row(
            f"{promising.name}: control degraded vs sync",
            "final expected reward: control − sync",
            p["control"] - p["sync"],
            -REWARD_MARGIN,
            "<",
            note="is there anything to rescue",
        ),
    ]
    for variant in ("sync", "control", "best GAC"):
        cis = [_ci(reward[c.name][variant]) for c in ctxs]
        result.curves.append(
            Curve(
                variant if variant != "control" else "control (lag, no GAC)",
                [float(i) for i in range(len(ctxs))],
                *map(list, zip(*cis)),
            )
        )
    result.appendix = _appendix(table, chosen, reward, ctxs, selection_seeds, eval_seeds)
    return result


def _appendix(table, chosen, reward, ctxs, selection_seeds, eval_seeds) -> str:
    """The selection table (every setting's mean selection reward per context, the chosen one in bold)
    and the evaluation means with their 95% CIs."""
    names = list(next(iter(table.values())))
    lines = [
        f"Selection: mean final expected reward over seeds {list(selection_seeds)}; **bold** = chosen "
        "(highest mean GAC setting of the context).",
        "",
        "| setting | " + " | ".join(c.name for c in ctxs) + " |",
        "|---|" + "---|" * len(ctxs),
    ]
    for n in names:
        cells = [f"**{_fmt(table[c.name][n])}**" if chosen[c.name].name == n else _fmt(table[c.name][n]) for c in ctxs]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Evaluation: final expected reward over seeds 0–{max(eval_seeds)}, mean [95% CI].",
        "",
        "| context | chosen GAC setting | sync | control | best GAC |",
        "|---|---|---|---|---|",
    ]
    for c in ctxs:
        r = reward[c.name]
        cells = [
            f"{_fmt(m)} [{_fmt(lo)}, {_fmt(hi)}]"
            for m, lo, hi in (t_interval(r[v]) for v in ("sync", "control", "best GAC"))
        ]
        lines.append(f"| {c.name} | {chosen[c.name].name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
