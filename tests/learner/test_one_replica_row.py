"""The metrics row of a one-replica step (``_metrics_to_numpy``'s shortcut, issue 32 row 11) holds the
means the general path computes, to the bit: numpy's mean of one value is ``(0 + x) / 1``, so -0.0
becomes 0.0 and every other finite value stays; a non-finite value gives NaN, as ``_alive_mean``."""

from __future__ import annotations

import math

import numpy as np
import torch

from sandbox.learner.trainer import _alive_mean, _metrics_to_numpy

VALUES = [-0.0, 0.0, 5e-324, -5e-324, 1.5, -2.25, 3.4e38, -1e-45]


def _general_mean(v: torch.Tensor) -> float:
    """The general path's mean of a row of live values (a C-contiguous (1, R) block)."""
    return float(np.ascontiguousarray(v.double().numpy()[None, :]).mean(axis=1)[0])


def test_one_replica_means_are_the_general_means_to_the_bit():
    one = np.ones(1, dtype=bool)
    for dtype in (torch.float32, torch.float64):
        metrics = {f"m{i}": torch.tensor([v], dtype=dtype) for i, v in enumerate(VALUES)}
        arrays, row = _metrics_to_numpy(metrics, 1, one)
        assert list(row) == list(metrics) and list(arrays) == list(metrics)
        for k, v in metrics.items():
            ref = _general_mean(v)
            assert row[k] == ref and math.copysign(1.0, row[k]) == math.copysign(1.0, ref), (dtype, k)
            assert np.array_equal(arrays[k], v.double().numpy())
        assert math.copysign(1.0, row["m0"]) == 1.0  # -0.0 -> 0.0: the shortcut must not keep the sign
    metrics = {"a": torch.tensor([1.0]), "b": torch.tensor([math.inf]), "c": torch.tensor([math.nan])}
    _, row = _metrics_to_numpy(metrics, 1, one)
    assert row["a"] == 1.0 and math.isnan(row["b"]) and math.isnan(row["c"])
    assert math.isnan(_alive_mean(np.array([math.inf]), one))


def test_one_replica_row_with_non_finite_values_is_the_general_row():
    """A row holding NaN or an infinity (the cosine with a zero gradient is NaN) stays on the shortcut for
    float32 / float64: the arrays hold the values' float64 bits (NaN signs and payloads as numpy's widening
    of the stacked tensor), the means are NaN for those and the general means for the rest."""
    one = np.ones(1, dtype=bool)
    z = torch.zeros(1)
    for dtype in (torch.float32, torch.float64):
        nans = (z / z).to(dtype), torch.tensor([math.nan], dtype=dtype), -torch.tensor([math.nan], dtype=dtype)
        values = [*nans, torch.tensor([math.inf], dtype=dtype), torch.tensor([-0.0], dtype=dtype)]
        metrics = {f"m{i}": v for i, v in enumerate(values)}
        arrays, row = _metrics_to_numpy(metrics, 1, one)
        widened = torch.stack(values).numpy().astype(np.float64)  # the general path's copy
        for i, k in enumerate(metrics):
            assert arrays[k].tobytes() == widened[i].tobytes(), (dtype, k)
        assert all(math.isnan(row[f"m{i}"]) for i in range(4)) and row["m4"] == 0.0
        assert math.copysign(1.0, row["m4"]) == 1.0
    half = {"a": torch.tensor([math.nan], dtype=torch.float16), "b": torch.tensor([1.0], dtype=torch.float16)}
    arrays, row = _metrics_to_numpy(half, 1, one)  # the general path
    assert math.isnan(row["a"]) and row["b"] == 1.0
