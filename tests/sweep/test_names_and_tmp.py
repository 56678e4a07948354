"""Sweep names become safe directory names, a resumed sweep removes what an interrupted one left
(temporary files of atomic writes, staging directories), and one process at a time writes a sweep."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path

import pytest
import tomli_w
from _sweep_tiny import TINY_BASE
from typer.testing import CliRunner

from sandbox.base.outputs import LOCK, OutputError, output_lock
from sandbox.cli import app
from sandbox.scenario.api import ScenarioError
from sandbox.sweep.api import default_out, parse_sweep, run_sweep


def _raw(name=None, **sweep) -> dict:
    raw = {"base": copy.deepcopy(TINY_BASE), "grid": {"system.staleness.k": [0, 1]}, "sweep": dict(sweep)}
    if name is not None:
        raw["sweep"]["name"] = name
    return raw


def _files(root: Path, skip: Path | None = None) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != LOCK and (skip is None or skip not in p.parents)
    }


def test_sweep_named_to_escape_writes_only_inside_its_directory(tmp_path, monkeypatch):
    work = tmp_path / "a" / "b" / "work"
    work.mkdir(parents=True)
    (tmp_path / "a" / "mine.txt").write_text("x")
    path = tmp_path / "sweep.toml"
    path.write_text(tomli_w.dumps(_raw("../../x{0}[/b]")))  # also markup and format braces in the progress bar
    monkeypatch.chdir(work)
    out = work / "runs" / "sweeps" / "x-0-b"
    before = _files(tmp_path, skip=out)
    res = CliRunner().invoke(app, ["sweep", str(path), "-j", "1"])
    assert res.exit_code == 0, res.output
    assert _files(tmp_path, skip=out) == before
    assert (out / "results.parquet").exists() and len(list((out / "runs").glob("*/summary.json"))) == 2
    assert all(out.resolve() in p.resolve().parents for p in out.rglob("*"))


@pytest.mark.parametrize(
    "name, dirname",
    [("lag_lr_quadratic", "lag_lr_quadratic"), ("methods_bitstring", "methods_bitstring"), ("<i>a b</i>", "i-a-b-i")],
)
def test_default_out_is_the_safe_name(name, dirname):
    assert default_out(parse_sweep(_raw(name))) == Path("runs") / "sweeps" / dirname


@pytest.mark.parametrize(
    "sweep, expected",
    [
        ({"name": ".."}, "sweep.name: sweep name '..' leaves no directory name"),
        ({"name": "///"}, "sweep.name: sweep name '///' leaves no directory name"),
        ({"name": 5}, "sweep.name: expected a string"),
        ({"out": "../elsewhere"}, "sweep.out: expected a relative path without '..'"),
        ({"out": "/tmp/elsewhere"}, "sweep.out: expected a relative path without '..'"),
    ],
)
def test_bad_sweep_names_and_outs_are_errors(sweep, expected):
    with pytest.raises(ScenarioError) as info:
        parse_sweep(_raw(**sweep))
    assert any(p.startswith(expected) for p in info.value.problems), info.value.problems


def test_resumed_sweep_removes_orphan_temporary_files(tmp_path):
    out = tmp_path / "sw"
    first = run_sweep(parse_sweep(_raw("tiny")), out, workers=1, progress=False)
    assert first.ran == 2
    runs = sorted((out / "runs").iterdir())
    # what `kill -9` during atomic writes and a staged run directory leaves behind
    orphans = [
        out / ".results.parquet.k2x_9abc.tmp",
        runs[0] / ".timing.json.a1b2c3d4.tmp",
        runs[1] / ".summary.json.zz_00zz0.tmp",
        runs[1] / ".staging-q1w2e3r4" / ".metrics.parquet.abcdefgh.tmp",
    ]
    for p in orphans:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"partial")
    (runs[1] / "summary.json").unlink()  # that run was interrupted
    keep = [out / "notes.tmp", out / ".mine.abcdefgh.tmp"]  # not temporary files of the sweep's
    for p in keep:
        p.write_text("mine")
    again = run_sweep(parse_sweep(_raw("tiny")), out, workers=1, progress=False)
    assert (again.ran, again.skipped) == (1, 1)
    assert not [p for p in orphans if p.exists()]
    assert [p for p in out.rglob("*") if p.name.startswith(".") and p.name.endswith(".tmp")] == [keep[1]]
    assert not list(out.rglob(".staging-*"))
    assert all(p.read_text() == "mine" for p in keep)
    assert set(again.results.status) == {"completed"}


def test_second_sweep_on_the_same_directory_is_refused(tmp_path):
    out = tmp_path / "sw"
    path = tmp_path / "sweep.toml"
    path.write_text(tomli_w.dumps(_raw("tiny")))
    with output_lock(out):
        with pytest.raises(OutputError, match="being written by another sandbox process"):
            run_sweep(parse_sweep(_raw("tiny")), out, workers=1, progress=False)
        res = CliRunner().invoke(app, ["sweep", str(path), "--out", str(out), "-j", "1", "-q"])
        assert res.exit_code == 2 and "error: --out:" in res.output and "Traceback" not in res.output
        assert not (out / "runs").exists()
