"""The ``sandbox export`` command functions (registered on the app in :mod:`sandbox.cli`)."""

from __future__ import annotations

import math
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from sandbox.base.outputs import user_path
from sandbox.cli_support import _command, _fail, _framework_problem, _out_path, console

EXIT_REFUSED = 3


def export(
    source: Path | None = typer.Argument(
        None, help="Scenario TOML, a shipped scenario's name, a `sandbox run` directory or a `sandbox sweep` directory."
    ),
    framework: str | None = typer.Option(
        None, "--framework", "-f", metavar="NAME", help="Target framework (see --list)."
    ),
    version: str | None = typer.Option(None, "--version", help="Framework version (default: the newest supported)."),
    variant: str | None = typer.Option(
        None, "--variant", metavar="NAME", help="Variant of a scenario file or of a multi-variant run directory."
    ),
    run_id: str | None = typer.Option(None, "--run", help="Run id of a sweep directory."),
    best: str | None = typer.Option(
        None,
        "--best",
        help="Pick the run (sweep: the configuration, averaged over seeds) with the highest value of this summary metric; speedup (= speedup_vs_sync) ranks by the end-to-end speed-up against the synchronous baseline.",
    ),
    lowest: bool = typer.Option(False, "--lowest", help="With --best: pick the lowest value instead (losses)."),
    set_: list[str] | None = typer.Option(
        None,
        "--set",
        metavar="KEY=VALUE",
        help="Override a scenario field before exporting: dotted.key=value (repeatable).",
    ),
    lr: float | None = typer.Option(None, "--lr", help="Learning rate for YOUR model (the toy's is never exported)."),
    out: Path | None = typer.Option(
        None, "--out", parser=_out_path, metavar="DIR", help="Output directory (default: promote/<source>-<framework>)."
    ),
    allow_partial: bool = typer.Option(
        False,
        "--allow-partial",
        help="Write the config even when settings have no equivalent (listed in PROMOTION.md).",
    ),
    list_: bool = typer.Option(False, "--list", help="List frameworks, versions and what each can express, then exit."),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="No progress display: only the line naming what was written (and refusals)."
    ),
):
    """Write a scenario as the configuration of a GPU framework, with PROMOTION.md explaining every key.

    Exit status: 0 written, 2 bad input, 3 refused (settings without an equivalent; see --allow-partial).
    """
    from sandbox.base.outputs import out_dir
    from sandbox.export.api import EXPORTERS, ExportError, ExportRefused, Given, export_scenario
    from sandbox.export.promotion import previous_source
    from sandbox.export.source import resolve

    if list_:
        _print_frameworks(EXPORTERS, framework)
        return
    with _command("sandbox export", ExportError):
        try:
            if source is None:
                raise ExportError("SOURCE: expected a scenario TOML, a run directory or a sweep directory (or --list)")
            if problem := _framework_problem(framework, EXPORTERS):
                raise ExportError(problem)
            if lr is not None and not (lr > 0 and math.isfinite(lr)):
                raise ExportError(f"--lr: expected a positive finite learning rate, got {lr}")
            src = resolve(source, variant=variant, run_id=run_id, best=best, lowest=lowest, overrides=set_)
            given = Given(
                lr=lr
                if lr is not None
                else (src.scenario.algorithm.optimizer.lr if "algorithm.optimizer.lr" in src.overrides else None),
                grad_clip=src.scenario.algorithm.optimizer.grad_clip
                if "algorithm.optimizer.grad_clip" in src.overrides
                else None,
            )
            exp = export_scenario(src.scenario, framework, version, given, allow_partial, src.provenance)
            target = user_path(out) if out is not None else Path("promote") / f"{src.label}-{framework}"
            if out is None and previous_source(target) not in (None, exp.provenance):
                raise ExportError(
                    f"--out: the default folder {target} holds the export of another source ({previous_source(target)}); "
                    "choose a folder with --out (or remove that one)"
                )
            out_dir(target)  # an impossible path (/proc, a file in the way): a clear error, nothing written
            exp.write(target)
        except ExportRefused as exc:
            console.print(
                f"[red]refused:[/red] {framework} cannot express {len(exc.rows)} setting(s) of this scenario:"
            )
            for r in exc.rows:
                console.print(f"  - [bold]{escape(r.source)}[/bold] = {escape(str(r.value))}: {escape(r.note)}")
            console.print(
                "Nothing was written. Re-run with [bold]--allow-partial[/bold] to write the rest and list these in PROMOTION.md."
            )
            if framework == "trl" and any("SandboxGRPOConfig.from_scenario" in r.note for r in exc.rows):
                where = f", variant={variant!r}" if variant else ""
                console.print(
                    "Or keep the method inside TRL's GRPOTrainer (docs/promotion.md#trl; "
                    "examples/trl_grpo_from_scenario.py):\n  "
                    + escape(
                        f"SandboxGRPOTrainer(model, reward_funcs, args=SandboxGRPOConfig.from_scenario("
                        f"{str(source)!r}{where}, output_dir=...), train_dataset=...)"
                    ),
                    soft_wrap=True,
                )
            raise typer.Exit(EXIT_REFUSED)
    command = next((ln for ln in exp.launch.splitlines() if ln.strip() and not ln.lstrip().startswith("#")), exp.launch)
    if quiet:
        console.print(f"written to [bold]{target}[/bold]: {', '.join(exp.files)}")
        return
    counts = exp.plan.counts()
    console.print(
        f"[bold]{escape(exp.plan.framework)} {escape(exp.plan.version)}[/bold] ({escape(exp.plan.target)}): "
        f"{len(exp.plan.settings)} keys written ({counts['as_is']} as is, {counts['converted']} converted, "
        f"{counts['pinned']} pinned); {counts['scale']} scale-dependent, {counts['setup']} setup, "
        f"{counts['sandbox_only']} sandbox-only fields"
    )
    for r in exp.plan.gaps():
        console.print(
            f"  [yellow]no equivalent[/yellow] [bold]{escape(r.source)}[/bold] = {escape(str(r.value))}: {escape(r.note)}"
        )
    console.print(
        f"written to [bold]{target}[/bold]: {', '.join(exp.files)}\nlaunch (see PROMOTION.md): [dim]{escape(command)}[/dim]"
    )


