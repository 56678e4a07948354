"""One option vocabulary across every command (docs/cli.md#vocabulary): the same name means the same thing
everywhere, walked over the click parameters typer builds, and the old spellings still work for one release
with a deprecation line on stderr."""

from __future__ import annotations

import re

import click
import pytest
import typer
from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.cli_support import parse_duration
from sandbox.preflight.command import preflight_summary

ROOT_COMMAND = typer.main.get_command(app)
COMMANDS = dict(ROOT_COMMAND.commands)

PARALLEL = {"sweep", "mission", "claims"}
"""The commands that run simulations in several processes: each takes -j/--jobs."""

PROGRESS = {
    "run",
    "sweep",
    "mission",
    "check",
    "claims",
    "plan",
    "demo",
    "explore",
    "preflight",
    "export",
    "import",
    "report",
}
"""The commands that do work (and may show progress): each takes -q/--quiet. The listings (list, scenario) print
their answer only."""

EXPECTED_METAVAR = {
    "--out": "DIR",
    "--set": "KEY=VALUE",
    "--jobs": "N",
    "--seeds": "N",
    "--budget": "DURATION",
    "--framework": "NAME",
    "--variant": "NAME",
}


def is_option(p) -> bool:
    return getattr(p, "param_type_name", "") == "option"  # typer 0.29 vendors click: no isinstance(click.Option)


def visible_options(cmd) -> list:
    return [p for p in cmd.params if is_option(p) and not p.hidden and "--help" not in p.opts]


def by_name(name: str) -> dict[str, click.Option]:
    """Every command's visible option spelled ``name`` (long or short), by command."""
    return {c: o for c, cmd in COMMANDS.items() for o in visible_options(cmd) if name in o.opts}


def test_the_mission_is_a_subcommand():
    assert "mission" in COMMANDS


def test_every_parallel_command_has_jobs_and_only_they_say_processes():
    for c in PARALLEL:
        opts = {o.opts[0]: o for o in visible_options(COMMANDS[c])}
        jobs = next((o for o in visible_options(COMMANDS[c]) if "--jobs" in o.opts), None)
        assert jobs is not None and "-j" in jobs.opts, f"{c}: no -j/--jobs ({sorted(opts)})"
        assert "process" in (jobs.help or "").lower()
    for c, cmd in COMMANDS.items():
        for o in visible_options(cmd):
            if "parallel process" in (o.help or "").lower():
                assert "--jobs" in o.opts, f"{c} {o.opts}: parallel processes are -j/--jobs"


def test_workers_only_ever_means_simulated_workers():
    found = by_name("--workers")
    assert set(found) >= {"plan", "import"}
    for c, o in found.items():
        text = (o.help or "").lower()
        assert "simulated" in text and "process" not in text, f"{c} --workers: {o.help}"
        assert "-j" not in o.opts


def test_quiet_is_q_everywhere_and_means_no_progress():
    for c in PROGRESS:
        q = next((o for o in visible_options(COMMANDS[c]) if "--quiet" in o.opts), None)
        assert q is not None, f"{c}: no -q/--quiet"
        assert "-q" in q.opts and q.is_flag
        assert (q.help or "").startswith("No progress display"), f"{c}: {q.help}"
    assert all("--quiet" in o.opts for o in by_name("-q").values())  # -q never means anything else (e.g. --quick)


def test_quick_is_a_flag_with_one_spelling():
    found = by_name("--quick")
    assert set(found) >= {"check", "claims", "demo", "explore", "preflight"}
    for c, o in found.items():
        assert o.is_flag and o.opts == ["--quick"], f"{c}: {o.opts}"
    assert not by_name("--tiny")  # demo's old spelling: hidden


def test_out_is_always_a_directory():
    found = by_name("--out")
    assert set(found) >= {
        "run",
        "sweep",
        "mission",
        "check",
        "claims",
        "plan",
        "report",
        "demo",
        "explore",
        "export",
        "import",
        "preflight",
    }
    for c, o in found.items():
        assert o.metavar == "DIR", f"{c} --out: metavar {o.metavar}"
        assert "file" not in (o.help or "").lower().split("(")[0], f"{c} --out: {o.help}"


