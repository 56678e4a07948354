"""Where `sandbox run` writes: safe variant directory names, nothing outside --out, a run that is
never half old and half new (staging, Ctrl-C), the re-run policy and the lock on --out."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w
from typer.testing import CliRunner

import sandbox.run.runner as runner
from sandbox.base.outputs import LOCK, OutputError, StagedDir, check_names, output_lock, safe_name
from sandbox.cli import app
from sandbox.scenario.api import ScenarioError, load_scenario, validate_scenario

ROOT = Path(__file__).resolve().parents[2]

TINY = {
    "title": "tiny",
    "task": {"name": "quadratic", "dim": 4, "eig_min": 0.1, "eig_max": 1.0, "noise_std": 0.05, "replicas": 2},
    "system": {
        "num_workers": 2,
        "generation_time": {"kind": "constant", "value": 1.0},
        "train_time": {"kind": "constant", "value": 0.0},
        "staleness": {"kind": "fixed_lag", "k": 1},
    },
    "algorithm": {"group_size": 1, "groups_per_step": 1, "optimizer": {"name": "sgd", "lr": 0.1}},
    "run": {"steps": 8, "figures": False, "eval_every": 4},
}


@pytest.fixture(autouse=True)
def _quick_figures(monkeypatch):
    """Stand-ins for the matplotlib figures (seconds each): these tests are about where files go."""
    import sandbox.run.plots

    def default_figures(result, out, label="", color=None, formats=("png",)):
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "reward.png").write_bytes(b"png")

    monkeypatch.setattr(sandbox.run.plots, "default_figures", default_figures)
    monkeypatch.setattr(
        sandbox.run.plots,
        "comparison_figure",
        lambda results, path, title="", formats=("png",): Path(path).write_bytes(b"png"),
    )


def scenario_file(tmp_path: Path, variants: dict | None = None, **run) -> Path:
    data = dict(TINY, run=dict(TINY["run"], **run))
    if variants:
        data["variants"] = variants
    path = tmp_path / "in" / "tiny.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(data))
    return path


def snapshot(root: Path, skip: Path | None = None) -> dict[str, str]:
    """Every file below ``root`` (except below ``skip`` and the lock file) with its content hash."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name != LOCK and (skip is None or skip not in p.parents):
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def invoke(*args: str):
    return CliRunner().invoke(app, ["run", *args, "-q"])


# -- names -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, slug",
    [
        ("async+tis", "async+tis"),
        ("lag4+tis", "lag4+tis"),
        ("Sync_v1.2", "Sync_v1.2"),
        ("../../../x", "x"),
        ("<b>v</b>", "b-v-b"),
        ("a b\tc", "a-b-c"),
        (".hidden", "hidden"),
        ("naïve", "na-ve"),
        ("..", ""),
        ("///", ""),
    ],
)
def test_safe_name_rule(name, slug):
    assert safe_name(name) == slug


def test_shipped_variant_names_keep_their_directories():
    for f in sorted((ROOT / "scenarios").glob("*.toml")) + sorted((ROOT / "scenarios" / "published").glob("*.toml")):
        scn, _ = load_scenario(f)
        for name in scn.variants:
            assert safe_name(name) == name, f"{f.name}: variant {name!r} would move"


@pytest.mark.parametrize(
    "variants, expected",
    [
        ({"..": {}}, "'..' leaves no directory name"),
        ({"a/b": {}, "a-b": {}}, "'a/b' and 'a-b' both become the directory name 'a-b'"),
        ({"Fast": {}, "fast": {}}, "'Fast' and 'fast' both become"),
        ({"summary.json": {}}, "'summary.json' is reserved"),
    ],
)
def test_bad_variant_names_are_rejected_at_load_time(variants, expected):
    with pytest.raises(ScenarioError) as info:
        validate_scenario(dict(TINY, variants=variants))
    (problem,) = info.value.problems
    assert problem.startswith("variants: ") and expected in problem


def test_cli_rejects_colliding_variant_names(tmp_path):
    res = invoke(str(scenario_file(tmp_path, {"x/y": {}, "x-y": {}})), "--out", str(tmp_path / "out"))
    assert res.exit_code == 2 and "variants:" in res.output and "'x/y' and 'x-y'" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "out").exists()


def test_check_names_maps_to_directories():
    assert check_names(["sync", "<b>v</b>"]) == {"sync": "sync", "<b>v</b>": "b-v-b"}


