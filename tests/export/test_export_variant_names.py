"""`sandbox export --variant` with variant names that are not directory names ("a/b", spaces):
the original name and the directory name (its slug, sandbox.base.outputs.safe_name) both select the
variant, in a scenario file and in the run directory `sandbox run` wrote; nothing else matches."""

from __future__ import annotations

import pytest
import tomli_w
from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.export.api import ExportError
from sandbox.export.source import resolve

SCENARIO = {
    "task": {"name": "bitstring", "horizon": 4, "replicas": 1},
    "system": {"num_workers": 2, "staleness": {"kind": "sync"}},
    "algorithm": {"group_size": 2, "groups_per_step": 1, "optimizer": {"name": "adam", "lr": 0.05}},
    "run": {"steps": 2, "figures": False, "eval_every": 2},
    "variants": {
        "lag/2": {"system.staleness": {"kind": "max_lag", "k_max": 2}},
        "lag 3 (max)": {"system.staleness": {"kind": "max_lag", "k_max": 3}},
    },
}


@pytest.fixture(scope="module")
def scenario_and_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("variants")
    path = root / "named.toml"
    path.write_text(tomli_w.dumps(SCENARIO))
    out = root / "run"
    res = CliRunner().invoke(app, ["run", str(path), "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir() if (p / "summary.json").exists()) == ["lag-2", "lag-3-max"]
    return path, out


@pytest.mark.parametrize("asked", ["lag/2", "lag-2", "lag 3 (max)", "lag-3-max"])
def test_run_directory_accepts_the_name_and_the_slug(scenario_and_run, asked):
    _, out = scenario_and_run
    src = resolve(out, variant=asked)
    assert src.scenario.system.staleness.k_max == (2 if "2" in asked else 3)
    assert src.label in ("run-lag-2", "run-lag-3-max")  # <run directory>-<variant directory>


@pytest.mark.parametrize("asked", ["lag/2", "lag-2", "lag 3 (max)", "lag-3-max"])
def test_scenario_file_accepts_the_name_and_the_slug(scenario_and_run, asked):
    path, _ = scenario_and_run
    src = resolve(path, variant=asked)
    assert src.scenario.system.staleness.k_max == (2 if "2" in asked else 3)
    assert "/" not in src.label and " " not in src.label  # the default output directory promote/<label>-<framework>


@pytest.mark.parametrize("asked", ["lag", "lag-3", "LAG-2", "lag_2", "///"])
def test_other_names_are_refused(scenario_and_run, asked):
    path, out = scenario_and_run
    with pytest.raises(ExportError, match="--variant: no run .* expected one of lag-2, lag-3-max"):
        resolve(out, variant=asked)
    with pytest.raises(ExportError, match="--variant: no variant .* expected one of lag/2, lag 3 \\(max\\)"):
        resolve(path, variant=asked)


def test_cli_export_by_original_name_writes_inside_promote(scenario_and_run, tmp_path, monkeypatch):
    path, out = scenario_and_run
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["export", str(out), "--variant", "lag/2", "-f", "verl", "--allow-partial"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "promote" / "run-lag-2-verl" / "PROMOTION.md").exists()
    res = CliRunner().invoke(app, ["export", str(path), "--variant", "lag/2", "-f", "verl", "--allow-partial"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "promote").iterdir()) == ["named-lag-2-verl", "run-lag-2-verl"]
    assert all(tmp_path in p.resolve().parents for p in tmp_path.rglob("*"))
