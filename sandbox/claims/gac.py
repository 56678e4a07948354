"""GAC (arXiv 2603.01501): the consecutive-gradient cosine under staleness, and what GAC does to it.

Scenario: ``scenarios/fixed_lag.toml`` with the ``methods_bitstring`` settings (bit-string H = 32,
GRPO, Adam lr 0.3, no off-policy correction; docs/claims.md#scenario), one run per seed.
Statistic: ``grad/cos_prev`` (cosine between the raw gradient and the previous step's raw gradient,
before any stabilizer) averaged over the steps after the variant's warm-up (the first k steps of a
fixed lag k, which reuse version 0; none for a synchronous run) where both gradients are non-zero (a
batch where every group has equal rewards has a zero GRPO gradient and no defined cosine: a
synchronous run that has converged, about step 15 here, has none after it; a run with no such step
gives NaN for that seed and the row's note counts it). Differences are paired by seed. Rows:

* sync cosine near 0: mean cosine of the synchronous run in [−0.1, 0.1];
* stale cosine persistently higher: cos(fixed lag 16) − cos(sync) > 0.1;
* GAC lowers the cosine of the uncorrected run: cos(GAC at lag 16) − cos(lag 16) < −0.05 (paired by
  seed; the minimum effect is half the claimed stale rise of 0.1);
* GAC restores synchronous-like cosine: cos(GAC at lag 16) − cos(sync) < 0.1, and GAC must lower the
  uncorrected cosine (the row above): a GAC cosine near sync's but no lower than the uncorrected one's
  restores nothing (the uncorrected run was near sync already). The row is capped by the row above:
  ``not reproduced`` when that one is, at best ``inconclusive`` when that one is inconclusive; and it
  is ``not testable here`` when "stale cosine persistently higher" is not reproduced (no stale cosine
  rise to restore: its own premise, as :mod:`.premise` is the reward rows');
* GAC matches synchronous reward: final expected reward (GAC, lag 16) − (sync) > −m, m the context's
  margin (:attr:`._runs.Context.margin`);
* mini-batch regime: cos(sync, ``algorithm.epochs = 4``) − cos(sync) > 0.1 (four passes over each
  batch: consecutive gradients share the batch, docs/system.md#mini-batches);
* nulls (the noise floors, :mod:`.null`): the synchronous run on other sampling seeds − sync, for the
  cosine (in [−0.05, 0.05]) and for the final reward (in [−m, m]); a difference row whose mean lies
  within its floor says so (a claimed difference there is at best inconclusive).

"GAC matches synchronous reward" is gated by the context's premises (:mod:`.premise`: ``not testable
here`` where uncorrected lag-16 training does not degrade or the synchronous run does not learn); the cosine rows are not (they measure the
gradients' geometry, which the paper's claim ties to staleness, not to a degradation). LM context
(:data:`._runs.LM`, ``--lm-seeds`` replicas): the same rows but the mini-batch one (the LM's sync,
lag-16 and GAC runs; same warm-ups).
"""

from __future__ import annotations

import numpy as np

from sandbox.claims import _runs as R
from sandbox.claims.base import (
    INCONCLUSIVE,
    NOT_REPRODUCED,
    NOT_TESTABLE,
    REPRODUCED,
    ClaimResult,
    Row,
    seed_curve,
)
from sandbox.claims.null import against, null_row
from sandbox.claims.premise import contexts, gate, learns_row, margin_text, premise_row, reward_null

WARMUP = 16
"""Warm-up of the fixed lag 16 variants (the steps that reuse version 0); a synchronous run has none."""
COS_MARGIN = 0.1
COS_MIN_EFFECT = 0.05
"""Minimum effect of "GAC cosine below uncorrected" (half the claimed stale rise) and the cosine null's band."""


