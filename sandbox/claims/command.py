"""The ``sandbox claims`` command functions (registered on the app in :mod:`sandbox.cli`)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from sandbox.base import progress
from sandbox.base.errors import ScenarioError
from sandbox.base.outputs import OutputError, user_path
from sandbox.cli_support import _did_you_mean, _fail, _os_error, _out_path, console


def claims(
    quick: bool = typer.Option(False, "--quick", help="Few seeds and steps (minutes on 2 cores; used by the tests)."),
    only: list[str] | None = typer.Option(None, "--only", help="Run only this claim (repeatable). See --list."),
    out: Path = typer.Option(
        Path("runs/claims"),
        "--out",
        parser=_out_path,
        metavar="DIR",
        help="Write claims.md, claims.json and one figure per claim here.",
    ),
    seeds: int | None = typer.Option(
        None, "--seeds", metavar="N", min=2, max=10_000, help="Seeds per claim (default: 3 with --quick, 8 otherwise)."
    ),
    lm_seeds: int | None = typer.Option(
        None,
        "--lm-seeds",
        min=0,
        max=1_000,
        help="Seeds (replicas) of the learning claims' LM context (default: 2 with --quick, 4 otherwise; 0: no LM context).",
    ),
    jobs: int | None = typer.Option(
        None,
        "--jobs",
        "-j",
        metavar="N",
        min=1,
        help="Parallel processes of the LM context runs (default: 1 with --quick, 2 otherwise).",
    ),
    list_: bool = typer.Option(False, "--list", help="List the claims and exit."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    score: Path | None = typer.Option(
        None,
        "--score",
        help="Score one published setup: a scenario file with a [published] table (docs/claims.md, "
        "'Score a new published setup'); prints predicted / published with its interval.",
    ),
):
    """Run each claim over seeds and print reproduced / not reproduced / inconclusive (docs/claims.md)."""
    import torch

    from sandbox.claims._runs import FULL_SEEDS, QUICK_SEEDS
    from sandbox.claims.api import CLAIMS

    if score is not None:
        from sandbox.claims.published import FULL_STEPS, QUICK_STEPS
        from sandbox.claims.published_score import score as score_file

        try:
            r = score_file(
                user_path(score), QUICK_STEPS if quick else FULL_STEPS, seeds or (QUICK_SEEDS if quick else FULL_SEEDS)
            )
        except ScenarioError as exc:
            _fail(escape(str(exc)))
        except OSError as exc:
            _os_error(exc)
        console.print(
            f"{escape(r['system'])} ({r['kind']}; published {r['published_text']}, {r['measure']}): predicted "
            f"{r['predicted']:.3g}x [{r['predicted_low']:.3g}, {r['predicted_high']:.3g}]; predicted / published "
            f"{r['ratio']:.3g} [{r['ratio_low']:.3g}, {r['ratio_high']:.3g}] ({'within' if r['within_band'] else 'outside'} "
            f"[0.8, 1.25]); mean step async {r['async_step_s']:.0f} s, baseline {r['baseline_step_s']:.0f} s; "
            f"{r['steps']} steps, {r['seeds']} seeds"
        )
        return
    from sandbox.base.outputs import out_dir
    from sandbox.claims.report import run_claims, verdict_table, write_outputs

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

    with (
        progress.session(progress.enabled(quiet)),
        progress.task(
            f"claims{' (quick)' if quick else ''}, {n_seeds} seeds", total=len(selected), unit="claims"
        ) as bar,
    ):
        results = run_claims(
            selected,
            quick,
            n_seeds,
            lambda c, r, t: (on_done(c, r, t), bar.advance(info=f"{c.name} done")),
            lm_seeds=lm_seeds,
            jobs=jobs,
        )
    command = (
        "sandbox claims"
        + (" --quick" if quick else "")
        + "".join(f" --only {n}" for n in only or [])
        + (f" --seeds {seeds}" if seeds is not None else "")
        + (f" --lm-seeds {lm_seeds}" if lm_seeds is not None else "")
    )
    console.print(verdict_table(results, f"claims{' (quick)' if quick else ''}, {n_seeds} seeds"))
    try:
        with (
            progress.session(progress.enabled(quiet)),
            progress.phase("figures: claims.md, claims.json and one figure per claim"),
        ):
            write_outputs(results, out_dir(out), quick, n_seeds, command, lm_seeds)
    except OutputError as exc:
        _fail(escape(str(exc)))
    except OSError as exc:
        _os_error(exc)
    console.print(f"claims.md, claims.json and figures in [bold]{out}[/bold]")
