"""What a first-time user meets (issue 49): a multi-variant scenario printed whole and kept in its run
directory, did-you-mean for names, a sweep file given to `run` (and a scenario to `sweep`) named as such,
the progress line naming a loss a loss, `report --out DIR`, `import` stating the workers it assumed, and
the output folders ignored by git."""

from __future__ import annotations

import tomllib
from pathlib import Path

import tomli_w
from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.scenario.api import dump_scenario, load_scenario, variant_scenarios
from sandbox.scenario.shipped import shipped_root, shipped_scenarios

ROOT = Path(__file__).resolve().parents[2]

TINY = {
    "title": "tiny",
    "task": {"name": "quadratic", "dim": 4, "replicas": 1},
    "system": {
        "num_workers": 2,
        "generation_time": {"kind": "constant", "value": 1.0},
        "staleness": {"kind": "fixed_lag", "k": 1},
    },
    "algorithm": {"group_size": 1, "groups_per_step": 1, "optimizer": {"name": "sgd", "lr": 0.1}},
    "run": {"steps": 3, "figures": False, "record_events": False, "eval_every": 3},
    "variants": {"sync": {"system.staleness": {"kind": "sync"}}, "lag2": {"system.staleness.k": 2}},
}


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def _variants(path) -> dict[str, str]:
    scn, raw = load_scenario(path)
    return {k: dump_scenario(v) for k, v in variant_scenarios(scn, raw).items()}


def test_every_shipped_multi_variant_scenario_prints_whole_and_reruns_the_same_variants(tmp_path):
    checked = 0
    for rel in shipped_scenarios():
        if rel.startswith("sweeps/"):
            continue
        scn, _ = load_scenario(shipped_root() / rel)
        if not scn.variants:
            continue
        res = invoke("scenario", rel.removesuffix(".toml"))
        assert res.exit_code == 0, res.output
        assert res.output.startswith(f"# {len(scn.variants)} variants (")  # a note, as a TOML comment
        printed = tmp_path / f"{checked}.toml"
        printed.write_text(res.output)
        assert tomllib.loads(res.output)["variants"].keys() == scn.variants.keys()
        assert _variants(printed) == _variants(shipped_root() / rel), rel  # every variant resolves the same
        checked += 1
    assert checked >= 3


def test_a_multi_variant_run_keeps_its_whole_scenario_and_still_exports_per_variant(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(tomli_w.dumps(TINY))
    out = tmp_path / "run"
    res = invoke("run", str(path), "--out", str(out), "-q")
    assert res.exit_code == 0, res.output
    assert (out / "scenario.toml").is_file() and (out / "sync" / "scenario.toml").is_file()
    assert _variants(out / "scenario.toml") == _variants(path)
    again = invoke("run", str(out / "scenario.toml"), "--out", str(tmp_path / "again"), "-q")  # re-runs as is
    assert again.exit_code == 0, again.output
    assert invoke("run", str(path), "--out", str(out), "-q").exit_code == 0  # replaces its own previous run

    from sandbox.export.source import resolve

    src = resolve(out, variant="lag2")
    assert src.scenario.system.staleness.k == 2


def test_did_you_mean_for_scenario_check_demo_and_claim_names():
    res = invoke("scenario", "quikstart")
    assert res.exit_code == 2 and "did you mean 'quickstart'?" in res.output
    res = invoke("run", "max_lagg")
    assert res.exit_code == 2 and "did you mean 'max_lag'?" in res.output
    res = invoke("demo", "stragler")
    assert res.exit_code == 2 and "did you mean 'stragglers'?" in res.output
    res = invoke("check", "straggler_cots")
    assert res.exit_code == 2 and "did you mean 'straggler_cost'?" in res.output


def test_a_sweep_file_given_to_run_and_a_scenario_given_to_sweep_are_named():
    sweep = ROOT / "scenarios" / "sweeps" / "lag_lr_quadratic.toml"
    res = invoke("run", str(sweep))
    assert res.exit_code == 2 and "this is a sweep file" in res.output and "sandbox sweep" in res.output
    assert "unknown key" not in res.output
    res = invoke("sweep", "quickstart", "--dry-run")
    assert res.exit_code == 2 and "this is a scenario file" in res.output and "sandbox run" in res.output
    assert "unknown key" not in res.output


def test_the_progress_line_names_the_tasks_metric():
    from sandbox.run.runner import step_info

    assert step_info({"time": 1.0, "eval/loss": 68008.796}) == "t=1.0s  loss=68008.796"
    assert step_info({"time": 2.0, "reward/mean": 0.5}) == "t=2.0s  reward=0.500"
    assert step_info({"time": 2.0, "eval/expected_reward": None, "reward/mean": 0.5}).endswith("reward=-")


def test_report_out_is_a_directory(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(tomli_w.dumps({k: v for k, v in TINY.items() if k != "variants"}))
    run = tmp_path / "run"
    assert invoke("run", str(path), "--out", str(run), "-q").exit_code == 0
    res = invoke("report", str(run), "--out", str(tmp_path / "somedir"))
    assert res.exit_code == 0, res.output
    assert (tmp_path / "somedir" / "report.html").is_file()
    res = invoke("report", str(run), "--out", str(tmp_path / "old.html"))  # the old spelling: a file, deprecated
    assert res.exit_code == 0 and (tmp_path / "old.html").is_file()
    assert "deprecated" in (res.stderr if hasattr(res, "stderr") else res.output)


def test_import_states_the_workers_it_assumed(tmp_path):
    config = str(ROOT / "tests" / "importers" / "data" / "verl_gsm8k_async.yaml")
    res = invoke("import", config, "-f", "verl", "--out", str(tmp_path / "a"))
    assert res.exit_code == 0, res.output
    n = tomllib.loads((tmp_path / "a" / "scenario.toml").read_text())["system"]["num_workers"]
    line = next(ln for ln in res.output.splitlines() if ln.startswith("simulated workers"))
    assert f"simulated workers: {n}" in line and ("--workers" in line or "from" in line)
    res = invoke("import", config, "-f", "verl", "--workers", "64", "--out", str(tmp_path / "b"), "-q")
    assert res.exit_code == 0 and "simulated workers: 64 (from --workers)" in res.output
    assert "written to" in res.output and "keys read" not in res.output  # -q: only what was assumed and written


def test_output_folders_are_ignored_by_git():
    ignored = {ln.strip() for ln in (ROOT / ".gitignore").read_text().splitlines()}
    # anchored at the root: a package folder of the same name (sandbox/preflight/) must not be ignored
    assert {"runs/", "/promote/", "/preflight/", "/imported/"} <= ignored
