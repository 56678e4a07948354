"""Bookkeeping files planted in an output directory (issue 42, findings 1-3): a ``.commit-*``
journal, the run manifest ``.sandbox-run.json``, a ``.replaced-*`` trash link, a FIFO or a link to
``/dev/zero`` at a bookkeeping file's name. Each is data from an untrusted directory: the command
ends with a clear error or writes its output, within a time limit, without a traceback, and nothing
outside ``--out`` changes (a sibling tree is snapshotted before and after).

The protocol tests call :class:`sandbox.base.outputs.StagedDir` (what ``run``, ``plan``, ``import`` and
``preflight`` share) in a child process with a time limit and a 1 GiB address-space limit, so that a
FIFO that blocks or ``/dev/zero`` read to the end fails the test instead of the machine."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

import sandbox
from sandbox.base.outputs import JOURNAL, MANIFEST

ROOT = Path(sandbox.__file__).resolve().parents[1]  # the tree under test (PYTHONPATH), also in the child
LIMIT_S = 60

# write a run into OUT through the staged protocol (what every command writing a whole directory uses)
_WRITE = """
import json, sys
from pathlib import Path
from sandbox.base.outputs import OutputError, StagedDir
try:
    with StagedDir(Path(sys.argv[1]), whole=True, writer="sandbox import") as stage:
        (stage / "scenario.toml").write_text("new")
        (stage / "summary.json").write_text("{}")
except OutputError as exc:
    print("error:", exc)
    sys.exit(2)
print("written")
"""


def _limit_memory():  # pragma: no cover - runs in the child
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def _write(out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", _WRITE, str(out)],
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
        env=env,
        preexec_fn=_limit_memory,
    )


def snapshot(root: Path, skip: Path) -> dict[str, tuple]:
    """Every entry under ``root`` but ``skip``: kind, link target or content hash, mode."""
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
def elsewhere(tmp_path):
    """A tree outside ``--out``: what planted links point at."""
    e = tmp_path / "elsewhere"
    (e / "figures").mkdir(parents=True)
    (e / "figures" / "precious.png").write_text("precious\n")
    (e / "thesis.tex").write_text("thesis\n")
    return e


def _journal(commit: Path, old, new, **extra) -> None:
    commit.mkdir()
    (commit / JOURNAL).write_text(json.dumps({"old": old, "new": new, "whole": True, "writer": "sandbox run", **extra}))


def _trash_link_attack(out: Path, e: Path) -> None:
    """Finding 1: a journal and a ``.replaced-*`` link: the old recovery removed ``elsewhere/figures``
    (a whole tree) and moved ``--out/figures`` there."""
    (out / "figures").mkdir()
    (out / "figures" / "a.png").write_text("old")
    _journal(out / ".commit-aaaaaaaa", [MANIFEST, "figures"], ["summary.json"])
    (out / ".commit-aaaaaaaa" / "summary.json").write_text("{}")
    os.symlink(e, out / ".replaced-aaaaaaaa")


def _foreign_manifest(out: Path, e: Path) -> None:
    """Finding 2: a planted manifest made someone's file acceptable, then deleted it."""
    (out / "thesis.tex").write_text("mine\n")
    (out / MANIFEST).write_text(json.dumps({"written_by": "sandbox run", "entries": ["thesis.tex"]}))


def _foreign_journal(out: Path, e: Path) -> None:
    """Finding 2: a planted journal whose ``old`` lists someone's file."""
    (out / "thesis.tex").write_text("mine\n")
    _journal(out / ".commit-bbbbbbbb", ["thesis.tex"], ["summary.json"])
    (out / ".commit-bbbbbbbb" / "summary.json").write_text("{}")


def _fifo_journal(out: Path, e: Path) -> None:
    (out / ".commit-cccccccc").mkdir()
    os.mkfifo(out / ".commit-cccccccc" / JOURNAL)


def _zero_journal(out: Path, e: Path) -> None:
    (out / ".commit-dddddddd").mkdir()
    os.symlink("/dev/zero", out / ".commit-dddddddd" / JOURNAL)


def _fifo_manifest(out: Path, e: Path) -> None:
    (out / "summary.json").write_text("{}")
    os.mkfifo(out / MANIFEST)


def _zero_manifest(out: Path, e: Path) -> None:
    (out / "summary.json").write_text("{}")
    os.symlink("/dev/zero", out / MANIFEST)


