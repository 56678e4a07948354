"""The ``sandbox explore`` command functions (registered on the app in :mod:`sandbox.cli`)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from sandbox.base import progress
from sandbox.base.outputs import describe_os_error, user_path
from sandbox.cli_support import _fail, _os_error, _out_path, console, parse_duration


def explore(
    out: Path = typer.Option(
        Path("runs/explore"), "--out", parser=_out_path, metavar="DIR", help="Directory of explorer.html."
    ),
    quick: bool = typer.Option(False, "--quick", help="A small grid (under 2 minutes on 2 cores)."),
    budget: float | None = typer.Option(
        None,
        "--budget",
        metavar="DURATION",
        parser=parse_duration,
        help="Refuse a task's grid estimated over this wall time, e.g. 90s or 10m (default: each task's own, quick 60 s and 90 s, full 300 s and 600 s).",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
):
    """Precompute a grid of runs (lag bound x learning rate x method x delay tail x engine mismatch) on
    the delayed quadratic (where staleness bites) and on the bit-string (the contrast), and write one
    self-contained page whose controls switch between them."""
    import time

    from sandbox.explore.api import DEFAULT_PAGE, QUICK_PAGE, GridError, build_explorer
    from sandbox.scenario.budget import format_seconds

    out_dir = user_path(out)
    try:  # before minutes of runs: --out must be a directory we can write
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".explorer-write-check"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        _fail(f"--out {escape(str(out))}: not a writable directory ({escape(describe_os_error(exc))})")
    grid = QUICK_PAGE if quick else DEFAULT_PAGE
    if budget is not None:  # each task's grid is held to it
        grid = tuple(g.with_(budget_seconds=budget) for g in grid)
    t0 = time.time()
    try:
        with progress.session(progress.enabled(quiet)):
            path = build_explorer(out_dir, grid)
    except GridError as exc:
        _fail(escape(str(exc)))
    except OSError as exc:  # a full disk while writing
        _os_error(exc)
    size = path.stat().st_size
    console.print(
        f"explorer: [bold]{escape(str(path))}[/bold] ({size / 1e6:.2f} MB, built in "
        f"{format_seconds(time.time() - t0)}; self-contained, open it in any browser)"
    )
