"""The premise of the learning claims: uncorrected stale training degrades, verified per context first.

VCPO, GAC, M2PO and their composition claim to rescue training that staleness degrades; where
uncorrected lag-16 training already matches synchronous training there is nothing to rescue, and
"matches sync" passes for free. So each context (:data:`sandbox.claims._runs.CONTEXTS`: the
bit-string task and the LM task) first tests the premise, one row per context, paired by seed:

* uncorrected degrades at lag 16: final expected reward (fixed lag 16, no correction) − (sync) < −0.05
  (one-sided: reproduced when the 95% interval's upper end is below −0.05).

A row whose claim presupposes the degradation — a method rescues it (matches sync, beats a control,
stays stable, two methods beat each alone) or a signal precedes it — is **gated** by its context's
premise (:func:`gate`): when the premise row is not ``reproduced`` (``not reproduced`` or
``inconclusive``), its verdict is ``not testable here`` (never ``reproduced``; its interval and p-value
stay, for information) and it leaves the Holm family (docs/claims.md#multiple-comparisons). Rows that
measure a quantity whose claim holds whether or not training degrades (ESS/N falls with lag, the
cosine rows, the masked fraction) carry their context but are not gated.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sandbox.claims import _runs as R
from sandbox.claims.base import NOT_TESTABLE, REPRODUCED, ClaimResult, Curve, Row, t_interval

REWARD_MARGIN = 0.05
LABEL = "uncorrected degrades at lag 16"
VARIANTS = {"sync": R.SYNC, "uncorrected, lag 16": R.lag(16)}
LM_VARIANTS = list(VARIANTS.values())
"""The LM runs this claim needs (prefetched together with the other claims', :func:`sandbox.claims.report.run_claims`)."""


def premise_row(ctx: R.Context, seeds: int, quick: bool) -> Row:
    """The premise row of ``ctx`` over ``seeds`` seeds (its runs are cached: every claim that gates a
    row on it reads the same runs)."""
    reward = {name: R.per_seed(ov, seeds, quick, R.Run.final_reward, ctx) for name, ov in VARIANTS.items()}
    return Row(
        LABEL,
        "final expected reward: lag 16 − sync",
        reward["uncorrected, lag 16"] - reward["sync"],
        -REWARD_MARGIN,
        "<",
        context=ctx.name,
    )


def gate(row: Row, premise: Row) -> Row:
    """``row`` as its context's premise allows: its own verdict when the premise is reproduced (the note
    says the premise was verified, with its interval), otherwise ``not testable here`` (the note gives
    the premise's interval and verdict)."""
    if premise.context != row.context:
        raise ValueError(f"gate: premise of context {premise.context!r} for a row of context {row.context!r}")
    interval = f"uncorrected − sync {premise.mean:.3g} [{premise.low:.3g}, {premise.high:.3g}]"
    if premise.verdict == REPRODUCED:
        return dataclasses.replace(
            row, note="; ".join(x for x in (f"premise verified in {row.context}: {interval}", row.note) if x)
        )
    why = f"premise not verified in {row.context}: {interval}, {premise.verdict}"
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
    result.rows = [premise_row(ctx, n, quick) for ctx, n in ctxs]
    for name, ov in VARIANTS.items():
        cis = []
        for ctx, n in ctxs:
            m, lo, hi = t_interval(R.per_seed(ov, n, quick, R.Run.final_reward, ctx))
            cis.append((m, lo if np.isfinite(lo) else m, hi if np.isfinite(hi) else m))
        result.curves.append(Curve(name, [float(i) for i in range(len(ctxs))], *map(list, zip(*cis))))
    return result