def test_report_is_a_flag_where_it_is_visible():
    for c, o in by_name("--report").items():
        assert o.is_flag, f"{c} --report takes a value; --out DIR names directories"


def test_seeds_is_a_count_and_budget_a_duration():
    for c, o in by_name("--seeds").items():
        assert o.type_descriptor.annotation is int, f"{c} --seeds: {o.type_descriptor.annotation}"
    for c, o in by_name("--budget").items():
        assert o.metavar == "DURATION", f"{c} --budget: {o.metavar}"


@pytest.mark.parametrize("name", sorted(EXPECTED_METAVAR))
def test_metavars_agree(name):
    for c, o in by_name(name).items():
        assert o.metavar == EXPECTED_METAVAR[name], f"{c} {name}: {o.metavar}"


def test_hidden_options_are_deprecated_spellings():
    for c, cmd in COMMANDS.items():
        for p in cmd.params:
            if is_option(p) and p.hidden:
                assert (p.help or "").startswith("Deprecated spelling of --"), f"{c} {p.opts}"


def test_help_shows_the_vocabulary():
    out = CliRunner().invoke(app, ["sweep", "--help"]).output
    assert re.search(r"-j, --jobs N", out) and "--workers" not in out


@pytest.mark.parametrize(
    "text, seconds", [("90s", 90.0), ("10m", 600.0), ("1.5h", 5400.0), ("45", 45.0), (" 2M ", 120.0)]
)
def test_one_duration_syntax(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "ten minutes", "-5s", "0", "inf", "nan"])
def test_a_bad_duration_names_the_option(text):
    res = CliRunner().invoke(app, ["explore", "--budget", text, "--out", "/nonexistent-never-written"])
    assert res.exit_code == 2 and "--budget" in res.output and "duration" in res.output


def _stderr(res) -> str:
    return res.stderr if hasattr(res, "stderr") else res.output


def test_old_spellings_still_work_with_a_deprecation_line(tmp_path, monkeypatch):
    """sweep --workers (processes), check --report DIR, demo --tiny, report --out FILE.html: accepted, with one
    line on stderr naming the new spelling (the options parse; the commands stop at their own first check)."""
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    res = runner.invoke(app, ["sweep", "no_such_sweep_file", "--workers", "2"])
    assert "--workers is deprecated" in _stderr(res) and "-j/--jobs" in _stderr(res)
    res = runner.invoke(app, ["check", "no_such_check", "--report", str(tmp_path / "r")])
    assert "--report DIR is deprecated" in _stderr(res) and "--out DIR" in _stderr(res)
    res = runner.invoke(app, ["demo", "no_such_demo", "--tiny"])
    assert "--tiny is deprecated" in _stderr(res) and "use --quick" in _stderr(res)
    assert not (tmp_path / "r").exists() and not (tmp_path / "runs").exists()


def test_preflight_summary_follows_the_page_and_includes_q5():
    res = {
        "Q1": {"verdict": "safe"},
        "Q2": {"verdict": "best"},
        "Q3": {"verdict": "2 trainer GPUs"},
        "Q4": {"verdict": "×1.5"},
        "Q5": {
            "verdict": "ranges",
            "bound": 4,
            "proxy": "lm",
            "framework_metrics": {"a": 1},
            "sandbox_metrics": {"b": 2, "c": 3},
        },
        "Q6": {"bitwise_equal": True},
        "Q7": {"verdict": "no bias"},
    }
    lines = preflight_summary(res)
    assert [ln.split(":")[0] for ln in lines] == ["Q1", "Q2", "Q6", "Q5", "Q3", "Q4", "Q7"]
    assert "3 mismatch / staleness metrics at k=4 on the LM proxy" in lines[3]


def test_preflight_order_is_the_pages():
    """The terminal order is the order of the sections preflight.md is written in."""
    import inspect

    from sandbox.preflight import figures as page
    from sandbox.preflight.command import PREFLIGHT_ORDER

    text = inspect.getsource(page)
    positions = [text.index(f'"## {q}:') for q in PREFLIGHT_ORDER]
    assert positions == sorted(positions)
