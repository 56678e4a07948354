"""VCPO (arXiv 2602.17616): ESS falls with lag, ESS-scaled learning rate against uncorrected training
and against a matched constant learning rate, and whether the ESS drop precedes the reward drop.

Scenario: ``scenarios/fixed_lag.toml`` with the ``methods_bitstring`` settings (docs/claims.md#scenario);
VCPO is ``vcpo_lr`` with sequence TIS (C = 8), as in ``methods_bitstring``. Rows (paired by seed):

* ESS/N falls with lag: mean ``is/ess_ratio`` over steps ≥ 16, sync − lag 4 > 0.05 and lag 4 − lag 16 >
  0.05 (a minimum effect of 5% of N);
* VCPO matches sync at lag 16: final expected reward (VCPO) − (sync) > −m, m the context's margin
  (:attr:`._runs.Context.margin`: 0.05 on the bit-string task, a third of the synchronous gain on the LM);
* VCPO beats its matched constant learning rate: final reward (VCPO) − (constant lr) > m (the minimum
  effect), where the control is the same run with sequence TIS and no stabilizer at the constant learning
  rate mean(``lr/scale`` of that seed's VCPO run) × 0.3;
* ESS drop precedes the reward drop, against a shifted-time null: on the uncorrected lag-16 run of each
  seed, the reward collapses at the first step where the 5-step mean of ``reward/mean`` is 0.2 below
  its running maximum; the ESS drops at the first step where the 5-step mean of ``is/ess_ratio`` is
  below 0.5; lead = reward step − ESS step (> 0: ESS first; ESS never below 0.5 gives lead = −(steps
  left)). The raw lead is positive by construction at lag 16 (ESS/N is below 0.5 from about step 16 in
  every run, so any later reward dip comes "after" it); it is reported as descriptive only (the note).
  The tested statistic is the lead minus its null: the mean lead over all T circular time shifts of
  the run's ESS series (the same ESS values and autocorrelation, their timing decoupled from the
  reward; exact enumeration, no random seed). > 5 steps (the minimum effect: the smoothing window): the
  real ESS drop comes earlier before the collapse than a time-shifted ESS would. Over the seeds that
  collapse; inconclusive when fewer than two collapse (the note says how many);
* null (the noise floor, :mod:`.null`): final reward of sync on other sampling seeds − sync in [−m, m];
  a reward row whose mean lies within the floor says so, and "beats" is then at best inconclusive.

The premise "uncorrected training degrades at lag 16" is the row of :mod:`.premise`; "VCPO matches
sync", "VCPO beats matched constant lr" and the ESS lead are gated by it (``not testable here`` where
it is not reproduced), "VCPO matches sync" also by "sync learns". LM context (:data:`._runs.LM`,
``--lm-seeds`` replicas): "VCPO matches sync at lag 16", "VCPO beats matched constant lr" and the null;
the replicas of one run share its learning rate, so the LM control is one run at the LM learning rate ×
the mean ``lr/scale`` of VCPO's run over replicas and steps. The lead needs a reward collapse of 0.2 (LM
rewards are about 0.2), so it does not run there.
"""

from __future__ import annotations

import math

import numpy as np

from sandbox.claims import _runs as R
from sandbox.claims.base import ClaimResult, Row, seed_curve
from sandbox.claims.null import against
from sandbox.claims.premise import contexts, gate, learns_row, margin_text, premise_row, reward_null

WARMUP = 16
COLLAPSE_DROP = 0.2
ESS_LOW = 0.5
ESS_MIN_EFFECT = 0.05
"""Minimum fall of ESS/N (5% of N) for "ESS/N falls"."""
LEAD_MIN_EFFECT = 5.0
"""Minimum lead over its null, in steps (the 5-step smoothing window of both series)."""

LAGS = {"sync": R.SYNC, "lag 4": R.lag(4), "lag 16": R.lag(16)}
VCPO_LAG16 = {**R.lag(16), **R.VCPO}
LM_VARIANTS = [R.SYNC, R.lag(16), VCPO_LAG16, R.null_variant(R.SYNC, R.LM)]
"""The LM runs this claim needs (prefetched with the other claims', :func:`sandbox.claims.report.run_claims`)."""


def _ess(run: R.Run) -> float:
    return run.mean("is/ess_ratio", skip=WARMUP)


