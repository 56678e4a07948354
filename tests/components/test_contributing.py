"""CONTRIBUTING.md's "add a component" steps followed literally, for one new component of each family,
in a temporary copy of the repository: (1) the module in the family's package, (2) a hand-value test
marked ``@pytest.mark.component``, (3) a ``## <name>`` docs entry on the family's page, (4) the scenario
reference regenerated. Then, with no other edit: the registry tests and the reference test pass, the
hand-value tests pass, and the component checker finds no problem in any command (every export included)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from plugin_site import COMPONENTS, ROOT, SYNTHETIC

from sandbox.components import FAMILIES

PACKAGES = {
    "objective": "sandbox/algorithms/objectives",
    "correction": "sandbox/algorithms/corrections",
    "stabilizer": "sandbox/algorithms/stabilizers",
    "delay": "sandbox/system/delays",
    "staleness": "sandbox/system/staleness",
    "task": "sandbox/tasks",
    "engine": "sandbox/engines",
}

CHECK = """
import json, sys
from sandbox.cli import app
from sandbox.component_check import check_component
from typer.testing import CliRunner
ref = CliRunner().invoke(app, ["scenario", "--reference"])  # step 4: sandbox scenario --reference > docs/scenario-reference.md
assert ref.exit_code == 0, ref.output
open("docs/scenario-reference.md", "w").write(ref.output)
wanted = json.loads(sys.argv[1])
print("RESULT" + json.dumps({f: check_component(f, n, tests="tests") for f, n in wanted.items()}))
"""


def _run(args, copy, timeout=600):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SANDBOX_PLUGINS")}
    env["PYTHONPATH"] = str(copy)  # the copy only: not this checkout
    return subprocess.run([sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_adding_one_component_per_family_as_contributing_says(tmp_path):
    copy = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for d in ("sandbox", "theory", "docs", "scenarios", "tests"):
        shutil.copytree(ROOT / d, copy / d, ignore=ignore)
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / f, copy / f)
    for family, (name, module) in COMPONENTS.items():
        shutil.copy(SYNTHETIC / f"{module}.py", copy / PACKAGES[family] / f"{module}.py")  # 1. the module
        page = copy / FAMILIES[family].docs  # 3. the docs entry
        page.write_text(
            page.read_text() + f"\n## {name}\n\nA synthetic {family} (tests/components/synthetic/{module}.py): "
            "see its docstring for the formula; knobs and defaults as in its config.\n"
        )
    shutil.copy(
        SYNTHETIC / "hand_values.py.template", copy / "tests" / "test_synthetic_values.py"
    )  # 2. the hand-value tests

    wanted = {family: name for family, (name, _) in COMPONENTS.items()}
    t0 = time.perf_counter()
    res = _run(["-c", CHECK, json.dumps(wanted)], copy)  # 4. the reference, then the checker
    print(f"reference and checker: {time.perf_counter() - t0:.1f} s")
    assert res.returncode == 0, res.stderr[-3000:]
    problems = json.loads(res.stdout.split("RESULT", 1)[1])
    for family, found in problems.items():
        assert found == [], (family, found)

    tests = _run(
        [
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_synthetic_values.py",
            "tests/scenario/test_scenario_reference.py::test_committed_reference_is_up_to_date",
            "tests/test_registry.py",
            "-k",
            "synthetic or markers or every_module or up_to_date",
        ],
        copy,
    )
    print(f"tests in the copy: {time.perf_counter() - t0:.1f} s")
    assert tests.returncode == 0, tests.stdout[-4000:]
    counts = tests.stdout.strip().splitlines()[-1]
    assert "failed" not in counts and int(counts.split(" passed")[0].split()[-1]) >= 6 + 6 + 6 + 3, counts
