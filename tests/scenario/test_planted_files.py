"""Hostile files in output directories (issue 28): symbolic links and manifests planted in a run's
output directory, its lock file, a sweep's directory and its run directories. Whatever the sandbox
does with them (refuse with a clear error, or replace its own entry), nothing outside the output
directory changes: every test snapshots the whole temporary tree outside ``out`` before and after.

Also the file-system errors that used to be tracebacks: a full disk (ENOSPC, simulated), an --out
with a name over 255 bytes or under /proc, and ``~`` in --out / ``[sweep] out``."""

from __future__ import annotations

import copy
import errno
import hashlib
import json
import os
import sys
from pathlib import Path

import pytest
import tomli_w
from typer.testing import CliRunner

from sandbox.base.outputs import LOCK, MANIFEST, OutputError, StagedDir, output_lock, user_path
from sandbox.cli import app

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sweep"))
from _sweep_tiny import TINY_BASE  # noqa: E402

RUN = ["--set", "run.steps=3", "--set", "run.figures=false", "-q"]


def _tiny_scenario(tmp: Path) -> Path:
    path = tmp / "tiny.toml"
    path.write_text(tomli_w.dumps(copy.deepcopy(TINY_BASE)))
    return path


def _snapshot(root: Path, skip: Path) -> dict[str, tuple]:
    """Every entry under ``root`` except ``skip`` and what is under it: kind, link target or
    content hash, mode."""
    snap = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == skip or skip in Path(dirpath).parents:
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            if p == skip:
                continue
            st = os.lstat(p)
            if os.path.islink(p):
                snap[str(p)] = ("link", os.readlink(p))
            elif p.is_file():
                snap[str(p)] = ("file", hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mode)
            else:
                snap[str(p)] = ("dir", st.st_mode)
    return snap


@pytest.fixture
def victims(tmp_path):
    """Files and a directory outside the output directory that planted links point at."""
    v = tmp_path / "victims"
    v.mkdir()
    (v / "victim.txt").write_text("precious\n")
    (v / "dir").mkdir()
    (v / "dir" / "inner.txt").write_text("inner\n")
    for name in ("summary.json", "error.json", "timing.json", "run.json", "metrics.parquet"):
        (v / "dir" / name).write_text(f"{name} of someone else\n")
    return v


def _run(args, cwd=None):
    return CliRunner().invoke(app, args, catch_exceptions=False)


def _clean(res) -> None:
    assert "Traceback" not in res.output, res.output


# ------------------------------------------------------------------------------------------------
# sandbox run
# ------------------------------------------------------------------------------------------------

PLANTS = {
    "lock symlink to a file": lambda out, v: os.symlink(v / "victim.txt", out / LOCK),
    "lock symlink to a missing file": lambda out, v: os.symlink(v / "new-file.txt", out / LOCK),
    "lock hard link": lambda out, v: os.link(v / "victim.txt", out / LOCK),
    "lock is a FIFO": lambda out, v: os.mkfifo(out / LOCK),
    "lock is a directory": lambda out, v: (out / LOCK).mkdir(),
    "summary.json symlink": lambda out, v: os.symlink(v / "victim.txt", out / "summary.json"),
    "figures symlink to a directory": lambda out, v: (
        os.symlink(v / "dir", out / "figures"),
        (out / "summary.json").write_text("{}"),
    ),
    "manifest listing outside paths": lambda out, v: (
        (out / MANIFEST).write_text(
            json.dumps({"entries": [str(v / "victim.txt"), "../victims/victim.txt", "..", "figures"]})
        ),
        os.symlink(v / "dir", out / "figures"),
    ),
    "staging directory symlink": lambda out, v: os.symlink(v / "dir", out / ".staging-abcdefgh"),
    "replaced directory symlink": lambda out, v: os.symlink(v / "dir", out / ".replaced-abcdefgh"),
    "commit journal naming outside paths": lambda out, v: (
        (out / ".commit-abcdefgh").mkdir(),
        (out / ".commit-abcdefgh" / ".sandbox-commit.json").write_text(
            json.dumps(
                {"old": ["../victims/victim.txt", str(v / "victim.txt")], "new": ["../victims/dir"], "whole": True}
            )
        ),
    ),
    "commit directory symlink": lambda out, v: os.symlink(v / "dir", out / ".commit-abcdefgh"),
    "temporary file symlink": lambda out, v: (
        os.symlink(v / "victim.txt", out / ".summary.json.abcdefgh.tmp"),
        (out / "summary.json").write_text("{}"),
    ),
}