def defined_cosine(run: R.Run) -> np.ndarray:
    """``grad/cos_prev`` per step, NaN where it is undefined: where this step's or the previous
    step's gradient is zero (a batch whose groups all have equal rewards has a zero GRPO gradient,
    e.g. every step after a synchronous run converged). The learner logs NaN there itself
    (``sandbox/learner/diagnostics.py``); the norm test is kept as a guard, so a forced 0 can never be
    averaged in."""
    norm = run.metrics["grad/norm"]
    prev = np.concatenate([[np.nan], norm[:-1]])
    return np.where((norm > 0) & (prev > 0), run.metrics["grad/cos_prev"], np.nan)


def _cos(run: R.Run, warmup: int = WARMUP) -> float:
    """Mean defined cosine (:func:`defined_cosine`) over the steps ≥ ``warmup``."""
    cos = defined_cosine(run)[warmup:]
    cos = cos[np.isfinite(cos)]
    return float(cos.mean()) if cos.size else float("nan")


VARIANTS = {
    "sync": R.SYNC,
    "fixed lag 16": R.lag(16),
    "GAC, lag 16": {**R.lag(16), **R.GAC},
    "sync, epochs 4": {**R.SYNC, "algorithm.epochs": 4},
}
WARMUPS = {"sync": 0, "fixed lag 16": WARMUP, "GAC, lag 16": WARMUP, "sync, epochs 4": 0}
LM_NAMES = ("sync", "fixed lag 16", "GAC, lag 16")
"""The variants the LM context runs (not the mini-batch one)."""
LM_VARIANTS = [*(VARIANTS[n] for n in LM_NAMES), R.null_variant(R.SYNC, R.LM)]
"""The LM runs this claim needs (prefetched with the other claims', :func:`sandbox.claims.report.run_claims`)."""


def _undefined_note(*names_values) -> str:
    """Why a cosine row has fewer seeds than asked for (empty when every seed has a value)."""
    parts = [
        f"{int((~np.isfinite(v)).sum())} of {len(v)} seeds of '{n}'" for n, v in names_values if (~np.isfinite(v)).any()
    ]
    return (
        ("no defined cosine (zero gradient at every step after the warm-up) for " + ", ".join(parts)) if parts else ""
    )


