"""The mission driver: a scenario's variants x seeds run through the sweep executor (resumable,
a failed run recorded), the VCPO constant-LR control, and mission.json / .md / .png."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import tomli_w

from sandbox.sweep.api import load_results
from sandbox.sweep.mission import CONTROL, main, run_mission

SCENARIO = {
    "title": "tiny mission",
    "task": {"name": "bitstring", "horizon": 6, "threshold": 0.5},
    "system": {"num_workers": 2, "staleness": {"kind": "fixed_lag", "k": 2}},
    "algorithm": {"group_size": 4, "groups_per_step": 2, "optimizer": {"name": "adam", "lr": 0.05}},
    "run": {"steps": 6, "eval_every": 2, "figures": False},
    "variants": {
        "sync": {"system.staleness": {"kind": "sync"}},
        "vcpo": {
            "algorithm.objective": {"name": "reinforce", "baseline": "opob", "normalize_std": True},
            "algorithm.stabilizers": [{"name": "vcpo_lr"}],
        },
        "kl": {
            "algorithm.objective": {"name": "grpo", "beta_kl": 0.1}
        },  # valid, but the simulator refuses it at run time
    },
}


def _summaries(out: Path) -> dict[str, int]:
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.rglob("summary.json")}


@pytest.fixture
def scenario_file(tmp_path) -> Path:
    path = tmp_path / "tiny_mission.toml"
    path.write_text(tomli_w.dumps(SCENARIO))
    return path


def test_mission_runs_variants_and_seeds_as_a_sweep_with_the_control(scenario_file, tmp_path):
    out = tmp_path / "out"
    results, table = run_mission(str(scenario_file), [0, 1], out, jobs=1, progress=False)
    assert list(results) == ["sync", "vcpo", "kl", CONTROL]
    assert all(len(runs) == 2 for runs in results.values())
    sweep = load_results(out)  # the mission directory is an ordinary sweep directory
    assert len(sweep) == 6 and set(sweep.variant) == {"sync", "vcpo", "kl"} and sorted(set(sweep.seed)) == [0, 1]
    # the failing variant is recorded and the others are kept
    assert set(sweep[sweep.variant == "kl"].status) == {"failed"} and table["kl"]["status"] == ["failed", "failed"]
    assert set(sweep[sweep.variant != "kl"].status) == {"completed"}
    # control: VCPO without its LR rule at the mean LR VCPO used in the same seed
    for vcpo, control in zip(results["vcpo"], results[CONTROL]):
        assert control["seed"] == vcpo["seed"]
        assert "lr/scale" in vcpo["metrics"] and vcpo["metrics"]["lr/scale"].nunique() > 1
        assert (
            control["metrics"]["lr"].tolist() == [pytest.approx(vcpo["metrics"]["lr"].mean(), rel=1e-6)] * 6
        )  # the metric is float32
    assert len(load_results(out / CONTROL)) == 2
    saved = json.loads((out / "mission.json").read_text())
    assert (
        saved["sync"]["seeds"] == [0, 1]
        and saved["sync"]["heldout_reward"]["per_seed"] == table["sync"]["heldout_reward"]["per_seed"]
    )
    assert "| vcpo_const_lr |" in (out / "mission.md").read_text()
    assert (out / "mission.png").stat().st_size > 1000

    # a second call resumes: no finished run is recomputed (failed ones are not retried either)
    before = _summaries(out)
    assert len(before) == 6
    again, _ = run_mission(str(scenario_file), [0, 1], out, jobs=1, progress=False)
    assert _summaries(out) == before
    pd.testing.assert_frame_equal(again["vcpo"][0]["metrics"], results["vcpo"][0]["metrics"])


def test_mission_cli_in_parallel_processes(scenario_file, tmp_path, capsys):
    out = tmp_path / "cli"
    main(
        [
            str(scenario_file),
            "--seeds",
            "3",
            "--jobs",
            "2",
            "--out",
            str(out),
            "--no-control",
            "--set",
            "run.steps=3",
            "--set",
            'variants={sync = {"system.staleness" = {kind = "sync"}}}',
        ]
    )
    assert "| sync |" in capsys.readouterr().out
    sweep = load_results(out)
    assert list(sweep.variant) == ["sync"] and list(sweep.status) == ["completed"] and list(sweep.steps_done) == [3]
    assert not (out / CONTROL).exists()
    assert {"mission.json", "mission.md", "mission.png"} <= {p.name for p in out.iterdir()}


def test_sandbox_mission_subcommand_counts_seeds_and_the_module_form_is_deprecated(scenario_file, tmp_path, capsys):
    """`sandbox mission FILE --seeds 2 -j 1` runs seeds 0 and 1 (a count, as every --seeds); the old
    `python -m sandbox.sweep.mission` still works, with a deprecation line on stderr."""
    from typer.testing import CliRunner

    from sandbox.cli import app

    out = tmp_path / "sub"
    res = CliRunner().invoke(
        app,
        [
            "mission",
            str(scenario_file),
            "--seeds",
            "2",
            "-j",
            "1",
            "--out",
            str(out),
            "--no-control",
            "-q",
            "--set",
            "run.steps=3",
            "--set",
            'variants={sync = {"system.staleness" = {kind = "sync"}}}',
        ],
    )
    assert res.exit_code == 0, res.output
    assert "| sync |" in res.output and "mission.png" in res.output
    sweep = load_results(out)
    assert sorted(sweep.seed) == [0, 1] and set(sweep.status) == {"completed"}
    main(
        [
            str(scenario_file),
            "--seeds",
            "0",
            "--jobs",
            "1",
            "--out",
            str(tmp_path / "old"),
            "--no-control",
            "--set",
            "run.steps=2",
            "--set",
            'variants={sync = {"system.staleness" = {kind = "sync"}}}',
        ]
    )
    assert "python -m sandbox.sweep.mission is deprecated" in capsys.readouterr().err