@pytest.mark.parametrize("plant", list(PLANTS), ids=list(PLANTS))
def test_sandbox_run_changes_nothing_outside_out(plant, tmp_path, victims):
    out = tmp_path / "out"
    out.mkdir()
    PLANTS[plant](out, victims)
    before = _snapshot(tmp_path, out)
    res = _run(["run", str(_tiny_scenario(tmp_path)), "--out", str(out), *RUN])
    _clean(res)
    assert res.exit_code in (0, 2), res.output
    if "lock" in plant:  # not a lock file of ours: refused, nothing written
        assert res.exit_code == 2 and "not a lock file the sandbox created" in " ".join(
            res.output.split()
        )  # rich wraps lines
    after = _snapshot(tmp_path, out)
    after.pop(str(tmp_path / "tiny.toml"), None)
    before.pop(str(tmp_path / "tiny.toml"), None)
    assert after == before


def test_a_symlinked_out_and_parent_are_followed(tmp_path):
    """A user's own symlinked results directory (or a link above it) is legitimate: written through."""
    real = tmp_path / "disk" / "results"
    real.mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "disk")
    res = _run(["run", str(_tiny_scenario(tmp_path)), "--out", str(tmp_path / "link" / "results" / "r"), *RUN])
    assert res.exit_code == 0, res.output
    assert (real / "r" / "summary.json").is_file()
    (tmp_path / "out-link").symlink_to(real / "r")
    res = _run(["run", str(_tiny_scenario(tmp_path)), "--out", str(tmp_path / "out-link"), *RUN])
    assert res.exit_code == 0, res.output
    assert (real / "r" / "summary.json").is_file() and (tmp_path / "out-link").is_symlink()


def test_output_lock_refuses_a_symlink_without_touching_its_target(tmp_path, victims):
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(victims / "victim.txt", out / LOCK)
    with pytest.raises(OutputError, match="not a lock file the sandbox created"):
        with output_lock(out):
            pass
    assert (victims / "victim.txt").read_text() == "precious\n"


# ------------------------------------------------------------------------------------------------
# a killed move is completed; the commit is journaled
# ------------------------------------------------------------------------------------------------


def _write_run(out: Path, tag: str) -> None:
    with StagedDir(out, whole=True) as stage:
        (stage / "scenario.toml").write_text(tag)
        (stage / "figures").mkdir()
        (stage / "figures" / "a.png").write_text(tag)
        (stage / "summary.json").write_text(json.dumps({"tag": tag}))


def test_a_move_killed_at_any_rename_is_completed_by_recover(tmp_path, monkeypatch):
    """kill -9 in the middle of the final move (simulated: the process stops after ``moved`` renames
    and cleans nothing up): :func:`recover` (run by the next writer of the directory, under its lock)
    completes it, and the directory holds the new run, whole, without the old run's entries."""
    import sandbox.base.outputs as outputs

    for moved in range(0, 9):
        out = tmp_path / f"out{moved}"
        _write_run(out, "old")
        (out / "extra-old").mkdir()  # an entry of the old run only (a variant directory)
        (out / "extra-old" / "summary.json").write_text("{}")
        manifest = json.loads((out / MANIFEST).read_text())
        manifest["entries"].append("extra-old")
        (out / MANIFEST).write_text(json.dumps(manifest))
        calls = [0]
        real = os.replace

        class Killed(BaseException):
            pass

        def dying_replace(a, b, calls=calls, out=out):
            if ".staging-" not in str(a):
                calls[0] += 1
                if calls[0] > moved:
                    raise Killed
            return real(a, b)

        monkeypatch.setattr(outputs.os, "replace", dying_replace)
        monkeypatch.setattr(outputs, "_remove", lambda p: None)
        with pytest.raises(Killed):
            _write_run(out, "new")
        monkeypatch.undo()
        assert outputs.recover(out) == 1
        names = sorted(p.name for p in out.iterdir())
        assert names == sorted([LOCK, MANIFEST, "figures", "scenario.toml", "summary.json"]), (moved, names)
        assert json.loads((out / "summary.json").read_text()) == {"tag": "new"}
        assert (out / "figures" / "a.png").read_text() == "new"
        assert json.loads((out / MANIFEST).read_text())["entries"] == ["figures", "scenario.toml", "summary.json"]


# ------------------------------------------------------------------------------------------------
# file-system errors: clear messages, no traceback
# ------------------------------------------------------------------------------------------------


def test_a_full_disk_is_a_clear_error_and_the_previous_run_stays(tmp_path, monkeypatch):
    import pandas as pd

    scn = _tiny_scenario(tmp_path)
    out = tmp_path / "out"
    assert _run(["run", str(scn), "--out", str(out), *RUN]).exit_code == 0
    before = _snapshot(out, tmp_path / "nothing")

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full)
    res = _run(["run", str(scn), "--out", str(out), *RUN])
    _clean(res)
    assert res.exit_code == 2
    text = " ".join(res.output.split())
    assert "No space left on device" in text and "metrics.parquet" in text
    assert _snapshot(out, tmp_path / "nothing") == before  # the previous run, exactly


