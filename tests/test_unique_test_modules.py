"""Test modules are imported by basename (pytest's default ``rootdir`` import mode, no ``__init__.py``
under ``tests/``), so two files named alike in different folders break the collection of the whole suite
("import file mismatch") while either folder alone still passes. This fails first, naming both files."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_every_test_module_basename_is_unique():
    seen: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: sorted(paths) for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"test modules sharing a basename (rename one of each): {clashes}"
