"""Composition: GAC together with VCPO or TIS against each alone, at fixed lag 16.

Scenario: ``scenarios/fixed_lag.toml`` with the ``methods_bitstring`` settings (docs/claims.md#scenario).
Statistic per seed: final expected reward of the combination − the better of its two parts alone
(the larger of the two per-seed rewards). Rows: GAC + TIS (sequence, C = 8) and GAC + VCPO
(``vcpo_lr`` + sequence TIS); the claim "they help together" is reproduced when the difference > m,
the context's margin as the minimum effect (:attr:`._runs.Context.margin`: 0.05 on the bit-string task,
a third of the synchronous gain on the LM). A null row (:mod:`.null`: final reward of sync on other
sampling seeds − sync in [−m, m]) sets the family's noise floor; a row whose mean lies within it says so
and is at best inconclusive. Both rows are gated by the context's premise (:mod:`.premise`: ``not testable here`` where uncorrected
lag-16 training does not degrade) and run in the bit-string context and in the LM context
(:data:`._runs.LM`, ``--lm-seeds`` replicas). The figure: per context, the final reward of every variant.
"""

from __future__ import annotations

import numpy as np

from sandbox.claims import _runs as R
from sandbox.claims.base import ClaimResult, Curve, Row, t_interval
from sandbox.claims.null import against
from sandbox.claims.premise import contexts, gate, margin_text, premise_row, reward_null

PARTS = {"GAC": R.GAC, "TIS": R.TIS, "VCPO": R.VCPO, "GAC + TIS": R.GAC_TIS, "GAC + VCPO": R.GAC_VCPO}


LM_VARIANTS = [R.SYNC, R.lag(16), *({**R.lag(16), **ov} for ov in PARTS.values()), R.null_variant(R.SYNC, R.LM)]
"""The LM runs this claim needs (prefetched with the other claims', :func:`sandbox.claims.report.run_claims`)."""
CONTEXT_TICKS = {"bitstring": "bit-string (H = 32)", "lm": "LM (3-digit addition)"}


def _rewards(ctx: R.Context, seeds: int, quick: bool) -> dict[str, np.ndarray]:
    reward = {
        name: R.per_seed({**R.lag(16), **ov}, seeds, quick, R.Run.final_reward, ctx) for name, ov in PARTS.items()
    }
    reward["sync"] = R.per_seed(R.SYNC, seeds, quick, R.Run.final_reward, ctx)
    reward["none"] = R.per_seed(R.lag(16), seeds, quick, R.Run.final_reward, ctx)
    return reward


def run(quick: bool = False, seeds: int = R.FULL_SEEDS, lm_seeds: int | None = None) -> ClaimResult:
    ctxs = contexts(seeds, quick, lm_seeds)
    result = ClaimResult(
        name="composition",
        paper="GAC (arXiv 2603.01501) + VCPO (arXiv 2602.17616) / TIS",
        definition=__doc__.split("\n\n", 1)[1].strip(),
        settings={
            **{name: R.settings({**R.lag(16), **ov}, quick) for name, ov in PARTS.items()},
            **{
                f"{name} (lm)": R.settings({**R.lag(16), **ov}, quick, ctx)
                for ctx, _ in ctxs[1:]
                for name, ov in PARTS.items()
            },
        },
        x_label="context (task); variants at lag 16 unless sync",
        y_label="final expected reward (mean, 95% CI)",
        kind="grouped",
        x_ticks=[CONTEXT_TICKS[ctx.name] for ctx, _ in ctxs],
    )
    rewards = {ctx.name: _rewards(ctx, n, quick) for ctx, n in ctxs}
    for ctx, n in ctxs:
        reward, premise, null = rewards[ctx.name], premise_row(ctx, n, quick), reward_null(ctx, n, quick)
        effect = f"minimum effect = {margin_text(ctx)}"
        result.rows += [
            against(
                gate(
                    Row(
                        f"GAC + {part} beats each alone",
                        f"reward(GAC+{part}) − max(GAC, {part})",
                        reward[f"GAC + {part}"] - np.maximum(reward["GAC"], reward[part]),
                        ctx.margin,
                        ">",
                        note=effect,
                        context=ctx.name,
                    ),
                    premise,
                ),
                null,
                beats=True,
            )
            for part in ("TIS", "VCPO")
        ] + [null]
    for name in ["sync", "none", *PARTS]:
        cis = []
        for ctx, _ in ctxs:
            m, lo, hi = t_interval(rewards[ctx.name][name])
            cis.append((m, lo if np.isfinite(lo) else m, hi if np.isfinite(hi) else m))
        result.curves.append(
            Curve(
                name if name != "none" else "uncorrected", [float(i) for i in range(len(ctxs))], *map(list, zip(*cis))
            )
        )
    return result
