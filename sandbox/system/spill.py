"""Records streamed to disk while a run goes on (held in memory, they grew with the run's length).

A run written to a directory (``run_scenario(scn, out_dir)``: ``sandbox run``, sweeps) moves its
finished jobs and its event log out of memory as it goes: every few thousand records become typed
columns appended to files of a private directory beside the run's output (created by
:func:`tempfile.mkdtemp`, so nobody else's link or file can be there; a ``.staging-`` name, so what
a killed run leaves is removed with the other leftovers of interrupted writers). At the end of the
run the tables are assembled from these files, one column at a time, bitwise the ones built from
memory (``tests/system/test_record_spill.py``), and the directory is removed.

- :class:`Spill`: the directory, its append-only column files (raw little-endian 8-byte values, or
  1-byte codes) and their reading back.
- :func:`column_kind`: the dtype a chunk of Python values is written with: ``"i"`` (every value a
  plain ``int`` in ±2**53), ``"f"`` (plain ``float`` values and such ints: float64, as pandas makes of
  a mixed column) or ``None`` (anything else: the caller keeps those records in memory instead).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

PREFIX = ".staging-records-"
"""The spill directory's name prefix: a transient directory of :mod:`sandbox.base.outputs` (``.staging-``)."""

_EXACT = 2**53  # ints a float64 holds exactly


def column_kind(values: Sequence) -> str | None:
    """``"i"``, ``"f"`` or ``None`` for one chunk of a column (see the module)."""
    types = set(map(type, values))
    if types == {float}:  # the usual float column, without the loop below
        return "f"
    if types == {int}:  # the usual int column: its extremes in range
        return "i" if -_EXACT <= min(values) and max(values) <= _EXACT else None
    kind = "i"
    for v in values:
        t = type(v)
        if t is float:
            kind = "f"
        elif t is not int or not -_EXACT <= v <= _EXACT:
            return None
    return kind


class Spill:
    """A private directory of append-only columns, ``name -> file``; ``close`` removes it."""

    def __init__(self, root: str | Path):
        self.dir = Path(tempfile.mkdtemp(dir=root, prefix=PREFIX))
        self._rows: dict[str, int] = {}

    def append(self, name: str, values: np.ndarray) -> None:
        """Append ``values`` (a 1-D array of 8-byte or 1-byte items) to column ``name``."""
        data = np.ascontiguousarray(values)
        fd = os.open(self.dir / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        try:
            view = memoryview(data).cast("B")
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        self._rows[name] = self._rows.get(name, 0) + len(data)

    def rows(self, name: str) -> int:
        return self._rows.get(name, 0)

    def read(self, name: str, dtype) -> np.ndarray:
        """Column ``name`` as a fresh array of ``dtype`` (empty when nothing was appended)."""
        if not self._rows.get(name):
            return np.empty(0, dtype=dtype)
        out = np.fromfile(self.dir / name, dtype=dtype)
        if len(out) != self._rows[name]:
            raise OSError(f"{self.dir / name}: {len(out)} values on disk, {self._rows[name]} written")
        return out

    def read_into(self, name: str, out: np.ndarray) -> None:
        """Column ``name`` read into ``out`` (a contiguous array of its values' dtype and length):
        no array of its own, so a column and a copy of it are never both held."""
        size = self._rows.get(name, 0)
        if len(out) != size:
            raise ValueError(f"{self.dir / name}: {size} values written, {len(out)} asked for")
        if not size:
            return
        view = memoryview(out).cast("B")
        with open(self.dir / name, "rb", buffering=0) as fh:
            while view:
                got = fh.readinto(view)
                if not got:
                    raise OSError(
                        f"{self.dir / name}: {size * out.itemsize - len(view)} bytes on disk, "
                        f"{size * out.itemsize} written"
                    )
                view = view[got:]

    def drop(self, name: str) -> None:
        """Forget column ``name`` (its file is removed)."""
        if self._rows.pop(name, None) is not None:
            (self.dir / name).unlink(missing_ok=True)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        self._rows.clear()
