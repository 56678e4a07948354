"""The ``sandbox check`` command functions (registered on the app in :mod:`sandbox.cli`)."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.markup import escape

from sandbox.base import progress
from sandbox.base.outputs import OutputError, user_path
from sandbox.cli_support import _deprecated, _did_you_mean, _fail, _os_error, _out_path, console


def check(
    names: list[str] | None = typer.Argument(None, help="Checks to run (default: all). See --list."),
    quick: bool = typer.Option(
        False,
        "--quick",
        help="Smaller sweeps and fewer replicas (minutes on 2 cores rather than tens of minutes; used by the tests).",
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        parser=_out_path,
        metavar="DIR",
        help="Write one figure per check and summary.json into this directory.",
    ),
    report_old: Path | None = typer.Option(
        None, "--report", parser=_out_path, hidden=True, help="Deprecated spelling of --out."
    ),
    perturb: bool = typer.Option(
        False, "--perturb", help="Distort every prediction by its check's perturbation: all should FAIL."
    ),
    processes: int | None = typer.Option(
        None,
        "--processes",
        "-j",
        min=1,
        metavar="N",
        help="Checks run at once, each in its own process (default: 2, or 1 on a one-core machine); "
        "the same numbers whatever N.",
    ),
    list_: bool = typer.Option(False, "--list", help="List the checks and exit."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
):
    """Hold the theory's predictions against simulations; exit status 1 if any check fails."""
    if report_old is not None:
        _deprecated("sandbox check --report DIR", "--out DIR (--report is sweep's flag for report.html)")
        out = out if out is not None else report_old
    report = out
    import torch

    from sandbox.checks.api import CHECKS
    from sandbox.checks.report import figure, results_table, run_checks, write_report

    if list_:
        for c in CHECKS.values():
            swept = f"{c.swept.symbol} [{c.swept.unit}]" if c.swept.unit else c.swept.symbol
            console.print(f"[bold]{c.name}[/bold] ({c.theory}; sweeps {escape(swept)}): {escape(c.description)}")
        return
    unknown = [n for n in names or [] if n not in CHECKS]
    if unknown:
        _fail(f"unknown check(s) {unknown}; {_did_you_mean(unknown[0], CHECKS)}expected some of {list(CHECKS)}")
    selected = {n: CHECKS[n] for n in (names or CHECKS)}
    if report is not None:  # an impossible --report (/proc/x, a file in the way) is refused before the checks run
        from sandbox.base.outputs import out_dir

        try:
            report = out_dir(user_path(report), "--report")
        except OutputError as exc:
            _fail(escape(str(exc)))
    torch.set_num_threads(1)  # toy tensors: one thread is several times faster here

    def on_done(c, result, seconds):
        verdict = "[green]PASS[/green]" if result.passed else "[red]FAIL[/red]"
        console.print(
            f"{verdict} [bold]{c.name}[/bold] ({c.theory}, {seconds:.1f} s): {escape(result.claim)}\n"
            f"      tolerance: {escape(result.justification)}"
        )

    from sandbox.base.figure_worker import FigureWorkers
    from sandbox.run.plots import warm_up

    # with a report, each check's figure is drawn in a worker process forked when the check ends, while the
    # next check runs (the same files: sandbox/base/figure_worker.py); the block waits for them all
    workers = FigureWorkers(prepare=warm_up, enabled=report is not None)

    def done(c, result, seconds):
        on_done(c, result, seconds)
        bar.advance(info=f"{c.name} done")
        if workers.enabled:
            workers.submit(f"the figure of check {c.name!r}", figure, result, report / f"{c.name}.png")

    try:
        with (
            progress.session(progress.enabled(quiet)),
            progress.task("theory checks" + (" (quick)" if quick else ""), total=len(selected), unit="checks") as bar,
            workers,
        ):
            results = run_checks(selected, quick, perturb, done, processes or min(2, os.cpu_count() or 1))
    except OutputError as exc:  # a figure's worker failed (the disk, the directory)
        _fail(escape(str(exc)))
    title = f"theory checks{' (quick)' if quick else ''}{' with perturbed predictions' if perturb else ''}"
    console.print(results_table(results, title))
    if report is not None:
        try:
            with progress.session(progress.enabled(quiet)), progress.phase("figures: one per check"):
                write_report(results, report, quick, perturb, figures=not workers.enabled)
        except OutputError as exc:
            _fail(escape(str(exc)))
        except OSError as exc:
            _os_error(exc)
        console.print(f"report in [bold]{report}[/bold]")
    failed = [r.name for r, _ in results if not r.passed]
    if failed:
        console.print(f"[red]{len(failed)} check(s) failed:[/red] {', '.join(failed)}")
        raise typer.Exit(1)
    console.print(f"[green]all {len(results)} checks passed[/green]")
