"""The default ``sandbox run`` summary fits an 80-column terminal with the quickstart's variant names."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from sandbox.run.command import compact_table


def _summary(**kw):
    base = {
        "status": "completed",
        "diverged_replicas": 0,
        "replicas": 4,
        "time_to_target": 123.4,
        "target_level": 0.9,
        "target_reached_replicas": 4,
        "speedup_vs_sync": 12.34,
        "speedup_ci_low": 11.98,
        "speedup_ci_high": 13.07,
        "staleness_mean": 11.75,
        "staleness_max": 16,
        "util_workers": 1.0,
        "collapsed_replicas": 2,
    }
    return SimpleNamespace(summary={**base, **kw})


def render(results: dict, width: int = 80) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(
        compact_table(results, "quickstart: synchronous vs asynchronous RL on a bit-string task")
    )
    return out.getvalue()


def test_compact_table_fits_80_columns_with_the_default_variants():
    results = {
        "sync": _summary(
            speedup_vs_sync=1.0,
            speedup_ci_low=1.0,
            speedup_ci_high=1.0,
            staleness_mean=0.0,
            staleness_max=0,
            util_workers=0.33,
            collapsed_replicas=0,
        ),
        "async": _summary(
            status="completed",
            diverged_replicas=3,
            collapsed_replicas=3,
            time_to_target=None,
            target_reached_replicas=1,
            speedup_vs_sync=None,
        ),
        "async+tis": _summary(),
    }
    text = render(results)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, text
    assert "…" not in text, text
    rows = {line.split()[0]: line for line in lines if line.strip() and line.split()[0] in results}
    assert set(rows) == set(results)  # every variant on a line of its own, its name whole
    assert "12.3x [12.0, 13.1]" in rows["async+tis"] and "2/4" in rows["async+tis"]
    assert "missed 1/4" in rows["async"] and "3/4" in rows["async"]
    assert "33%" in rows["sync"]
