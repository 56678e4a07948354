"""The ``sandbox import`` command functions (registered on the app in :mod:`sandbox.cli`)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from sandbox.base.outputs import user_path
from sandbox.cli_support import _command, _config_slug, _framework_problem, _out_path, _starting, console


def import_(
    config: Path | None = typer.Argument(
        None,
        help="The framework's config: verl / VCPO-fork overrides (key=value lines) or YAML; TRL GRPOConfig / AsyncGRPOConfig keyword arguments as JSON or YAML; OpenRLHF flags; AReaL YAML; prime-rl TOML (see --list).",
    ),
    framework: str | None = typer.Option(
        None, "--framework", "-f", metavar="NAME", help="The framework the config is written for (see --list)."
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        parser=_out_path,
        metavar="DIR",
        help="Output directory for scenario.toml and IMPORT.md (default: imported/<config name>-<framework>).",
    ),
    task: str = typer.Option(
        "bitstring",
        "--task",
        help="Proxy task the scenario runs on: bitstring (seconds per run) or lm (the small LM of lm_mission, minutes).",
    ),
    workers: int | None = typer.Option(
        None,
        "--workers",
        metavar="N",
        min=1,
        help="Simulated rollout workers generating concurrently (engines x concurrency): system.num_workers (default: from the config or --cluster, else the proxy's 16, stated in the output).",
    ),
    cluster: Path | None = typer.Option(
        None,
        "--cluster",
        help="A TOML file with a [cluster] table: num_workers, generation_time / train_time / sync_delay (delay tables, e.g. a length trace), and recorded-only trainer_gpus, rollout_gpus, gpu, model_params (docs/import.md).",
    ),
    entry: str | None = typer.Option(
        None,
        "--entry",
        help="The entry point the config is launched with when the file does not say (verl: a module such as verl.experimental.one_step_off_policy.main_ppo; trl: GRPOConfig or AsyncGRPOConfig).",
    ),
    list_: bool = typer.Option(False, "--list", help="List the frameworks and the formats read, then exit."),
    quiet: bool = typer.Option(
        False,
        "--quiet",
        "-q",
        help="No progress display: only the workers assumed and the line naming what was written.",
    ),
):
    """Read a framework's config as a scenario: scenario.toml (loads and runs) plus IMPORT.md listing, key by key,
    what was mapped, converted, cannot be represented or is unknown (docs/import.md).

    Exit status: 0 written, 2 bad input (a malformed file names the line or key).
    """
    with _starting():
        from sandbox.base.outputs import write_text
        from sandbox.importers.api import IMPORTERS, ConfigImportError, import_config, read_cluster, render_import_md
    if list_:
        table = Table(title="sandbox import CONFIG --framework NAME")
        for col in ("framework", "reads", "formats"):
            table.add_column(col)
        for imp in IMPORTERS.values():
            table.add_row(imp.name, escape(imp.title), escape(imp.formats))
        console.print(table)
        return
    with _command("sandbox import", ConfigImportError) as output:
        if config is None:
            raise ConfigImportError("CONFIG: expected the framework's config file (or --list)")
        if problem := _framework_problem(framework, IMPORTERS):
            raise ConfigImportError(problem)
        facts = dict(read_cluster(cluster)) if cluster is not None else {}
        if workers is not None:
            facts["num_workers"] = workers
        imp = import_config(config, framework, task, facts, entry=entry)
        target = user_path(out) if out is not None else Path("imported") / f"{_config_slug(config)}-{framework}"
        with output.stage(target) as stage:
            write_text(stage / "scenario.toml", imp.toml)
            write_text(stage / "IMPORT.md", render_import_md(imp, IMPORTERS[framework].title))
    console.print(_workers_line(imp, workers, cluster))
    if quiet:
        console.print(f"written to [bold]{escape(str(target))}[/bold]: scenario.toml, IMPORT.md")
        return
    counts: dict[str, int] = {}
    for r in imp.rows + imp.cluster_rows:
        counts[r.kind] = counts.get(r.kind, 0) + 1
    keys = len({r.key for r in imp.rows + imp.cluster_rows})
    console.print(
        f"[bold]{escape(framework)}[/bold]: {keys} keys read into {sum(counts.values())} rows ({counts.get('mapped', 0)} as is, "
        f"{counts.get('converted', 0)} converted, {counts.get('default', 0)} framework defaults, "
        f"{counts.get('setup', 0)} setup, {counts.get('scale', 0)} scale-dependent); proxy task: {escape(task)}"
    )
    for r in imp.rows:
        if r.kind in ("unsupported", "unknown"):
            label = "cannot represent" if r.kind == "unsupported" else "unknown key"
            console.print(
                f"  [yellow]{label}[/yellow] [bold]{escape(r.key)}[/bold] = {escape(str(r.value))}: {escape(r.note)}"
            )
    console.print(
        f"written to [bold]{escape(str(target))}[/bold]: scenario.toml, IMPORT.md\n"
        f"run it: [dim]sandbox run {escape(str(target / 'scenario.toml'))}[/dim]"
    )


def _workers_line(imp, given: int | None, cluster: Path | None) -> str:
    """Where the imported scenario's simulated workers (``system.num_workers``) came from, said out loud: a
    proxy default silently kept would set the staleness of a different cluster."""
    n = imp.data.get("system", {}).get("num_workers")
    if given is not None:
        source = "--workers"
    elif any(r.field == "system.num_workers" for r in imp.cluster_rows):
        source = f"--cluster {cluster}"
    elif any(r.field == "system.num_workers" for r in imp.rows):
        source = "the config"
    else:
        return (
            f"[yellow]simulated workers: {n}[/yellow], the proxy scenario's default (the config does not say how "
            "many rollouts run concurrently): give --workers N (engines x concurrency) or cluster.num_workers"
        )
    return f"simulated workers: {n} (from {escape(source)})"
