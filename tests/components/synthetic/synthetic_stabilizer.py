"""A synthetic stabilizer for the component checker: grad_norm_skip under another name."""

from __future__ import annotations

from typing import Literal

from sandbox.algorithms.stabilizers.base import STABILIZERS
from sandbox.algorithms.stabilizers.grad_norm_skip import GradNormSkip, GradNormSkipConfig


class SyntheticStabilizerConfig(GradNormSkipConfig):
    """Synthetic stabilizer: grad_norm_skip's rule under a new name (component checker)."""

    name: Literal["synthetic_stabilizer"] = "synthetic_stabilizer"


@STABILIZERS.register(SyntheticStabilizerConfig)
class SyntheticStabilizer(GradNormSkip):
    pass
