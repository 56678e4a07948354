"""The ``sandbox run`` command functions (registered on the app in :mod:`sandbox.cli`)."""

from __future__ import annotations

import math
from contextlib import nullcontext
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from sandbox.base import progress
from sandbox.base.errors import ScenarioError
from sandbox.base.gc_pause import collected_on_exit
from sandbox.base.outputs import COMPARISON, OutputError, StagedDir, safe_name, user_path
from sandbox.base.processes import terminate_as_interrupt
from sandbox.cli_support import _fail, _final_label, _fmt, _interrupted, _os_error, _out_path, _starting, console


def _run_one(scn, out: Path | None, label: str, group: str = "", color: str | None = None):
    """One variant; its phases (warm start, simulating, writing, figures) are shown by the runner in
    the command's progress session (sandbox.base.progress)."""
    from sandbox.run.runner import run_scenario

    # force: the run command checked the budget
    return run_scenario(scn, out, force=True, label=label, color=color, group=group)


def run(
    scenario: Path | None = typer.Argument(
        None, help="Scenario TOML, or the name of a shipped scenario such as max_lag (default: the shipped quickstart)."
    ),
    set_: list[str] | None = typer.Option(
        None, "--set", metavar="KEY=VALUE", help="Override a field: dotted.key=value (repeatable)."
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        parser=_out_path,
        metavar="DIR",
        help="Run directory (default: runs/<scenario name>, plus +<dotted.key>-<value> per --set override).",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    force: bool = typer.Option(
        False, "--force", help="Run even when the estimated memory exceeds the available memory."
    ),
    wide: bool = typer.Option(
        False,
        "--wide",
        help="The full summary table (throughput, final reward, drops, ESS, gradient "
        "cosine) instead of the compact one that fits 80 columns; every number is in summary.json.",
    ),
):
    """Run a scenario (all its variants) and print a summary table.

    The run is written into a staging directory inside --out and moved into place once complete,
    replacing a previous run there; Ctrl-C (exit status 130) keeps nothing and leaves a previous run
    as it was. A directory holding anything but a previous run is refused, and so is a directory
    another sandbox process is writing. SIGTERM is treated as Ctrl-C (exit status 143).
    """
    with _starting():
        from sandbox.run.writers import WriterUnavailable, check_writers
        from sandbox.scenario.api import DEFAULT_SCENARIO, load_scenario, parse_overrides, variant_scenarios
    staged = None
    out = user_path(out) if out is not None else None
    try:
        with terminate_as_interrupt():
            try:
                scn, raw = load_scenario(scenario or DEFAULT_SCENARIO, set_)
                variants = variant_scenarios(scn, raw)
                weights = _check_budget(variants, force)
                for (
                    v
                ) in variants.values():  # an extra's writer that is not installed: refused before anything is written
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
                from sandbox.base.figure_worker import FigureWorkers
                from sandbox.base.heap import release_free_heap
                from sandbox.run.runner import slim

                # matplotlib (about a second to import) only where a variant draws figures
                figures = any(v.run.figures for v in variants.values())
                if figures:
                    from sandbox.run.plots import default_figures, variant_colors, warm_up
                colors = variant_colors(variants) if figures else dict.fromkeys(variants)
                # several variants: each one's figures are drawn in a worker process while the next one simulates,
                # the same files (sandbox/base/figure_worker.py); the block waits for them before the run is moved in
                with (
                    progress.session(progress.enabled(quiet)),
                    progress.task(f"{name}: variants", weights=weights) if len(variants) > 1 else nullcontext() as top,
                    FigureWorkers(prepare=warm_up if figures else None) as workers,
                ):
                    for label, vscn in variants.items():
                        # the variant's cluster and learner (reference cycles) go when it ends, not at some later
                        # collection; that collection scans the variant's own objects only (sandbox/base/gc_pause.py)
                        with collected_on_exit():
                            where = stage / safe_name(label) if label else stage
                            defer = workers.enabled and len(variants) > 1
                            with workers.deferring() if defer else nullcontext():
                                result = _run_one(vscn, where, label, name, colors[label])
                            if defer and vscn.run.figures:
                                workers.submit(
                                    f"the figures of variant {label!r}",
                                    default_figures,
                                    result,
                                    where / "figures",
                                    label=label,
                                    color=colors[label],
                                    formats=vscn.run.figure_formats,
                                )
                            results[label or name] = slim(result)  # written: keep what the outputs across variants read
                            del result
                        release_free_heap()  # the variant's freed pages back to the system (sandbox/base/heap.py)
                        if top is not None:
                            top.advance(info=f"{label} done")
                    if len(results) > 1:
                        from sandbox.base.outputs import write_text
                        from sandbox.scenario.api import dump_scenario

                        # the whole scenario the run ran (base + [variants]): `sandbox run <dir>/scenario.toml` re-runs it
                        write_text(stage / "scenario.toml", dump_scenario(scn, variants=True))
                        if any(r.scenario.run.figures for r in results.values()):
                            from sandbox.run.plots import comparison_figure, run_formats

                            with progress.phase("figures: comparison"):
                                comparison_figure(
                                    results,
                                    stage / COMPARISON,
                                    title=scn.title or name,
                                    formats=run_formats(r.scenario for r in results.values()),
                                )
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


MAX_DIR_NAME = 96
"""Longest default run-directory name; a longer one keeps its first 80 characters and a hash."""


def default_run_dir(name: str, overrides: dict) -> Path:
    """``runs/<scenario name>`` for a scenario as written; with ``--set`` overrides, one
    ``+<dotted.key>-<value>`` per override in key order (``runs/fixed_lag+system.staleness.k-16``),
    so that a run with overrides never replaces the scenario's own run, and the same overrides (in
    any order) always give the same directory. Characters a directory name cannot hold become ``-``
    (sandbox.base.outputs.safe_name); a name longer than MAX_DIR_NAME keeps its first 80 characters plus
    the first 8 hex digits of the SHA-256 of the overrides (canonical JSON), which keeps it unique."""
    import hashlib
    import json

    base = safe_name(name) or "run"
    if not overrides:
        return Path("runs") / base
    canonical = {k: overrides[k] for k in sorted(overrides)}
    parts = [
        f"{k}={v if isinstance(v, str) else json.dumps(v, sort_keys=True, separators=(',', ':'))}"
        for k, v in canonical.items()
    ]
    full = safe_name("+".join([base, *parts])) or base
    if len(full) > MAX_DIR_NAME:
        digest = hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()[:8]
        full = f"{full[:80].rstrip('-.')}-{digest}"
    return Path("runs") / full


def _check_budget(variants: dict, force: bool) -> list[float]:
    """Refuse (BudgetError) a variant whose estimated memory exceeds the available memory, unless
    --force; warn when the runs together are estimated to take longer than budget.WARN_SECONDS.
    Returns each variant's estimated seconds (the weights of the progress' ETA)."""
    from sandbox.scenario.budget import WARN_SECONDS, check_budget, format_seconds

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
    from sandbox.analysis.time_to_target import compare_variants
    from sandbox.base.outputs import TIME_TO_TARGET, write_json

    comparison = compare_variants(results)
    for label, r in results.items():
        r.summary.update(comparison.variant_fields(label))
        write_json(stage / safe_name(label) / "summary.json", r.summary)
    if any(r.scenario.run.figures for r in results.values()):
        from sandbox.report.figures import time_to_target_figure
        from sandbox.run.plots import run_formats  # matplotlib: only when figures are drawn

        time_to_target_figure(
            comparison, stage / TIME_TO_TARGET, formats=run_formats(r.scenario for r in results.values())
        )
    return comparison


def _status_cell(s: dict) -> str:
    status = (
        s["status"]
        if not s.get("diverged_replicas")
        else f"{s['status']} ({s['diverged_replicas']}/{s['replicas']} diverged)"
    )
    if s["status"] == "diverged":
        status = f"diverged ({s['diverged_replicas']}/{s['replicas']})"
    return status


def _target_cell(s: dict) -> str:
    ttt = s.get("time_to_target")
    return (
        _fmt(ttt, ".3g")
        if ttt is not None
        else "no target"
        if s.get("target_level") is None
        else f"missed {s.get('target_reached_replicas', 0)}/{s['replicas']}"
    )


def compact_table(results: dict, title: str) -> Table:
    """The default summary of ``sandbox run``, narrow enough for an 80-column terminal: variant, status,
    end-to-end speed-up with its 95% interval, time to target, staleness, busy workers and collapsed
    replicas (``sandbox.analysis.collapse``); ``--wide`` and summary.json have the rest."""
    from rich import box

    from sandbox.analysis.collapse import cell

    table = Table(
        title=escape(title),
        box=box.SIMPLE_HEAD,
        padding=(0, 1, 0, 0),
        pad_edge=False,
        show_edge=False,
        title_justify="left",
    )
    for col, just in (
        ("variant", "left"),
        ("status", "left"),
        ("speed-up [95% CI]", "right"),
        ("target s", "right"),
        ("lag", "right"),
        ("busy", "right"),
        ("collapsed", "right"),
    ):
        table.add_column(col, justify=just, overflow="fold")
    for label, r in results.items():
        s = r.summary
        speed, lo, hi = s.get("speedup_vs_sync"), s.get("speedup_ci_low"), s.get("speedup_ci_high")
        speed_cell = (
            "-"
            if speed is None
            else f"{speed:#.3g}x" + (f" [{lo:#.3g}, {hi:#.3g}]" if lo is not None and hi is not None else "")
        )
        table.add_row(
            escape(label),
            s["status"],
            speed_cell,
            _target_cell(s),
            f"{_fmt(s['staleness_mean'], '.2f')}/{s['staleness_max']}",
            f"{100 * s['util_workers']:.0f}%"
            if s.get("util_workers") is not None and math.isfinite(s["util_workers"])
            else "-",
            cell(s.get("collapsed_replicas"), s.get("replicas")),
        )
    return table


def _print_table(results: dict, title: str, comparison=None, wide: bool = False) -> None:
    if not wide:
        console.print(compact_table(results, title))
    else:
        _print_wide_table(results, title)
    _print_table_notes(results, comparison, wide)


def _print_wide_table(results: dict, title: str) -> None:
    from sandbox.analysis.collapse import cell

    base = next(iter(results.values())).summary["throughput_samples_per_s"]
    table = Table(title=escape(title))
    final_label = _final_label(
        next((c for c in _FINAL_FIELDS if any(not math.isnan(r.summary[c]) for r in results.values())), "final_reward")
    )
    columns = (
        "run",
        "status",
        "collapsed",
        "throughput (samples/s)",
        "vs first",
        final_label,
        "to target (s)",
        "end to end vs sync",
        "staleness mean/max",
        "dropped groups",
        "ESS/N mean",
        "grad cos mean",
    )
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
            _fmt(ttt, ".3g")
            if ttt is not None
            else "no target"
            if s.get("target_level") is None
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
        console.print(
            escape(rule if rule.startswith("no target") else f"no target ({rule})")
            + "; no time to target or speed-up is claimed"
        )
    for label, r in results.items():
        if r.summary.get("divergence"):
            console.print(f"[yellow]diverged[/yellow] {escape(label)}: {escape(r.summary['divergence'])}")
    if comparison is not None:
        from sandbox.analysis.time_to_target import describe

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
            "a zero gradient (docs/time_to_target.md); --wide for the full table.[/dim]"
        )
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
