"""The public names of :mod:`sandbox.claims` (its ``__init__`` stays light, so that the command module loads without them)."""

from __future__ import annotations

from sandbox.claims import (
    composition,
    drop_bias,
    gac,
    gac_search,
    m2po,
    mismatch,
    mismatch_presets,
    premise,
    published_scaling,
    throughput,
    transfer_rule,
    vcpo,
)
from sandbox.claims.base import Claim, ClaimResult, Row

CLAIMS: dict[str, Claim] = {
    c.name: c
    for c in [
        Claim(
            "premise",
            "VCPO, GAC, M2PO",
            "per context (bit-string, LM): does sync learn, does uncorrected lag-16 training degrade? gates the rescue rows",
            premise.run,
            premise.LM_VARIANTS,
        ),
        Claim(
            "gac_cosine",
            "GAC (arXiv 2603.01501)",
            "consecutive-gradient cosine: sync vs lag 16 vs GAC; epochs 4; GAC reward; bit-string and LM",
            gac.run,
            gac.LM_VARIANTS,
        ),
        Claim(
            "vcpo",
            "VCPO (arXiv 2602.17616)",
            "ESS/N vs lag; VCPO vs sync and matched constant lr; ESS lead; bit-string and LM",
            vcpo.run,
            vcpo.LM_VARIANTS,
        ),
        Claim(
            "m2po",
            "M2PO (arXiv 2510.01161)",
            "masked-token fraction and stability at lag 16; bit-string and LM",
            m2po.run,
            m2po.LM_VARIANTS,
        ),
        Claim(
            "throughput",
            "T6 order statistics",
            "async speed-up over sync for shipped system scenarios vs theory",
            throughput.run,
        ),
        Claim(
            "published_speedups_engine",
            "AReaL, verl, ROLL Flash, PipelineRL, VCPO",
            "published async speed-ups vs predictions with continuous-batching engines",
            published_scaling.run,
        ),
        Claim(
            "drop_bias",
            "prime-rl / TRL drop, AReaL bound",
            "length of consumed vs generated responses when over-stale groups are dropped",
            drop_bias.run,
        ),
        Claim(
            "composition",
            "GAC + VCPO / TIS",
            "GAC combined with VCPO or TIS vs each alone at lag 16; bit-string and LM",
            composition.run,
            composition.LM_VARIANTS,
        ),
        Claim(
            "mismatch_presets",
            "published mismatch magnitudes",
            "calibrated engine presets (LM) within x1.5 of the published k3 KL, probability gap, router flips, drift",
            mismatch_presets.run,
        ),
        Claim(
            "mismatch_corrections",
            "TIS, MIS, IcePop, Geo-RS",
            "mismatch alone at staleness 0 degrades uncorrected training at long responses; do the corrections restore it",
            mismatch.corrections,
        ),
        Claim(
            "mismatch_sync",
            "a users' question (mismatch at staleness 0)",
            "staleness 0 plus mismatch vs synchronous training: how far apart",
            mismatch.sync,
        ),
        Claim(
            "mismatch_staleness",
            "TIS, VCPO (arXiv 2602.17616)",
            "a staleness correction under added mismatch; VCPO's ESS rule under mismatch vs lag",
            mismatch.staleness,
        ),
        Claim(
            "mismatch_drift",
            "Beyond Precision (Zhang, Li et al. 2025)",
            "a drifting engine's gap grows at lr ~0, a static one's does not",
            mismatch.drift,
        ),
        Claim(
            "transfer_rule",
            "preflight's transfer rule",
            "critical learning rate vs critical lr/RMS(θ) across three LM widths at lag 4",
            transfer_rule.run,
        ),
        Claim(
            "gac_search",
            "GAC (arXiv 2603.01501)",
            "best GAC setting (selection seeds) vs matched control and sync per lr × lag × schedule",
            gac_search.run,
        ),
    ]
}

__all__ = ["CLAIMS", "Claim", "ClaimResult", "Row"]
