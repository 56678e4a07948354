"""The ``sandbox plan`` command functions (registered on the app in :mod:`sandbox.cli`)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from sandbox.base import progress
from sandbox.base.errors import ScenarioError
from sandbox.base.outputs import safe_name, user_path
from sandbox.cli_support import _command, _fail, _out_path, _starting, console


def _write_outputs(writer: str, result, stage: Path) -> None:
    """The plan's tables and figures (``sandbox.plan.figures.<writer>``) written into ``stage`` by a child forked
    for them where fork is available (:class:`sandbox.base.figure_worker.FigureWorkers`), so the command's own
    process never imports matplotlib; the same functions on the same result, so the same bytes
    (``tests/system/test_command_imports.py``). The command waits for the child: its failure is raised here."""
    from sandbox.base.figure_worker import FigureWorkers

    def write() -> None:
        from sandbox.plan import figures

        getattr(figures, writer)(result, stage)

    with FigureWorkers(max_workers=1) as workers:
        if workers.enabled:
            workers.submit(f"the plan's tables and figures in {stage}", write)
        else:
            write()


@contextmanager
def _staged_plan(out, quiet: bool):
    """The output directory of ``sandbox plan`` (both forms): staged and moved into place whole, with
    progress shown; yields ``(staged, stage)``, ended as :func:`_command` ends a command."""
    with _command("sandbox plan") as output, progress.session(progress.enabled(quiet)):
        staged = output.stage(out)
        with staged as stage:
            yield staged, stage


def plan(
    scenario: Path | None = typer.Argument(
        None,
        help="Scenario TOML, or the name of a shipped scenario (default: the shipped quickstart); variants are ignored.",
    ),
    workers: str | None = typer.Option(
        None,
        "--workers",
        metavar="LIST",
        help="Simulated worker counts, comma-separated, e.g. 8,16,32 (default: the scenario's).",
    ),
    k_max: str | None = typer.Option(
        None,
        "--k-max",
        metavar="LIST",
        help="Staleness bounds, comma-separated (0 = sync, always planned as the baseline; default 0,1,2,4,8); which field each sets: docs/plan.md. With --gpus: one bound (default: the scenario's).",
    ),
    seeds: int = typer.Option(
        3, "--seeds", metavar="N", min=1, max=10_000, help="Seeds per configuration (run.seed = 0, 1, ...)."
    ),
    steps: int | None = typer.Option(
        None, "--steps", min=1, help="Learner steps per simulation (default: the scenario's run.steps)."
    ),
    set_: list[str] | None = typer.Option(
        None, "--set", metavar="KEY=VALUE", help="Override a field: dotted.key=value (repeatable)."
    ),
    out: Path | None = typer.Option(
        None, "--out", parser=_out_path, metavar="DIR", help="Output directory (default: runs/plan_<scenario name>)."
    ),
    learn: bool = typer.Option(
        False,
        "--learn",
        help="Also train every configuration and add time to target and the end-to-end speed-up (SLOW: one full learning run per configuration and seed).",
    ),
    learn_seeds: int = typer.Option(
        2, "--learn-seeds", min=1, max=10_000, help="With --learn: learning runs per configuration."
    ),
    learn_steps: int | None = typer.Option(
        None,
        "--learn-steps",
        min=1,
        help="With --learn: optimizer steps per learning run (default: the scenario's run.steps).",
    ),
    force: bool = typer.Option(
        False, "--force", help="Run even when the estimate exceeds the time limit or the available memory."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    gpus: int | None = typer.Option(
        None,
        "--gpus",
        help="Total GPUs: sweep the trainer/rollout split and the per-engine concurrency on continuous-batching engines instead (docs/plan.md#gpu-split).",
    ),
    gpu: str = typer.Option(
        "H100", "--gpu", help="With --gpus: the accelerator of the hardware table (A100, H100, H200, H20)."
    ),
    model: str = typer.Option(
        "qwen2.5-7b", "--model", help="With --gpus: the model of the hardware table (e.g. qwen2.5-7b, llama3.1-70b)."
    ),
    tp: int = typer.Option(1, "--tp", min=1, help="With --gpus: GPUs per inference engine (tensor parallel)."),
    concurrency: str = typer.Option(
        "64,128,256",
        "--concurrency",
        metavar="LIST",
        help="With --gpus: sequences in flight per engine (max_sequences), comma-separated.",
    ),
    trainer_gpus: str | None = typer.Option(
        None, "--trainer-gpus", metavar="LIST", help="With --gpus: trainer GPU counts to try (default 1 ... N - tp)."
    ),
    mfu: float = typer.Option(
        0.4, "--mfu", min=0.01, max=1.0, help="With --gpus: the trainer's model-FLOPs utilisation."
    ),
    length_median: float | None = typer.Option(
        None,
        "--length-median",
        min=1.0,
        help="With --gpus: median response length, tokens (default the scenario engine's, else 1000).",
    ),
    length_sigma: float | None = typer.Option(
        None,
        "--length-sigma",
        min=0.0,
        help="With --gpus: sigma of log response length (default the scenario engine's, else 1.0).",
    ),
    max_tokens: int | None = typer.Option(
        None,
        "--max-tokens",
        min=1,
        help="With --gpus: longest response, tokens (default the scenario engine's, else 8192).",
    ),
):
    """Plan a cluster before buying GPU time: for every (workers, k_max) pair a system-only simulation
    (no learning, seconds) of the scenario over seeds, printing throughput, speed-up over synchronous
    training with the same workers, the lag of the consumed groups, utilisation and drops; plan.csv,
    plan.json and figures go to --out, replaced whole when the plan is complete (docs/plan.md).
    """
    with _starting():
        from sandbox.plan.capacity import (
            build_configurations,
            check_plan,
            default_steps,
            estimate_plan,
            learn_table,
            parse_int_list,
            plan_table,
            run_plan,
        )
        from sandbox.scenario.api import DEFAULT_SCENARIO, load_scenario
        from sandbox.scenario.budget import WARN_SECONDS, format_seconds
    path = scenario or DEFAULT_SCENARIO
    out = user_path(out) if out is not None else Path("runs") / f"plan_{safe_name(path.stem) or 'scenario'}"
    if gpus is not None:
        _plan_split(
            path,
            set_,
            out,
            gpus,
            gpu,
            model,
            tp,
            concurrency,
            trainer_gpus,
            k_max,
            mfu,
            length_median,
            length_sigma,
            max_tokens,
            seeds,
            steps,
            learn,
            workers,
            quiet,
            learn_seeds,
            learn_steps,
            force,
        )
        return
    try:
        scn, raw = load_scenario(path, set_)
        worker_list = (
            parse_int_list(workers, "--workers", 1, "8,16,32") if workers is not None else [scn.system.num_workers]
        )
        k_list = parse_int_list(k_max if k_max is not None else "0,1,2,4,8", "--k-max", 0, "0,1,2,4,8")
        configs = build_configurations(raw, worker_list, k_list, str(path))
        est = estimate_plan(configs, steps or default_steps(scn), seeds, learn_seeds if learn else 0, learn_steps)
        check_plan(est, force)
    except ScenarioError as exc:
        _fail(escape(str(exc)))
    if est.seconds > WARN_SECONDS:
        console.print(
            f"[yellow]warning:[/yellow] this plan may take {escape(est.describe())} (estimate); Ctrl-C stops it"
        )
    runs = len(configs) * (learn_seeds if learn else 0)
    # one task over both parts, each unit weighted by its part's estimate (estimate_plan), so the ETA
    # does not take a learning run for a system-only simulation
    sys_s = est.terms[0][1] / max(len(configs), 1)
    learn_s = est.terms[1][1] / runs if runs else 0.0
    weights = [sys_s] * len(configs) + [learn_s] * runs
    label = f"plan: {len(configs)} configurations x {seeds} seeds" + (f", {runs} learning runs" if runs else "")
    with _staged_plan(out, quiet) as (staged, stage):
        with progress.task(label, weights=weights) as bar:
            result = run_plan(
                raw,
                str(path),
                worker_list,
                k_list,
                seeds,
                steps,
                learn_seeds if learn else 0,
                learn_steps,
                on_config=lambda c: bar.advance(info=f"system-only {c.label}"),
                on_run=lambda c, s: bar.advance(info=f"learned {c.label} seed {s}"),
                configs=configs,
            )
        with progress.phase("figures and tables"):
            _write_outputs("write_plan", result, stage)
    console.print(plan_table(result))
    if learn:
        console.print(learn_table(result))
    tokens = (
        ""
        if result.tokens_per_response is None
        else f"; tokens/s charges {result.tokens_per_response} token{'s' * (result.tokens_per_response != 1)} per response"
        + ("" if result.tokens_exact else " (the task's maximum: an upper bound on each response)")
    )
    console.print(
        f"[dim]k_max sets {escape(result.bound_field)}{escape(tokens)}. Throughput: per simulated second over the whole "
        "run; vs sync: simulated time of sync with the same workers / this one's (mean over seeds, common random "
        "numbers); lag: step - head version of every consumed group (p50/p95/max over all seeds); busy: busy fraction; "
        "dropped: dropped / (dropped + consumed) groups"
        + (
            "; learning runs: time to target and end-to-end speed-up over sync with the same workers with their 95% "
            "bootstrap intervals, samples needed = samples to target / sync's (docs/time_to_target.md)"
            if learn
            else ""
        )
        + ".[/dim]"
    )
    replaced = " (it replaced the previous plan)" if staged.previous else ""
    secs = result.system_seconds
    console.print(
        f"system-only part: {len(configs) * seeds} simulations in "
        + (f"{secs:.2f} s" if secs < 120 else format_seconds(secs))
    )
    console.print(f"plan.csv, plan.json and figures in [bold]{escape(str(out))}[/bold]{replaced}")


def _plan_split(
    path,
    set_,
    out,
    gpus,
    gpu,
    model,
    tp,
    concurrency,
    trainer_gpus,
    k_max,
    mfu,
    length_median,
    length_sigma,
    max_tokens,
    seeds,
    steps,
    learn,
    workers,
    quiet,
    learn_seeds=2,
    learn_steps=None,
    force=False,
):
    """``sandbox plan --gpus N``: the trainer/rollout split (sandbox/plan/split.py, docs/plan.md#gpu-split)."""
    with _starting():
        from sandbox.plan.capacity import parse_int_list
        from sandbox.plan.split import SplitOptions, run_split, split_configurations
        from sandbox.scenario.api import load_scenario
    try:
        if workers is not None:
            raise ScenarioError(
                ["--workers: with --gpus the workers follow from the split and --concurrency"], "option"
            )
        k_list = parse_int_list(k_max, "--k-max", 0, "2") if k_max is not None else [None]
        if len(k_list) != 1:
            raise ScenarioError([f"--k-max: with --gpus give one bound (e.g. 2), got {k_max!r}"], "option")
        opts = SplitOptions(
            gpus=gpus,
            gpu=gpu,
            model=model,
            tp=tp,
            concurrency=parse_int_list(concurrency, "--concurrency", 1, "64,128,256"),
            trainer_gpus=parse_int_list(trainer_gpus, "--trainer-gpus", 1, "1,2,4") if trainer_gpus else None,
            k_max=k_list[0],
            mfu=mfu,
            length_median=length_median,
            length_sigma=length_sigma,
            max_tokens=max_tokens,
        )
        scn, raw = load_scenario(path, set_)
        configs = split_configurations(raw, str(path), opts)
        if learn:
            _check_split_learning(configs, learn_seeds, learn_steps, force)
    except ScenarioError as exc:
        _fail(escape(str(exc)))
    with _staged_plan(out, quiet) as (staged, stage):
        runs = len(configs) * learn_seeds if learn else 0
        label = f"plan --gpus {gpus}: {len(configs)} splits x {seeds} seeds" + (
            f", {runs} learning runs" if runs else ""
        )
        with progress.task(label, total=len(configs) + runs) as bar:
            result = run_split(
                raw,
                str(path),
                opts,
                seeds,
                steps,
                configs=configs,
                on_config=lambda c: bar.advance(info=c.label),
                learn_seeds=learn_seeds if learn else 0,
                learn_steps=learn_steps,
                on_run=lambda c, s: bar.advance(info=f"learn {c.label} seed {s}"),
            )
        with progress.phase("figures and tables"):
            _write_outputs("write_split", result, stage)
    table = Table(
        title=escape(
            f"plan --gpus {gpus}: {result.title} ({opts.gpu}, {opts.model}, tp {opts.tp}; "
            f"{result.control}; {result.steps} steps, {result.seeds} seeds)"
        )
    )
    for c in (
        "trainer GPUs",
        "engines",
        "per engine",
        "samples/s [95% CI]",
        "tokens/s",
        "lag mean/p95",
        "dropped",
        "trainer busy",
        "train step (s)",
    ):
        table.add_column(c, justify="right")
    for r in result.rows:
        ci = (
            f" [{r['samples_per_s_low']:.3g}, {r['samples_per_s_high']:.3g}]"
            if r["samples_per_s_low"] == r["samples_per_s_low"]
            else ""
        )
        table.add_row(
            str(r["trainer_gpus"]),
            str(r["engines"]),
            str(r["concurrency"]),
            f"{r['samples_per_s']:.3g}{ci}",
            f"{r['tokens_per_s']:.4g}",
            f"{r['lag_mean']:.2f}/{r['lag_p95']}",
            f"{r['dropped_fraction']:.1%}",
            f"{r['util_learner']:.0%}",
            f"{r['train_step_s']:.3g}",
        )
    console.print(table)
    b = result.best
    line = (
        f"best split: {b['trainer_gpus']} trainer GPUs, {gpus - b['trainer_gpus']} for rollouts, {b['concurrency']} "
        f"sequences per engine: {b['samples_per_s']:.3g} samples/s"
    )
    if b["samples_per_s_low"] == b["samples_per_s_low"]:
        line += f" [{b['samples_per_s_low']:.3g}, {b['samples_per_s_high']:.3g}]"
    if "margin" in b:
        if b["margin_low"] == b["margin_low"]:
            margin = f"{b['margin']:.3g} [{b['margin_low']:.3g}, {b['margin_high']:.3g}] samples/s"
        else:
            margin = f"{b['margin']:.3g} samples/s (one seed: no interval)"
        verdict = (
            "distinguishable"
            if b["distinguishable"]
            else "NOT distinguishable with these seeds (the interval contains 0)"
        )
        line += (
            f"; ahead of the runner-up ({b['runner_up_trainer_gpus']} trainer GPUs, {b['runner_up_concurrency']} per engine) "
            f"by {margin}, paired by seed: {verdict}"
        )
    console.print(escape(line))
    if result.learn_seeds:
        console.print(escape(_best_learned_line(result.best_learned, gpus, result.rows)))
    console.print(f"split.csv, split.json and figures/split.png in [bold]{escape(str(out))}[/bold]")


def _best_learned_line(b: dict, gpus: int, rows: list[dict]) -> str:
    """The best split by time to target (``sandbox/plan/split.py``, ``best_learned``), in one line."""
    if not b:
        reached = ", ".join(
            f"t={r['trainer_gpus']},c={r['concurrency']}: {r.get('reached_units', '0/0')}" for r in rows
        )
        return f"best split by time to target: none, no configuration reached the target in every run ({reached})"
    ci = lambda lo, hi: f" [{lo:.4g}, {hi:.4g}]" if lo is not None and hi is not None else ""  # noqa: E731
    line = (
        f"best split by time to target: {b['trainer_gpus']} trainer GPUs, {gpus - b['trainer_gpus']} for rollouts, "
        f"{b['concurrency']} per engine: {b['time_to_target']:.4g} s"
        + ci(b["time_to_target_ci_low"], b["time_to_target_ci_high"])
    )
    if "runner_up_trainer_gpus" in b:
        verdict = (
            "distinguishable"
            if b["distinguishable"]
            else "NOT distinguishable with these seeds (the intervals overlap)"
        )
        line += (
            f"; runner-up {b['runner_up_trainer_gpus']} trainer GPUs, {b['runner_up_concurrency']} per engine: "
            f"{b['runner_up_time_to_target']:.4g} s"
            + ci(b["runner_up_time_to_target_ci_low"], b["runner_up_time_to_target_ci_high"])
            + f": {verdict}"
        )
    return line


def _check_split_learning(configs, learn_seeds: int, learn_steps, force: bool) -> None:
    """Refuse a learning split above the plan's time limit (``sandbox.plan.capacity.check_plan``), with the
    budget estimate of its learning runs."""
    from sandbox.plan.capacity import PlanEstimate, check_plan, learn_scenario
    from sandbox.scenario.budget import estimate

    seconds, peak, what = 0.0, 0.0, ""
    for c in configs:
        b = estimate(learn_scenario(c.scenario, 0, learn_steps))
        seconds += learn_seeds * b.seconds
        if b.memory > peak:
            peak, what = b.memory, f"learning run of {c.label} ({b.main_memory().what})"
    check_plan(PlanEstimate(seconds, peak, [(f"{len(configs) * learn_seeds} learning runs", seconds)], what), force)