def _rows(ctx: R.Context, seeds: int, quick: bool, names) -> list[Row]:
    """The rows of one context over the variants ``names`` (the mini-batch row where they include it)."""
    cos = {name: R.per_seed(VARIANTS[name], seeds, quick, lambda r, w=WARMUPS[name]: _cos(r, w), ctx) for name in names}
    reward = {
        name: R.per_seed(VARIANTS[name], seeds, quick, R.Run.final_reward, ctx) for name in ("sync", "GAC, lag 16")
    }
    stat = "mean grad/cos_prev after the warm-up where both gradients are non-zero"
    note = {
        name: _undefined_note(("sync", cos["sync"]), *([(name, cos[name])] if name != "sync" else [])) for name in names
    }
    c = ctx.name
    reseeded = R.null_per_seed(VARIANTS["sync"], seeds, quick, lambda r: _cos(r, WARMUPS["sync"]), ctx)
    cos_null = null_row(
        "sync cosine reseeded", "cos(sync, other sampling seed) − cos(sync)", reseeded - cos["sync"], COS_MIN_EFFECT, c
    )
    reward_floor = reward_null(ctx, seeds, quick)
    lower = against(
        Row(
            "GAC cosine below uncorrected",
            "cos(GAC, lag 16) − cos(lag 16)",
            cos["GAC, lag 16"] - cos["fixed lag 16"],
            -COS_MIN_EFFECT,
            "<",
            note="; ".join(
                x
                for x in (
                    "minimum effect 0.05",
                    _undefined_note(("fixed lag 16", cos["fixed lag 16"]), ("GAC, lag 16", cos["GAC, lag 16"])),
                )
                if x
            ),
            context=c,
        ),
        cos_null,
        beats=True,
    )
    cap, why = {
        REPRODUCED: ("", ""),
        NOT_REPRODUCED: (NOT_REPRODUCED, "GAC's cosine is not below the uncorrected run's"),
        INCONCLUSIVE: (INCONCLUSIVE, "GAC's cosine not significantly below the uncorrected run's"),
    }[lower.verdict]
    stale = against(
        Row(
            "stale cosine higher than sync",
            "cos(lag 16) − cos(sync)",
            cos["fixed lag 16"] - cos["sync"],
            COS_MARGIN,
            ">",
            note=note["fixed lag 16"],
            context=c,
        ),
        cos_null,
        beats=True,
    )
    if stale.verdict != REPRODUCED:  # nothing to restore: the row's own premise fails
        cap, why = NOT_TESTABLE, f"no stale cosine rise to restore ('stale cosine higher than sync' {stale.verdict})"
    restore_note = "; ".join(x for x in (why, note["GAC, lag 16"]) if x)
    rows = [
        Row(
            "sync cosine near 0",
            stat + " (sync)",
            cos["sync"],
            (-COS_MARGIN, COS_MARGIN),
            "within",
            note=note["sync"],
            context=c,
        ),
        stale,
        lower,
        Row(
            "GAC restores sync-like cosine",
            "cos(GAC, lag 16) − cos(sync), and GAC below uncorrected",
            cos["GAC, lag 16"] - cos["sync"],
            COS_MARGIN,
            "<",
            note=restore_note,
            cap=cap,
            context=c,
        ),
        against(
            gate(
                Row(
                    "GAC matches sync reward at lag 16",
                    "final expected reward: GAC − sync",
                    reward["GAC, lag 16"] - reward["sync"],
                    -ctx.margin,
                    ">",
                    note=margin_text(ctx),
                    context=c,
                ),
                premise_row(ctx, seeds, quick),
                learns_row(ctx, seeds, quick),
            ),
            reward_floor,
            beats=False,
        ),
    ]
    if "sync, epochs 4" in names:
        rows.append(
            against(
                Row(
                    "mini-batch (epochs 4) cosine higher",
                    "cos(sync, E=4) − cos(sync)",
                    cos["sync, epochs 4"] - cos["sync"],
                    COS_MARGIN,
                    ">",
                    note=note["sync, epochs 4"],
                    context=c,
                ),
                cos_null,
                beats=True,
            )
        )
    return rows + [cos_null, reward_floor]


def run(quick: bool = False, seeds: int = R.FULL_SEEDS, lm_seeds: int | None = None) -> ClaimResult:
    ctxs = contexts(seeds, quick, lm_seeds)
    result = ClaimResult(
        name="gac_cosine",
        paper="GAC (arXiv 2603.01501)",
        definition=__doc__.split("\n\n", 1)[1].strip(),
        settings={
            **{name: R.settings(ov, quick) for name, ov in VARIANTS.items()},
            **{f"{name} (lm)": R.settings(VARIANTS[name], quick, ctx) for ctx, _ in ctxs[1:] for name in LM_NAMES},
        },
        y_label="consecutive-gradient cosine grad/cos_prev\n(5-step mean; gaps: zero gradient, no cosine)",
    )
    result.rows = _rows(R.BITSTRING, seeds, quick, tuple(VARIANTS))
    for ctx, n in ctxs[1:]:
        result.rows += _rows(ctx, n, quick, LM_NAMES)
    curves = [(name, VARIANTS[name], R.BITSTRING, seeds) for name in VARIANTS]
    curves += [(f"{name} (LM)", VARIANTS[name], ctx, n) for ctx, n in ctxs[1:] for name in LM_NAMES]
    for name, ov, ctx, n_seeds in curves:
        runs = R.runs(ov, n_seeds, quick, ctx)
        steps = runs[0].steps
        n = min(len(r.steps) for r in runs)
        # undefined steps (a zero gradient) stay NaN: gaps in the figure, never a cosine of 0
        per = np.array([R.smooth(defined_cosine(r)[:n]) for r in runs])
        result.curves.append(seed_curve(name, steps[:n].tolist(), per, bounds=(-1.0, 1.0)))
    return result
