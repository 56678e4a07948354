"""Package-level checks: registry, doctests (so plain `pytest` runs them) and import hygiene."""

from __future__ import annotations

import doctest
import pathlib
import subprocess
import sys

import pytest

import theory

ROOT = pathlib.Path(theory.__file__).resolve().parent.parent


def test_registry_lists_every_module():
    modules = {p.stem for p in pathlib.Path(theory.__file__).parent.glob("*.py") if p.stem != "__init__"}
    assert set(theory.RESULTS) == modules
    for name, r in theory.RESULTS.items():
        assert r.module.__name__ == f"theory.{name}"
        assert r.section.startswith("T") and r.description and r.kind in {"exact", "approx", "rate", "bound"}
        assert r.module.__doc__ and len(r.module.__doc__) > 200  # statement, assumptions, source


@pytest.mark.parametrize("name", ["__init__"] + sorted(theory.RESULTS))
def test_doctests(name):
    mod = theory if name == "__init__" else theory.RESULTS[name].module
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert res.attempted > 0 and res.failed == 0


def test_imports_only_numpy_and_sympy():
    # fresh interpreter: importing theory must not pull in sandbox (or scipy)
    code = (
        "import sys, theory; bad = [m for m in ('sandbox', 'scipy', 'torch') if m in sys.modules];"
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    for path in pathlib.Path(theory.__file__).parent.glob("*.py"):
        text = path.read_text()
        assert "import sandbox" not in text and "from sandbox" not in text, path
