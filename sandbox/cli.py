"""Command line: ``sandbox run [SCENARIO] [--set dotted.key=value ...] [--out DIR]`` and the other
commands (``sandbox --help``).

Start-up imports only what every command needs (typer, rich, numpy): the scenario models pull in
torch (several seconds), so each command imports them when it runs, and ``sandbox --help``,
``sandbox --version`` and ``sandbox demo`` (the list) never load torch (tests/scenario/test_cli_polish.py
checks it). Help is click's plain layout: a flag is listed as a flag (``-q, --quiet``; an on/off pair
as ``--x / --no-x``), without the ``<bool>`` value type that typer 0.29's rich panels print after
every flag as if it took a value."""

from __future__ import annotations

import difflib
import math
import os
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import List, NoReturn, Optional

# pyarrow's buffers (parquet writing, pandas's arrow-backed strings) from the system allocator, in
# this process and the sweep workers it starts, unless the user chose a pool: mimalloc, pyarrow's
# default, kept what every table's conversion had used (issue 28: with the records emptied as their
# tables are built and the written variants slimmed, the quickstart's peak RSS grew by about 25 KB a
# step with mimalloc, about 12 with the system allocator); the bytes written are the same.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

try:  # Ctrl-C during the start-up imports exits without a traceback
    import typer
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from . import __version__, progress
    from .errors import ScenarioError
    from .gc_pause import collected_on_exit
    from .outputs import COMPARISON, OutputError, StagedDir, describe_os_error, safe_name, user_path
    from .processes import interrupted_by, terminate_as_interrupt
except KeyboardInterrupt:
    sys.stderr.write("interrupted: nothing was kept\n")
    raise SystemExit(130) from None

app = typer.Typer(add_completion=False, no_args_is_help=False, rich_markup_mode=None,
                  help="Asynchronous-RL simulation and theory sandbox.")
# Wide tables when the output is a file or a CI log (rich would otherwise wrap at 80 columns).
console = Console() if sys.stdout.isatty() else Console(width=140)


def _interrupted(kept: str) -> NoReturn:
    """Ctrl-C or SIGTERM (:func:`sandbox.processes.terminate_as_interrupt`): say what the
    interruption left (``kept``) and exit with status 128 + the signal (130, 143), no traceback."""
    console.print(f"[yellow]interrupted[/yellow]: {escape(kept)}")
    raise typer.Exit(128 + interrupted_by())


def _fail(message: str) -> NoReturn:
    """One line ``error: message`` (rich markup: what the user wrote escaped), exit status 2, no traceback."""
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(2)


def _deprecated(old: str, new: str) -> None:
    """One line on stderr for an old spelling that still works for one release (docs/cli.md#vocabulary)."""
    sys.stderr.write(f"warning: {old} is deprecated and will be removed in the next release; use {new}\n")


def parse_duration(text: str) -> float:
    """Seconds of a duration in the one syntax every ``--budget`` takes: ``90s``, ``10m``, ``1.5h`` or a
    plain number of seconds; a ``typer.BadParameter`` (exit status 2, the option named) otherwise."""
    raw = str(text).strip().lower()
    unit = {"s": 1, "m": 60, "h": 3600}.get(raw[-1:])
    try:
        seconds = float(raw[:-1]) * unit if unit else float(raw)
    except ValueError:
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        raise typer.BadParameter(f"{text!r} is not a duration (expected e.g. 90s, 10m, 1.5h)")
    return seconds


def _did_you_mean(name: str, known) -> str:
    """``did you mean 'x'? `` for the closest of ``known`` (difflib), else ""."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""


def _os_error(exc: OSError) -> NoReturn:
    """A file-system error no other handler named (a full disk while writing): one line naming the
    path, exit status 2, no traceback."""
    where = f" ({exc.filename})" if exc.filename else ""
    _fail(escape(describe_os_error(exc) + where))


@contextmanager
def _starting():
    """Around a command's lazy imports (the scenario layer, torch): Ctrl-C there exits with status
    130 and no traceback, as during the start-up imports."""
    try:
        yield
    except KeyboardInterrupt:
        sys.stderr.write("interrupted: nothing was kept\n")
        raise typer.Exit(130) from None


class _Output:
    """The output directory a command stages (:class:`sandbox.outputs.StagedDir`, replaced whole), so
    that an interruption can say what it left: the previous output intact, or nothing."""

    def __init__(self, writer: str):
        self.writer, self.staged = writer, None

    def stage(self, target: Path) -> StagedDir:
        self.staged = StagedDir(target, whole=True, writer=self.writer)
        return self.staged

    def kept(self) -> str:
        if self.staged is not None and self.staged.previous:
            return f"nothing was kept; the previous output in {self.staged.out} is unchanged"
        return "nothing was kept"


@contextmanager
def _command(writer: str, *errors: type[Exception]):
    """One error path for the commands that stage a whole output directory (plan, import, preflight,
    export): a scenario or output error or one of ``errors`` ends the command with one line and exit
    status 2, a file-system error with :func:`_os_error`, Ctrl-C or SIGTERM with :func:`_interrupted`
    saying what was kept. Yields an :class:`_Output` to stage the directory through."""
    output = _Output(writer)
    try:
        with terminate_as_interrupt():
            yield output
    except (OutputError, ScenarioError, *errors) as exc:
        _fail(escape(str(exc)))
    except OSError as exc:
        _os_error(exc)
    except KeyboardInterrupt:
        _interrupted(output.kept())


@contextmanager
def _staged_plan(out, quiet: bool):
    """The output directory of ``sandbox plan`` (both forms): staged and moved into place whole, with
    progress shown; yields ``(staged, stage)``, ended as :func:`_command` ends a command."""
    with _command("sandbox plan") as output, progress.session(progress.enabled(quiet)):
        staged = output.stage(out)
        with staged as stage:
            yield staged, stage


def _framework_problem(framework: str | None, known) -> str | None:
    """What is wrong with ``--framework`` (missing, or not one of ``known``, with the closest name as a
    hint); None when it names a known framework."""
    if framework is None:
        return f"--framework: required; expected one of {', '.join(known)}"
    if framework not in known:
        close = difflib.get_close_matches(framework, list(known), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"--framework: unknown framework {framework!r}; {hint}expected one of {', '.join(known)}"
    return None


def _config_slug(config: Path) -> str:
    """The default output folder's name for a config file: its stem when that is a safe name as is,
    otherwise the safe part (or ``config``) plus 8 hex digits of the stem's hash, so that ``..yaml``,
    ``名前.yaml`` and ``~.yaml`` get folders of their own and never one of the others'."""
    import hashlib

    stem = config.stem
    slug = safe_name(stem)
    if slug == stem and slug:
        return slug
    return f"{slug or 'config'}-{hashlib.sha256(stem.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}"


def _out_path(text: str | Path) -> Path:
    """An ``--out`` path as typed: an empty string is refused (``Path("")`` would be the current
    directory, which the user did not name); a default (a ``Path`` already) is kept."""
    if isinstance(text, Path):
        return text
    if not text.strip():
        raise typer.BadParameter("expected a path, got an empty string (write . for the current directory)")
    return Path(text)


def _print_version(value: bool) -> None:
    if value:
        console.print(f"sandbox {__version__} (Python {sys.version.split()[0]})", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print the sandbox version and exit."),
) -> None:
    """Asynchronous-RL simulation and theory sandbox: run scenarios, sweeps and theory checks."""


