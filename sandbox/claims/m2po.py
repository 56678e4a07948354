"""M2PO (arXiv 2510.01161): a small fraction of tokens masked while training stays stable at high staleness.

Scenario: ``scenarios/fixed_lag.toml`` with the ``methods_bitstring`` settings (docs/claims.md#scenario),
``algorithm.correction = m2po_mask`` (default second-moment threshold) at fixed lag 16. Rows:

* small masked fraction: mean ``mask/frac`` (fraction of tokens the mask removes) over steps ≥ 16 < 0.05;
* stable at lag 16: final expected reward (M2PO, lag 16) − (sync) > −m, m the context's margin
  (:attr:`._runs.Context.margin`; a diverged run scores its last finite evaluation, which fails it);
  gated by the context's premises (:mod:`.premise`: uncorrected degrades, sync learns);
* null (the noise floor, :mod:`.null`): final reward of sync on other sampling seeds − sync in [−m, m].

Both rows run in the bit-string context and in the LM context (:data:`._runs.LM`, ``--lm-seeds`` replicas).
"""

from __future__ import annotations

import numpy as np

from sandbox.claims import _runs as R
from sandbox.claims.base import ClaimResult, Row, seed_curve
from sandbox.claims.null import against
from sandbox.claims.premise import contexts, gate, learns_row, margin_text, premise_row, reward_null

WARMUP = 16
MASK_MAX = 0.05


M2PO_LAG16 = {**R.lag(16), **R.M2PO}
LM_VARIANTS = [R.SYNC, M2PO_LAG16, R.null_variant(R.SYNC, R.LM)]
"""The LM runs this claim needs (prefetched with the other claims', :func:`sandbox.claims.report.run_claims`)."""


def run(quick: bool = False, seeds: int = R.FULL_SEEDS, lm_seeds: int | None = None) -> ClaimResult:
    ctxs = contexts(seeds, quick, lm_seeds)
    ov = M2PO_LAG16
    result = ClaimResult(
        name="m2po",
        paper="M2PO (arXiv 2510.01161)",
        definition=__doc__.split("\n\n", 1)[1].strip(),
        settings={
            "M2PO, lag 16": R.settings(ov, quick),
            "sync": R.settings(R.SYNC, quick),
            **{
                f"{name} (lm)": R.settings(o, quick, ctx)
                for ctx, _ in ctxs[1:]
                for name, o in (("M2PO, lag 16", ov), ("sync", R.SYNC))
            },
        },
        y_label="masked-token fraction mask/frac (5-step mean)",
    )
    for ctx, n_seeds in ctxs:
        frac = R.per_seed(ov, n_seeds, quick, lambda r: r.mean("mask/frac", skip=WARMUP), ctx)
        reward = R.per_seed(ov, n_seeds, quick, R.Run.final_reward, ctx) - R.per_seed(
            R.SYNC, n_seeds, quick, R.Run.final_reward, ctx
        )
        null = reward_null(ctx, n_seeds, quick)
        result.rows += [
            Row(
                "small masked fraction at lag 16",
                f"mean mask/frac over steps ≥ {WARMUP}",
                frac,
                MASK_MAX,
                "<",
                context=ctx.name,
            ),
            against(
                gate(
                    Row(
                        "stable at lag 16",
                        "final expected reward: M2PO − sync",
                        reward,
                        -ctx.margin,
                        ">",
                        note=margin_text(ctx),
                        context=ctx.name,
                    ),
                    premise_row(ctx, n_seeds, quick),
                    learns_row(ctx, n_seeds, quick),
                ),
                null,
                beats=False,
            ),
            null,
        ]
        runs = R.runs(ov, n_seeds, quick, ctx)
        n = min(len(r.steps) for r in runs)
        result.curves.append(
            seed_curve(
                "M2PO, lag 16" + (" (LM)" if ctx.name == "lm" else ""),
                runs[0].steps[:n].tolist(),
                np.array([R.smooth(r.metrics["mask/frac"][:n]) for r in runs]),
                bounds=(0.0, 1.0),
            )
        )
    return result
