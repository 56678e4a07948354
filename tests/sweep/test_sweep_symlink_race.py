"""Issue 28: the live symlink race. A sweep checks its run directories before it starts; a run
directory (or ``runs/``) replaced by a symbolic link while the sweep is running must not be written
through either. The sweep reaches each directory from its own directory one component at a time
without following a link and writes relative to the directories so opened
(``sandbox.base.outputs.open_dir``, ``commit_run``): a link met is refused with a clear error, and a link
swapped in after the directory was opened changes nothing of where the files go. Each test plants
the link in the middle of the sweep (a hook in the sweep's own move) and asserts that nothing
outside the sweep directory changed."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
from _sweep_tiny import TINY_BASE
from test_sweep_planted_files import _snapshot

from sandbox.base import outputs
from sandbox.base.outputs import OutputError
from sandbox.sweep import execute
from sandbox.sweep.api import parse_sweep, run_sweep


def _raw():
    return {"base": copy.deepcopy(TINY_BASE), "grid": {"system.staleness.k": [0, 1]}, "sweep": {"name": "race"}}


def _swap_for_link(path: Path, target: Path, aside: Path) -> None:
    """What an attacker does mid-sweep: the real directory moves aside, a link takes its place."""
    os.rename(path, aside)
    os.symlink(target, path)


@pytest.mark.parametrize("which", ["run directory", "runs"])
def test_a_link_planted_before_a_run_lands_is_refused(which, tmp_path, victims, monkeypatch):
    """The first run's result is about to be moved in; its run directory (or ``runs/``) has just been
    replaced by a link to someone else's directory: a clear error naming it, their files unchanged."""
    out = tmp_path / "out"
    real = execute.commit_run
    planted = []

    def commit(src, dest, flag="--out", root=None):
        if not planted:
            target = dest if which == "run directory" else dest.parent
            target.mkdir(parents=True, exist_ok=True)
            _swap_for_link(target, victims / "dir", tmp_path / f"aside-{which.replace(' ', '-')}")
            planted.append(target)
        return real(src, dest, flag, root)

    monkeypatch.setattr(execute, "commit_run", commit)
    before = _snapshot(tmp_path, out)
    with pytest.raises(OutputError, match="is a symbolic link"):
        run_sweep(parse_sweep(_raw()), out, workers=1, progress=False)
    assert planted
    after = _snapshot(tmp_path, out)
    after = {k: v for k, v in after.items() if "aside-" not in k}  # the attacker's own move
    assert after == before


def test_a_link_swapped_in_after_the_directory_was_opened_is_not_written_through(tmp_path, victims, monkeypatch):
    """The swap happens inside the move itself (after the run directory was opened, between the old
    files leaving and the new ones coming in): the new files still go into the directory that was
    opened (now moved aside by the attacker), none through the link, none into the victim's."""
    out = tmp_path / "out"
    aside = tmp_path / "aside"
    swapped, landing = [], []
    real = execute.commit_run

    def commit(src, dest, flag="--out", root=None):
        landing.append(dest)
        try:
            return real(src, dest, flag, root)
        finally:
            landing.pop()

    def pause():  # the sweep's move of a finished run, between the old files leaving and the new ones coming in
        if landing and not swapped:
            _swap_for_link(landing[-1], victims / "dir", aside)
            swapped.append(landing[-1])

    monkeypatch.setattr(execute, "commit_run", commit)
    monkeypatch.setattr(outputs, "_test_pause", pause)
    before = _snapshot(tmp_path, out)
    try:
        run_sweep(parse_sweep(_raw()), out, workers=1, progress=False)
    except OutputError as exc:  # a later step may meet the link and refuse it: a clear error is fine
        assert "symbolic link" in str(exc)
    assert swapped
    after = {k: v for k, v in _snapshot(tmp_path, out).items() if not k.startswith(str(aside))}
    assert after == before  # the victims are untouched
    assert json.loads((aside / "summary.json").read_text())["status"]  # the result landed where it was opened


def test_record_failure_refuses_a_link(tmp_path, victims):
    """``error.json`` of a worker that died goes into the run directory reached without a link."""
    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    os.symlink(victims / "dir", out / "runs" / "r1")
    before = _snapshot(tmp_path, out)
    with pytest.raises(OutputError, match="is a symbolic link"):
        execute._record_failure(out / "runs" / "r1", {"id": "r1", "error": "died"}, out)
    assert _snapshot(tmp_path, out) == before
    execute._record_failure(out / "runs" / "r2", {"id": "r2", "error": "died"}, out)
    assert json.loads((out / "runs" / "r2" / "error.json").read_text())["error"] == "died"
    assert not [n for n in os.listdir(out / "runs" / "r2") if n.endswith(".tmp")]


def test_open_dir_walks_without_links(tmp_path):
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    os.symlink(tmp_path, root / "link")
    (root / "file").write_text("x")
    fd = outputs.open_dir(root, root / "a" / "b" / "c")  # created on the way
    os.close(fd)
    assert (root / "a" / "b" / "c").is_dir()
    for bad, why in (
        (root / "link" / "x", "symbolic link"),
        (root / "file" / "x", "not a directory"),
        (tmp_path / "elsewhere", "not inside"),
    ):
        with pytest.raises(OutputError, match=why):
            outputs.open_dir(root, bad)
    with pytest.raises(OutputError, match="has gone"):
        outputs.open_dir(root, root / "missing", create=False)
