"""The ``sandbox mission, sweep`` command functions (registered on the app in :mod:`sandbox.cli`)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from sandbox.base import progress
from sandbox.base.errors import ScenarioError
from sandbox.base.outputs import OutputError, safe_name, user_path
from sandbox.base.processes import terminate_as_interrupt
from sandbox.cli_support import (
    _deprecated,
    _fail,
    _final_label,
    _fmt,
    _interrupted,
    _os_error,
    _out_path,
    _starting,
    console,
)


def sweep(
    sweep_file: Path = typer.Argument(
        ...,
        help="Sweep TOML (or a shipped sweep's name, e.g. sweeps/lag_lr_quadratic): base scenario + [grid] / [[zip]] axes + seeds.",
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        parser=_out_path,
        metavar="DIR",
        help="Sweep directory (default: [sweep] out or runs/sweeps/<name>).",
    ),
    jobs: int | None = typer.Option(
        None, "--jobs", "-j", min=1, metavar="N", help="Parallel processes (default: one per core)."
    ),
    workers_old: int | None = typer.Option(
        None, "--workers", min=1, hidden=True, help="Deprecated spelling of --jobs."
    ),
    backend: str | None = typer.Option(None, "--backend", help="local (process pool) or ray."),
    address: str | None = typer.Option(None, "--address", help="Ray cluster address (default: start a local one)."),
    set_: list[str] | None = typer.Option(
        None, "--set", metavar="KEY=VALUE", help="Override a base field for every run: dotted.key=value (repeatable)."
    ),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Run again the runs that failed with an error."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the runs and exit."),
    report_: bool = typer.Option(False, "--report", help="Write report.html into the sweep directory at the end."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    force: bool = typer.Option(
        False,
        "--force",
        help="Run even when a run's estimated memory (or the parallel runs') exceeds the available memory.",
    ),
):
    """Run a sweep (resumable: finished runs are never recomputed) and collect results.parquet.

    Ctrl-C exits with status 130 and no traceback: before the runs start nothing was written
    ("interrupted: nothing was kept", as `sandbox run`); once they run, the finished runs are kept
    and the same command resumes.
    """
    if workers_old is not None:
        _deprecated("sandbox sweep --workers", "-j/--jobs (--workers is for simulated workers)")
        jobs = jobs if jobs is not None else workers_old
    phase = ["load"]  # load | run | report: what an interruption leaves
    try:
        with terminate_as_interrupt():
            _sweep(sweep_file, out, jobs, backend, address, set_, retry_failed, dry_run, report_, quiet, force, phase)
    except OSError as exc:
        _os_error(exc)
    except KeyboardInterrupt:
        where = str(phase[1]) if len(phase) > 1 else ""
        _interrupted(
            {
                "load": "nothing was kept",
                "run": f"finished runs are kept in {where}; run the same command to resume",
                "report": f"no report was written; the runs are kept in {where}",
            }[phase[0]]
        )


def _sweep(
    sweep_file, out, workers, backend, address, set_, retry_failed, dry_run, report_, quiet, force, phase: list
) -> None:
    from sandbox.sweep.api import SweepError, default_out, load_sweep, run_sweep

    try:
        spec = load_sweep(sweep_file, set_)
    except ScenarioError as exc:
        _fail(escape(str(exc)))
    out = user_path(out) if out is not None else default_out(spec)
    if backend is not None and backend not in ("local", "ray"):
        _fail(f"--backend: expected local or ray (got {backend!r})")
    if dry_run:
        _print_sweep_plan(spec, out)
        return
    if not quiet:
        axes = " x ".join(f"{'+'.join(g)} ({len(v)})" for g, v in zip(spec.axes, spec.values)) or "no axes"
        seeds = f" x {len(spec.seeds)} seeds" if spec.seeds else ""
        console.print(
            f"sweep [bold]{escape(spec.name)}[/bold]: {escape(axes)}{seeds} = {len(spec.runs)} runs -> {escape(str(out))}"
        )
    phase[:] = ["run", out]
    try:
        outcome = run_sweep(
            spec,
            out,
            workers=workers,
            backend=backend,
            address=address,
            retry_failed=retry_failed,
            progress=not quiet,
            console=console,
            force=force,
        )
    except (SweepError, OutputError) as exc:
        _fail(escape(str(exc)))
    _print_sweep_table(outcome.results, spec)
    _print_sweep_speedups(out, outcome.results)
    console.print(
        f"{outcome.ran} runs computed, {outcome.skipped} already done, {outcome.failed} failed "
        f"({outcome.wall_s:.1f} s). Results: [bold]{escape(str(out / 'results.parquet'))}[/bold] "
        f"(sandbox.sweep.api.load_results({escape(repr(str(out)))}))"
    )
    if report_:
        from sandbox.report.api import write_report

        phase[:] = ["report", out]
        console.print(f"report: [bold]{escape(str(write_report(out)))}[/bold]")
    if len(outcome.results) and outcome.failed == len(outcome.results):  # nothing to show for it: not a success
        console.print(
            f"[red]every run of the sweep failed ({outcome.failed})[/red]: see the errors above or "
            f"{escape(str(out / 'runs'))}/<id>/error.json"
        )
        raise typer.Exit(1)


def mission(
    scenario: Path = typer.Argument(
        ..., help="Scenario TOML with variants, or a shipped scenario's name such as lm_mission."
    ),
    seeds: int = typer.Option(3, "--seeds", metavar="N", min=1, help="Seeds per variant (run.seed = 0 ... N-1)."),
    jobs: int = typer.Option(2, "--jobs", "-j", metavar="N", min=1, help="Parallel processes (1: in this process)."),
    out: Path | None = typer.Option(
        None, "--out", metavar="DIR", help="Sweep directory of the mission (default: runs/<scenario name>)."
    ),
    set_: list[str] | None = typer.Option(
        None, "--set", metavar="KEY=VALUE", help="Override a field: dotted.key=value (repeatable)."
    ),
    control: bool = typer.Option(
        True, "--control/--no-control", help="Run the VCPO constant-LR control (when a variant is named vcpo)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
):
    """Run every variant of a scenario over seeds as a resumable sweep, then the VCPO constant-LR control,
    and write mission.png (held-out reward and diagnostics, mean over seeds with a min-max band),
    mission.json and mission.md (sandbox/sweep/mission.py; docs/tasks.md#lm)."""
    with _starting():
        from sandbox.scenario.shipped import resolve_scenario_path
        from sandbox.sweep.api import SweepError
        from sandbox.sweep.mission import markdown, run_mission
    path = resolve_scenario_path(scenario)
    target = user_path(out) if out is not None else Path("runs") / (safe_name(path.stem) or "mission")
    try:
        with terminate_as_interrupt(), progress.session(progress.enabled(quiet)):
            _, table = run_mission(
                str(path), list(range(seeds)), target, jobs, set_ or [], control=control, progress=not quiet
            )
    except (ScenarioError, SweepError, OutputError) as exc:
        _fail(escape(str(exc)))
    except OSError as exc:
        _os_error(exc)
    except KeyboardInterrupt:
        _interrupted(f"finished runs are kept in {target}; run the same command to resume")
    console.print(escape(markdown(table, str(scenario))))
    console.print(f"figure: [bold]{escape(str(target / 'mission.png'))}[/bold]")


PLAN_TABLE_ROWS = 1000
"""``sandbox sweep --dry-run`` draws a table up to this many runs; beyond, plain aligned columns (rich
renders about 300 rows a second, so a 90,000-run sweep took minutes to list)."""


def _print_sweep_plan(spec, out: Path) -> None:
    from sandbox.sweep.results import run_dir, run_state
    from sandbox.sweep.spec import value_label

    keys = spec.axis_keys
    header = ["id", *keys, "seed", "state"]
    title = f"{spec.name}: {len(spec.runs)} runs -> {out}"
    if len(spec.runs) > PLAN_TABLE_ROWS:
        labels: dict[int, str] = {}  # an axis value's label, once per distinct value object

        def label(v) -> str:
            if id(v) not in labels:
                labels[id(v)] = str(value_label(v)).replace("\n", " ")
            return labels[id(v)]

        exists = Path(out).exists()
        rows = [
            [
                r.id,
                *[label(r.params[k]) for k in keys],
                str(r.seed),
                run_state(run_dir(out, r.id)) if exists else "pending",
            ]
            for r in spec.runs
        ]
        widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
        lines = [title, "  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
        console.file.write("\n".join(lines) + "\n")
        console.file.flush()
        return
    table = Table(title=escape(title))
    for col in header:
        table.add_column(col)
    for r in spec.runs:
        table.add_row(
            r.id, *[escape(str(value_label(r.params[k]))) for k in keys], str(r.seed), run_state(run_dir(out, r.id))
        )
    console.print(table)


def _print_sweep_table(df, spec, max_rows: int = 40) -> None:
    """Mean over seeds of the headline numbers, one row per combination of the swept values."""
    from rich.markup import escape

    if df.empty:
        return
    keys = [k for k in spec.display_keys if k in df.columns]
    reward_col = next(
        (c for c in ("final_expected_reward", "final_reward", "final_loss") if c in df and df[c].notna().any()), None
    )
    table = Table(title=escape(f"{spec.name} (mean over seeds)"))
    ttt = "time_to_target" in df and df["time_to_target"].notna().any()
    cols = (
        keys
        + ["runs", "status", "collapsed"]
        + ([reward_col] if reward_col else [])
        + ["throughput", "staleness"]
        + (["to target (s)", "end to end vs sync"] if ttt else [])
    )
    for c in cols:
        table.add_column(c.split(".")[-1] if c in keys and len(keys) > 3 else _final_label(c) if c == reward_col else c)
    groups = df.groupby(keys, sort=False, dropna=False) if keys else [((), df)]
    for i, (vals, g) in enumerate(groups):
        if i >= max_rows:
            console.print(f"... {len(df.groupby(keys)) - max_rows} more combinations in results.parquet")
            break
        vals = vals if isinstance(vals, tuple) else (vals,)
        status = ", ".join(f"{n} {s}" for s, n in g.status.value_counts().items())
        collapsed = (
            f"{int(g['collapsed_replicas'].sum())}/{int(g['replicas'].sum())}"
            if "collapsed_replicas" in g and "replicas" in g and g["collapsed_replicas"].notna().all()
            else "-"
        )
        row = [escape(str(v)) for v in vals] + [str(len(g)), status, collapsed]
        if reward_col:
            row.append(_fmt(g[reward_col].mean()))
        row.append(_fmt(g["throughput_samples_per_s"].mean(), ".2f") if "throughput_samples_per_s" in g else "-")
        row.append(_fmt(g["staleness_mean"].mean(), ".2f") if "staleness_mean" in g else "-")
        if ttt:
            reached = g["time_to_target"].notna()
            no_target = "target_level" in g and g["target_level"].isna().all()
            row.append(
                _fmt(g["time_to_target"].mean(), ".3g")
                if reached.all()
                else "no target"
                if no_target
                else f"not reached ({int(reached.sum())}/{len(g)})"
            )
            speed = g["speedup_vs_sync"].dropna() if "speedup_vs_sync" in g else []
            row.append(_fmt(speed.iloc[0], ".2f") + "x" if len(speed) else "-")
        table.add_row(*row)
    console.print(table)


def _print_sweep_speedups(out: Path, df) -> None:
    """One plain-words sentence per asynchronous configuration: time to target against its
    synchronous baseline, split into samples per second and samples needed (docs/time_to_target.md)."""
    if df.empty or "time_to_target" not in df or df["time_to_target"].isna().all():
        return
    from sandbox.analysis.time_to_target import describe
    from sandbox.sweep.results import time_to_target_comparison

    comp = time_to_target_comparison(out)
    if comp is None:
        return
    for label, base in comp.baseline.items():
        if base != label:
            console.print(escape(describe(comp, label)) + ".")