def _collapse_step(run: R.Run) -> int | None:
    """First step where the 5-step mean of ``reward/mean`` is 0.2 below its running maximum (None: never)."""
    reward = R.smooth(run.metrics["reward/mean"])
    running_max = np.fmax.accumulate(np.where(np.isfinite(reward), reward, -np.inf))
    collapsed = np.nonzero(reward < running_max - COLLAPSE_DROP)[0]
    return int(collapsed[0]) if collapsed.size else None


def _ess_drop_step(ess: np.ndarray) -> int:
    """First step where the 5-step mean of the ESS series is below 0.5 (its length if never)."""
    low = np.nonzero(R.smooth(ess) < ESS_LOW)[0]
    return int(low[0]) if low.size else len(ess)


def collapse_lead(run: R.Run) -> float:
    """Steps by which the ESS drop precedes the reward collapse; NaN if the reward never collapses."""
    t_reward = _collapse_step(run)
    if t_reward is None:
        return math.nan
    return float(t_reward - _ess_drop_step(run.metrics["is/ess_ratio"]))


def null_lead(run: R.Run) -> float:
    """The lead's null: the mean of reward step − ESS-drop step over all T circular shifts of the run's
    ESS series (``np.roll`` by 0 … T − 1 steps); NaN if the reward never collapses."""
    t_reward = _collapse_step(run)
    if t_reward is None:
        return math.nan
    ess = run.metrics["is/ess_ratio"]
    return float(np.mean([t_reward - _ess_drop_step(np.roll(ess, s)) for s in range(len(ess))]))


def lm_control_variant(ctx: R.Context, mean_scale: float) -> dict:
    """The matched constant-lr control of a replica-seeds context: lag 16 with sequence TIS, no stabilizer, at
    the context's learning rate × VCPO's mean ``lr/scale`` (one learning rate for all the replicas of a run)."""
    return {**R.lag(16), **R.TIS, "algorithm.optimizer.lr": float(ctx.lr * mean_scale)}


def _reward_rows(
    ctx: R.Context, seeds: int, quick: bool, vs_sync, vs_control, control_note: str, premise: Row
) -> list[Row]:
    """The final-reward rows of one context: VCPO matches sync (gated by both premises), VCPO beats its matched
    constant lr (minimum effect: the margin), and the null row they are judged against."""
    null = reward_null(ctx, seeds, quick)
    margin = margin_text(ctx)
    matches = gate(
        Row(
            "VCPO matches sync at lag 16",
            "final expected reward: VCPO − sync",
            vs_sync,
            -ctx.margin,
            ">",
            note=margin,
            context=ctx.name,
        ),
        premise,
        learns_row(ctx, seeds, quick),
    )
    beats = gate(
        Row(
            "VCPO beats matched constant lr",
            "final expected reward: VCPO − constant lr",
            vs_control,
            ctx.margin,
            ">",
            note=f"{control_note}; minimum effect = {margin}",
            context=ctx.name,
        ),
        premise,
    )
    return [against(matches, null, beats=False), against(beats, null, beats=True), null]


