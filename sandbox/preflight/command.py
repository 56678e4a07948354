"""The ``sandbox preflight`` command functions (registered on the app in :mod:`sandbox.cli`)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from sandbox.base import progress
from sandbox.base.outputs import user_path
from sandbox.cli_support import _command, _config_slug, _out_path, _starting, console, parse_duration


def preflight(
    config: Path = typer.Argument(..., help="The framework's config (any format `sandbox import` reads)."),
    framework: str = typer.Option(
        ...,
        "--framework",
        "-f",
        metavar="NAME",
        help="The framework the config is written for (sandbox import --list).",
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        parser=_out_path,
        metavar="DIR",
        help="Output directory (default: preflight/<config name>-<framework>).",
    ),
    quick: bool = typer.Option(
        False,
        "--quick",
        help="At most 2 minutes: the bit-string proxy (your learning rate not placed), 4 seeds, 60 steps, a 4 x 4 map, a coarser split.",
    ),
    budget: float | None = typer.Option(
        None,
        "--budget",
        metavar="DURATION",
        parser=parse_duration,
        help="Wall-time budget, e.g. 90s or 10m (default 10m; --quick 2m).",
    ),
    seeds: int | None = typer.Option(
        None, "--seeds", metavar="N", min=2, max=10_000, help="Seeds per cell (default 6; --quick 4)."
    ),
    lr_mult: float = typer.Option(
        1.0,
        "--lr-mult",
        help="The learning-rate multiplier (of yours) Q2 compares corrections at and the map centres on.",
    ),
    gpus: int | None = typer.Option(
        None, "--gpus", min=2, help="Q3/Q4/Q7: total GPUs (default: from the config or --cluster)."
    ),
    gpu: str | None = typer.Option(
        None, "--gpu", help="Q3/Q4/Q7: accelerator of the hardware table (A100, H100, H200, H20; default H100)."
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        help="Q3/Q4/Q7: model of the hardware table, e.g. qwen2.5-7b (default: matched from the config's model path).",
    ),
    tp: int | None = typer.Option(
        None, "--tp", min=1, help="Q3/Q4/Q7: GPUs per inference engine (default: from the config, else 1)."
    ),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", min=1, help="Q3/Q4/Q7: longest response, tokens (default: from the config, else 8192)."
    ),
    length_median: float | None = typer.Option(
        None,
        "--length-median",
        min=1.0,
        help="Q3/Q4/Q7: median response length, tokens (default min(1000, max tokens / 4)).",
    ),
    length_sigma: float | None = typer.Option(
        None, "--length-sigma", min=0.0, help="Q3/Q4/Q7: sigma of log response length (default 1.0)."
    ),
    cluster: Path | None = typer.Option(
        None,
        "--cluster",
        help="A TOML file with a [cluster] table (as `sandbox import --cluster`): trainer_gpus + rollout_gpus and gpu feed Q3/Q4/Q7.",
    ),
    param_rms: float | None = typer.Option(
        None,
        "--param-rms",
        help="RMS of your model's weight matrices, for the transfer rule (default: the model family's initializer_range, an assumption; docs/preflight.md#the-transfer-rule).",
    ),
    entry: str | None = typer.Option(
        None,
        "--entry",
        metavar="NAME",
        help="The entry point when the file does not say (as `sandbox import --entry`).",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
):
    """Import CONFIG, plan a bounded set of simulations around its staleness bound, learning rate and
    correction (Q1, Q2, Q5, Q6 on the LM proxy, your learning rate placed by the transfer rule; with --quick
    on the bit-string proxy; Q3, Q4, Q7 on the timing model of `sandbox plan --gpus`), run them over seeds,
    and write preflight.md, preflight.json and preflight.html with one verdict per question (docs/preflight.md).

    Exit status: 0 written, 2 bad input or a plan over its budget (the message names what shrinks it).
    """
    with _starting():
        from sandbox.importers.api import ConfigImportError, import_config, read_cluster
        from sandbox.preflight.figures import write_outputs
        from sandbox.preflight.questions import PreflightError, check_plan, make_plan, run_plan
        from sandbox.preflight.system import SystemPlanError, cluster_facts
        from sandbox.preflight.transfer import model_rms, proxy_rms, transfer, user_learning_rate
    with _command("sandbox preflight", ConfigImportError, PreflightError, SystemPlanError) as output:
        seconds = budget
        table = read_cluster(user_path(cluster)) if cluster is not None else None
        imp = import_config(config, framework, cluster=table, entry=entry)
        lm = None if quick else import_config(config, framework, proxy="lm", cluster=table, entry=entry).data
        facts = cluster_facts(
            imp.rows,
            framework,
            {
                "gpus": gpus,
                "gpu": gpu,
                "model": model,
                "tp": tp,
                "max_tokens": max_tokens,
                "length_median": length_median,
                "length_sigma": length_sigma,
            },
            table,
        )
        point = None
        if lm is not None:
            user_lr = user_learning_rate(imp.rows)
            try:
                rms = model_rms(facts.model, param_rms)
            except ValueError as exc:
                raise PreflightError(str(exc)) from None
            if user_lr is not None:
                point = transfer(user_lr, str(lm["algorithm"]["optimizer"]["name"]), rms, proxy_rms(lm))
        plan = make_plan(
            imp.data,
            quick=quick,
            seeds=seeds,
            lr_mult=lr_mult,
            budget=seconds,
            framework=framework,
            facts=facts,
            lm_data=lm,
            transfer_to=point,
        )
        check_plan(plan)
        if facts.missing:
            console.print("Q3/Q4/Q7 will not be answered: missing " + escape("; ".join(facts.missing)))
        split = f" + {plan.system.runs} system-only split runs" if plan.system is not None else ""
        console.print(
            f"preflight: {len(plan.jobs)} runs x {plan.seeds} seeds{split}, estimated {plan.seconds:.0f} s "
            f"(budget {plan.budget:.0f} s)"
        )
        target = user_path(out) if out is not None else Path("preflight") / f"{_config_slug(config)}-{framework}"
        with output.stage(target) as stage:  # opened first: an impossible --out is refused before minutes of runs
            with progress.session(progress.enabled(quiet)):
                res = run_plan(plan)
            write_outputs(stage, res, framework, str(config))
    for line in preflight_summary(res):
        console.print(escape(line))
    console.print(
        f"written to [bold]{escape(str(target))}[/bold]: preflight.md, preflight.json, preflight.html "
        f"({res['plan']['wall_s']:.0f} s)"
    )


PREFLIGHT_ORDER = ("Q1", "Q2", "Q6", "Q5", "Q3", "Q4", "Q7")
"""The order of the questions in preflight.md (sandbox/preflight/figures.py), kept by the terminal summary."""


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
            lines.append(
                f"Q1: {a['verdict']}"
                + (
                    f" ({a['reason']})"
                    if a.get("reason")
                    else f": your point is {a['position']} the safe region at k={a['at']['bound']}"
                )
            )
        elif q == "Q5" and a.get("verdict") == "ranges":
            n = len(a.get("framework_metrics", {})) + len(a.get("sandbox_metrics", {}))
            proxy = "LM" if a.get("proxy") == "lm" else "bit-string"
            gap = "" if a.get("staleness_gap", True) else " (lag 0: no staleness gap, the engine's mismatch only)"
            lines.append(
                f"Q5: first- and last-quarter ranges of {n} mismatch / staleness metrics at k={a.get('bound')} "
                f"on the {proxy} proxy{gap} (table in preflight.md)"
            )
        else:
            lines.append(f"{q}: {a['verdict']}")
    return lines
