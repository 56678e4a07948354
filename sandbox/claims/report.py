"""Running claims, printing their verdict table, and writing ``--out DIR``: ``claims.md`` (a markdown
table for a report, its multiple-comparison note, then each claim's appendix, if any), ``claims.json`` and
one figure per claim (PNG + SVG).

Multiple comparisons (docs/claims.md#multiple-comparisons): the family is every tested row of the
invocation: a row ``not testable here`` (its context's premise not reproduced, :mod:`.premise`) makes no
claim and is left out, as a row without a p-value is. Each row's verdict is its own 95% interval
(one-sided level 0.025 per row, no correction); the table adds each row's one-sided p-value and whether a
``reproduced`` row survives Holm's step-down correction at family-wise level 0.025 over the family
(:func:`sandbox.claims.base.holm`)."""

from __future__ import annotations

import inspect
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

from sandbox.base import progress  # noqa: E402
from sandbox.base.outputs import write_json, write_text  # noqa: E402
from sandbox.claims import _runs  # noqa: E402
from sandbox.claims import premise as premise_mod  # noqa: E402
from sandbox.claims.base import ALPHA, INCONCLUSIVE, NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, ClaimResult, Row, holm  # noqa: E402
from sandbox.run.plots import PALETTE, _save  # noqa: E402

COLUMNS = (
    "claim",
    "context",
    "statistic",
    "mean [95% CI]",
    "threshold",
    "verdict",
    "seeds",
    "collapsed k/R",
    "p (one-sided)",
    "Holm",
)
VERDICT_COLUMN = COLUMNS.index("verdict")
STYLE = {REPRODUCED: "green", NOT_REPRODUCED: "red", INCONCLUSIVE: "yellow", NOT_TESTABLE: "blue"}
CONTEXT_NAMES = {"bitstring": "bit-string", "lm": "LM", "": "—"}


