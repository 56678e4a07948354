"""The premise of the learning claims: uncorrected stale training degrades, verified per context first.

VCPO, GAC, M2PO and their composition claim to rescue training that staleness degrades; where
uncorrected lag-16 training already matches synchronous training there is nothing to rescue, and
"matches sync" passes for free. So each context (:data:`sandbox.claims._runs.CONTEXTS`: the
bit-string task and the LM task) first tests the premise, one row per context, paired by seed:

* sync learns: final expected reward of the synchronous run − its first evaluation (step 0, after one
  optimizer step) > the context's margin m (:attr:`sandbox.claims._runs.Context.margin`: 0.05 on the
  bit-string task; on the LM a third of the sync gain measured on the selection seeds,
  :mod:`.lm_selection`, so there the selection gain is 3 m): a "matches sync" row compares with a
  reference that learns more than its margin on the claims' own seeds, so a learner that does not learn
  cannot pass it (the note gives the gain in margins);
* uncorrected degrades at lag 16: final expected reward (fixed lag 16, no correction) − (sync) < −m
  (one-sided: reproduced when the 95% interval's upper end is below −m);
* null (the family's noise floor, :mod:`.null`): final expected reward of the synchronous run on other
  sampling seeds − sync, in [−m, m].

A row whose claim presupposes the degradation — a method rescues it (matches sync, beats a control,
stays stable, two methods beat each alone) or a signal precedes it — is **gated** by its context's
premise (:func:`gate`; a "matches sync" row also by "sync learns"): when a premise row is not
``reproduced`` (``not reproduced`` or ``inconclusive``), its verdict is ``not testable here`` (never ``reproduced``; its interval and p-value
stay, for information) and it leaves the Holm family (docs/claims.md#multiple-comparisons). Rows that
measure a quantity whose claim holds whether or not training degrades (ESS/N falls with lag, the
cosine rows, the masked fraction) carry their context but are not gated.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from sandbox.claims import _runs as R
from sandbox.claims.base import NOT_TESTABLE, REPRODUCED, ClaimResult, Curve, Row, t_interval
from sandbox.claims.null import null_row

LABEL = "uncorrected degrades at lag 16"
LEARNS_LABEL = "sync learns"
VARIANTS = {"sync": R.SYNC, "uncorrected, lag 16": R.lag(16)}
LM_VARIANTS = [*VARIANTS.values(), R.null_variant(R.SYNC, R.LM)]
"""The LM runs this claim needs (prefetched together with the other claims', :func:`sandbox.claims.report.run_claims`)."""


def margin_text(ctx: R.Context) -> str:
    """How the context's margin was set (said on every row that uses it)."""
    if ctx.name == "lm":
        return f"margin {ctx.margin:.3g} = 1/3 of the sync gain measured on the selection seed (sandbox.claims.lm_selection)"
    return f"margin {ctx.margin:.3g}"


def premise_row(ctx: R.Context, seeds: int, quick: bool) -> Row:
    """The premise row of ``ctx`` over ``seeds`` seeds (its runs are cached: every claim that gates a
    row on it reads the same runs)."""
    reward = {name: R.per_seed(ov, seeds, quick, R.Run.final_reward, ctx) for name, ov in VARIANTS.items()}
    return Row(
        LABEL,
        "final expected reward: lag 16 − sync",
        reward["uncorrected, lag 16"] - reward["sync"],
        -ctx.margin,
        "<",
        note=margin_text(ctx),
        context=ctx.name,
    )


def first_evaluation(run: R.Run) -> float:
    """The run's first evaluation (step 0, after one optimizer step): the base model's reward within its noise."""
    ev = run.metrics["eval/expected_reward"]
    ev = ev[np.isfinite(ev)]
    return float(ev[0]) if ev.size else float("nan")


def learns_row(ctx: R.Context, seeds: int, quick: bool) -> Row:
    """Does the synchronous reference learn more than the margin: its gain over its first evaluation > the
    context's margin (then a learner that does not learn, which ends near its first evaluation, falls short of
    sync by more than the margin on average and cannot pass "matches sync")."""
    gain = R.per_seed(R.SYNC, seeds, quick, lambda r: r.final_reward() - first_evaluation(r), ctx)
    ratio = float(np.nanmean(gain)) / ctx.margin
    return Row(
        LEARNS_LABEL,
        "final expected reward − first evaluation (sync)",
        gain,
        ctx.margin,
        ">",
        note=f"{margin_text(ctx)}; mean gain = {ratio:.1f} × margin",
        context=ctx.name,
    )


def reward_null(ctx: R.Context, seeds: int, quick: bool) -> Row:
    """The null row of the final-reward families: sync on other sampling seeds − sync, in [−margin, margin]."""
    ref = R.per_seed(R.SYNC, seeds, quick, R.Run.final_reward, ctx)
    other = R.null_per_seed(R.SYNC, seeds, quick, R.Run.final_reward, ctx)
    return null_row(
        "sync reseeded", "final expected reward: sync (other sampling seed) − sync", other - ref, ctx.margin, ctx.name
    )


def gate(row: Row, *premises: Row) -> Row:
    """``row`` as its context's premises allow: its own verdict when every premise row is reproduced (the
    note says the premises were verified, with their intervals), otherwise ``not testable here`` (the note
    gives the failed premises' intervals and verdicts)."""
    for premise in premises:
        if premise.context != row.context:
            raise ValueError(f"gate: premise of context {premise.context!r} for a row of context {row.context!r}")
    text = {
        p.label: f"{'uncorrected − sync' if p.label == LABEL else p.label} {p.mean:.3g} [{p.low:.3g}, {p.high:.3g}]"
        for p in premises
    }
    failed = [p for p in premises if p.verdict != REPRODUCED]
    if not failed:
        why = f"premise verified in {row.context}: " + ", ".join(text.values())
        return dataclasses.replace(row, note="; ".join(x for x in (why, row.note) if x))
    why = f"premise not verified in {row.context}: " + ", ".join(f"{text[p.label]}, {p.verdict}" for p in failed)
    return dataclasses.replace(row, cap=NOT_TESTABLE, note="; ".join(x for x in (why, row.note) if x))


def lm_seeds_or_default(lm_seeds: int | None, quick: bool) -> int:
    """``--lm-seeds`` (None: the LM context's default, 4, or 2 with ``--quick``; 0: no LM context)."""
    if lm_seeds is None:
        return R.LM.quick_seeds if quick else R.LM.full_seeds
    if lm_seeds == 1 or lm_seeds < 0:
        raise ValueError(f"lm_seeds: expected 0 (no LM context) or at least 2 (an interval needs two), got {lm_seeds}")
    return lm_seeds


def contexts(seeds: int, quick: bool, lm_seeds: int | None) -> list[tuple[R.Context, int]]:
    """The contexts a learning claim runs in, with their seed counts: bit-string, then LM unless
    ``lm_seeds = 0``."""
    n = lm_seeds_or_default(lm_seeds, quick)
    return [(R.BITSTRING, seeds)] + ([(R.LM, n)] if n else [])


def run(quick: bool = False, seeds: int = R.FULL_SEEDS, lm_seeds: int | None = None) -> ClaimResult:
    ctxs = contexts(seeds, quick, lm_seeds)
    result = ClaimResult(
        name="premise",
        paper="VCPO (arXiv 2602.17616), GAC (arXiv 2603.01501), M2PO (arXiv 2510.01161)",
        definition=__doc__.split("\n\n", 1)[1].strip(),
        settings={
            f"{name} ({ctx.name})": R.settings(ov, quick, ctx) for ctx, _ in ctxs for name, ov in VARIANTS.items()
        }
        | {"seeds": {ctx.name: n for ctx, n in ctxs}},
        x_label="context (task)",
        y_label="final expected reward (mean over seeds, 95% CI)",
        kind="grouped",
        x_ticks=[{"bitstring": "bit-string (H = 32)", "lm": "LM (3-digit addition)"}[ctx.name] for ctx, _ in ctxs],
    )
    result.rows = [
        row
        for ctx, n in ctxs
        for row in (learns_row(ctx, n, quick), premise_row(ctx, n, quick), reward_null(ctx, n, quick))
    ]
    for name, ov in VARIANTS.items():
        cis, values = [], []
        for ctx, n in ctxs:
            values.append(R.per_seed(ov, n, quick, R.Run.final_reward, ctx))
            m, lo, hi = t_interval(values[-1])
            cis.append((m, lo if np.isfinite(lo) else m, hi if np.isfinite(hi) else m))
        # each seed's value per context (a context with fewer seeds padded with NaN: no dot)
        seeds = [[float(v[s]) if s < len(v) else math.nan for v in values] for s in range(max(n for _, n in ctxs))]
        result.curves.append(Curve(name, [float(i) for i in range(len(ctxs))], *map(list, zip(*cis)), seeds))
    return result
