"""The ``sandbox report`` command functions (registered on the app in :mod:`sandbox.cli`)."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.markup import escape

from sandbox.base.outputs import OutputError, user_path
from sandbox.cli_support import _deprecated, _fail, _os_error, _out_path, console


def report(
    directory: Path = typer.Argument(..., help="A sweep directory or the output of `sandbox run`."),
    out: Path | None = typer.Option(
        None, "--out", parser=_out_path, metavar="DIR", help="Directory of report.html (default: DIRECTORY itself)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
):
    """Write a self-contained HTML report (figures embedded, scenario, table of runs) as report.html in
    --out (a directory, created if needed; a path ending in .html still names the file, deprecated)."""
    from sandbox.base.outputs import check_out_path, out_dir
    from sandbox.base.readfile import InputFileError
    from sandbox.report.api import write_report

    try:  # the file is replaced (a link there too, never written through); an impossible path is refused
        target = None
        if out is not None:
            if out.suffix.lower() in (".html", ".htm"):
                _deprecated("sandbox report --out FILE.html", "--out DIR (report.html is written into it)")
                target = check_out_path(user_path(out))
            else:
                target = check_out_path(out_dir(user_path(out)) / "report.html")
        if target is not None and os.path.lexists(target) and not (os.path.islink(target) or target.is_file()):
            raise OutputError(
                f"--out: {target} exists and is not a file (a directory or a special file): remove it "
                "or choose another path"
            )
        path = write_report(directory, target)
    except (FileNotFoundError, InputFileError, OutputError) as exc:
        _fail(escape(str(exc)))
    except OSError as exc:
        _os_error(exc)
    console.print(f"report: [bold]{path}[/bold] (self-contained; open it in any browser)")
