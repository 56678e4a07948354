"""Per-seed values that remember which of their runs collapsed, so that a claim row's mean over seeds
never hides a collapsed run (docs/claims.md#collapsed-runs).

:func:`sandbox.claims._runs.per_seed` returns a :class:`SeedValues`: the statistic of each seed's run,
with, per seed, whether that run collapsed and whether it diverged (:func:`run_collapse`, the rule of
:mod:`sandbox.analysis.collapse`). Element-wise arithmetic between such arrays (``reward["VCPO"] −
reward["sync"]``) keeps the flags, a seed's flag set when any operand's run at that seed has it; an
operand of the same shape without flags (values computed another way) makes the result's flags
incomplete (:attr:`SeedValues.complete` False: the count is a lower bound). Reductions and any other
shape give plain arrays. The numbers themselves are computed on plain arrays: bitwise those of numpy.
"""

from __future__ import annotations

import numpy as np


class SeedValues(np.ndarray):
    """A 1-d float array of per-seed values with per-seed ``collapsed`` and ``diverged`` flags."""

    collapsed: np.ndarray | None
    diverged: np.ndarray | None
    complete: bool

    def __new__(cls, values, collapsed, diverged, complete: bool = True) -> SeedValues:
        obj = np.asarray(values).view(cls)
        obj.collapsed = np.asarray(collapsed, dtype=bool)
        obj.diverged = np.asarray(diverged, dtype=bool)
        obj.complete = bool(complete)
        if obj.ndim != 1 or obj.collapsed.shape != obj.shape or obj.diverged.shape != obj.shape:
            raise ValueError(
                f"SeedValues: values, collapsed and diverged must be 1-d of one length, got "
                f"{obj.shape}, {obj.collapsed.shape}, {obj.diverged.shape}"
            )
        return obj

    def __array_finalize__(self, obj) -> None:
        # any derived array (a slice, a copy, a sorted copy) drops the flags: only arithmetic keeps them
        self.collapsed = self.diverged = None
        self.complete = False

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        plain = [x.view(np.ndarray) if isinstance(x, SeedValues) else x for x in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(x.view(np.ndarray) if isinstance(x, SeedValues) else x for x in kwargs["out"])
        result = getattr(ufunc, method)(*plain, **kwargs)
        if (
            method != "__call__"
            or not isinstance(result, np.ndarray)
            or result.shape != self.shape
            or result.dtype.kind != "f"
        ):
            return result
        arrays = [x for x in inputs if np.ndim(x) > 0]
        flagged = [x for x in arrays if isinstance(x, SeedValues) and x.collapsed is not None]
        if not flagged:
            return result
        collapsed = np.logical_or.reduce([x.collapsed for x in flagged])
        diverged = np.logical_or.reduce([x.diverged for x in flagged])
        complete = len(flagged) == len(arrays) and all(x.complete for x in flagged)
        return SeedValues(result, collapsed, diverged, complete)


def flags(values) -> tuple[list[bool], list[bool], bool] | None:
    """(collapsed, diverged, complete) of per-seed values, or None when they carry no flags."""
    if isinstance(values, SeedValues) and values.collapsed is not None:
        return values.collapsed.tolist(), values.diverged.tolist(), values.complete
    return None
