"""Running checks, printing their table, and writing ``--report DIR`` (one figure per check and
a JSON summary).

The table names each point by the variable its check sweeps (the check's :func:`~.base.sweeps`
declaration: ``τ = 4 versions``, ``P = 8 workers``, ``sync (τ = 0): k = 4 steps``) and shows a
two-sided criterion as ``± tolerance`` (pass iff |measured − predicted| ≤ tolerance) and a one-sided
one as ``≤ bound`` with ``+ tolerance`` (pass iff measured − tolerance ≤ bound)."""

from __future__ import annotations

import os
import time
from functools import partial
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from rich.markup import escape  # noqa: E402
from rich.table import Table  # noqa: E402

from sandbox.base import progress  # noqa: E402
from sandbox.base.outputs import write_json  # noqa: E402
from sandbox.checks.api import CHECKS  # noqa: E402
from sandbox.checks.base import UNDECLARED, CheckResult, Point, Swept  # noqa: E402
from sandbox.run.plots import PALETTE, _save  # noqa: E402

TABLE_COLUMNS = ("check", "swept variable", "predicted", "measured", "tolerance", "result")
TABLE_LEGEND = (
    "tolerance ± t: a point passes when |measured − predicted| ≤ t. A one-sided bound (predicted ≤ x, "
    "tolerance + t) passes when measured − t ≤ x."
)


def swept_of(result: CheckResult) -> Swept:
    """The :class:`Swept` declaration of the check that produced ``result``."""
    check = CHECKS.get(result.name)
    return check.swept if check is not None else UNDECLARED


def table_cells(swept: Swept, point: Point) -> tuple[str, str, str, str]:
    """(swept variable, predicted, measured, tolerance) of one point, as the table prints them."""
    if swept.is_upper(point):
        predicted, tolerance = f"≤ {point.predicted:.5g}", f"+ {point.tolerance:.2g}"
    else:
        predicted, tolerance = f"{point.predicted:.5g}", f"± {point.tolerance:.2g}"
    return swept.label(point), predicted, f"{point.measured:.5g}", tolerance


def results_table(results: list[tuple[CheckResult, float]], title: str) -> Table:
    """One row per point, the check's name on its first row; rich markup in the result column."""
    table = Table(title=escape(title), caption=TABLE_LEGEND, caption_justify="left")
    for col in TABLE_COLUMNS:
        table.add_column(col)
    for result, _ in results:
        swept = swept_of(result)
        for i, p in enumerate(result.points):
            table.add_row(
                escape(result.name) if i == 0 else "",
                *(escape(c) for c in table_cells(swept, p)),
                ("[green]pass" if p.ok else "[red]FAIL") + (f" [dim]{escape(p.note)}[/dim]" if p.note else ""),
            )
        table.add_section()
    return table