# -- nothing outside --out -------------------------------------------------------------------------


def test_hostile_variant_names_write_only_inside_out(tmp_path):
    work = tmp_path / "a" / "b" / "c"
    out = work / "out"
    path = scenario_file(tmp_path, {"../../../x": {}, "<b>v</b>": {"system.staleness.k": 0}, "[/b]{0}": {}})
    before = snapshot(tmp_path, skip=out)
    res = CliRunner().invoke(app, ["run", str(path), "--out", str(out)])  # with the progress bars
    assert res.exit_code == 0, res.output
    assert snapshot(tmp_path, skip=out) == before
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "b-0",
        "b-v-b",
        "scenario.toml",
        "x",
    ]  # run.figures = false: no comparison figure either; the whole scenario on top
    assert (out / "x" / "summary.json").exists() and (out / "b-v-b" / "summary.json").exists()
    assert all(out.resolve() in p.resolve().parents for p in out.rglob("*"))


# -- never half old and half new -------------------------------------------------------------------


def _interrupt_at(call: int, step: int, monkeypatch) -> list:
    """Make the ``call``-th run_scenario raise KeyboardInterrupt (Ctrl-C) at simulated step ``step``."""
    original = runner.run_scenario
    calls = []

    def run_scenario(scn, out_dir=None, on_step=None, **kw):
        calls.append(out_dir)

        def step_cb(row):
            if len(calls) == call and row["step"] >= step:
                raise KeyboardInterrupt
            if on_step:
                on_step(row)

        return original(scn, out_dir, on_step=step_cb, **kw)

    monkeypatch.setattr(runner, "run_scenario", run_scenario)
    return calls


def test_ctrl_c_over_a_complete_run_keeps_it_untouched(tmp_path, monkeypatch):
    out = tmp_path / "out"
    variants = {"sync": {"system.staleness.k": 0}, "lag": {}}
    assert invoke(str(scenario_file(tmp_path, variants)), "--out", str(out)).exit_code == 0
    before = snapshot(out)
    # the re-run differs (other seed); its first variant completes, the second is interrupted
    calls = _interrupt_at(2, 3, monkeypatch)
    res = invoke(str(scenario_file(tmp_path, variants, seed=7)), "--out", str(out))
    assert len(calls) == 2
    assert res.exit_code == 130
    assert f"interrupted: nothing was kept; the previous run in {out} is unchanged" in " ".join(res.output.split())
    assert "Traceback" not in res.output
    assert snapshot(out) == before
    assert not [p for p in out.iterdir() if p.name.startswith((".staging-", ".replaced-"))]


def test_ctrl_c_while_writing_the_run_directory_leaves_the_previous_run(tmp_path, monkeypatch):
    """The reported bug: a new metrics.parquet beside the old summary.json and old figures."""
    import sandbox.run.plots

    out = tmp_path / "run"
    runner.run_scenario(validate_scenario(dict(TINY, run=dict(TINY["run"], figures=True))), out)
    before = snapshot(out)

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(sandbox.run.plots, "default_figures", interrupted)
    again = validate_scenario(dict(TINY, run=dict(TINY["run"], figures=True, seed=3)))
    with pytest.raises(KeyboardInterrupt):
        runner.run_scenario(again, out)  # metrics.parquet etc. are written before the figures
    assert snapshot(out) == before
    assert sorted(os.listdir(out)) == sorted(n for n in os.listdir(out) if not n.startswith("."))


def test_ctrl_c_into_a_new_directory_keeps_nothing(tmp_path, monkeypatch):
    out = tmp_path / "new" / "out"
    _interrupt_at(1, 2, monkeypatch)
    res = invoke(str(scenario_file(tmp_path)), "--out", str(out))
    assert res.exit_code == 130 and "interrupted: nothing was kept" in res.output
    assert "Traceback" not in res.output and not out.exists()


