"""The shipped scenarios are package data: every file of the top-level ``scenarios/`` folder is
matched by a package-data pattern of pyproject.toml (so a wheel carries it) and read through
:mod:`importlib.resources`; a scenario argument resolves as :mod:`sandbox.scenario.shipped` says.

A new subfolder or file type under ``scenarios/`` that the patterns miss fails here, not in a
user's clean install (``.ci/wheel_smoke.sh`` then checks a real wheel in an empty directory).
"""

from __future__ import annotations

import glob
import os
import tomllib
from importlib.resources import files
from pathlib import Path

import pytest

from sandbox.base.errors import ScenarioError
from sandbox.scenario.api import DEFAULT_SCENARIO, load_scenario
from sandbox.scenario.shipped import (
    PACKAGE_DATA_SUFFIXES,
    display_name,
    find_shipped,
    resolve_scenario_path,
    shipped_root,
    shipped_scenarios,
)

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"


def _shipped_files() -> list[str]:
    """Every file under the top-level scenarios/ folder (hidden files and caches aside), relative."""
    return sorted(
        p.relative_to(SCENARIOS).as_posix()
        for p in SCENARIOS.rglob("*")
        if p.is_file()
        and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(SCENARIOS).parts)
    )


def _package_data_matches() -> set[str]:
    """The files under sandbox/scenarios that setuptools' package-data patterns of ``sandbox`` select
    (setuptools expands them with ``glob(..., recursive=True)`` relative to the package)."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["sandbox"]
    base = ROOT / "sandbox"
    found = set()
    for pattern in patterns:
        for match in glob.glob(str(base / pattern), recursive=True):
            rel = Path(match).relative_to(base)
            if rel.parts[0] == "scenarios" and Path(match).is_file():
                found.add(Path(*rel.parts[1:]).as_posix())
    return found


def test_scenarios_folder_is_the_one_copy_the_package_links():
    link = ROOT / "sandbox" / "scenarios"
    assert link.is_symlink(), "sandbox/scenarios must be a symbolic link to ../scenarios (one copy)"
    assert os.readlink(link) == "../scenarios"
    assert shipped_root().resolve() == SCENARIOS.resolve()


def test_every_file_under_scenarios_is_package_data():
    shipped = _shipped_files()
    assert "quickstart.toml" in shipped and any(f.startswith("published/") for f in shipped)
    missed = sorted(set(shipped) - _package_data_matches())
    assert not missed, (
        f"files under scenarios/ that no package-data pattern of pyproject.toml covers (a wheel "
        f"would lack them): {missed}"
    )
    assert {Path(f).suffix for f in shipped} <= set(PACKAGE_DATA_SUFFIXES)


def test_every_shipped_file_reads_through_importlib_resources():
    root = files("sandbox").joinpath("scenarios")
    for rel in _shipped_files():
        assert root.joinpath(*rel.split("/")).read_bytes() == (SCENARIOS / rel).read_bytes(), rel
    assert shipped_scenarios() == [f for f in _shipped_files() if f.endswith(".toml")]


def test_default_and_every_shipped_scenario_load():
    assert DEFAULT_SCENARIO == shipped_root() / "quickstart.toml"
    for rel in shipped_scenarios():
        if rel.startswith("sweeps/"):
            continue  # sweep files: tests/sweep
        scn, _ = load_scenario(rel)  # by its shipped name, from the repository's root or anywhere
        assert scn.run.steps > 0, rel


@pytest.mark.parametrize(
    "name, rel",
    [
        ("max_lag", "max_lag.toml"),
        ("max_lag.toml", "max_lag.toml"),
        ("scenarios/max_lag.toml", "max_lag.toml"),
        ("./scenarios/max_lag", "max_lag.toml"),
        ("published/verl_fully_async", "published/verl_fully_async.toml"),
        ("sweeps/lag_lr_quadratic.toml", "sweeps/lag_lr_quadratic.toml"),
    ],
)
def test_a_shipped_name_resolves_outside_the_repository(tmp_path, monkeypatch, name, rel):
    monkeypatch.chdir(tmp_path)  # an empty directory: nothing of that name here
    assert find_shipped(name) == shipped_root().joinpath(*rel.split("/"))
    assert resolve_scenario_path(name) == find_shipped(name)
    assert display_name(resolve_scenario_path(name)) == f"scenarios/{rel} (shipped)"


@pytest.mark.parametrize(
    "name", ["no_such_scenario", "../scenarios/max_lag.toml", "/scenarios/max_lag.toml", "", "scenarios"]
)
def test_names_that_are_no_shipped_scenario(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    assert find_shipped(name) is None


def test_a_local_file_wins_over_the_shipped_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "scenarios").mkdir()
    local = tmp_path / "scenarios" / "max_lag.toml"
    local.write_text((SCENARIOS / "quickstart.toml").read_text().replace("title =", "title = 'local' #", 1))
    assert resolve_scenario_path("scenarios/max_lag.toml") == Path("scenarios/max_lag.toml")
    assert display_name(resolve_scenario_path("scenarios/max_lag.toml")) == "scenarios/max_lag.toml"
    assert load_scenario("scenarios/max_lag.toml")[0].title == "local"


def test_a_missing_scenario_names_the_shipped_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ScenarioError) as info:
        load_scenario("scenarios/max_lagg.toml")
    text = str(info.value)
    assert "file not found: scenarios/max_lagg.toml" in text
    assert "shipped:" in text and "max_lag" in text and "published/verl_fully_async" in text


# -- without an extra, its integration is refused by name (the core commands need none) ------------


def _without(monkeypatch, *modules):
    """Make ``modules`` look not installed: imports fail and find_spec finds nothing."""
    import importlib.util
    import sys

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a, **k: None if name.split(".")[0] in modules else real(name, *a, **k),
    )
    for m in modules:
        monkeypatch.setitem(sys.modules, m, None)


@pytest.mark.parametrize(
    "missing, args, extra",
    [
        (
            ("tensorboard",),
            ["run", "sync", "--set", 'run.writers=["tensorboard"]', "--set", "run.steps=2"],
            '".[tensorboard]"',
        ),
        (("transformers",), ["run", "lm_mission_hf", "--set", "run.steps=1"], '".[hf]"'),
        (("ray",), ["sweep", "sweeps/lag_lr_quadratic", "--backend", "ray", "--set", "run.steps=2", "-q"], '".[ray]"'),
    ],
)
def test_a_missing_extra_is_refused_by_name_without_traceback(tmp_path, monkeypatch, missing, args, extra):
    from typer.testing import CliRunner

    from sandbox.cli import app

    _without(monkeypatch, *missing)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out")])
    text = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert "error:" in text and extra in text, text
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    if args[0] == "run":
        assert not (tmp_path / "out").exists()  # refused before anything is written
