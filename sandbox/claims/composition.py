"""Composition: GAC together with VCPO or TIS against each alone, at fixed lag 16.

Scenario: ``scenarios/fixed_lag.toml`` with the ``methods_bitstring`` settings (docs/claims.md#scenario).
Statistic per seed: final expected reward of the combination − the better of its two parts alone
(the larger of the two per-seed rewards). Rows: GAC + TIS (sequence, C = 8) and GAC + VCPO
(``vcpo_lr`` + sequence TIS); the claim "they help together" is reproduced when the difference > 0.
"""

from __future__ import annotations

import numpy as np

from . import _runs as R
from .base import ClaimResult, Curve, Row, t_interval

PARTS = {"GAC": R.GAC, "TIS": R.TIS, "VCPO": R.VCPO, "GAC + TIS": R.GAC_TIS, "GAC + VCPO": R.GAC_VCPO}


def run(quick: bool = False, seeds: int = R.FULL_SEEDS) -> ClaimResult:
    reward = {name: R.per_seed({**R.lag(16), **ov}, seeds, quick, R.Run.final_reward) for name, ov in PARTS.items()}
    reward["sync"] = R.per_seed(R.SYNC, seeds, quick, R.Run.final_reward)
    reward["none"] = R.per_seed(R.lag(16), seeds, quick, R.Run.final_reward)
    result = ClaimResult(
        name="composition",
        paper="GAC (arXiv 2603.01501) + VCPO (arXiv 2602.17616) / TIS",
        definition=__doc__.split("\n\n", 1)[1].strip(),
        settings={name: R.settings({**R.lag(16), **ov}, quick) for name, ov in PARTS.items()},
        x_label="variant (lag 16 unless sync)",
        y_label="final expected reward (mean, 95% CI)",
        kind="bars",
    )
    result.rows = [
        Row("GAC + TIS beats each alone", "reward(GAC+TIS) − max(GAC, TIS)",
            reward["GAC + TIS"] - np.maximum(reward["GAC"], reward["TIS"]), 0.0, ">"),
        Row("GAC + VCPO beats each alone", "reward(GAC+VCPO) − max(GAC, VCPO)",
            reward["GAC + VCPO"] - np.maximum(reward["GAC"], reward["VCPO"]), 0.0, ">"),
    ]
    for i, name in enumerate(["sync", "none", *PARTS]):
        m, lo, hi = t_interval(reward[name])
        result.curves.append(Curve(name, [float(i)], [m], [lo if np.isfinite(lo) else m], [hi if np.isfinite(hi) else m]))
    return result
