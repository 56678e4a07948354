"""M2PO (arXiv 2510.01161): a small fraction of tokens masked while training stays stable at high staleness.

Scenario: ``scenarios/fixed_lag.toml`` with the ``methods_bitstring`` settings (docs/claims.md#scenario),
``algorithm.correction = m2po_mask`` (default second-moment threshold) at fixed lag 16. Rows:

* small masked fraction: mean ``mask/frac`` (fraction of tokens the mask removes) over steps ≥ 16 < 0.05;
* stable at lag 16: final expected reward (M2PO, lag 16) − (sync) > −0.05 (a diverged run scores its
  last finite evaluation, which fails this margin).
"""

from __future__ import annotations

import numpy as np

from . import _runs as R
from .base import ClaimResult, Curve, Row, band

WARMUP = 16
MASK_MAX = 0.05
REWARD_MARGIN = 0.05


def run(quick: bool = False, seeds: int = R.FULL_SEEDS) -> ClaimResult:
    ov = {**R.lag(16), **R.M2PO}
    frac = R.per_seed(ov, seeds, quick, lambda r: r.mean("mask/frac", skip=WARMUP))
    reward = R.per_seed(ov, seeds, quick, R.Run.final_reward) - R.per_seed(R.SYNC, seeds, quick, R.Run.final_reward)
    result = ClaimResult(
        name="m2po",
        paper="M2PO (arXiv 2510.01161)",
        definition=__doc__.split("\n\n", 1)[1].strip(),
        settings={"M2PO, lag 16": R.settings(ov, quick), "sync": R.settings(R.SYNC, quick)},
        y_label="masked-token fraction mask/frac (5-step mean)",
    )
    result.rows = [
        Row("small masked fraction at lag 16", f"mean mask/frac over steps ≥ {WARMUP}", frac, MASK_MAX, "<"),
        Row("stable at lag 16", "final expected reward: M2PO − sync", reward, -REWARD_MARGIN, ">"),
    ]
    runs = R.runs(ov, seeds, quick)
    n = min(len(r.steps) for r in runs)
    m, lo, hi = band(np.array([R.smooth(r.metrics["mask/frac"][:n]) for r in runs]), bounds=(0.0, 1.0))
    result.curves.append(Curve("M2PO, lag 16", runs[0].steps[:n].tolist(), m, lo, hi))
    return result