def _manifest_link(out: Path, e: Path) -> None:
    (e / "m.json").write_text(json.dumps({"entries": ["thesis.tex"]}))
    (out / "thesis.tex").write_text("mine\n")
    os.symlink(e / "m.json", out / MANIFEST)


def _journal_dir_link(out: Path, e: Path) -> None:
    (e / "c").mkdir()
    (e / "c" / JOURNAL).write_text(json.dumps({"old": [], "new": ["thesis.tex"], "whole": True}))
    os.symlink(e / "c", out / ".commit-eeeeeeee")


PLANTS = {
    "trash link + journal": _trash_link_attack,
    "manifest listing a foreign file": _foreign_manifest,
    "journal listing a foreign file": _foreign_journal,
    "FIFO journal": _fifo_journal,
    "/dev/zero journal": _zero_journal,
    "FIFO manifest": _fifo_manifest,
    "/dev/zero manifest": _zero_manifest,
    "manifest is a link out": _manifest_link,
    "commit directory is a link out": _journal_dir_link,
}


@pytest.mark.parametrize("plant", list(PLANTS), ids=list(PLANTS))
def test_planted_bookkeeping_changes_nothing_outside_out(plant, tmp_path, elsewhere):
    out = tmp_path / "out"
    out.mkdir()
    PLANTS[plant](out, elsewhere)
    before = snapshot(tmp_path, out)
    mine = (out / "thesis.tex").read_text() if (out / "thesis.tex").exists() else None
    res = _write(out)  # TimeoutExpired (a FIFO read) or a MemoryError (/dev/zero) fails the test
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode in (0, 2), res.stdout + res.stderr
    assert snapshot(tmp_path, out) == before
    if mine is not None:  # someone's file in --out: refused, never deleted
        assert res.returncode == 2 and "thesis.tex" in res.stdout, res.stdout
        assert (out / "thesis.tex").read_text() == mine


