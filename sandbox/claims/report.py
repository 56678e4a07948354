"""Running claims, printing their verdict table, and writing ``--out DIR``: ``claims.md`` (a markdown
table for a report, then each claim's appendix, if any), ``claims.json`` and one figure per claim (PNG + SVG)."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rich.markup import escape  # noqa: E402
from rich.table import Table  # noqa: E402

from .. import progress  # noqa: E402
from ..outputs import write_json, write_text  # noqa: E402
from ..plots import PALETTE, _save  # noqa: E402
from . import _runs  # noqa: E402
from .base import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, ClaimResult, Row  # noqa: E402

COLUMNS = ("claim", "statistic", "mean [95% CI]", "threshold", "verdict", "seeds")
STYLE = {REPRODUCED: "green", NOT_REPRODUCED: "red", INCONCLUSIVE: "yellow"}


def _num(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else "—"


def interval_text(row: Row) -> str:
    return f"{_num(row.mean)} [{_num(row.low)}, {_num(row.high)}]"


def cells(result: ClaimResult, row: Row) -> tuple[str, ...]:
    verdict = row.verdict + (f" ({row.note})" if row.note else "")
    return (f"{result.name}: {row.label}", row.statistic, interval_text(row), row.threshold_text(), verdict, str(row.seeds))


def run_claims(claims: dict, quick: bool, seeds: int, on_done=None) -> list[tuple[ClaimResult, float]]:
    _runs.clear_cache()
    out = []
    for claim in claims.values():
        t = time.perf_counter()
        with progress.phase(f"claim {claim.name}"):
            result = claim.run(quick=quick, seeds=seeds)
        elapsed = time.perf_counter() - t
        out.append((result, elapsed))
        if on_done is not None:
            on_done(claim, result, elapsed)
    _runs.clear_cache()
    return out


def verdict_table(results: list[tuple[ClaimResult, float]], title: str) -> Table:
    table = Table(title=escape(title), caption="95% CI: Student t-interval over seeds (docs/claims.md#verdicts)",
                  caption_justify="left")
    for col in COLUMNS:
        table.add_column(col)
    for result, _ in results:
        for row in result.rows:
            c = [escape(x) for x in cells(result, row)]
            c[4] = f"[{STYLE[row.verdict]}]{c[4]}"
            table.add_row(*c)
        table.add_section()
    return table


def markdown(results: list[tuple[ClaimResult, float]], command: str) -> str:
    lines = [f"Verdicts of `{command}` (95% CI: Student t-interval over seeds; definitions in docs/claims.md).", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for result, _ in results:
        for row in result.rows:
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells(result, row)) + " |")
    for result, _ in results:
        if result.appendix:
            lines += ["", f"## {result.name}", "", result.appendix.rstrip()]
    return "\n".join(lines) + "\n"


def _split_label(label: str) -> tuple[str, str]:
    """``"AReaL (published)"`` -> ``("AReaL", "published")``; a label without a trailing
    parenthesis -> ``(label, "")``."""
    m = re.match(r"^(.*\S) \(([^()]*)\)$", label)
    return (m.group(1), m.group(2)) if m else (label, "")


def figure(result: ClaimResult, path: Path) -> None:
    """Lines: the mean over seeds with its 95% band per variant. Bars: one bar per variant with its
    CI, named on the x axis; a curve without a band (a theory or published value) is a black mark
    over its bar, with one legend entry per kind of mark. Grouped: per category (``x_ticks``) one
    bar per variant with its CI, the variants side by side."""
    if result.kind == "grouped":
        fig, ax = plt.subplots(figsize=(10, 4.5))
        width = 0.8 / max(len(result.curves), 1)
        for i, c in enumerate(result.curves):
            x = np.asarray(c.x, dtype=float) + (i - (len(result.curves) - 1) / 2) * width
            y = np.asarray(c.y, dtype=float)
            err = [y - np.asarray(c.low or c.y), np.asarray(c.high or c.y) - y]
            ax.bar(x, y, width, yerr=err, capsize=2, color=PALETTE[i % len(PALETTE)], label=c.label)
        ax.set_xticks(range(len(result.x_ticks)), result.x_ticks, rotation=30, ha="right", fontsize=7)
        ax.set_ylim(top=ax.get_ylim()[1] * 1.12)  # room for the legend above the bars
        ax.legend(fontsize=7, ncol=len(result.curves), loc="upper center")
    elif result.kind == "lines":
        fig, ax = plt.subplots(figsize=(7, 4))
        for i, c in enumerate(result.curves):
            color = PALETTE[i % len(PALETTE)]
            ax.plot(c.x, c.y, color=color, label=c.label)
            if c.low:
                ax.fill_between(c.x, c.low, c.high, color=color, alpha=0.2, linewidth=0)
        ax.legend(fontsize=7, title="mean over seeds, band: 95% CI", title_fontsize=7)
    else:
        bars = [c for c in result.curves if c.low]
        fig, ax = plt.subplots(figsize=(max(7.0, 1.1 * len(bars) + 3), 4.6))
        ticks, names, labelled = [], [], set()
        for c in result.curves:
            name, kind = _split_label(c.label)
            if c.low:
                err = [[c.y[0] - c.low[0]], [c.high[0] - c.y[0]]]
                legend = f"{kind or 'measured'} (mean, 95% CI)"
                ax.bar(c.x, c.y, color=PALETTE[0], yerr=err, capsize=4, width=0.6,
                       label=legend if legend not in labelled else None)
                labelled.add(legend)
                ticks.append(c.x[0])
                names.append(name)
            else:
                legend = kind or name
                ax.plot(c.x, c.y, "k_", markersize=28, markeredgewidth=2.5, label=legend if legend not in labelled else None)
                labelled.add(legend)
        ax.set_xticks(ticks, names, rotation=20, ha="right", fontsize=8)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, markerscale=0.5)
    ax.set_xlabel(result.x_label)
    ax.set_ylabel(result.y_label)
    counts = {v: sum(r.verdict == v for r in result.rows) for v in (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)}
    ax.set_title(f"{result.name} ({result.paper}):\n" + ", ".join(f"{n} {v}" for v, n in counts.items() if n), fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def write_outputs(results: list[tuple[ClaimResult, float]], out: Path, quick: bool, seeds: int, command: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for result, _ in results:
        figure(result, out / f"{result.name}.png")
    write_text(out / "claims.md", markdown(results, command))
    write_json(out / "claims.json", {
        "command": command, "quick": quick, "seeds": seeds,
        "claims": [{**r.to_dict(), "seconds": round(s, 2)} for r, s in results],
    })