def _fmt(x, spec=".3f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec)


def _run_one(scn, out: Path | None, label: str, group: str = "", color: str | None = None):
    """One variant; its phases (warm start, simulating, writing, figures) are shown by the runner in
    the command's progress session (sandbox.progress)."""
    from .runner import run_scenario

    # force: the run command checked the budget
    return run_scenario(scn, out, force=True, label=label, color=color, group=group)


@app.command()
def run(
    scenario: Optional[Path] = typer.Argument(None, help="Scenario TOML, or the name of a shipped scenario such as max_lag (default: the shipped quickstart)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", metavar="KEY=VALUE", help="Override a field: dotted.key=value (repeatable)."),
    out: Optional[Path] = typer.Option(
        None, "--out", parser=_out_path, metavar="DIR", help="Run directory (default: runs/<scenario name>, plus +<dotted.key>-<value> per --set override)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    force: bool = typer.Option(False, "--force", help="Run even when the estimated memory exceeds the available memory."),
    wide: bool = typer.Option(False, "--wide", help="The full summary table (throughput, final reward, drops, ESS, gradient "
                              "cosine) instead of the compact one that fits 80 columns; every number is in summary.json."),
):
    """Run a scenario (all its variants) and print a summary table.

    The run is written into a staging directory inside --out and moved into place once complete,
    replacing a previous run there; Ctrl-C (exit status 130) keeps nothing and leaves a previous run
    as it was. A directory holding anything but a previous run is refused, and so is a directory
    another sandbox process is writing. SIGTERM is treated as Ctrl-C (exit status 143).
    """
    with _starting():
        from .writers import WriterUnavailable, check_writers
        from .scenario import DEFAULT_SCENARIO, load_scenario, parse_overrides, variant_scenarios
    staged = None
    out = user_path(out) if out is not None else None
    try:
        with terminate_as_interrupt():
            try:
                scn, raw = load_scenario(scenario or DEFAULT_SCENARIO, set_)
                variants = variant_scenarios(scn, raw)
                weights = _check_budget(variants, force)
                for v in variants.values():  # an extra's writer that is not installed: refused before anything is written
                    check_writers(v.run.writers)
            except (ScenarioError, WriterUnavailable) as exc:
                _fail(escape(str(exc)))
            name = (scenario or DEFAULT_SCENARIO).stem
            out = out or default_run_dir(name, parse_overrides(set_))
            results = {}
            comparison = None
            staged = StagedDir(out, whole=True)
            with staged as stage:
                if staged.previous:
                    console.print(f"{escape(str(out))} holds a previous run: it is replaced when this run is complete")
                from .figure_worker import FigureWorkers
                from .heap import release_free_heap
                from .runner import slim

                # matplotlib (about a second to import) only where a variant draws figures
                figures = any(v.run.figures for v in variants.values())
                if figures:
                    from .plots import default_figures, variant_colors, warm_up
                colors = variant_colors(variants) if figures else dict.fromkeys(variants)
                # several variants: each one's figures are drawn in a worker process while the next one simulates,
                # the same files (sandbox/figure_worker.py); the block waits for them before the run is moved in
                with progress.session(progress.enabled(quiet)), \
                        progress.task(f"{name}: variants", weights=weights) if len(variants) > 1 else nullcontext() as top, \
                        FigureWorkers(prepare=warm_up if figures else None) as workers:
                    for label, vscn in variants.items():
                        # the variant's cluster and learner (reference cycles) go when it ends, not at some later
                        # collection; that collection scans the variant's own objects only (sandbox/gc_pause.py)
                        with collected_on_exit():
                            where = stage / safe_name(label) if label else stage
                            defer = workers.enabled and len(variants) > 1
                            with workers.deferring() if defer else nullcontext():
                                result = _run_one(vscn, where, label, name, colors[label])
                            if defer and vscn.run.figures:
                                workers.submit(f"the figures of variant {label!r}", default_figures, result, where / "figures",
                                               label=label, color=colors[label], formats=vscn.run.figure_formats)
                            results[label or name] = slim(result)  # written: keep what the outputs across variants read
                            del result
                        release_free_heap()  # the variant's freed pages back to the system (sandbox/heap.py)
                        if top is not None:
                            top.advance(info=f"{label} done")
                    if len(results) > 1:
                        from .outputs import write_text
                        from .scenario import dump_scenario

                        # the whole scenario the run ran (base + [variants]): `sandbox run <dir>/scenario.toml` re-runs it
                        write_text(stage / "scenario.toml", dump_scenario(scn, variants=True))
                        if any(r.scenario.run.figures for r in results.values()):
                            from .plots import comparison_figure, run_formats

                            with progress.phase("figures: comparison"):
                                comparison_figure(results, stage / COMPARISON, title=scn.title or name,
                                                  formats=run_formats(r.scenario for r in results.values()))
                        comparison = _compare_variants(results, stage)
                        if workers.running:
                            with progress.phase("figures: the variants' (worker processes)"):
                                workers.wait()
    except (OutputError, ScenarioError) as exc:  # ScenarioError here: SimulationError, found while simulating
        _fail(escape(str(exc)))
    except OSError as exc:
        _os_error(exc)
    except KeyboardInterrupt:
        if staged is not None and staged.committed:
            kept = f"the run was complete and is kept in {out}"
        elif staged is not None and staged.previous:
            kept = f"nothing was kept; the previous run in {out} is unchanged"
        else:
            kept = "nothing was kept"
        _interrupted(kept)
    _print_table(results, scn.title or name, comparison, wide=wide)
    replaced = " (it replaced the previous run)" if staged.previous else ""
    console.print(f"results in [bold]{escape(str(out))}[/bold]{replaced}")


@app.command("scenario", short_help="Print a scenario resolved, or the reference of every key.")
def scenario_command(
    scenario: Optional[Path] = typer.Argument(None, help="Scenario TOML, or the name of a shipped scenario such as max_lag (default: the shipped quickstart)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", metavar="KEY=VALUE", help="Override a field: dotted.key=value (repeatable)."),
    variant: Optional[str] = typer.Option(None, "--variant", metavar="NAME", help="Print this variant resolved instead of the whole scenario."),
    reference: bool = typer.Option(False, "--reference", help="Print the reference of every scenario key (markdown) and exit."),
):
    """Print a scenario resolved (TOML, every default explicit, --set applied: what `sandbox run` would
    run; a scenario with variants whole, its [variants] tables included, so the output re-runs as is;
    --variant one variant resolved), or with --reference the reference of every key: type, default,
    allowed values, description.

    docs/scenario-reference.md is this reference; regenerate it with
    `sandbox scenario --reference > docs/scenario-reference.md`.
    """
    with _starting():
        from .scenario import DEFAULT_SCENARIO, dump_scenario, load_scenario, variant_scenarios

    if reference:
        from .scenario.reference import reference_markdown

        sys.stdout.write(reference_markdown())
        return
    try:
        scn, raw = load_scenario(scenario or DEFAULT_SCENARIO, set_)
        variants = variant_scenarios(scn, raw)
        if variant is not None and variant not in variants:
            names = ", ".join(n for n in variants if n) or "none"
            raise ScenarioError([f"--variant: unknown variant {variant!r}; this scenario's variants: {names}"], "option")
    except ScenarioError as exc:
        _fail(escape(str(exc)))
    if variant is None and scn.variants:
        names = ", ".join(scn.variants)
        sys.stdout.write(f"# {len(scn.variants)} variants ({names}), each the base below with its [variants] overrides;\n"
                         f"# `sandbox scenario {scenario or 'quickstart'} --variant NAME` prints one resolved.\n")
        sys.stdout.write(dump_scenario(scn, variants=True))
        return
    sys.stdout.write(dump_scenario(variants[variant] if variant is not None else scn))


MAX_DIR_NAME = 96
"""Longest default run-directory name; a longer one keeps its first 80 characters and a hash."""


def default_run_dir(name: str, overrides: dict) -> Path:
    """``runs/<scenario name>`` for a scenario as written; with ``--set`` overrides, one
    ``+<dotted.key>-<value>`` per override in key order (``runs/fixed_lag+system.staleness.k-16``),
    so that a run with overrides never replaces the scenario's own run, and the same overrides (in
    any order) always give the same directory. Characters a directory name cannot hold become ``-``
    (sandbox.outputs.safe_name); a name longer than MAX_DIR_NAME keeps its first 80 characters plus
    the first 8 hex digits of the SHA-256 of the overrides (canonical JSON), which keeps it unique."""
    import hashlib
    import json

    base = safe_name(name) or "run"
    if not overrides:
        return Path("runs") / base
    canonical = {k: overrides[k] for k in sorted(overrides)}
    parts = [f"{k}={v if isinstance(v, str) else json.dumps(v, sort_keys=True, separators=(',', ':'))}"
             for k, v in canonical.items()]
    full = safe_name("+".join([base, *parts])) or base
    if len(full) > MAX_DIR_NAME:
        digest = hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()[:8]
        full = f"{full[:80].rstrip('-.')}-{digest}"
    return Path("runs") / full


def _check_budget(variants: dict, force: bool) -> list[float]:
    """Refuse (BudgetError) a variant whose estimated memory exceeds the available memory, unless
    --force; warn when the runs together are estimated to take longer than budget.WARN_SECONDS.
    Returns each variant's estimated seconds (the weights of the progress' ETA)."""
    from .budget import WARN_SECONDS, check_budget, format_seconds

    budgets = [check_budget(v, force=force, flag="--force", label=label) for label, v in variants.items()]
    seconds = sum(b.seconds for b in budgets)
    if seconds > WARN_SECONDS:
        t = max(budgets, key=lambda b: b.seconds).main_time()
        runs = "this run" if len(budgets) == 1 else f"these {len(budgets)} runs"
        console.print(
            f"[yellow]warning:[/yellow] {runs} may take about {format_seconds(seconds)} (estimate; mostly "
            f"{escape(t.what)}: {escape(t.formula())}); Ctrl-C stops it"
        )
    return [b.seconds for b in budgets]


def _compare_variants(results: dict, stage: Path):
    """Time-to-target of every variant against the common target and its end-to-end speed-up
    against the first synchronous variant (docs/time_to_target.md), recorded in each variant's
    summary.json, with the figure time_to_target.png beside comparison.png."""
    from .analysis.time_to_target import compare_variants
    from .outputs import TIME_TO_TARGET, write_json

    comparison = compare_variants(results)
    for label, r in results.items():
        r.summary.update(comparison.variant_fields(label))
        write_json(stage / safe_name(label) / "summary.json", r.summary)
    if any(r.scenario.run.figures for r in results.values()):
        from .plots import run_formats  # matplotlib: only when figures are drawn
        from .report.figures import time_to_target_figure

        time_to_target_figure(comparison, stage / TIME_TO_TARGET, formats=run_formats(r.scenario for r in results.values()))
    return comparison


def _status_cell(s: dict) -> str:
    status = s["status"] if not s.get("diverged_replicas") else f"{s['status']} ({s['diverged_replicas']}/{s['replicas']} diverged)"
    if s["status"] == "diverged":
        status = f"diverged ({s['diverged_replicas']}/{s['replicas']})"
    return status


def _target_cell(s: dict) -> str:
    ttt = s.get("time_to_target")
    return (_fmt(ttt, ".3g") if ttt is not None else "no target" if s.get("target_level") is None
            else f"missed {s.get('target_reached_replicas', 0)}/{s['replicas']}")


def compact_table(results: dict, title: str) -> Table:
    """The default summary of ``sandbox run``, narrow enough for an 80-column terminal: variant, status,
    end-to-end speed-up with its 95% interval, time to target, staleness, busy workers and collapsed
    replicas (``sandbox.analysis.collapse``); ``--wide`` and summary.json have the rest."""
    from rich import box

    from .analysis.collapse import cell

    table = Table(title=escape(title), box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False,
                  title_justify="left")
    for col, just in (("variant", "left"), ("status", "left"), ("speed-up [95% CI]", "right"), ("target s", "right"),
                      ("lag", "right"), ("busy", "right"), ("collapsed", "right")):
        table.add_column(col, justify=just, overflow="fold")
    for label, r in results.items():
        s = r.summary
        speed, lo, hi = s.get("speedup_vs_sync"), s.get("speedup_ci_low"), s.get("speedup_ci_high")
        speed_cell = "-" if speed is None else f"{speed:#.3g}x" + (f" [{lo:#.3g}, {hi:#.3g}]" if lo is not None and hi is not None else "")
        table.add_row(escape(label), s["status"], speed_cell, _target_cell(s),
                      f"{_fmt(s['staleness_mean'], '.2f')}/{s['staleness_max']}", f"{100 * s['util_workers']:.0f}%"
                      if s.get("util_workers") is not None and math.isfinite(s["util_workers"]) else "-",
                      cell(s.get("collapsed_replicas"), s.get("replicas")))
    return table


def _print_table(results: dict, title: str, comparison=None, wide: bool = False) -> None:
    if not wide:
        console.print(compact_table(results, title))
    else:
        _print_wide_table(results, title)
    _print_table_notes(results, comparison, wide)


def _print_wide_table(results: dict, title: str) -> None:
    from .analysis.collapse import cell

    base = next(iter(results.values())).summary["throughput_samples_per_s"]
    table = Table(title=escape(title))
    final_label = _final_label(next((c for c in _FINAL_FIELDS if any(not math.isnan(r.summary[c]) for r in results.values())),
                                    "final_reward"))
    columns = ("run", "status", "collapsed", "throughput (samples/s)", "vs first", final_label, "to target (s)",
               "end to end vs sync", "staleness mean/max", "dropped groups", "ESS/N mean", "grad cos mean")
    for col in columns:
        table.add_column(col)
    for label, r in results.items():
        s = r.summary
        reward = s["final_expected_reward"] if not math.isnan(s["final_expected_reward"]) else s["final_reward"]
        if math.isnan(reward):
            reward = s["final_loss"]
        ttt = s.get("time_to_target")
        speed = s.get("speedup_vs_sync")
        table.add_row(
            escape(label),
            _status_cell(s),
            cell(s.get("collapsed_replicas"), s.get("replicas")),
            _fmt(s["throughput_samples_per_s"], ".2f"),
            _fmt(s["throughput_samples_per_s"] / base if base else math.nan, ".2f") + "x",
            _fmt(reward),
            _fmt(ttt, ".3g") if ttt is not None else "no target" if s.get("target_level") is None
            else f"not reached ({s.get('target_reached_replicas', 0)}/{s['replicas']})",
            _fmt(speed, ".2f") + "x" if speed is not None else "-",
            f"{_fmt(s['staleness_mean'], '.2f')} / {s['staleness_max']}",
            _dropped_cell(s),
            _fmt(s["ess_ratio_mean"]),
            _fmt(s["grad_cos_mean"]),
        )
    console.print(table)


def _print_table_notes(results: dict, comparison, wide: bool) -> None:
    first = next(iter(results.values())).summary
    if first.get("target_level") is not None:
        console.print(f"target: {escape(str(first.get('target_metric')))} {escape(first.get('target_rule', ''))}")
    elif first.get("target_rule"):
        rule = first["target_rule"]
        console.print(escape(rule if rule.startswith("no target") else f"no target ({rule})")
                      + "; no time to target or speed-up is claimed")
    for label, r in results.items():
        if r.summary.get("divergence"):
            console.print(f"[yellow]diverged[/yellow] {escape(label)}: {escape(r.summary['divergence'])}")
    if comparison is not None:
        from .analysis.time_to_target import describe

        sync = comparison.baseline.get(next(iter(results)))
        for label in results:
            if label != sync:
                console.print(escape(describe(comparison, label)) + ".")
    elif first.get("time_to_target") is not None:
        console.print(f"reached in {first['time_to_target']:.3g} s, {first['steps_to_target']:.3g} learner steps")
    if not wide:
        console.print(
            "[dim]speed-up: time to target of the synchronous variant / this one's (95% bootstrap interval); target s: "
            f"simulated seconds until the running mean over {first.get('target_window_steps') or '-'} steps crosses the "
            "target, mean over replicas; lag: mean/max versions between the generating weights and the training step; busy: "
            "busy fraction of the rollout workers; collapsed: replicas that diverged or ended below reward 0.05 with "
            "a zero gradient (docs/time_to_target.md); --wide for the full table.[/dim]")
        return
    console.print(
        "[dim]throughput: samples consumed per simulated second; time to target: simulated seconds until the "
        f"centred running mean of the headline metric over {first.get('target_window_steps') or '-'} steps crosses the "
        "target, mean over replicas (docs/time_to_target.md); end to end vs sync: time to target of the synchronous "
        "variant / this one's (its 95% bootstrap interval over replicas in the sentence), = the gain in samples per second "
        "up to the target × the ratio of samples needed; staleness: versions between the weights that "
        "generated a group and the step that trained on it; dropped groups: generated groups the staleness control "
        "discarded (over-stale), of all groups generated; ESS/N: effective sample size of the unclipped "
        "sequence importance weights (1 = on-policy); grad cos: cosine between consecutive gradients.[/dim]"
    )


def _dropped_cell(summary: dict) -> str:
    """Generated groups the staleness control threw away: count, and share of every group generated."""
    dropped, jobs = summary.get("dropped", 0), summary.get("jobs")
    if not jobs:
        return str(dropped)
    return f"{dropped}/{jobs} ({100 * dropped / jobs:.0f}%)" if dropped else "0"


_FINAL_FIELDS = ("final_expected_reward", "final_reward", "final_loss")


def _final_label(field: str) -> str:
    """The table header of a summary's final value: a loss says it is one and which way is better."""
    return {"final_expected_reward": "final expected reward", "final_reward": "final reward",
            "final_loss": "final loss (lower is better)"}.get(field, field)


def main() -> None:  # pragma: no cover
    app()


# ------------------------------------------------------------------------------------------------
# sweeps, reports, demos
# ------------------------------------------------------------------------------------------------


@app.command()
def sweep(
    sweep_file: Path = typer.Argument(..., help="Sweep TOML (or a shipped sweep's name, e.g. sweeps/lag_lr_quadratic): base scenario + [grid] / [[zip]] axes + seeds."),
    out: Optional[Path] = typer.Option(None, "--out", parser=_out_path, metavar="DIR", help="Sweep directory (default: [sweep] out or runs/sweeps/<name>)."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1, metavar="N", help="Parallel processes (default: one per core)."),
    workers_old: Optional[int] = typer.Option(None, "--workers", min=1, hidden=True, help="Deprecated spelling of --jobs."),
    backend: Optional[str] = typer.Option(None, "--backend", help="local (process pool) or ray."),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address (default: start a local one)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", metavar="KEY=VALUE", help="Override a base field for every run: dotted.key=value (repeatable)."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Run again the runs that failed with an error."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the runs and exit."),
    report_: bool = typer.Option(False, "--report", help="Write report.html into the sweep directory at the end."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    force: bool = typer.Option(False, "--force", help="Run even when a run's estimated memory (or the parallel runs') exceeds the available memory."),
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
        _interrupted({
            "load": "nothing was kept",
            "run": f"finished runs are kept in {where}; run the same command to resume",
            "report": f"no report was written; the runs are kept in {where}",
        }[phase[0]])


def _sweep(sweep_file, out, workers, backend, address, set_, retry_failed, dry_run, report_, quiet, force, phase: list) -> None:
    from .sweep import SweepError, default_out, load_sweep, run_sweep

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
        console.print(f"sweep [bold]{escape(spec.name)}[/bold]: {escape(axes)}{seeds} = {len(spec.runs)} runs -> {escape(str(out))}")
    phase[:] = ["run", out]
    try:
        outcome = run_sweep(spec, out, workers=workers, backend=backend, address=address,
                            retry_failed=retry_failed, progress=not quiet, console=console, force=force)
    except (SweepError, OutputError) as exc:
        _fail(escape(str(exc)))
    _print_sweep_table(outcome.results, spec)
    _print_sweep_speedups(out, outcome.results)
    console.print(
        f"{outcome.ran} runs computed, {outcome.skipped} already done, {outcome.failed} failed "
        f"({outcome.wall_s:.1f} s). Results: [bold]{escape(str(out / 'results.parquet'))}[/bold] "
        f"(sandbox.sweep.load_results({escape(repr(str(out)))}))"
    )
    if report_:
        from .report import write_report

        phase[:] = ["report", out]
        console.print(f"report: [bold]{escape(str(write_report(out)))}[/bold]")
    if len(outcome.results) and outcome.failed == len(outcome.results):  # nothing to show for it: not a success
        console.print(f"[red]every run of the sweep failed ({outcome.failed})[/red]: see the errors above or "
                      f"{escape(str(out / 'runs'))}/<id>/error.json")
        raise typer.Exit(1)


@app.command(short_help="A scenario's variants over seeds: mission.png, mission.md and the VCPO control.")
def mission(
    scenario: Path = typer.Argument(..., help="Scenario TOML with variants, or a shipped scenario's name such as lm_mission."),
    seeds: int = typer.Option(3, "--seeds", metavar="N", min=1, help="Seeds per variant (run.seed = 0 ... N-1)."),
    jobs: int = typer.Option(2, "--jobs", "-j", metavar="N", min=1, help="Parallel processes (1: in this process)."),
    out: Optional[Path] = typer.Option(None, "--out", metavar="DIR", help="Sweep directory of the mission (default: runs/<scenario name>)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", metavar="KEY=VALUE", help="Override a field: dotted.key=value (repeatable)."),
    control: bool = typer.Option(True, "--control/--no-control", help="Run the VCPO constant-LR control (when a variant is named vcpo)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
):
    """Run every variant of a scenario over seeds as a resumable sweep, then the VCPO constant-LR control,
    and write mission.png (held-out reward and diagnostics, mean over seeds with a min-max band),
    mission.json and mission.md (sandbox/sweep/mission.py; docs/tasks.md#lm)."""
    with _starting():
        from .scenario.shipped import resolve_scenario_path
        from .sweep import SweepError
        from .sweep.mission import markdown, run_mission
    path = resolve_scenario_path(scenario)
    target = user_path(out) if out is not None else Path("runs") / (safe_name(path.stem) or "mission")
    try:
        with terminate_as_interrupt(), progress.session(progress.enabled(quiet)):
            _, table = run_mission(str(path), list(range(seeds)), target, jobs, set_ or [], control=control,
                                   progress=not quiet)
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
    from .sweep.results import run_dir, run_state
    from .sweep.spec import value_label

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
        rows = [[r.id, *[label(r.params[k]) for k in keys], str(r.seed), run_state(run_dir(out, r.id)) if exists else "pending"]
                for r in spec.runs]
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
        table.add_row(r.id, *[escape(str(value_label(r.params[k]))) for k in keys], str(r.seed), run_state(run_dir(out, r.id)))
    console.print(table)


def _print_sweep_table(df, spec, max_rows: int = 40) -> None:
    """Mean over seeds of the headline numbers, one row per combination of the swept values."""
    from rich.markup import escape

    if df.empty:
        return
    keys = [k for k in spec.display_keys if k in df.columns]
    reward_col = next((c for c in ("final_expected_reward", "final_reward", "final_loss") if c in df and df[c].notna().any()), None)
    table = Table(title=escape(f"{spec.name} (mean over seeds)"))
    ttt = "time_to_target" in df and df["time_to_target"].notna().any()
    cols = (keys + ["runs", "status", "collapsed"] + ([reward_col] if reward_col else []) + ["throughput", "staleness"]
            + (["to target (s)", "end to end vs sync"] if ttt else []))
    for c in cols:
        table.add_column(c.split(".")[-1] if c in keys and len(keys) > 3 else _final_label(c) if c == reward_col else c)
    groups = df.groupby(keys, sort=False, dropna=False) if keys else [((), df)]
    for i, (vals, g) in enumerate(groups):
        if i >= max_rows:
            console.print(f"... {len(df.groupby(keys)) - max_rows} more combinations in results.parquet")
            break
        vals = vals if isinstance(vals, tuple) else (vals,)
        status = ", ".join(f"{n} {s}" for s, n in g.status.value_counts().items())
        collapsed = (f"{int(g['collapsed_replicas'].sum())}/{int(g['replicas'].sum())}"
                     if "collapsed_replicas" in g and "replicas" in g and g["collapsed_replicas"].notna().all() else "-")
        row = [escape(str(v)) for v in vals] + [str(len(g)), status, collapsed]
        if reward_col:
            row.append(_fmt(g[reward_col].mean()))
        row.append(_fmt(g["throughput_samples_per_s"].mean(), ".2f") if "throughput_samples_per_s" in g else "-")
        row.append(_fmt(g["staleness_mean"].mean(), ".2f") if "staleness_mean" in g else "-")
        if ttt:
            reached = g["time_to_target"].notna()
            no_target = "target_level" in g and g["target_level"].isna().all()
            row.append(_fmt(g["time_to_target"].mean(), ".3g") if reached.all()
                       else "no target" if no_target else f"not reached ({int(reached.sum())}/{len(g)})")
            speed = g["speedup_vs_sync"].dropna() if "speedup_vs_sync" in g else []
            row.append(_fmt(speed.iloc[0], ".2f") + "x" if len(speed) else "-")
        table.add_row(*row)
    console.print(table)


def _print_sweep_speedups(out: Path, df) -> None:
    """One plain-words sentence per asynchronous configuration: time to target against its
    synchronous baseline, split into samples per second and samples needed (docs/time_to_target.md)."""
    if df.empty or "time_to_target" not in df or df["time_to_target"].isna().all():
        return
    from .analysis.time_to_target import describe
    from .sweep.results import time_to_target_comparison

    comp = time_to_target_comparison(out)
    if comp is None:
        return
    for label, base in comp.baseline.items():
        if base != label:
            console.print(escape(describe(comp, label)) + ".")


@app.command(short_help="Hold the theory's predictions against simulations.")
def check(
    names: Optional[List[str]] = typer.Argument(None, help="Checks to run (default: all). See --list."),
    quick: bool = typer.Option(False, "--quick", help="Smaller sweeps and fewer replicas (minutes on 2 cores rather than tens of minutes; used by the tests)."),
    out: Optional[Path] = typer.Option(None, "--out", parser=_out_path, metavar="DIR", help="Write one figure per check and summary.json into this directory."),
    report_old: Optional[Path] = typer.Option(None, "--report", parser=_out_path, hidden=True, help="Deprecated spelling of --out."),
    perturb: bool = typer.Option(False, "--perturb", help="Distort every prediction by its check's perturbation: all should FAIL."),
    list_: bool = typer.Option(False, "--list", help="List the checks and exit."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
):
    """Hold the theory's predictions against simulations; exit status 1 if any check fails."""
    if report_old is not None:
        _deprecated("sandbox check --report DIR", "--out DIR (--report is sweep's flag for report.html)")
        out = out if out is not None else report_old
    report = out
    import torch

    from .checks import CHECKS
    from .checks.report import results_table, run_checks, write_report

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
        from .outputs import out_dir

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

    with progress.session(progress.enabled(quiet)), \
            progress.task("theory checks" + (" (quick)" if quick else ""), total=len(selected), unit="checks") as bar:
        results = run_checks(selected, quick, perturb, lambda c, r, t: (on_done(c, r, t), bar.advance(info=f"{c.name} done")))
    title = f"theory checks{' (quick)' if quick else ''}{' with perturbed predictions' if perturb else ''}"
    console.print(results_table(results, title))
    if report is not None:
        try:
            with progress.session(progress.enabled(quiet)), progress.phase("figures: one per check"):
                write_report(results, report, quick, perturb)
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


@app.command(short_help="Each paper's claim as an experiment with a verdict over seeds.")
def claims(
    quick: bool = typer.Option(False, "--quick", help="Few seeds and steps (minutes on 2 cores; used by the tests)."),
    only: Optional[List[str]] = typer.Option(None, "--only", help="Run only this claim (repeatable). See --list."),
    out: Path = typer.Option(Path("runs/claims"), "--out", parser=_out_path, metavar="DIR", help="Write claims.md, claims.json and one figure per claim here."),
    seeds: Optional[int] = typer.Option(None, "--seeds", metavar="N", min=2, max=10_000, help="Seeds per claim (default: 3 with --quick, 8 otherwise)."),
    lm_seeds: Optional[int] = typer.Option(
        None, "--lm-seeds", min=0, max=1_000,
        help="Seeds (replicas) of the learning claims' LM context (default: 2 with --quick, 4 otherwise; 0: no LM context)."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", metavar="N", min=1, help="Parallel processes of the LM context runs (default: 1 with --quick, 2 otherwise)."),
    list_: bool = typer.Option(False, "--list", help="List the claims and exit."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    score: Optional[Path] = typer.Option(
        None, "--score", help="Score one published setup: a scenario file with a [published] table (docs/claims.md, "
        "'Score a new published setup'); prints predicted / published with its interval."),
):
    """Run each claim over seeds and print reproduced / not reproduced / inconclusive (docs/claims.md)."""
    import torch

    from .claims import CLAIMS
    from .claims._runs import FULL_SEEDS, QUICK_SEEDS

    if score is not None:
        from .claims.published import FULL_STEPS, QUICK_STEPS
        from .claims.published_score import score as score_file

        try:
            r = score_file(user_path(score), QUICK_STEPS if quick else FULL_STEPS, seeds or (QUICK_SEEDS if quick else FULL_SEEDS))
        except ScenarioError as exc:
            _fail(escape(str(exc)))
        except OSError as exc:
            _os_error(exc)
        console.print(
            f"{escape(r['system'])} ({r['kind']}; published {r['published_text']}, {r['measure']}): predicted "
            f"{r['predicted']:.3g}x [{r['predicted_low']:.3g}, {r['predicted_high']:.3g}]; predicted / published "
            f"{r['ratio']:.3g} [{r['ratio_low']:.3g}, {r['ratio_high']:.3g}] ({'within' if r['within_band'] else 'outside'} "
            f"[0.8, 1.25]); mean step async {r['async_step_s']:.0f} s, baseline {r['baseline_step_s']:.0f} s; "
            f"{r['steps']} steps, {r['seeds']} seeds")
        return
    from .claims.report import run_claims, verdict_table, write_outputs
    from .outputs import out_dir

    if list_:
        for c in CLAIMS.values():
            console.print(f"[bold]{c.name}[/bold] ({escape(c.paper)}): {escape(c.description)}")
        return
    unknown = [n for n in only or [] if n not in CLAIMS]
    if unknown:
        _fail(f"--only: unknown claim(s) {unknown}; {_did_you_mean(unknown[0], CLAIMS)}expected some of {list(CLAIMS)}")
    if lm_seeds == 1:
        _fail("--lm-seeds: 1 seed gives no interval; expected 0 (no LM context) or at least 2")
    selected = {n: CLAIMS[n] for n in (only or CLAIMS)}
    n_seeds = seeds if seeds is not None else (QUICK_SEEDS if quick else FULL_SEEDS)
    out = user_path(out)
    try:  # an impossible --out is refused before minutes of runs
        out_dir(out)
    except OutputError as exc:
        _fail(escape(str(exc)))
    torch.set_num_threads(1)  # toy tensors: one thread is several times faster here

    def on_done(c, result, seconds):
        console.print(f"[bold]{c.name}[/bold] ({escape(c.paper)}, {seconds:.1f} s): {len(result.rows)} row(s)")

    with progress.session(progress.enabled(quiet)), \
            progress.task(f"claims{' (quick)' if quick else ''}, {n_seeds} seeds", total=len(selected), unit="claims") as bar:
        results = run_claims(selected, quick, n_seeds, lambda c, r, t: (on_done(c, r, t), bar.advance(info=f"{c.name} done")),
                             lm_seeds=lm_seeds, jobs=jobs)
    command = "sandbox claims" + (" --quick" if quick else "") + "".join(f" --only {n}" for n in only or []) + (
        f" --seeds {seeds}" if seeds is not None else "") + (f" --lm-seeds {lm_seeds}" if lm_seeds is not None else "")
    console.print(verdict_table(results, f"claims{' (quick)' if quick else ''}, {n_seeds} seeds"))
    try:
        with progress.session(progress.enabled(quiet)), progress.phase("figures: claims.md, claims.json and one figure per claim"):
            write_outputs(results, out_dir(out), quick, n_seeds, command, lm_seeds)
    except OutputError as exc:
        _fail(escape(str(exc)))
    except OSError as exc:
        _os_error(exc)
    console.print(f"claims.md, claims.json and figures in [bold]{out}[/bold]")


@app.command(short_help="Capacity planning: throughput, lag and utilisation over workers x staleness bounds.")
def plan(
    scenario: Optional[Path] = typer.Argument(None, help="Scenario TOML, or the name of a shipped scenario (default: the shipped quickstart); variants are ignored."),
    workers: Optional[str] = typer.Option(None, "--workers", metavar="LIST", help="Simulated worker counts, comma-separated, e.g. 8,16,32 (default: the scenario's)."),
    k_max: Optional[str] = typer.Option(None, "--k-max", metavar="LIST", help="Staleness bounds, comma-separated (0 = sync, always planned as the baseline; default 0,1,2,4,8); which field each sets: docs/plan.md. With --gpus: one bound (default: the scenario's)."),
    seeds: int = typer.Option(3, "--seeds", metavar="N", min=1, max=10_000, help="Seeds per configuration (run.seed = 0, 1, ...)."),
    steps: Optional[int] = typer.Option(None, "--steps", min=1, help="Learner steps per simulation (default: the scenario's run.steps)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", metavar="KEY=VALUE", help="Override a field: dotted.key=value (repeatable)."),
    out: Optional[Path] = typer.Option(None, "--out", parser=_out_path, metavar="DIR", help="Output directory (default: runs/plan_<scenario name>)."),
    learn: bool = typer.Option(False, "--learn", help="Also train every configuration and add time to target and the end-to-end speed-up (SLOW: one full learning run per configuration and seed)."),
    learn_seeds: int = typer.Option(2, "--learn-seeds", min=1, max=10_000, help="With --learn: learning runs per configuration."),
    learn_steps: Optional[int] = typer.Option(None, "--learn-steps", min=1, help="With --learn: optimizer steps per learning run (default: the scenario's run.steps)."),
    force: bool = typer.Option(False, "--force", help="Run even when the estimate exceeds the time limit or the available memory."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="Total GPUs: sweep the trainer/rollout split and the per-engine concurrency on continuous-batching engines instead (docs/plan.md#gpu-split)."),
    gpu: str = typer.Option("H100", "--gpu", help="With --gpus: the accelerator of the hardware table (A100, H100, H200, H20)."),
    model: str = typer.Option("qwen2.5-7b", "--model", help="With --gpus: the model of the hardware table (e.g. qwen2.5-7b, llama3.1-70b)."),
    tp: int = typer.Option(1, "--tp", min=1, help="With --gpus: GPUs per inference engine (tensor parallel)."),
    concurrency: str = typer.Option("64,128,256", "--concurrency", metavar="LIST", help="With --gpus: sequences in flight per engine (max_sequences), comma-separated."),
    trainer_gpus: Optional[str] = typer.Option(None, "--trainer-gpus", metavar="LIST", help="With --gpus: trainer GPU counts to try (default 1 ... N - tp)."),
    mfu: float = typer.Option(0.4, "--mfu", min=0.01, max=1.0, help="With --gpus: the trainer's model-FLOPs utilisation."),
    length_median: Optional[float] = typer.Option(None, "--length-median", min=1.0, help="With --gpus: median response length, tokens (default the scenario engine's, else 1000)."),
    length_sigma: Optional[float] = typer.Option(None, "--length-sigma", min=0.0, help="With --gpus: sigma of log response length (default the scenario engine's, else 1.0)."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", min=1, help="With --gpus: longest response, tokens (default the scenario engine's, else 8192)."),
):
    """Plan a cluster before buying GPU time: for every (workers, k_max) pair a system-only simulation
    (no learning, seconds) of the scenario over seeds, printing throughput, speed-up over synchronous
    training with the same workers, the lag of the consumed groups, utilisation and drops; plan.csv,
    plan.json and figures go to --out, replaced whole when the plan is complete (docs/plan.md).
    """
    with _starting():
        from .analysis.plan import (
            build_configurations, check_plan, default_steps, estimate_plan, learn_table, parse_int_list, plan_table,
            run_plan,
        )
        from .report.plan_figures import write_plan
        from .budget import WARN_SECONDS, format_seconds
        from .scenario import DEFAULT_SCENARIO, load_scenario
    path = scenario or DEFAULT_SCENARIO
    out = user_path(out) if out is not None else Path("runs") / f"plan_{safe_name(path.stem) or 'scenario'}"
    if gpus is not None:
        _plan_split(path, set_, out, gpus, gpu, model, tp, concurrency, trainer_gpus, k_max, mfu, length_median,
                    length_sigma, max_tokens, seeds, steps, learn, workers, quiet, learn_seeds, learn_steps, force)
        return
    try:
        scn, raw = load_scenario(path, set_)
        worker_list = parse_int_list(workers, "--workers", 1, "8,16,32") if workers is not None else [scn.system.num_workers]
        k_list = parse_int_list(k_max if k_max is not None else "0,1,2,4,8", "--k-max", 0, "0,1,2,4,8")
        configs = build_configurations(raw, worker_list, k_list, str(path))
        est = estimate_plan(configs, steps or default_steps(scn), seeds, learn_seeds if learn else 0, learn_steps)
        check_plan(est, force)
    except ScenarioError as exc:
        _fail(escape(str(exc)))
    if est.seconds > WARN_SECONDS:
        console.print(f"[yellow]warning:[/yellow] this plan may take {escape(est.describe())} (estimate); Ctrl-C stops it")
    runs = len(configs) * (learn_seeds if learn else 0)
    # one task over both parts, each unit weighted by its part's estimate (estimate_plan), so the ETA
    # does not take a learning run for a system-only simulation
    sys_s = est.terms[0][1] / max(len(configs), 1)
    learn_s = est.terms[1][1] / runs if runs else 0.0
    weights = [sys_s] * len(configs) + [learn_s] * runs
    label = f"plan: {len(configs)} configurations x {seeds} seeds" + (f", {runs} learning runs" if runs else "")
    with _staged_plan(out, quiet) as (staged, stage):
        with progress.task(label, weights=weights) as bar:
            result = run_plan(raw, str(path), worker_list, k_list, seeds, steps, learn_seeds if learn else 0,
                              learn_steps, on_config=lambda c: bar.advance(info=f"system-only {c.label}"),
                              on_run=lambda c, s: bar.advance(info=f"learned {c.label} seed {s}"), configs=configs)
        with progress.phase("figures and tables"):
            write_plan(result, stage)
    console.print(plan_table(result))
    if learn:
        console.print(learn_table(result))
    tokens = ("" if result.tokens_per_response is None else
              f"; tokens/s charges {result.tokens_per_response} token{'s' * (result.tokens_per_response != 1)} per response"
              + ("" if result.tokens_exact else " (the task's maximum: an upper bound on each response)"))
    console.print(
        f"[dim]k_max sets {escape(result.bound_field)}{escape(tokens)}. Throughput: per simulated second over the whole "
        "run; vs sync: simulated time of sync with the same workers / this one's (mean over seeds, common random "
        "numbers); lag: step - head version of every consumed group (p50/p95/max over all seeds); busy: busy fraction; "
        "dropped: dropped / (dropped + consumed) groups"
        + ("; learning runs: time to target and end-to-end speed-up over sync with the same workers with their 95% "
           "bootstrap intervals, samples needed = samples to target / sync's (docs/time_to_target.md)" if learn else "")
        + ".[/dim]"
    )
    replaced = " (it replaced the previous plan)" if staged.previous else ""
    secs = result.system_seconds
    console.print(f"system-only part: {len(configs) * seeds} simulations in "
                  + (f"{secs:.2f} s" if secs < 120 else format_seconds(secs)))
    console.print(f"plan.csv, plan.json and figures in [bold]{escape(str(out))}[/bold]{replaced}")


def _plan_split(path, set_, out, gpus, gpu, model, tp, concurrency, trainer_gpus, k_max, mfu, length_median,
                length_sigma, max_tokens, seeds, steps, learn, workers, quiet, learn_seeds=2, learn_steps=None,
                force=False):
    """``sandbox plan --gpus N``: the trainer/rollout split (sandbox/analysis/plan_split.py, docs/plan.md#gpu-split)."""
    with _starting():
        from .analysis.plan import parse_int_list
        from .analysis.plan_split import SplitOptions, run_split, split_configurations
        from .report.plan_figures import write_split
        from .scenario import load_scenario
    try:
        if workers is not None:
            raise ScenarioError(["--workers: with --gpus the workers follow from the split and --concurrency"], "option")
        k_list = parse_int_list(k_max, "--k-max", 0, "2") if k_max is not None else [None]
        if len(k_list) != 1:
            raise ScenarioError([f"--k-max: with --gpus give one bound (e.g. 2), got {k_max!r}"], "option")
        opts = SplitOptions(gpus=gpus, gpu=gpu, model=model, tp=tp,
                            concurrency=parse_int_list(concurrency, "--concurrency", 1, "64,128,256"),
                            trainer_gpus=parse_int_list(trainer_gpus, "--trainer-gpus", 1, "1,2,4") if trainer_gpus else None,
                            k_max=k_list[0], mfu=mfu, length_median=length_median, length_sigma=length_sigma,
                            max_tokens=max_tokens)
        scn, raw = load_scenario(path, set_)
        configs = split_configurations(raw, str(path), opts)
        if learn:
            _check_split_learning(configs, learn_seeds, learn_steps, force)
    except ScenarioError as exc:
        _fail(escape(str(exc)))
    with _staged_plan(out, quiet) as (staged, stage):
        runs = len(configs) * learn_seeds if learn else 0
        label = f"plan --gpus {gpus}: {len(configs)} splits x {seeds} seeds" + (f", {runs} learning runs" if runs else "")
        with progress.task(label, total=len(configs) + runs) as bar:
            result = run_split(raw, str(path), opts, seeds, steps, configs=configs,
                               on_config=lambda c: bar.advance(info=c.label),
                               learn_seeds=learn_seeds if learn else 0, learn_steps=learn_steps,
                               on_run=lambda c, s: bar.advance(info=f"learn {c.label} seed {s}"))
        with progress.phase("figures and tables"):
            write_split(result, stage)
    table = Table(title=escape(f"plan --gpus {gpus}: {result.title} ({opts.gpu}, {opts.model}, tp {opts.tp}; "
                               f"{result.control}; {result.steps} steps, {result.seeds} seeds)"))
    for c in ("trainer GPUs", "engines", "per engine", "samples/s [95% CI]", "tokens/s", "lag mean/p95",
              "dropped", "trainer busy", "train step (s)"):
        table.add_column(c, justify="right")
    for r in result.rows:
        ci = f" [{r['samples_per_s_low']:.3g}, {r['samples_per_s_high']:.3g}]" if r["samples_per_s_low"] == r["samples_per_s_low"] else ""
        table.add_row(str(r["trainer_gpus"]), str(r["engines"]), str(r["concurrency"]), f"{r['samples_per_s']:.3g}{ci}",
                      f"{r['tokens_per_s']:.4g}", f"{r['lag_mean']:.2f}/{r['lag_p95']}", f"{r['dropped_fraction']:.1%}",
                      f"{r['util_learner']:.0%}", f"{r['train_step_s']:.3g}")
    console.print(table)
    b = result.best
    line = (f"best split: {b['trainer_gpus']} trainer GPUs, {gpus - b['trainer_gpus']} for rollouts, {b['concurrency']} "
            f"sequences per engine: {b['samples_per_s']:.3g} samples/s")
    if b["samples_per_s_low"] == b["samples_per_s_low"]:
        line += f" [{b['samples_per_s_low']:.3g}, {b['samples_per_s_high']:.3g}]"
    if "margin" in b:
        if b["margin_low"] == b["margin_low"]:
            margin = f"{b['margin']:.3g} [{b['margin_low']:.3g}, {b['margin_high']:.3g}] samples/s"
        else:
            margin = f"{b['margin']:.3g} samples/s (one seed: no interval)"
        verdict = "distinguishable" if b["distinguishable"] else "NOT distinguishable with these seeds (the interval contains 0)"
        line += (f"; ahead of the runner-up ({b['runner_up_trainer_gpus']} trainer GPUs, {b['runner_up_concurrency']} per engine) "
                 f"by {margin}, paired by seed: {verdict}")
    console.print(escape(line))
    if result.learn_seeds:
        console.print(escape(_best_learned_line(result.best_learned, gpus, result.rows)))
    console.print(f"split.csv, split.json and figures/split.png in [bold]{escape(str(out))}[/bold]")


def _best_learned_line(b: dict, gpus: int, rows: list[dict]) -> str:
    """The best split by time to target (``sandbox/analysis/plan_split.py``, ``best_learned``), in one line."""
    if not b:
        reached = ", ".join(f"t={r['trainer_gpus']},c={r['concurrency']}: {r.get('reached_units', '0/0')}" for r in rows)
        return f"best split by time to target: none, no configuration reached the target in every run ({reached})"
    ci = lambda lo, hi: f" [{lo:.4g}, {hi:.4g}]" if lo is not None and hi is not None else ""  # noqa: E731
    line = (f"best split by time to target: {b['trainer_gpus']} trainer GPUs, {gpus - b['trainer_gpus']} for rollouts, "
            f"{b['concurrency']} per engine: {b['time_to_target']:.4g} s"
            + ci(b["time_to_target_ci_low"], b["time_to_target_ci_high"]))
    if "runner_up_trainer_gpus" in b:
        verdict = "distinguishable" if b["distinguishable"] else "NOT distinguishable with these seeds (the intervals overlap)"
        line += (f"; runner-up {b['runner_up_trainer_gpus']} trainer GPUs, {b['runner_up_concurrency']} per engine: "
                 f"{b['runner_up_time_to_target']:.4g} s"
                 + ci(b["runner_up_time_to_target_ci_low"], b["runner_up_time_to_target_ci_high"]) + f": {verdict}")
    return line


def _check_split_learning(configs, learn_seeds: int, learn_steps, force: bool) -> None:
    """Refuse a learning split above the plan's time limit (``sandbox.analysis.plan.check_plan``), with the
    budget estimate of its learning runs."""
    from .analysis.plan import PlanEstimate, check_plan, learn_scenario
    from .budget import estimate

    seconds, peak, what = 0.0, 0.0, ""
    for c in configs:
        b = estimate(learn_scenario(c.scenario, 0, learn_steps))
        seconds += learn_seeds * b.seconds
        if b.memory > peak:
            peak, what = b.memory, f"learning run of {c.label} ({b.main_memory().what})"
    check_plan(PlanEstimate(seconds, peak, [(f"{len(configs) * learn_seeds} learning runs", seconds)], what), force)


@app.command(short_help="Write a self-contained HTML report of a run or a sweep.")
def report(
    directory: Path = typer.Argument(..., help="A sweep directory or the output of `sandbox run`."),
    out: Optional[Path] = typer.Option(None, "--out", parser=_out_path, metavar="DIR", help="Directory of report.html (default: DIRECTORY itself)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
):
    """Write a self-contained HTML report (figures embedded, scenario, table of runs) as report.html in
    --out (a directory, created if needed; a path ending in .html still names the file, deprecated)."""
    from .outputs import check_out_path, out_dir
    from .readfile import InputFileError
    from .report import write_report

    try:  # the file is replaced (a link there too, never written through); an impossible path is refused
        target = None
        if out is not None:
            if out.suffix.lower() in (".html", ".htm"):
                _deprecated("sandbox report --out FILE.html", "--out DIR (report.html is written into it)")
                target = check_out_path(user_path(out))
            else:
                target = check_out_path(out_dir(user_path(out)) / "report.html")
        if target is not None and os.path.lexists(target) and not (os.path.islink(target) or target.is_file()):
            raise OutputError(f"--out: {target} exists and is not a file (a directory or a special file): remove it "
                              "or choose another path")
        path = write_report(directory, target)
    except (FileNotFoundError, InputFileError, OutputError) as exc:
        _fail(escape(str(exc)))
    except OSError as exc:
        _os_error(exc)
    console.print(f"report: [bold]{path}[/bold] (self-contained; open it in any browser)")


@app.command(short_help="List the teaching demos, or run one.")
def demo(
    name: Optional[str] = typer.Argument(None, help="Demo to run (omit to list them)."),
    out: Path = typer.Option(Path("runs/demos"), "--out", parser=_out_path, metavar="DIR", help="Where the figure is written."),
    quick: bool = typer.Option(False, "--quick", help="A few steps only (a smoke test)."),
    tiny: bool = typer.Option(False, "--tiny", hidden=True, help="Deprecated spelling of --quick."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
):
    """List the teaching demos, or run one: a plain-language explanation and one figure."""
    from .demos import DEMOS, run_demo

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

    from .outputs import out_dir

    t0 = time.time()
    try:
        out = out_dir(user_path(out))  # an impossible path: a clear error before the demo runs
        with progress.session(progress.enabled(quiet)), progress.phase(f"demo {name}"):  # its runs' "simulating" rows under it
            path = run_demo(name, out, quick)
    except OutputError as exc:
        _fail(escape(str(exc)))
    except OSError as exc:
        _os_error(exc)
    console.print(f"[bold]{name}[/bold] done in {time.time() - t0:.1f} s; figure: [bold]{path}[/bold]")


@app.command(short_help="Write an interactive HTML explorer of staleness (precomputed runs, works offline).")
def explore(
    out: Path = typer.Option(Path("runs/explore"), "--out", parser=_out_path, metavar="DIR", help="Directory of explorer.html."),
    quick: bool = typer.Option(False, "--quick", help="A small grid (under 2 minutes on 2 cores)."),
    budget: Optional[float] = typer.Option(None, "--budget", metavar="DURATION", parser=parse_duration,
                                           help="Refuse a task's grid estimated over this wall time, e.g. 90s or 10m (default: each task's own, quick 60 s and 90 s, full 300 s and 600 s)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
):
    """Precompute a grid of runs (lag bound x learning rate x method x delay tail x engine mismatch) on
    the delayed quadratic (where staleness bites) and on the bit-string (the contrast), and write one
    self-contained page whose controls switch between them."""
    import time

    from .budget import format_seconds
    from .explore import DEFAULT_PAGE, QUICK_PAGE, GridError, build_explorer

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
    console.print(f"explorer: [bold]{escape(str(path))}[/bold] ({size / 1e6:.2f} MB, built in "
                  f"{format_seconds(time.time() - t0)}; self-contained, open it in any browser)")


@app.command("list", short_help="List the components a scenario can be assembled from.")
def list_components(
    family: Optional[str] = typer.Argument(None, help="objective, correction, stabilizer, delay, staleness, task or engine (default: all)."),
):
    """List what a scenario can be assembled from: every registered objective, correction, stabilizer,
    delay model, staleness control, task and rollout engine, with the field that selects it and its docs entry."""
    from .components import FAMILIES

    if family is not None and family not in FAMILIES:
        _fail(f"FAMILY: unknown family {family!r}; expected one of {', '.join(FAMILIES)}")
    for name, fam in FAMILIES.items():
        if family is not None and name != family:
            continue
        table = Table(title=f"{name} ({fam.field})", title_justify="left")
        table.add_column("name", style="bold")
        table.add_column("what it is")
        table.add_column("docs")
        for entry in fam.registry.entries():
            table.add_row(entry.name, escape(entry.summary), f"{fam.docs}#{entry.name}")
        console.print(table)


# ------------------------------------------------------------------------------------------------
# promotion to a GPU framework
# ------------------------------------------------------------------------------------------------

EXIT_REFUSED = 3


@app.command(short_help="Write a scenario as a GPU framework's configuration.")
def export(
    source: Optional[Path] = typer.Argument(None, help="Scenario TOML, a shipped scenario's name, a `sandbox run` directory or a `sandbox sweep` directory."),
    framework: Optional[str] = typer.Option(None, "--framework", "-f", metavar="NAME", help="Target framework (see --list)."),
    version: Optional[str] = typer.Option(None, "--version", help="Framework version (default: the newest supported)."),
    variant: Optional[str] = typer.Option(None, "--variant", metavar="NAME", help="Variant of a scenario file or of a multi-variant run directory."),
    run_id: Optional[str] = typer.Option(None, "--run", help="Run id of a sweep directory."),
    best: Optional[str] = typer.Option(None, "--best", help="Pick the run (sweep: the configuration, averaged over seeds) with the highest value of this summary metric; speedup (= speedup_vs_sync) ranks by the end-to-end speed-up against the synchronous baseline."),
    lowest: bool = typer.Option(False, "--lowest", help="With --best: pick the lowest value instead (losses)."),
    set_: Optional[List[str]] = typer.Option(None, "--set", metavar="KEY=VALUE", help="Override a scenario field before exporting: dotted.key=value (repeatable)."),
    lr: Optional[float] = typer.Option(None, "--lr", help="Learning rate for YOUR model (the toy's is never exported)."),
    out: Optional[Path] = typer.Option(None, "--out", parser=_out_path, metavar="DIR", help="Output directory (default: promote/<source>-<framework>)."),
    allow_partial: bool = typer.Option(False, "--allow-partial", help="Write the config even when settings have no equivalent (listed in PROMOTION.md)."),
    list_: bool = typer.Option(False, "--list", help="List frameworks, versions and what each can express, then exit."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display: only the line naming what was written (and refusals)."),
):
    """Write a scenario as the configuration of a GPU framework, with PROMOTION.md explaining every key.

    Exit status: 0 written, 2 bad input, 3 refused (settings without an equivalent; see --allow-partial).
    """
    from .export import EXPORTERS, ExportError, ExportRefused, Given, export_scenario
    from .export.promotion import previous_source
    from .export.source import resolve
    from .outputs import out_dir

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
                lr=lr if lr is not None else (src.scenario.algorithm.optimizer.lr if "algorithm.optimizer.lr" in src.overrides else None),
                grad_clip=src.scenario.algorithm.optimizer.grad_clip if "algorithm.optimizer.grad_clip" in src.overrides else None,
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
            console.print(f"[red]refused:[/red] {framework} cannot express {len(exc.rows)} setting(s) of this scenario:")
            for r in exc.rows:
                console.print(f"  - [bold]{escape(r.source)}[/bold] = {escape(str(r.value))}: {escape(r.note)}")
            console.print("Nothing was written. Re-run with [bold]--allow-partial[/bold] to write the rest and list these in PROMOTION.md.")
            if framework == "trl" and any("SandboxGRPOConfig.from_scenario" in r.note for r in exc.rows):
                where = f", variant={variant!r}" if variant else ""
                console.print("Or keep the method inside TRL's GRPOTrainer (docs/promotion.md#trl; "
                              "examples/trl_grpo_from_scenario.py):\n  " + escape(
                                  f"SandboxGRPOTrainer(model, reward_funcs, args=SandboxGRPOConfig.from_scenario("
                                  f"{str(source)!r}{where}, output_dir=...), train_dataset=...)"), soft_wrap=True)
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
        console.print(f"  [yellow]no equivalent[/yellow] [bold]{escape(r.source)}[/bold] = {escape(str(r.value))}: {escape(r.note)}")
    console.print(f"written to [bold]{target}[/bold]: {', '.join(exp.files)}\nlaunch (see PROMOTION.md): [dim]{escape(command)}[/dim]")


@app.command("import", short_help="Read a GPU framework's config back as a scenario (the inverse of export).")
def import_(
    config: Optional[Path] = typer.Argument(None, help="The framework's config: verl / VCPO-fork overrides (key=value lines) or YAML; TRL GRPOConfig / AsyncGRPOConfig keyword arguments as JSON or YAML; OpenRLHF flags; AReaL YAML; prime-rl TOML (see --list)."),
    framework: Optional[str] = typer.Option(None, "--framework", "-f", metavar="NAME", help="The framework the config is written for (see --list)."),
    out: Optional[Path] = typer.Option(None, "--out", parser=_out_path, metavar="DIR", help="Output directory for scenario.toml and IMPORT.md (default: imported/<config name>-<framework>)."),
    task: str = typer.Option("bitstring", "--task", help="Proxy task the scenario runs on: bitstring (seconds per run) or lm (the small LM of lm_mission, minutes)."),
    workers: Optional[int] = typer.Option(None, "--workers", metavar="N", min=1, help="Simulated rollout workers generating concurrently (engines x concurrency): system.num_workers (default: from the config or --cluster, else the proxy's 16, stated in the output)."),
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="A TOML file with a [cluster] table: num_workers, generation_time / train_time / sync_delay (delay tables, e.g. a length trace), and recorded-only trainer_gpus, rollout_gpus, gpu, model_params (docs/import.md)."),
    entry: Optional[str] = typer.Option(None, "--entry", help="The entry point the config is launched with when the file does not say (verl: a module such as verl.experimental.one_step_off_policy.main_ppo; trl: GRPOConfig or AsyncGRPOConfig)."),
    list_: bool = typer.Option(False, "--list", help="List the frameworks and the formats read, then exit."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display: only the workers assumed and the line naming what was written."),
):
    """Read a framework's config as a scenario: scenario.toml (loads and runs) plus IMPORT.md listing, key by key,
    what was mapped, converted, cannot be represented or is unknown (docs/import.md).

    Exit status: 0 written, 2 bad input (a malformed file names the line or key).
    """
    with _starting():
        from .importers import IMPORTERS, ConfigImportError, import_config, read_cluster, render_import_md
        from .outputs import write_text
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
            console.print(f"  [yellow]{label}[/yellow] [bold]{escape(r.key)}[/bold] = {escape(str(r.value))}: {escape(r.note)}")
    console.print(f"written to [bold]{escape(str(target))}[/bold]: scenario.toml, IMPORT.md\n"
                  f"run it: [dim]sandbox run {escape(str(target / 'scenario.toml'))}[/dim]")


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
        return (f"[yellow]simulated workers: {n}[/yellow], the proxy scenario's default (the config does not say how "
                "many rollouts run concurrently): give --workers N (engines x concurrency) or cluster.num_workers")
    return f"simulated workers: {n} (from {escape(source)})"


@app.command(short_help="Before a GPU run: simulate around an imported config and answer the seven questions.")
def preflight(
    config: Path = typer.Argument(..., help="The framework's config (any format `sandbox import` reads)."),
    framework: str = typer.Option(..., "--framework", "-f", metavar="NAME", help="The framework the config is written for (sandbox import --list)."),
    out: Optional[Path] = typer.Option(None, "--out", parser=_out_path, metavar="DIR", help="Output directory (default: preflight/<config name>-<framework>)."),
    quick: bool = typer.Option(False, "--quick", help="At most 2 minutes: the bit-string proxy (your learning rate not placed), 4 seeds, 60 steps, a 4 x 4 map, a coarser split."),
    budget: Optional[float] = typer.Option(None, "--budget", metavar="DURATION", parser=parse_duration,
                                           help="Wall-time budget, e.g. 90s or 10m (default 10m; --quick 2m)."),
    seeds: Optional[int] = typer.Option(None, "--seeds", metavar="N", min=2, max=10_000, help="Seeds per cell (default 6; --quick 4)."),
    lr_mult: float = typer.Option(1.0, "--lr-mult", help="The learning-rate multiplier (of yours) Q2 compares corrections at and the map centres on."),
    gpus: Optional[int] = typer.Option(None, "--gpus", min=2, help="Q3/Q4/Q7: total GPUs (default: from the config or --cluster)."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="Q3/Q4/Q7: accelerator of the hardware table (A100, H100, H200, H20; default H100)."),
    model: Optional[str] = typer.Option(None, "--model", help="Q3/Q4/Q7: model of the hardware table, e.g. qwen2.5-7b (default: matched from the config's model path)."),
    tp: Optional[int] = typer.Option(None, "--tp", min=1, help="Q3/Q4/Q7: GPUs per inference engine (default: from the config, else 1)."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", min=1, help="Q3/Q4/Q7: longest response, tokens (default: from the config, else 8192)."),
    length_median: Optional[float] = typer.Option(None, "--length-median", min=1.0, help="Q3/Q4/Q7: median response length, tokens (default min(1000, max tokens / 4))."),
    length_sigma: Optional[float] = typer.Option(None, "--length-sigma", min=0.0, help="Q3/Q4/Q7: sigma of log response length (default 1.0)."),
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="A TOML file with a [cluster] table (as `sandbox import --cluster`): trainer_gpus + rollout_gpus and gpu feed Q3/Q4/Q7."),
    param_rms: Optional[float] = typer.Option(None, "--param-rms", help="RMS of your model's weight matrices, for the transfer rule (default: the model family's initializer_range, an assumption; docs/preflight.md#the-transfer-rule)."),
    entry: Optional[str] = typer.Option(None, "--entry", metavar="NAME", help="The entry point when the file does not say (as `sandbox import --entry`)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
):
    """Import CONFIG, plan a bounded set of simulations around its staleness bound, learning rate and
    correction (Q1, Q2, Q5, Q6 on the LM proxy, your learning rate placed by the transfer rule; with --quick
    on the bit-string proxy; Q3, Q4, Q7 on the timing model of `sandbox plan --gpus`), run them over seeds,
    and write preflight.md, preflight.json and preflight.html with one verdict per question (docs/preflight.md).

    Exit status: 0 written, 2 bad input or a plan over its budget (the message names what shrinks it).
    """
    with _starting():
        from .importers import ConfigImportError, import_config
        from .importers import read_cluster
        from .preflight import PreflightError, check_plan, make_plan, run_plan
        from .preflight_system import SystemPlanError, cluster_facts
        from .preflight_transfer import model_rms, proxy_rms, transfer, user_learning_rate
        from .report.preflight import write_outputs
    with _command("sandbox preflight", ConfigImportError, PreflightError, SystemPlanError) as output:
        seconds = budget
        table = read_cluster(user_path(cluster)) if cluster is not None else None
        imp = import_config(config, framework, cluster=table, entry=entry)
        lm = None if quick else import_config(config, framework, proxy="lm", cluster=table, entry=entry).data
        facts = cluster_facts(imp.rows, framework, {"gpus": gpus, "gpu": gpu, "model": model, "tp": tp, "max_tokens": max_tokens,
                                                    "length_median": length_median, "length_sigma": length_sigma}, table)
        point = None
        if lm is not None:
            user_lr = user_learning_rate(imp.rows)
            try:
                rms = model_rms(facts.model, param_rms)
            except ValueError as exc:
                raise PreflightError(str(exc)) from None
            if user_lr is not None:
                point = transfer(user_lr, str(lm["algorithm"]["optimizer"]["name"]), rms, proxy_rms(lm))
        plan = make_plan(imp.data, quick=quick, seeds=seeds, lr_mult=lr_mult, budget=seconds, framework=framework, facts=facts,
                         lm_data=lm, transfer_to=point)
        check_plan(plan)
        if facts.missing:
            console.print("Q3/Q4/Q7 will not be answered: missing " + escape("; ".join(facts.missing)))
        split = f" + {plan.system.runs} system-only split runs" if plan.system is not None else ""
        console.print(f"preflight: {len(plan.jobs)} runs x {plan.seeds} seeds{split}, estimated {plan.seconds:.0f} s "
                      f"(budget {plan.budget:.0f} s)")
        target = user_path(out) if out is not None else Path("preflight") / f"{_config_slug(config)}-{framework}"
        with output.stage(target) as stage:  # opened first: an impossible --out is refused before minutes of runs
            with progress.session(progress.enabled(quiet)):
                res = run_plan(plan)
            write_outputs(stage, res, framework, str(config))
    for line in preflight_summary(res):
        console.print(escape(line))
    console.print(f"written to [bold]{escape(str(target))}[/bold]: preflight.md, preflight.json, preflight.html "
                  f"({res['plan']['wall_s']:.0f} s)")


PREFLIGHT_ORDER = ("Q1", "Q2", "Q6", "Q5", "Q3", "Q4", "Q7")
"""The order of the questions in preflight.md (sandbox/report/preflight.py), kept by the terminal summary."""


def preflight_summary(res: dict) -> list[str]:
    """One line per question of a preflight result, in the order of preflight.md (:data:`PREFLIGHT_ORDER`)."""
    lines = []
    for q in PREFLIGHT_ORDER:
        a = res.get(q)
        if a is None:
            continue
        if q == "Q6":
            lines.append(f"Q6: {'bitwise equal' if a['bitwise_equal'] else 'differs'} in the sandbox")
        elif q == "Q1" and "position" in a:
            lines.append(f"Q1: {a['verdict']}" + (f" ({a['reason']})" if a.get("reason") else
                                                  f": your point is {a['position']} the safe region at k={a['at']['bound']}"))
        elif q == "Q5" and a.get("verdict") == "ranges":
            n = len(a.get("framework_metrics", {})) + len(a.get("sandbox_metrics", {}))
            proxy = "LM" if a.get("proxy") == "lm" else "bit-string"
            gap = "" if a.get("staleness_gap", True) else " (lag 0: no staleness gap, the engine's mismatch only)"
            lines.append(f"Q5: first- and last-quarter ranges of {n} mismatch / staleness metrics at k={a.get('bound')} "
                         f"on the {proxy} proxy{gap} (table in preflight.md)")
        else:
            lines.append(f"{q}: {a['verdict']}")
    return lines


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
        console.print("versions: " + ", ".join(f"{v.series} ({v.release}; keys read at {v.read_at})" for v in cls.versions))
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
    matrix = Table(title="what each framework can express (yes = a key; partly = some settings or always on; "
                         "- = no equivalent; details: --list --framework NAME)")
    matrix.add_column("concept")
    for cls in exporters.values():
        matrix.add_column(cls.name)
    for c in concepts:
        cells = []
        for cls in exporters.values():
            how = cls.expresses.get(c)
            low = (how or "").lower()
            cells.append("?" if how is None else "-" if low.startswith("no equivalent") else "partly" if low.startswith("partly") else "yes")
        matrix.add_row(c, *cells)
    console.print(matrix)
