"""Processes and signals (issue 28), with real processes:

- ``kill -9`` of ``sandbox sweep`` while runs are in flight leaves no sandbox process alive (the
  forkserver and its pool workers die with the command) and no run result lands afterwards;
- SIGTERM at any moment of ``sandbox run`` (many kill times over the run, several of them in the
  middle of the final move, held there by a test hook) leaves the previous run intact or the new one
  complete, never a mix, and the next ``sandbox run`` accepts the directory;
- a worker process bound to a command (:func:`sandbox.base.processes.bind_to`) ends when the command
  does, by the watch thread alone (the fallback where there is no parent-death signal);
- the temporary directories of killed Ray workers are removed (:func:`remove_scratch`).

Robust under load: every wait polls with a generous deadline."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import tomli_w
from _processes import SANDBOX, group_pids, kill_group, poll, repo_env
from _sweep_tiny import TINY_BASE

pytestmark = pytest.mark.slow


def _landed(out: Path) -> set[str]:
    runs = out / "runs"
    return {p.parent.name for p in runs.glob("*/summary.json")} | {p.parent.name for p in runs.glob("*/error.json")}


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
def test_kill_9_of_a_sweep_leaves_no_process_and_lands_nothing(tmp_path):
    base = copy.deepcopy(TINY_BASE)
    base["run"]["steps"] = 20000  # runs long enough to be in flight when the command is killed
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        tomli_w.dumps({"base": base, "seeds": [0, 1], "grid": {"system.staleness.k": [0, 1]}, "sweep": {"name": "k9"}})
    )
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [*SANDBOX, "sweep", str(sweep), "--out", str(out), "-j", "2", "-q"],
        env=repo_env(),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:

        def started() -> bool:  # run.json is written when a run starts (in its pending directory)
            runs = out / "runs"
            return len(list(runs.glob(".pending-*/*/run.json")) + list(runs.glob("*/run.json"))) >= 2

        in_flight = poll(started, timeout=240)
        assert in_flight, "the runs never started"
        assert len(group_pids(proc.pid)) >= 3  # the command, the forkserver, its workers
        landed = _landed(out)
        proc.kill()  # kill -9 of the command only
        proc.wait(timeout=30)
        left = poll(lambda: not group_pids(proc.pid), timeout=15)
        assert left, f"processes still alive 15 s after kill -9: {group_pids(proc.pid)}"
        time.sleep(1.0)
        assert _landed(out) == landed  # no result of a run in flight landed after the kill
    finally:
        kill_group(proc.pid)


def test_a_process_bound_to_a_command_ends_with_it_by_the_watch_thread(tmp_path):
    """No parent-death signal here (the bound process is not the command's child): the watch
    thread alone ends it when the command ends (the fallback for other systems)."""
    command = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    code = (
        "import sys, time; from sandbox.base.processes import watch_process; "
        f"watch_process({command.pid}, interval=0.05); print('bound', flush=True); time.sleep(600)"
    )
    bound = subprocess.Popen([sys.executable, "-c", code], env=repo_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert bound.stdout.readline().strip() == "bound"
        assert bound.poll() is None
        command.kill()  # becomes a zombie until reaped below: a zombie counts as gone
        assert bound.wait(timeout=60) == -signal.SIGKILL
    finally:
        command.kill()
        command.wait()
        bound.kill()
        bound.wait()


def test_remove_scratch_removes_only_dead_workers_directories(tmp_path):
    from sandbox.sweep.execute import remove_scratch

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = tmp_path / f"sandbox-abc123-{dead.pid}-a1b2c3d4"
    (gone / "abc123").mkdir(parents=True)
    (gone / "abc123" / "metrics.parquet").write_text("x")
    mine = tmp_path / f"sandbox-abc123-{os.getpid()}-a1b2c3d4"  # this (live) process's
    mine.mkdir()
    other = tmp_path / "sandbox-notes"  # not a scratch directory
    other.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("keep")
    link = tmp_path / f"sandbox-zzz-{dead.pid}-zzzzzzzz"
    link.symlink_to(victim)
    assert remove_scratch(tmp_path) == 1
    assert not gone.exists() and mine.exists() and other.exists() and link.is_symlink()
    assert (victim / "keep").read_text() == "keep"


def test_execute_run_packed_names_its_directory_with_its_pid(tmp_path, monkeypatch):
    """A killed worker's directory is recognisable (its pid in the name) and removed by the next task."""
    import sandbox.sweep.execute as execute

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = []

    def fake(rid, data, run, meta):
        seen.append(run)
        run.mkdir(parents=True)
        (run / "summary.json").write_text("{}")
        return {"id": rid, "state": "done"}

    monkeypatch.setattr(execute, "_execute_into", fake)
    rec = execute.execute_run_packed("r1", {}, {})
    assert rec["files"] == {"summary.json": b"{}"}
    assert execute.SCRATCH.match(seen[0].parent.name).group("pid") == str(os.getpid())
    assert not any(tmp_path.iterdir())


# ------------------------------------------------------------------------------------------------
# SIGTERM during `sandbox run`
# ------------------------------------------------------------------------------------------------


def _state(out: Path) -> dict:
    return {
        str(p.relative_to(out)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(out.rglob("*"))
        if ".sandbox.lock" not in p.name
    }


def _complete(out: Path, seed: int) -> bool:
    """The run of ``seed`` is in ``out``, whole: every file of the manifest, summary.json last."""
    try:
        manifest = json.loads((out / ".sandbox-run.json").read_text())
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    need = {"scenario.toml", "metrics.parquet", "jobs.parquet", "events.parquet", "replicas.npz", "summary.json"}
    names = {p.name for p in out.iterdir() if not p.name.startswith(".")}
    return (
        need <= set(manifest["entries"])
        and names == set(manifest["entries"])
        and f"seed = {seed}" in (out / "scenario.toml").read_text()
        and summary.get("steps_done") == 30
    )


def _run_cmd(scn: Path, out: Path, seed: int) -> list[str]:
    return [
        *SANDBOX,
        "run",
        str(scn),
        "--out",
        str(out),
        "-q",
        "--set",
        f"run.seed={seed}",
        "--set",
        "run.steps=30",
        "--set",
        "run.figures=false",
    ]


def test_sigterm_at_any_moment_of_sandbox_run_leaves_old_or_new(tmp_path):
    scn = tmp_path / "tiny.toml"
    scn.write_text(tomli_w.dumps(copy.deepcopy(TINY_BASE)))
    out = tmp_path / "out"
    t0 = time.monotonic()
    first = subprocess.run(
        _run_cmd(scn, out, 100), env=repo_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert first.returncode == 0, first.stderr
    duration = time.monotonic() - t0
    # kill times spread over the run (start-up imports, simulation, writing), then in the final move
    delays = [duration * f for f in (0.1, 0.3, 0.5, 0.7, 0.85, 0.95, 1.05)]
    trials = [("at", d) for d in delays] + [("in the move", None)] * 5
    outcomes = []
    for seed, (when, delay) in enumerate(trials):
        before = _state(out)
        env = repo_env(SANDBOX_TEST_COMMIT_PAUSE="3") if delay is None else repo_env()
        proc = subprocess.Popen(
            _run_cmd(scn, out, seed), env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        if delay is None:  # the move has begun (the stage renamed .commit-*) and is paused halfway
            assert poll(lambda: any(p.name.startswith(".commit-") for p in out.iterdir()), timeout=240)
        else:
            time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        text, _ = proc.communicate(timeout=240)
        assert "Traceback" not in text, text
        assert proc.returncode in (0, 143, -signal.SIGTERM), (proc.returncode, text)
        if delay is None:
            assert proc.returncode == 143 and "the run was complete and is kept" in " ".join(text.split()), text
        old = _state(out) == before
        new = _complete(out, seed)
        assert old or new, f"trial {seed} ({when} {delay}): neither the previous run nor the new one, complete"
        assert not [p.name for p in out.iterdir() if p.name.startswith((".staging-", ".commit-", ".replaced-"))] or old
        outcomes.append("new" if new else "old")
    assert outcomes[-5:] == ["new"] * 5 and "old" in outcomes
    again = subprocess.run(
        _run_cmd(scn, out, 99), env=repo_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert _complete(out, 99)
