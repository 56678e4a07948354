"""Command line: ``sandbox run [SCENARIO] [--set dotted.key=value ...] [--out DIR]`` and the other
commands (``sandbox --help``).

Start-up imports only what every command needs (typer, rich, numpy): the scenario models pull in
torch (several seconds), so each command imports them when it runs, and ``sandbox --help``,
``sandbox --version`` and ``sandbox demo`` (the list) never load torch (tests/scenario/test_cli_polish.py
checks it). Help is click's plain layout: a flag is listed as a flag (``-q, --quiet``; an on/off pair
as ``--x / --no-x``), without the ``<bool>`` value type that typer 0.29's rich panels print after
every flag as if it took a value."""

from __future__ import annotations

import os
import sys

# pyarrow's buffers (parquet writing, pandas's arrow-backed strings) from the system allocator, in
# this process and the sweep workers it starts, unless the user chose a pool: mimalloc, pyarrow's
# default, kept what every table's conversion had used (with the records emptied as their
# tables are built and the written variants slimmed, the quickstart's peak RSS grew by about 25 KB a
# step with mimalloc, about 12 with the system allocator); the bytes written are the same.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

try:  # Ctrl-C during the start-up imports (typer, rich, each command's module) exits without a traceback
    import typer

    from sandbox import __version__
    from sandbox.checks.command import check
    from sandbox.claims.command import claims
    from sandbox.cli_support import console
    from sandbox.demos.command import demo
    from sandbox.explore.command import explore
    from sandbox.export.command import export
    from sandbox.importers.command import import_
    from sandbox.plan.command import plan
    from sandbox.preflight.command import preflight
    from sandbox.report.command import report
    from sandbox.run.command import run
    from sandbox.scenario.command import list_components, scenario_command
    from sandbox.sweep.command import mission, sweep
except KeyboardInterrupt:
    sys.stderr.write("interrupted: nothing was kept\n")
    raise SystemExit(130) from None

app = typer.Typer(
    add_completion=False,
    no_args_is_help=False,
    rich_markup_mode=None,
    help="Asynchronous-RL simulation and theory sandbox.",
)

# the commands, each in its folder (the order of --help)
app.command()(run)
app.command("scenario", short_help="Print a scenario resolved, or the reference of every key.")(scenario_command)
app.command()(sweep)
app.command(short_help="A scenario's variants over seeds: mission.png, mission.md and the VCPO control.")(mission)
app.command(short_help="Hold the theory's predictions against simulations.")(check)
app.command(short_help="Each paper's claim as an experiment with a verdict over seeds.")(claims)
app.command(short_help="Capacity planning: throughput, lag and utilisation over workers x staleness bounds.")(plan)
app.command(short_help="Write a self-contained HTML report of a run or a sweep.")(report)
app.command(short_help="List the teaching demos, or run one.")(demo)
app.command(short_help="Write an interactive HTML explorer of staleness (precomputed runs, works offline).")(explore)
app.command("list", short_help="List the components a scenario can be assembled from.")(list_components)
app.command(short_help="Write a scenario as a GPU framework's configuration.")(export)
app.command("import", short_help="Read a GPU framework's config back as a scenario (the inverse of export).")(import_)
app.command(short_help="Before a GPU run: simulate around an imported config and answer the seven questions.")(
    preflight
)


def _print_version(value: bool) -> None:
    if value:
        console.print(f"sandbox {__version__} (Python {sys.version.split()[0]})", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the sandbox version and exit."
    ),
) -> None:
    """Asynchronous-RL simulation and theory sandbox: run scenarios, sweeps and theory checks."""


def main() -> None:  # pragma: no cover
    app()
