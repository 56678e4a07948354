"""Off-policy corrections (``shared/reference/algorithms.md`` §2–3): stop-gradient weights, masks and
adaptive clip bounds applied to an objective's per-token surrogate. See :mod:`.base` for the contract."""

from __future__ import annotations

from ..configs import (
    BAPOConfig,
    DecoupledPPOConfig,
    DPPOMaskConfig,
    GeoMISConfig,
    IcePopConfig,
    M2POClipBandConfig,
    M2POMaskConfig,
    MISConfig,
    NoCorrectionConfig,
    OPSMConfig,
    TISConfig,
    TOPRConfig,
)
from .base import CorrectionContext, CorrectionResult, NoCorrection
from .bounds import BAPO, M2POClipBand, m2po_clipband_tau
from .masks import OPSM, DPPOMask, M2POMask, m2po_keep_mask
from .weights import MIS, TIS, TOPR, DecoupledPPO, GeoMIS, IcePop

CORRECTIONS = {
    NoCorrectionConfig: NoCorrection,
    TISConfig: TIS,
    MISConfig: MIS,
    GeoMISConfig: GeoMIS,
    IcePopConfig: IcePop,
    OPSMConfig: OPSM,
    DecoupledPPOConfig: DecoupledPPO,
    M2POMaskConfig: M2POMask,
    M2POClipBandConfig: M2POClipBand,
    BAPOConfig: BAPO,
    TOPRConfig: TOPR,
    DPPOMaskConfig: DPPOMask,
}

#: corrections that replace the objective's clip bounds (need a clip-surrogate objective)
BOUNDS_CORRECTIONS = (M2POClipBandConfig, BAPOConfig)


def build_correction(cfg):
    """The correction object for ``cfg``."""
    try:
        return CORRECTIONS[type(cfg)](cfg)
    except KeyError:
        raise TypeError(f"no correction registered for {type(cfg).__name__}") from None


__all__ = [
    "CORRECTIONS",
    "BOUNDS_CORRECTIONS",
    "build_correction",
    "CorrectionContext",
    "CorrectionResult",
    "NoCorrection",
    "TIS",
    "MIS",
    "GeoMIS",
    "IcePop",
    "OPSM",
    "DecoupledPPO",
    "M2POMask",
    "M2POClipBand",
    "BAPO",
    "TOPR",
    "DPPOMask",
    "m2po_keep_mask",
    "m2po_clipband_tau",
]