def _num(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else "—"


def interval_text(row: Row) -> str:
    return f"{_num(row.mean)} [{_num(row.low)}, {_num(row.high)}]"


def _p(p: float) -> str:
    return "—" if not math.isfinite(p) else ("< 1e-4" if p < 1e-4 else f"{p:.2g}")


def family_p(row: Row) -> float:
    """A row's p-value in the Holm family: NaN (left out) for a row ``not testable here``."""
    return math.nan if row.verdict == NOT_TESTABLE else row.p_value


def family_holm(results: list[tuple[ClaimResult, float]]) -> dict[int, bool]:
    """Per row (keyed by ``id(row)``), whether Holm's procedure over the family's p-values
    (:func:`family_p`) rejects it."""
    rows = [row for result, _ in results for row in result.rows]
    return {id(row): ok for row, ok in zip(rows, holm([family_p(row) for row in rows]))}


def holm_text(row: Row, survives: bool) -> str:
    """The Holm column: whether a ``reproduced`` row stays reproduced after the family's correction."""
    if row.verdict != REPRODUCED:
        return "—"
    return "reproduced" if survives else "not significant after correction"


def collapsed_text(row: Row) -> str:
    """The "collapsed k/R" column: k of the row's R seeds had a run behind the value that collapsed
    (:attr:`Row.collapsed`), ", d diverged" when d of them diverged; "≥" when part of the value came
    without per-run records (a lower bound); "—" when no learning run is recorded behind the row."""
    if row.collapsed is None:
        return "—"
    k, d = sum(row.collapsed), sum(row.diverged or [])
    text = f"{'' if row.collapse_complete else '≥'}{k}/{len(row.collapsed)}"
    return text + (f", {d} diverged" if d else "")


def collapsed_title(result: ClaimResult) -> str:
    """The figure's line on collapsed runs: how many rows average over a seed whose run collapsed ("" if none),
    since a band over seeds does not show them."""
    rows = [r for r in result.rows if r.collapsed and any(r.collapsed)]
    if not rows:
        return ""
    worst = max(rows, key=lambda r: sum(r.collapsed))
    return (
        f"\n{len(rows)} row(s) average over collapsed runs (most: {sum(worst.collapsed)}/{len(worst.collapsed)} "
        f"seeds, '{worst.label}'; claims.md column collapsed k/R)"
    )


COLLAPSED_NOTE = (
    "Collapsed k/R: of the R seeds behind a row, k had a run that collapsed (diverged, or ended below reward "
    "0.05 with a zero gradient: docs/time_to_target.md#collapse), however the mean reads; ≥: part of the row's "
    "values came without per-run records, so k is a lower bound; —: no learning run is recorded behind the row."
)


def cells(result: ClaimResult, row: Row, survives: bool = False) -> tuple[str, ...]:
    verdict = row.verdict + (f" ({row.note})" if row.note else "")
    return (
        f"{result.name}: {row.label}",
        CONTEXT_NAMES[row.context],
        row.statistic,
        interval_text(row),
        row.threshold_text(),
        verdict,
        str(row.seeds),
        collapsed_text(row),
        _p(row.p_value),
        holm_text(row, survives),
    )


def multiplicity_note(results: list[tuple[ClaimResult, float]]) -> str:
    """The closing note of the table: the family, the per-row level, how many rows chance alone would
    reproduce, and what Holm's correction keeps."""
    rows = [row for result, _ in results for row in result.rows]
    flags = family_holm(results)
    tested = [row for row in rows if math.isfinite(family_p(row))]
    untestable = sum(row.verdict == NOT_TESTABLE for row in rows)
    reproduced = [row for row in rows if row.verdict == REPRODUCED]
    kept = [row for row in reproduced if flags[id(row)]]
    return (
        f"Multiple comparisons: the family is the {len(rows)} rows of this table ({len(tested)} with a p-value; "
        f"{untestable} 'not testable here' rows, whose premise failed, are left out). "
        f"Each verdict is a per-row 95% t-interval, i.e. a one-sided test at level {ALPHA:g} with no correction: "
        f"if every claim sat exactly at its threshold, about {ALPHA * len(tested):.1f} of the {len(tested)} tested rows "
        f"would read 'reproduced' by chance. Holm's step-down correction over the family (family-wise level {ALPHA:g}) "
        f"keeps {len(kept)} of the {len(reproduced)} 'reproduced' rows (column Holm; docs/claims.md#multiple-comparisons)."
    )


LM_WORKERS = 2
"""Processes that simulate the LM-context runs of the full mode (``--quick``: in-process)."""


def run_claims(
    claims: dict, quick: bool, seeds: int, on_done=None, lm_seeds: int | None = None, jobs: int | None = None
) -> list[tuple[ClaimResult, float]]:
    """Run ``claims`` in order. The LM-context runs of every learning claim among them (``Claim.lm_variants``)
    are simulated first, :data:`LM_WORKERS` at a time (``lm_seeds``: replicas per run, None: the default,
    0: no LM context; ``jobs``: processes, None = 1 with ``quick``, else :data:`LM_WORKERS`; the numbers do not
    depend on it); their time is added to the first learning claim's."""
    _runs.clear_cache()
    n_lm = premise_mod.lm_seeds_or_default(lm_seeds, quick)
    lm_variants = [ov for claim in claims.values() for ov in claim.lm_variants]
    lm_seconds = 0.0
    if n_lm and lm_variants:
        t = time.perf_counter()
        with progress.phase("LM context runs"):
            _runs.prefetch_replicas(lm_variants, n_lm, quick, _runs.LM, workers=jobs or (1 if quick else LM_WORKERS))
        lm_seconds = time.perf_counter() - t
    out = []
    for claim in claims.values():
        t = time.perf_counter()
        with progress.phase(f"claim {claim.name}"):
            takes_lm = claim.lm_variants or "lm_seeds" in inspect.signature(claim.run).parameters
            result = claim.run(quick=quick, seeds=seeds, **({"lm_seeds": n_lm} if takes_lm else {}))
        if claim.lm_variants:
            t, lm_seconds = t - lm_seconds, 0.0
        elapsed = time.perf_counter() - t
        out.append((result, elapsed))
        if on_done is not None:
            on_done(claim, result, elapsed)
    _runs.clear_cache()
    return out


def verdict_table(results: list[tuple[ClaimResult, float]], title: str) -> Table:
    caption = (
        "95% CI: Student t-interval over seeds (docs/claims.md#verdicts). "
        + COLLAPSED_NOTE
        + " "
        + multiplicity_note(results)
    )
    table = Table(title=escape(title), caption=escape(caption), caption_justify="left")
    for col in COLUMNS:
        table.add_column(col)
    flags = family_holm(results)
    for result, _ in results:
        for row in result.rows:
            c = [escape(x) for x in cells(result, row, flags[id(row)])]
            c[VERDICT_COLUMN] = f"[{STYLE[row.verdict]}]{c[VERDICT_COLUMN]}"
            table.add_row(*c)
        table.add_section()
    return table


def markdown(results: list[tuple[ClaimResult, float]], command: str) -> str:
    lines = [
        f"Verdicts of `{command}` (95% CI: Student t-interval over seeds; definitions in docs/claims.md).",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    flags = family_holm(results)
    for result, _ in results:
        for row in result.rows:
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells(result, row, flags[id(row)])) + " |")
    lines += ["", COLLAPSED_NOTE, "", multiplicity_note(results)]
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
    """Lines: the mean over seeds with its 95% band per variant (an LM-context curve, labelled
    "(LM)", dashed), each seed's curve thin under it (:attr:`Curve.seeds`). Bars: one bar per variant with its
    CI, named on the x axis, each seed's value a dot; a curve without a band (a theory or published value) is a black mark
    over its bar, with one legend entry per kind of mark. Grouped: per category (``x_ticks``) one
    bar per variant with its CI, the variants side by side, each seed's value a dot."""
    if result.kind == "grouped":
        fig, ax = plt.subplots(figsize=(10, 4.5))
        width = 0.8 / max(len(result.curves), 1)
        for i, c in enumerate(result.curves):
            x = np.asarray(c.x, dtype=float) + (i - (len(result.curves) - 1) / 2) * width
            y = np.asarray(c.y, dtype=float)
            err = [y - np.asarray(c.low or c.y), np.asarray(c.high or c.y) - y]
            ax.bar(x, y, width, yerr=err, capsize=2, color=PALETTE[i % len(PALETTE)], label=c.label)
            for seed in c.seeds:  # each seed's value, a dot on its bar
                ax.plot(x, seed, "o", color="black", markersize=3.5, alpha=0.7)
        ax.set_xticks(range(len(result.x_ticks)), result.x_ticks, rotation=30, ha="right", fontsize=7)
        ax.set_ylim(top=ax.get_ylim()[1] * 1.12)  # room for the legend above the bars
        dots = any(c.seeds for c in result.curves)
        ax.legend(
            fontsize=7,
            ncol=len(result.curves),
            loc="upper center",
            title="bars: mean, 95% CI" + ("; dots: each seed" if dots else ""),
            title_fontsize=7,
        )
    elif result.kind == "lines":
        fig, ax = plt.subplots(figsize=(7, 4))
        for i, c in enumerate(result.curves):
            color = PALETTE[i % len(PALETTE)]
            ax.plot(c.x, c.y, color=color, label=c.label, linestyle="--" if c.label.endswith("(LM)") else "-")
            if c.low:
                ax.fill_between(c.x, c.low, c.high, color=color, alpha=0.2, linewidth=0)
            for seed in c.seeds:
                ax.plot(c.x, seed, color=color, linewidth=0.5, alpha=0.45)
        title = "mean over seeds, band: 95% CI" + (", thin: each seed" if any(c.seeds for c in result.curves) else "")
        ax.legend(fontsize=7, title=title, title_fontsize=7)
    else:
        bars = [c for c in result.curves if c.low]
        fig, ax = plt.subplots(figsize=(max(7.0, 1.1 * len(bars) + 3), 4.6))
        ticks, names, labelled = [], [], set()
        for c in result.curves:
            name, kind = _split_label(c.label)
            if c.low:
                err = [[c.y[0] - c.low[0]], [c.high[0] - c.y[0]]]
                legend = f"{kind or 'measured'} (mean, 95% CI{'; dots: each seed' if c.seeds else ''})"
                ax.bar(
                    c.x,
                    c.y,
                    color=PALETTE[0],
                    yerr=err,
                    capsize=4,
                    width=0.6,
                    label=legend if legend not in labelled else None,
                )
                labelled.add(legend)
                for seed in c.seeds:  # each seed's value, a dot on its bar
                    ax.plot(c.x, seed, "o", color="black", markersize=4, alpha=0.7)
                ticks.append(c.x[0])
                names.append(name)
            else:
                legend = kind or name
                ax.plot(
                    c.x, c.y, "k_", markersize=28, markeredgewidth=2.5, label=legend if legend not in labelled else None
                )
                labelled.add(legend)
        ax.set_xticks(ticks, names, rotation=20, ha="right", fontsize=8)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, markerscale=0.5)
    ax.set_xlabel(result.x_label)
    ax.set_ylabel(result.y_label)
    counts = {
        v: sum(r.verdict == v for r in result.rows) for v in (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_TESTABLE)
    }
    ax.set_title(
        f"{result.name} ({result.paper}):\n"
        + ", ".join(f"{n} {v}" for v, n in counts.items() if n)
        + collapsed_title(result),
        fontsize=9,
    )
    ax.grid(alpha=0.3)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def write_outputs(
    results: list[tuple[ClaimResult, float]],
    out: Path,
    quick: bool,
    seeds: int,
    command: str,
    lm_seeds: int | None = None,
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for result, _ in results:
        figure(result, out / f"{result.name}.png")
    write_text(out / "claims.md", markdown(results, command))
    write_json(
        out / "claims.json",
        {
            "command": command,
            "quick": quick,
            "seeds": seeds,
            "lm_seeds": premise_mod.lm_seeds_or_default(lm_seeds, quick),
            "claims": [{**r.to_dict(), "seconds": round(s, 2)} for r, s in results],
            "multiple_comparisons": {
                "family_rows": sum(len(r.rows) for r, _ in results),
                "alpha_one_sided": ALPHA,
                "correction": "Holm step-down over the rows' one-sided p-values; rows 'not testable here' left out",
                "holm_reproduced": [
                    f"{r.name}: {row.label}"
                    for r, _ in results
                    for row in r.rows
                    if row.verdict == REPRODUCED and family_holm(results)[id(row)]
                ],
                "note": multiplicity_note(results),
            },
        },
    )