def test_a_genuine_killed_move_is_still_completed(tmp_path):
    """The validation accepts what a killed commit really leaves: manifest and old entries in the
    trash half-way, the journal naming them."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "figures").mkdir()
    (out / "scenario.toml").write_text("old")
    _journal(out / ".commit-ffffffff", [MANIFEST, "scenario.toml", "figures"], ["scenario.toml", "summary.json"])
    (out / ".commit-ffffffff" / "summary.json").write_text('{"tag": "new"}')
    (out / ".replaced-ffffffff").mkdir()
    os.replace(out / "scenario.toml", out / ".replaced-ffffffff" / "scenario.toml")  # killed after one move...
    (out / ".commit-ffffffff" / "scenario.toml").write_text("new")
    res = _write(out)
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted([".sandbox.lock", MANIFEST, "scenario.toml", "summary.json"])
    assert (out / "scenario.toml").read_text() == "new"


# ------------------------------------------------------------------------------------------------
# every command that writes a directory, with each kind of planted bookkeeping file
# ------------------------------------------------------------------------------------------------

TINY = {
    "title": "tiny delayed quadratic",
    "task": {"name": "quadratic", "dim": 6, "eig_min": 0.1, "eig_max": 1.0, "noise_std": 0.05, "replicas": 1},
    "system": {
        "num_workers": 2,
        "generation_time": {"kind": "constant", "value": 1.0},
        "train_time": {"kind": "constant", "value": 0.0},
        "staleness": {"kind": "fixed_lag", "k": 1},
    },
    "algorithm": {"group_size": 1, "groups_per_step": 1, "optimizer": {"name": "sgd", "lr": 0.1}},
    "run": {"steps": 3, "figures": False, "eval_every": 1},
}
CONFIG = ROOT / "tests" / "importers" / "data" / "trl_grpo_gsm8k.yaml"


class _Stopped(Exception):
    pass


def _inputs(tmp: Path) -> dict[str, Path]:
    import tomli_w

    scenario = tmp / "tiny.toml"
    scenario.write_text(tomli_w.dumps(TINY))
    sweep = tmp / "sweep.toml"
    sweep.write_text(
        tomli_w.dumps({"base": TINY, "sweep": {"name": "tiny"}, "seeds": [0], "grid": {"system.staleness.k": [1]}})
    )
    return {"scenario": scenario, "sweep": sweep}


def _command(name: str, out: Path, inputs: dict[str, Path]) -> list[str]:
    return {
        "run": ["run", str(inputs["scenario"]), "--out", str(out), "-q"],
        "import": ["import", str(CONFIG), "-f", "trl", "--out", str(out)],
        "plan": [
            "plan",
            str(inputs["scenario"]),
            "--workers",
            "2",
            "--k-max",
            "0",
            "--seeds",
            "1",
            "--steps",
            "2",
            "--out",
            str(out),
            "-q",
        ],
        "preflight": ["preflight", str(CONFIG), "-f", "trl", "--quick", "--out", str(out), "-q"],
        "export": ["export", str(inputs["scenario"]), "-f", "trl", "--out", str(out)],
        "sweep": ["sweep", str(inputs["sweep"]), "--out", str(out), "-j", "1", "-q"],
    }[name]


MANIFESTS = {
    "run": MANIFEST,
    "import": MANIFEST,
    "plan": MANIFEST,
    "preflight": MANIFEST,
    "export": "export.json",
    "sweep": "sweep.json",
}


def _plant(kind: str, out: Path, manifest: str, e: Path) -> None:
    out.mkdir()
    (out / "thesis.tex").write_text("mine\n")  # someone's file: must survive whatever is planted
    if kind == "journal":
        _journal(out / ".commit-aaaaaaaa", [MANIFEST, "thesis.tex"], ["summary.json"])
        (out / ".commit-aaaaaaaa" / "summary.json").write_text("{}")
    elif kind == "manifest":
        listing = {
            "entries": ["thesis.tex", "../elsewhere/thesis.tex"],
            "files": ["thesis.tex"],
            "runs": [],
            "written_by": "sandbox run",
        }
        (out / manifest).write_text(json.dumps(listing))
    elif kind == "trash link":
        _journal(out / ".commit-bbbbbbbb", [MANIFEST, "figures"], ["summary.json"])
        (out / ".commit-bbbbbbbb" / "summary.json").write_text("{}")
        (out / "figures").mkdir()
        os.symlink(e, out / ".replaced-bbbbbbbb")
        os.symlink(e, out / ".staging-bbbbbbbb")
    elif kind == "FIFO":
        os.mkfifo(out / manifest)
        (out / ".commit-cccccccc").mkdir()
        os.mkfifo(out / ".commit-cccccccc" / JOURNAL)
    elif kind == "device link":
        os.symlink("/dev/zero", out / manifest)
        (out / ".commit-dddddddd").mkdir()
        os.symlink("/dev/zero", out / ".commit-dddddddd" / JOURNAL)


COMMANDS = list(MANIFESTS)
KINDS = ["journal", "manifest", "trash link", "FIFO", "device link"]


def attempt(command: str, kind: str, tmp: Path, seconds: int = LIMIT_S) -> str:
    """Run ``command`` in-process on an ``--out`` with ``kind`` planted; the outcome: ``clean`` (exit
    0, 1 or 2 without a traceback, nothing outside ``--out`` changed, someone's file kept),
    ``traceback``, ``hang`` (no answer within ``seconds``: ``SIGALRM``) or ``outside`` (a change
    outside ``--out`` or to someone's file in it)."""
    import signal

    from typer.testing import CliRunner

    import sandbox.preflight.questions as preflight
    from sandbox.cli import app
    from sandbox.importers.api import ConfigImportError

    e = tmp / "elsewhere"
    (e / "figures").mkdir(parents=True)
    (e / "figures" / "precious.png").write_text("precious\n")
    (e / "thesis.tex").write_text("thesis\n")
    (e / "summary.json").write_text("{}")
    out = tmp / "out"
    _plant(kind, out, MANIFESTS[command], e)
    inputs = _inputs(tmp)
    before = snapshot(tmp, out)

    def stop(signum, frame):
        raise _Stopped

    def no_minutes(plan):  # preflight: the directory protocol ran; its minutes of simulations are not the point
        raise ConfigImportError("stopped by the test after the output directory was opened")

    real, preflight.run_plan = preflight.run_plan, no_minutes
    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        res = CliRunner().invoke(app, _command(command, out, inputs), catch_exceptions=True)
    except _Stopped:
        return "hang"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        preflight.run_plan = real
    if isinstance(res.exception, _Stopped):
        return "hang"
    if (res.exception is not None and not isinstance(res.exception, SystemExit)) or "Traceback" in res.output:
        return "traceback"
    mine = out / "thesis.tex"
    if snapshot(tmp, out) != before or not mine.is_file() or mine.read_text() != "mine\n":
        return "outside"
    return "clean" if res.exit_code in (0, 1, 2) else "traceback"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", COMMANDS)
def test_every_writer_with_each_planted_bookkeeping_file(command, kind, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert attempt(command, kind, tmp_path) == "clean"
