"""The ``sandbox demo`` command functions (registered on the app in :mod:`sandbox.cli`)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from sandbox.base import progress
from sandbox.base.outputs import OutputError, user_path
from sandbox.cli_support import _deprecated, _did_you_mean, _fail, _os_error, _out_path, console


def demo(
    name: str | None = typer.Argument(None, help="Demo to run (omit to list them)."),
    out: Path = typer.Option(
        Path("runs/demos"), "--out", parser=_out_path, metavar="DIR", help="Where the figure is written."
    ),
    quick: bool = typer.Option(False, "--quick", help="A few steps only (a smoke test)."),
    tiny: bool = typer.Option(False, "--tiny", hidden=True, help="Deprecated spelling of --quick."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
):
    """List the teaching demos, or run one: a plain-language explanation and one figure."""
    from sandbox.demos.api import DEMOS, run_demo

    if name is None:
        table = Table(title="demos (sandbox demo NAME)")
        table.add_column("name")
        table.add_column("what it shows")
        for key, (_, desc) in DEMOS.items():
            table.add_row(key, desc)
        console.print(table)
        return
    if tiny:
        _deprecated("sandbox demo --tiny", "--quick")
        quick = True
    if name not in DEMOS:
        _fail(f"unknown demo {name!r}; {_did_you_mean(name, DEMOS)}available: {', '.join(DEMOS)}")
    import time

    from sandbox.base.outputs import out_dir

    t0 = time.time()
    try:
        out = out_dir(user_path(out))  # an impossible path: a clear error before the demo runs
        with (
            progress.session(progress.enabled(quiet)),
            progress.phase(f"demo {name}"),
        ):  # its runs' "simulating" rows under it
            path = run_demo(name, out, quick)
    except OutputError as exc:
        _fail(escape(str(exc)))
    except OSError as exc:
        _os_error(exc)
    console.print(f"[bold]{name}[/bold] done in {time.time() - t0:.1f} s; figure: [bold]{path}[/bold]")
