"""Command line: ``sandbox run [SCENARIO] [--set dotted.key=value ...] [--out DIR]``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .scenario import DEFAULT_SCENARIO, ScenarioError, load_scenario, variant_scenarios

app = typer.Typer(add_completion=False, no_args_is_help=False, help="Asynchronous-RL simulation and theory sandbox.")
console = Console()


@app.callback()
def _root() -> None:
    """Asynchronous-RL simulation and theory sandbox: run scenarios, sweeps and theory checks."""


def _fmt(x, spec=".3f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec)


def _run_one(scn, out: Path | None, label: str, quiet: bool):
    from .runner import run_scenario

    with Progress(
        TextColumn(f"[bold]{label or scn.title or 'run'}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} steps"),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=console,
        disable=quiet,
        transient=False,
    ) as progress:
        task = progress.add_task("run", total=scn.run.steps, info="")

        def on_step(row: dict) -> None:
            reward = row.get("eval/expected_reward", row.get("reward/mean", row.get("eval/loss", math.nan)))
            progress.update(task, advance=1, info=f"t={row['time']:.1f}s  reward={_fmt(reward)}")

        return run_scenario(scn, out, on_step=on_step)


@app.command()
def run(
    scenario: Optional[Path] = typer.Argument(None, help="Scenario TOML (default: scenarios/quickstart.toml)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="Override a field: dotted.key=value (repeatable)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default: runs/<scenario name>)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
):
    """Run a scenario (all its variants) and print a summary table."""
    try:
        scn, raw = load_scenario(scenario or DEFAULT_SCENARIO, set_)
        variants = variant_scenarios(scn, raw)
    except ScenarioError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2)
    name = (scenario or DEFAULT_SCENARIO).stem
    out = out or Path("runs") / name
    results = {}
    for label, vscn in variants.items():
        results[label or name] = _run_one(vscn, out / label if label else out, label, quiet)
    _print_table(results, scn.title or name)
    if len(results) > 1:
        from .plots import comparison_figure

        comparison_figure(results, out / "comparison.png")
    console.print(f"results in [bold]{out}[/bold]")


def _print_table(results: dict, title: str) -> None:
    base = next(iter(results.values())).summary["throughput_samples_per_s"]
    table = Table(title=title)
    for col in ("run", "status", "throughput (samples/s)", "vs first", "final reward", "staleness mean/max", "ESS/N mean", "grad cos mean"):
        table.add_column(col)
    for label, r in results.items():
        s = r.summary
        reward = s["final_expected_reward"] if not math.isnan(s["final_expected_reward"]) else s["final_reward"]
        if math.isnan(reward):
            reward = s["final_loss"]
        status = s["status"] if s["status"] != "diverged" else f"diverged ({s['diverged_replicas']}/{s['replicas']})"
        table.add_row(
            label,
            status,
            _fmt(s["throughput_samples_per_s"], ".2f"),
            _fmt(s["throughput_samples_per_s"] / base if base else math.nan, ".2f") + "x",
            _fmt(reward),
            f"{_fmt(s['staleness_mean'], '.2f')} / {s['staleness_max']}",
            _fmt(s["ess_ratio_mean"]),
            _fmt(s["grad_cos_mean"]),
        )
    console.print(table)


def main() -> None:  # pragma: no cover
    app()