def test_ctrl_c_during_start_up_imports_exits_130_without_traceback(tmp_path):
    code = (
        "import sys\n"
        "class Stop:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'sandbox.scenario':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Stop())\n"
        "from sandbox.cli import app\n"
        "app()\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, "run", "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 130, res.stderr
    assert "interrupted: nothing was kept" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


def test_failed_move_into_place_restores_the_previous_run(tmp_path, monkeypatch):
    import sandbox.base.outputs as outputs

    out = tmp_path / "out"
    assert invoke(str(scenario_file(tmp_path)), "--out", str(out)).exit_code == 0
    before = snapshot(out)
    real_replace = os.replace
    failed = []

    def replace(src, dst):  # the disk fills up as the new summary.json moves in
        if Path(dst).name == "summary.json" and Path(dst).parent == out and not failed:
            failed.append(src)
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(outputs.os, "replace", replace)
    res = invoke(str(scenario_file(tmp_path, seed=9)), "--out", str(out))
    text = " ".join(res.output.split())
    assert res.exit_code == 2 and "No space left on device" in text and "Traceback" not in text
    assert "the previous run is as it was" in text
    monkeypatch.undo()
    assert snapshot(out) == before


# -- re-running into an existing directory ---------------------------------------------------------


def test_rerun_replaces_the_previous_run_as_a_whole(tmp_path):
    out = tmp_path / "out"
    first = invoke(str(scenario_file(tmp_path, {"a": {}, "b": {"system.staleness.k": 0}})), "--out", str(out))
    assert first.exit_code == 0 and "replaced" not in first.output
    res = invoke(str(scenario_file(tmp_path, figures=True)), "--out", str(out))  # a single run now
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "holds a previous run" in text and "it replaced the previous run" in text
    names = sorted(n for n in os.listdir(out) if not n.startswith("."))
    assert "a" not in names and "b" not in names and "comparison.png" not in names  # no old variant left
    assert {"summary.json", "metrics.parquet", "figures"} <= set(names)
    # and back: the single run's files go, figures included
    res = invoke(str(scenario_file(tmp_path, {"c": {}})), "--out", str(out))
    assert res.exit_code == 0
    assert sorted(n for n in os.listdir(out) if not n.startswith(".")) == ["c"]


def test_directory_written_before_the_manifest_is_replaced(tmp_path):
    out = tmp_path / "old"
    runner.run_scenario(validate_scenario(TINY), out)  # a bare run directory, as older versions wrote
    (out / "report.html").write_text("<html></html>")
    res = invoke(str(scenario_file(tmp_path, seed=5)), "--out", str(out))
    assert res.exit_code == 0, res.output
    assert not (out / "report.html").exists()  # it described the old run


def test_directory_with_other_files_is_refused(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    res = invoke(str(scenario_file(tmp_path)), "--out", str(out))
    assert res.exit_code == 2 and "error:" in res.output and "notes.txt" in res.output
    assert "Traceback" not in res.output
    assert sorted(os.listdir(out)) == ["notes.txt"] and (out / "notes.txt").read_text() == "keep me"


# -- one writer per directory ----------------------------------------------------------------------


def test_second_writer_of_the_same_out_is_refused(tmp_path):
    out = tmp_path / "out"
    with output_lock(out):
        res = invoke(str(scenario_file(tmp_path)), "--out", str(out))
        assert res.exit_code == 2, res.output
        text = " ".join(res.output.split())
        assert f"is being written by another sandbox process (pid {os.getpid()})" in text
        assert "Traceback" not in res.output
        assert not (out / "summary.json").exists()
    assert invoke(str(scenario_file(tmp_path)), "--out", str(out)).exit_code == 0  # free again


def test_lock_file_that_is_a_symlink_is_refused_and_never_written_through(tmp_path):
    """Issue 28: the lock file is never followed to a file elsewhere (neither locked nor given a pid)."""
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (out / LOCK).symlink_to(victim)
    with pytest.raises(OutputError, match=r"\.sandbox\.lock is a symbolic link"):
        with output_lock(out):
            pass
    assert victim.read_text() == "precious"
    dangling = tmp_path / "created-through-link"
    (out / LOCK).unlink()
    (out / LOCK).symlink_to(dangling)
    res = invoke(str(scenario_file(tmp_path)), "--out", str(out))
    assert res.exit_code == 2 and "is a symbolic link" in " ".join(res.output.split()), res.output
    assert "Traceback" not in res.output
    assert not dangling.exists() and not (out / "summary.json").exists()


def test_lock_held_by_another_process(tmp_path):
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from sandbox.base.outputs import output_lock\n"
            f"with output_lock({str(out)!r}):\n    print('locked', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(OutputError, match=rf"pid {holder.pid}\)"):
            with StagedDir(out, whole=True):
                pass
    finally:
        holder.kill()
        holder.wait()
    with StagedDir(out, whole=True) as stage:  # the lock went with the process
        (stage / "summary.json").write_text("{}")
    assert (out / "summary.json").exists()
