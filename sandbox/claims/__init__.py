"""``sandbox claims``: each paper's claim as an experiment with a verdict over seeds (docs/claims.md).

A claim runs its scenario once per seed, reduces each run to a statistic, and gives the mean with a
95% t-interval and a verdict against the claim's threshold (:mod:`.base`)."""

from __future__ import annotations

from . import composition, drop_bias, gac, gac_search, m2po, published, published_engine, throughput, vcpo
from .base import Claim, ClaimResult, Row

CLAIMS: dict[str, Claim] = {
    c.name: c
    for c in [
        Claim("gac_cosine", "GAC (arXiv 2603.01501)", "consecutive-gradient cosine: sync vs lag 16 vs GAC; epochs 4; GAC reward", gac.run),
        Claim("vcpo", "VCPO (arXiv 2602.17616)", "ESS/N vs lag; VCPO vs sync, uncorrected and matched constant lr; ESS lead", vcpo.run),
        Claim("m2po", "M2PO (arXiv 2510.01161)", "masked-token fraction and stability at lag 16", m2po.run),
        Claim("throughput", "T6 order statistics", "async speed-up over sync for shipped system scenarios vs theory", throughput.run),
        Claim("published_speedups", "AReaL, verl, ROLL Flash, VCPO", "published async speed-ups vs system-only predictions", published.run),
        Claim("published_speedups_engine", "AReaL, verl, VCPO", "published async speed-ups vs predictions with continuous-batching engines", published_engine.run),
        Claim("drop_bias", "prime-rl / TRL drop, AReaL bound", "length of consumed vs generated responses when over-stale groups are dropped", drop_bias.run),
        Claim("composition", "GAC + VCPO / TIS", "GAC combined with VCPO or TIS vs each alone at lag 16", composition.run),
        Claim("gac_search", "GAC (arXiv 2603.01501)", "best GAC setting (selection seeds) vs matched control and sync per lr × lag × schedule", gac_search.run),
    ]
}

__all__ = ["CLAIMS", "Claim", "ClaimResult", "Row"]