def _print_frameworks(exporters: dict, only: str | None) -> None:
    if only is not None:
        if only not in exporters:
            _fail(f"--framework: unknown framework {only!r}; expected one of {', '.join(exporters)}")
        cls = exporters[only]
        table = Table(title=f"{cls.name}: {cls.title}")
        table.add_column("concept")
        table.add_column("how")
        for concept, how in cls.expresses.items():
            table.add_row(concept, escape(how))
        console.print(table)
        console.print(
            "versions: " + ", ".join(f"{v.series} ({v.release}; keys read at {v.read_at})" for v in cls.versions)
        )
        return
    table = Table(title="sandbox export --framework NAME [--version V]")
    for col in ("framework", "versions (default first)", "target"):
        table.add_column(col)
    for cls in exporters.values():
        table.add_row(cls.name, ", ".join(f"{v.series} ({v.release})" for v in cls.versions), escape(cls.title))
    console.print(table)
    concepts: list[str] = []
    for cls in exporters.values():
        concepts += [c for c in cls.expresses if c not in concepts]
    matrix = Table(
        title="what each framework can express (yes = a key; partly = some settings or always on; "
        "- = no equivalent; details: --list --framework NAME)"
    )
    matrix.add_column("concept")
    for cls in exporters.values():
        matrix.add_column(cls.name)
    for c in concepts:
        cells = []
        for cls in exporters.values():
            how = cls.expresses.get(c)
            low = (how or "").lower()
            cells.append(
                "?"
                if how is None
                else "-"
                if low.startswith("no equivalent")
                else "partly"
                if low.startswith("partly")
                else "yes"
            )
        matrix.add_row(c, *cells)
    console.print(matrix)
