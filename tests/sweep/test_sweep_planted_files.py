"""Hostile files in a sweep directory (issue 28): a run directory, ``runs/`` or the lock file that
is a symbolic link to somewhere else, links planted inside run directories, and stale pending
directories. The sweep refuses what it would write through (a clear error naming the path) and
replaces only its own entries; nothing outside the sweep directory changes (snapshot before and
after). And a full disk mid-sweep: a clear error, the finished runs intact, ``--retry-failed``
completes the sweep with the numbers of an undisturbed one."""

from __future__ import annotations

import copy
import errno
import hashlib
import os
from pathlib import Path

import pandas as pd
import pytest
import tomli_w
from _sweep_tiny import TINY_BASE
from typer.testing import CliRunner

from sandbox.base.outputs import LOCK, OutputError
from sandbox.cli import app
from sandbox.sweep.api import parse_sweep, run_sweep
from sandbox.sweep.results import RESULTS


def _snapshot(root: Path, skip: Path) -> dict:
    snap = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == skip or skip in Path(dirpath).parents:
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            if p == skip:
                continue
            if os.path.islink(p):
                snap[str(p)] = ("link", os.readlink(p))
            elif p.is_file():
                snap[str(p)] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
            else:
                snap[str(p)] = ("dir",)
    return snap


def _raw():
    return {"base": copy.deepcopy(TINY_BASE), "grid": {"system.staleness.k": [0, 1]}, "sweep": {"name": "planted"}}


def _ids():
    return [r.id for r in parse_sweep(_raw()).runs]


def _plant_run_dir_link(out, v):
    (out / "runs").mkdir(parents=True)
    os.symlink(v / "dir", out / "runs" / _ids()[0])


def _plant_runs_link(out, v):
    out.mkdir()
    os.symlink(v / "dir", out / "runs")


def _plant_lock_link(out, v):
    out.mkdir()
    os.symlink(v / "victim.txt", out / LOCK)


def _plant_files_in_run_dir(out, v):
    run = out / "runs" / _ids()[0]
    run.mkdir(parents=True)
    for name in ("summary.json", "error.json", "timing.json", "run.json", "metrics.parquet"):
        os.symlink(v / "dir" / name, run / name)
    os.symlink(v / "dir", run / "figures")
    os.symlink(v / "dir", out / "runs" / ".pending-x-abcdefgh")
    os.symlink(v / "victim.txt", out / "runs" / ".summary.json.abcdefgh.tmp")


def _plant_top_files(out, v):
    out.mkdir()
    for name in ("results.parquet", "metrics.parquet", "sweep.json", "base.toml", "sweep.toml"):
        os.symlink(v / "victim.txt", out / name)


PLANTS = {
    "run directory is a link": (_plant_run_dir_link, "is a symbolic link"),
    "runs is a link": (_plant_runs_link, "is a symbolic link"),
    "lock file is a link": (_plant_lock_link, "not a lock file the sandbox created"),
    "links inside a run directory": (_plant_files_in_run_dir, None),
    "links for the sweep's own files": (_plant_top_files, None),
}


@pytest.mark.parametrize("plant", list(PLANTS), ids=list(PLANTS))
@pytest.mark.parametrize("workers", [1, 2])
def test_planted_links_change_nothing_outside_the_sweep(plant, workers, tmp_path, victims):
    out = tmp_path / "out"
    make, refused = PLANTS[plant]
    make(out, victims)
    before = _snapshot(tmp_path, out)
    if refused:
        with pytest.raises(OutputError, match=refused):
            run_sweep(parse_sweep(_raw()), out, workers=workers, progress=False)
    else:
        outcome = run_sweep(parse_sweep(_raw()), out, workers=workers, progress=False)
        assert (outcome.ran, outcome.failed) == (2, 0)
        assert not os.path.islink(out / "runs" / _ids()[0] / "summary.json")
    assert _snapshot(tmp_path, out) == before


def test_planted_run_dir_link_via_the_cli_is_a_clear_error(tmp_path, victims):
    out = tmp_path / "out"
    _plant_run_dir_link(out, victims)
    sweep = tmp_path / "s.toml"
    sweep.write_text(tomli_w.dumps(_raw()))
    before = _snapshot(tmp_path, out)
    res = CliRunner().invoke(app, ["sweep", str(sweep), "--out", str(out), "-q", "-j", "1"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "is a symbolic link" in " ".join(res.output.split())
    assert _snapshot(tmp_path, out) == before


def test_a_full_disk_mid_sweep_is_a_clear_error_and_retry_failed_completes_it(tmp_path, monkeypatch):
    raw = _raw()
    raw["seeds"] = [0, 1]  # 4 runs
    sweep = tmp_path / "s.toml"
    sweep.write_text(tomli_w.dumps(raw))
    clean = run_sweep(parse_sweep(raw), tmp_path / "clean", workers=1, progress=False)
    assert clean.ran == 4

    out = tmp_path / "out"
    real = pd.DataFrame.to_parquet
    calls = [0]

    def filling(self, path, *a, **k):  # the disk fills up at the 8th table written (the third run's)
        calls[0] += 1
        if calls[0] >= 8:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, path, *a, **k)

    monkeypatch.setattr(pd.DataFrame, "to_parquet", filling)
    res = CliRunner().invoke(app, ["sweep", str(sweep), "--out", str(out), "-q", "-j", "1"])
    assert "Traceback" not in res.output
    assert res.exit_code == 2, res.output
    assert "No space left on device" in " ".join(res.output.split())
    finished = {p.parent.name: p.read_bytes() for p in (out / "runs").glob("*/summary.json")}
    assert finished  # the runs before the disk filled are kept
    monkeypatch.setattr(pd.DataFrame, "to_parquet", real)
    res = CliRunner().invoke(app, ["sweep", str(sweep), "--out", str(out), "-q", "-j", "1", "--retry-failed"])
    assert res.exit_code == 0, res.output
    for rid, data in finished.items():
        assert (out / "runs" / rid / "summary.json").read_bytes() == data  # not recomputed
    got = pd.read_parquet(out / RESULTS).drop(columns=["wall_s"]).sort_values("id").reset_index(drop=True)
    want = (
        pd.read_parquet(tmp_path / "clean" / RESULTS).drop(columns=["wall_s"]).sort_values("id").reset_index(drop=True)
    )
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert not [p for p in (out / "runs").iterdir() if p.name.startswith(".")]


def test_a_directory_that_is_not_a_sweep_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "home"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    before = _snapshot(tmp_path, tmp_path / "nothing")
    with pytest.raises(OutputError, match="not part of a sandbox sweep"):
        run_sweep(parse_sweep(_raw()), out, workers=1, progress=False)
    assert _snapshot(tmp_path, tmp_path / "nothing") == before  # not even a lock file
    (out / "notes.txt").unlink()
    assert run_sweep(parse_sweep(_raw()), out, workers=1, progress=False).ran == 2
    (out / "notes.txt").write_text("mine")  # a sweep's directory (sweep.json): the user's notes beside it are fine
    assert run_sweep(parse_sweep(_raw()), out, workers=1, progress=False).skipped == 2