@pytest.mark.parametrize(
    "out", ["a" * 300, "x/" + "b" * 256 + "/y", "/proc", "/proc/self", "/proc/1/x", "/sys", "/dev/null/x", "/dev/null"]
)
def test_impossible_out_is_a_clear_error(tmp_path, out, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = _run(["run", str(_tiny_scenario(tmp_path)), "--out", out, *RUN])
    _clean(res)
    assert res.exit_code == 2, res.output
    assert "error:" in res.output and "--out" in res.output


def test_impossible_sweep_out_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "s.toml"
    sweep.write_text(tomli_w.dumps({"base": copy.deepcopy(TINY_BASE), "grid": {"system.staleness.k": [0]}}))
    for out in ["a" * 300, "/proc", "/proc/self/x"]:
        res = _run(["sweep", str(sweep), "--out", out, "-q", "-j", "1"])
        _clean(res)
        assert res.exit_code == 2 and "error:" in res.output, res.output


def test_tilde_is_expanded_in_out_and_sweep_out(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    assert user_path("~/x") == home / "x"
    res = _run(["run", str(_tiny_scenario(tmp_path)), "--out", "~/r", *RUN])
    assert res.exit_code == 0, res.output
    assert (home / "r" / "summary.json").is_file() and not (work / "~").exists()
    sweep = tmp_path / "s.toml"
    sweep.write_text(
        tomli_w.dumps({"base": copy.deepcopy(TINY_BASE), "grid": {"system.staleness.k": [0]}, "sweep": {"out": "~/sw"}})
    )
    res = _run(["sweep", str(sweep), "-q", "-j", "1"])
    assert res.exit_code == 0, res.output
    assert (home / "sw" / "results.parquet").is_file() and not (work / "~").exists()


# ------------------------------------------------------------------------------------------------
# claims, demo, report --out
# ------------------------------------------------------------------------------------------------

IMPOSSIBLE = ["a" * 300, "/proc", "/proc/self/x", "/dev/null/x"]


@pytest.mark.parametrize("out", IMPOSSIBLE)
def test_impossible_out_of_claims_and_demo_is_a_clear_error(tmp_path, out, monkeypatch):
    """Refused before anything runs (claims: minutes of runs), exit status 2, no traceback."""
    monkeypatch.chdir(tmp_path)
    for args in (["claims", "--quick", "--only", "throughput", "-q"], ["demo", "delayed_instability", "--quick"]):
        res = _run([*args, "--out", out])
        _clean(res)
        assert res.exit_code == 2 and "error:" in res.output and "--out" in res.output, res.output
        assert "done in" not in res.output  # the demo did not run


@pytest.fixture
def run_dir(tmp_path):
    out = tmp_path / "r"
    res = _run(["run", str(_tiny_scenario(tmp_path)), "--out", str(out), *RUN])
    assert res.exit_code == 0, res.output
    return out


@pytest.mark.parametrize("out", [*IMPOSSIBLE, "DIR", "FIFO"])
def test_impossible_report_out_is_a_clear_error(tmp_path, out, run_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if out == "DIR":  # a directory where the report file would go (--out is the report's directory)
        (tmp_path / "DIR" / "report.html").mkdir(parents=True)
    if out == "FIFO":
        os.mkfifo(tmp_path / "FIFO")
    res = _run(["report", str(run_dir), "--out", out])
    _clean(res)
    assert res.exit_code == 2 and "error:" in res.output, res.output
    if out == "FIFO":
        assert (tmp_path / "FIFO").is_fifo()


def test_report_and_demo_replace_a_planted_link_without_writing_through(tmp_path, run_dir, victims):
    """A link planted where the report or the demo's figure goes is replaced by the file; its target
    (outside the output directory) is unchanged."""
    os.symlink(victims / "victim.txt", run_dir / "report.html")
    demos = tmp_path / "demos"
    demos.mkdir()
    for ext in ("png", "svg"):
        os.symlink(victims / "victim.txt", demos / f"delayed_instability.{ext}")
    before = _snapshot(victims, tmp_path / "nothing")
    res = _run(["report", str(run_dir)])
    _clean(res)
    assert res.exit_code == 0, res.output
    assert not (run_dir / "report.html").is_symlink() and "<html" in (run_dir / "report.html").read_text()[:200].lower()
    res = _run(["demo", "delayed_instability", "--quick", "--out", str(demos)])
    _clean(res)
    assert res.exit_code == 0, res.output
    assert (
        not (demos / "delayed_instability.png").is_symlink()
        and (demos / "delayed_instability.png").stat().st_size > 1000
    )
    assert _snapshot(victims, tmp_path / "nothing") == before