def figure(result: CheckResult, path: Path) -> None:
    """Predicted values (line) against measured points with ±tolerance bars; for a one-sided bound
    the bar runs down from the measurement by the tolerance (pass iff its lower end is ≤ the bound)."""
    swept = swept_of(result)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    series = sorted({p.series for p in result.points})
    for i, name in enumerate(series):
        pts = sorted((p for p in result.points if p.series == name), key=lambda p: p.x)
        upper = bool(pts) and swept.is_upper(pts[0])
        x = np.array([p.x for p in pts], dtype=float)
        label = f" ({name})" if name else ""
        ax.plot(
            x,
            [p.predicted for p in pts],
            "-",
            color=f"C{i}",
            label=f"{'bound' if upper else 'predicted'} (theory){label}",
        )
        colors = [PALETTE[2] if p.ok else PALETTE[5] for p in pts]  # bluish green / vermillion: colour-blind safe
        tol = [p.tolerance for p in pts]
        ax.errorbar(
            x,
            [p.measured for p in pts],
            yerr=[tol, [0.0] * len(pts)] if upper else tol,
            fmt="none",
            ecolor="gray",
            capsize=3,
        )
        measured_label = "measured (bar: − tolerance, one-sided)" if upper else "measured ± tolerance"
        markers = ["o" if p.ok else "X" for p in pts]
        for xi, yi, ci, mi in zip(x, [p.measured for p in pts], colors, markers):
            ax.scatter([xi], [yi], c=[ci], marker=mi, zorder=3)
        if i == 0:
            ax.scatter([], [], c=[PALETTE[2]], marker="o", label=measured_label + " (within)")
            if not all(p.ok for p in result.points):
                ax.scatter([], [], c=[PALETTE[5]], marker="X", label="measured, outside the tolerance")
    x = np.array([p.x for p in result.points], dtype=float)
    if result.log_y and all(p.predicted > 0 and p.measured > 0 for p in result.points):
        ax.set_yscale("log")
    if result.log_x and (x > 0).all():
        ax.set_xscale("log")
    ax.set_xlabel(result.x_label)
    ax.set_ylabel(result.y_label)
    ax.set_title(f"{result.name}: {'PASS' if result.passed else 'FAIL'}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)


def _timed(check, quick: bool, perturb: bool) -> tuple[CheckResult, float]:
    t = time.perf_counter()
    with progress.phase(f"check {check.name}"):
        result = check.run(quick=quick, perturb=check.perturbation if perturb else 1.0)
    return result, time.perf_counter() - t


_POOL_CHECKS: list = []
"""The checks a worker pool runs, by position (set before the pool forks: its workers inherit them)."""


def _pool_worker_start() -> None:
    import signal

    import torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent decides
    torch.set_num_threads(1)


def _pool_run(index: int, quick: bool, perturb: bool) -> tuple[CheckResult, float]:
    return _timed(_POOL_CHECKS[index], quick, perturb)


def run_checks(
    checks: dict, quick: bool, perturb: bool = False, on_done=None, processes: int = 1
) -> list[tuple[CheckResult, float]]:
    """Each check's result and seconds, in the order of ``checks``; ``on_done(check, result, seconds)`` as each
    is known, in that order. ``processes`` > 1: the checks run in that many worker processes forked from this
    one (``multiprocessing``'s fork pool), handed out one at a time in order, so a long check does not hold
    the others back. A check's numbers do not depend on the process it runs in: each seeds its own
    simulations (``tests/checks/test_check_processes.py``)."""
    items = list(checks.values())
    pool = None
    if processes > 1 and len(items) > 1 and hasattr(os, "fork"):
        import multiprocessing

        _POOL_CHECKS[:] = items
        pool = multiprocessing.get_context("fork").Pool(min(processes, len(items)), initializer=_pool_worker_start)
        outcomes = pool.imap(partial(_pool_run, quick=quick, perturb=perturb), range(len(items)))
    else:
        outcomes = (_timed(check, quick, perturb) for check in items)
    out = []
    try:
        for check, (result, elapsed) in zip(items, outcomes):
            out.append((result, elapsed))
            if on_done is not None:
                on_done(check, result, elapsed)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
            _POOL_CHECKS.clear()
    return out


def _swept_summary(result: CheckResult) -> dict:
    swept = swept_of(result)
    return {
        "swept": {
            "symbol": swept.symbol,
            "unit": swept.unit,
            "upper_bound": swept.upper_bound if isinstance(swept.upper_bound, bool) else sorted(swept.upper_bound),
            "labels": [swept.label(p) for p in result.points],
        }
    }


def write_report(
    results: list[tuple[CheckResult, float]], out: Path, quick: bool, perturb: bool, figures: bool = True
) -> None:
    """``summary.json`` and, with ``figures``, one figure per check (``False``: drawn already, by
    the command's figure workers)."""
    out.mkdir(parents=True, exist_ok=True)
    if figures:
        for result, _ in results:
            figure(result, out / f"{result.name}.png")
    write_json(
        out / "summary.json",
        {
            "quick": quick,
            "perturbed": perturb,
            "passed": all(r.passed for r, _ in results),
            "checks": [{**r.to_dict(), "seconds": round(s, 2), **_swept_summary(r)} for r, s in results],
        },
    )
