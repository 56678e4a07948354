"""The ``mismatch_ess`` check (T12) rejects a wrong simulator, not only a perturbed prediction.

Three bugs are injected into the simulator (never into the check): (a) the ``logit_noise`` engine samples
exactly and reports the exact log-probs (no mismatch at all), (b) it draws its noise at twice the
configured scale, (c) the bit-string task ignores the configured length and simulates one horizon for
every scenario. Each test runs the check's own code at its quick settings and shows which points catch
the bug.
"""

from __future__ import annotations

import pytest

from sandbox.checks import mismatch_ess
from sandbox.engines.base import Engine
from sandbox.engines.logit_noise import LogitNoiseEngine
from sandbox.tasks.bitstring import BitStringTask

FROZEN = mismatch_ess.SERIES[0]


def frozen_only(monkeypatch, horizons):
    monkeypatch.setattr(mismatch_ess, "QUICK", {**mismatch_ess.QUICK, "horizons": horizons, "learning_horizons": []})


@pytest.mark.slow
def test_rejects_an_exact_engine(monkeypatch):
    frozen_only(monkeypatch, [8, 128])
    monkeypatch.setattr(LogitNoiseEngine, "draw", Engine.draw)  # samples softmax(z) and reports it
    result = mismatch_ess.run(quick=True)
    assert not any(p.ok for p in result.points)
    for p in result.points:
        assert p.measured == pytest.approx(1.0, abs=1e-12) and p.predicted < 0.97


@pytest.mark.slow
def test_rejects_a_doubled_noise_scale(monkeypatch):
    frozen_only(monkeypatch, [8, 32])
    scale = LogitNoiseEngine.scale
    monkeypatch.setattr(LogitNoiseEngine, "scale", lambda self, *a: 2 * scale(self, *a))
    result = mismatch_ess.run(quick=True)
    for p in result.points:
        assert not p.ok and p.measured < p.predicted - 10 * p.se


@pytest.mark.slow
def test_rejects_a_simulator_that_ignores_lengths(monkeypatch):
    frozen_only(monkeypatch, [8, 32, 128])
    init = BitStringTask.__init__

    def one_length(self, cfg):
        init(self, cfg.model_copy(update={"horizon": 32}))

    monkeypatch.setattr(BitStringTask, "__init__", one_length)
    points = {p.x: p for p in mismatch_ess.run(quick=True).points}
    assert points[32].ok  # the length it does simulate is right
    assert not points[8].ok and points[8].measured < points[8].predicted  # 32 tokens of noise, not 8
    assert not points[128].ok and points[128].measured > points[128].predicted


def test_prediction_needs_the_configured_length():
    import numpy as np

    with pytest.raises(ValueError, match="positions"):
        mismatch_ess.predicted_second_moment(np.zeros((2, 16)), 32, 0.0, 0.0)