def run(quick: bool = False, seeds: int = R.FULL_SEEDS, lm_seeds: int | None = None) -> ClaimResult:
    ctxs = contexts(seeds, quick, lm_seeds)
    ess = {name: R.per_seed(ov, seeds, quick, _ess) for name, ov in LAGS.items()}
    vcpo_ov = VCPO_LAG16
    reward = {
        name: R.per_seed(ov, seeds, quick, R.Run.final_reward) for name, ov in (("sync", R.SYNC), ("VCPO", vcpo_ov))
    }
    premise = premise_row(R.BITSTRING, seeds, quick)
    scales = R.per_seed(vcpo_ov, seeds, quick, lambda r: r.mean("lr/scale"))
    control = R.with_collapse(
        [
            R.run({**R.lag(16), **R.TIS, "algorithm.optimizer.lr": float(R.BASE_LR * s)}, seed, quick)
            for seed, s in enumerate(scales)
        ],
        R.Run.final_reward,
    )
    leads = R.per_seed(R.lag(16), seeds, quick, collapse_lead)
    nulls = R.per_seed(R.lag(16), seeds, quick, null_lead)
    collapsed = int(np.isfinite(leads).sum())
    raw = (
        f"raw lead (descriptive, positive by construction): {np.nanmean(leads):.1f} steps"
        if collapsed
        else "no raw lead"
    )
    result = ClaimResult(
        name="vcpo",
        paper="VCPO (arXiv 2602.17616)",
        definition=__doc__.split("\n\n", 1)[1].strip(),
        settings={
            **{name: R.settings(ov, quick) for name, ov in LAGS.items()},
            "VCPO": R.settings(vcpo_ov, quick),
            **{
                f"{name} (lm)": R.settings(ov, quick, ctx)
                for ctx, _ in ctxs[1:]
                for name, ov in (("sync", R.SYNC), ("lag 16", R.lag(16)), ("VCPO", vcpo_ov))
            },
            "constant lr control": f"lag 16 + sequence TIS, lr = mean lr/scale of the VCPO run × {R.BASE_LR}; "
            f"per seed: {[round(float(R.BASE_LR * s), 4) for s in scales]}",
        },
        y_label="ESS/N (is/ess_ratio, 5-step mean)",
    )
    bit = R.BITSTRING
    result.rows = [
        Row(
            "ESS/N falls: sync → lag 4",
            "ESS/N(sync) − ESS/N(lag 4)",
            ess["sync"] - ess["lag 4"],
            ESS_MIN_EFFECT,
            ">",
            note="minimum effect 0.05 (5% of N)",
            context=bit.name,
        ),
        Row(
            "ESS/N falls: lag 4 → lag 16",
            "ESS/N(lag 4) − ESS/N(lag 16)",
            ess["lag 4"] - ess["lag 16"],
            ESS_MIN_EFFECT,
            ">",
            note="minimum effect 0.05 (5% of N)",
            context=bit.name,
        ),
        *_reward_rows(
            bit,
            seeds,
            quick,
            reward["VCPO"] - reward["sync"],
            reward["VCPO"] - control,
            f"mean lr/scale {np.nanmean(scales):.3g}",
            premise,
        ),
        gate(
            Row(
                "ESS drop precedes reward drop (vs shifted-time null)",
                "lead − null lead (steps); lead = reward-collapse step − ESS<0.5 step, null: mean over circular shifts of ESS",
                leads - nulls,
                LEAD_MIN_EFFECT,
                ">",
                note=f"{collapsed} of {seeds} uncorrected lag-16 runs collapse"
                + ("" if collapsed >= 2 else " (too few to measure a lead)")
                + f"; {raw}; minimum effect 5 steps",
                forced_inconclusive=collapsed < 2,
                context=bit.name,
            ),
            premise,
        ),
    ]
    for ctx, n in ctxs[1:]:
        lm = {
            name: R.per_seed(ov, n, quick, R.Run.final_reward, ctx)
            for name, ov in (("sync", R.SYNC), ("VCPO", vcpo_ov))
        }
        lm_scale = float(np.nanmean(R.per_seed(vcpo_ov, n, quick, lambda r: r.mean("lr/scale"), ctx)))
        if math.isfinite(lm_scale):
            lm_control = R.per_seed(lm_control_variant(ctx, lm_scale), n, quick, R.Run.final_reward, ctx)
            result.settings["constant lr control (lm)"] = R.settings(lm_control_variant(ctx, lm_scale), quick, ctx)
        else:  # no finite lr/scale (every VCPO replica diverged at once): no control to match, the row has no value
            lm_control = np.full(n, np.nan)
        result.rows += _reward_rows(
            ctx,
            n,
            quick,
            lm["VCPO"] - lm["sync"],
            lm["VCPO"] - lm_control,
            f"one run at lr {ctx.lr:g} × mean lr/scale {lm_scale:.3g} = {ctx.lr * lm_scale:.3g}",
            premise_row(ctx, n, quick),
        )
    curves = [(name, ov, R.BITSTRING, seeds) for name, ov in {**LAGS, "VCPO, lag 16": vcpo_ov}.items()]
    curves += [
        (f"{name} (LM)", ov, ctx, n)
        for ctx, n in ctxs[1:]
        for name, ov in (("sync", R.SYNC), ("lag 16", R.lag(16)), ("VCPO, lag 16", vcpo_ov))
    ]
    for name, ov, ctx, n_seeds in curves:
        runs = R.runs(ov, n_seeds, quick, ctx)
        n = min(len(r.steps) for r in runs)
        per = np.array([R.smooth(r.metrics["is/ess_ratio"][:n]) for r in runs])
        result.curves.append(seed_curve(name, runs[0].steps[:n].tolist(), per, bounds=(0.0, 1.0)))
    return result
