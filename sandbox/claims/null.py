"""Null rows: the noise floor of a claim family, and the rows whose effect lies within it.

A family's null row applies the family's statistic to two runs that differ only in their sampling seed:
the reference variant on the claims' seeds against the same variant on other seeds
(:func:`sandbox.claims._runs.null_runs`: run seed s + 1000 in the bit-string context, run seed 1 instead
of 0 in the LM context), paired by seed. Reseeding changes nothing a method does, so any difference is
noise; its row is ``statistic in [−m, m]`` (m the family's margin or minimum effect): ``reproduced`` when
reseeding moves the statistic by less than the margin.

The **noise floor** of a family is the largest |end| of its null row's 95% interval (:func:`noise_floor`).
:func:`against` marks a row whose mean effect lies within it ("within the noise floor" in its note); a
"beats" row there (a claimed difference) is at best ``inconclusive``, whatever its own interval: an
effect that reseeding alone produces is no effect.
"""

from __future__ import annotations

import dataclasses
import math

from sandbox.claims.base import INCONCLUSIVE, NOT_TESTABLE, REPRODUCED, Row

NULL_PREFIX = "null: "


def null_row(label: str, statistic: str, values, margin: float, context: str) -> Row:
    """The null row of a family: ``values`` per seed (the statistic on the reseeded runs minus that on the
    claims' runs), reproduced when its interval lies inside [−margin, margin]."""
    return Row(
        NULL_PREFIX + label,
        statistic,
        values,
        (-margin, margin),
        "within",
        note=f"same run, other sampling seed; noise floor = largest |end| of this interval (margin {margin:.3g})",
        context=context,
    )


def noise_floor(null: Row) -> float:
    """The largest |end| of the null row's interval (NaN when it has none)."""
    return max(abs(null.low), abs(null.high)) if math.isfinite(null.low) and math.isfinite(null.high) else math.nan


def against(row: Row, null: Row, beats: bool) -> Row:
    """``row`` judged against its family's noise floor: when |mean| ≤ the floor, the note says so and a
    ``beats`` row (a claimed difference, not a non-inferiority) is capped at ``inconclusive``."""
    floor = noise_floor(null)
    if row.context != null.context:
        raise ValueError(f"against: null of context {null.context!r} for a row of context {row.context!r}")
    if not (math.isfinite(floor) and math.isfinite(row.mean)) or abs(row.mean) > floor or row.verdict == NOT_TESTABLE:
        return row
    note = f"effect {row.mean:.3g} within the noise floor ±{floor:.3g} ('{null.label}')"
    note = "; ".join(x for x in (row.note, note) if x)
    if beats and row.verdict == REPRODUCED:
        return dataclasses.replace(row, cap=INCONCLUSIVE, note=note)
    return dataclasses.replace(row, note=note)
