"""A run's jobs and events tables read when used, not held (held, a run's memory grew with its length).

A run written to a directory (``sandbox run``, sweeps) has its finished jobs and events on disk while
it goes (:mod:`sandbox.system.spill`), and then in its ``jobs.parquet`` and ``events.parquet``. Its
:class:`~sandbox.run.runner.RunResult` does not hold these tables (about 1.9 KB a step on the quickstart,
alive through the writing of the run, and in every forked figure worker, :mod:`sandbox.base.figure_worker`):
its ``jobs`` and ``events`` fields hold a :class:`Loader`, and each read of the field builds the table
from the records, or reads it from the written file, and hands it over without keeping it. So a table
exists while something reads it (the summary, the file's writer, the timeline figure) and is freed
after, one table at a time.

Measured on the quickstart (peak RSS by ``/usr/bin/time -f %M``, fresh processes, main's tree and this
one alternated, two rounds, every output file byte-identical): without figures 450.5 / 450.4 MB at
480 steps and 459.2 / 460.8 MB at 1,920 before (6.0 and 7.2 KB a step), 450.8 / 450.7 and 456.8 /
456.7 MB after (4.2 KB a step); with figures 467.3 / 471.7 and 467.3 / 471.6 MB before (3.1 and 3.0
KB a step), 467.8 / 470.4 and 467.8 / 470.4 MB after (1.8 KB a step). Measured together with the
staleness controls' bounded heap (:class:`sandbox.system.staleness.base.BufferIndex`). What still
grows: the metrics table and per-replica arrays (read by the summary, the figures and the comparison
of variants), and each table's writing to its file. Below pyarrow's row-group length (1,048,576 rows; a
quickstart variant's events table reaches it near 44,000 steps) a table is one parquet row group, and
the parquet encoder holds that row group's encoded columns until it is written: on a quickstart
variant's events table (fresh processes, peak RSS over the write) 12.6 MB at 1,920 steps and 34.8 MB
at 7,680, about 3.6 times the table (its Arrow conversion is nearly zero-copy: 1.5 MB). Converting and
writing one such row group at a time with ``pyarrow.parquet.ParquetWriter`` was tried: the
files are byte-identical (10 to 2.6 million rows; quickstart, LM and sweep runs) but the transient is
the same within 0.6 MB up to 2.5 million rows (``pq.write_table`` already encodes one row group at a
time), and so is the quickstart's peak RSS (figures off, trees alternated: 456.6 / 456.4 and 484.7 /
486.7 MB at 1,920 and 7,680 steps before, 456.4 / 456.6 and 486.5 / 484.5 MB with it: 5.1 and 5.0 KB
a step); it was not kept. A smaller row group would bound the transient but change the files.

- :class:`Loader`: a table to build on each read (``build``: a function of no argument), and the
  empty table of its columns (:meth:`Loader.empty`, read from the file's schema without its rows).
- :func:`parquet_file`: the :class:`Loader` of a written table (``pd.read_parquet``: the same columns,
  dtypes and values as the table that was written, ``tests/base/test_lazy_tables.py``).
- :class:`TableField`: the field of a dataclass that holds a table or a :class:`Loader`; reading it
  gives a table either way, so a reader (``result.jobs.worker.max()``) does not know which it was.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd


class Loader:
    """A table built on each read by ``build()``; ``empty``: the table's columns without rows (or None:
    ``build()`` sliced to no row)."""

    __slots__ = ("build", "_empty", "where", "path")

    def __init__(
        self,
        build: Callable[[], pd.DataFrame],
        where: str,
        empty: Callable[[], pd.DataFrame] | None = None,
        path: Path | None = None,
    ):
        self.build, self._empty, self.where = build, empty, where
        self.path = path
        """The file the table is read from (:func:`parquet_file`), None for a table built otherwise."""

    def empty(self) -> pd.DataFrame:
        """The table's columns and dtypes, no rows, in arrays of its own (not a view of a full column)."""
        return self._empty() if self._empty is not None else self.build().iloc[:0].copy()

    def __repr__(self) -> str:
        return f"Loader({self.where})"


def parquet_file(path: Path) -> Loader:
    """The table written to ``path`` (read again on each use)."""
    path = Path(path)

    def empty() -> pd.DataFrame:
        import pyarrow.parquet as pq

        return pq.read_schema(path).empty_table().to_pandas()  # the schema's pandas metadata: same dtypes

    return Loader(lambda: pd.read_parquet(path), str(path), empty, path)


class TableField:
    """A dataclass field holding a ``pd.DataFrame`` or a :class:`Loader` (no default; see the module).
    ``obj.name = x`` stores ``x``; ``obj.name`` is the table (a loader's table is built for this read
    only); :func:`held` is what is stored."""

    def __set_name__(self, owner, name: str) -> None:
        self.name, self.slot = name, "_table_" + name

    def __get__(self, obj, owner=None):
        if obj is None:  # the class's attribute: no default for the dataclass field
            raise AttributeError(self.name)
        value = obj.__dict__[self.slot]
        return value.build() if isinstance(value, Loader) else value

    def __set__(self, obj, value) -> None:
        if not isinstance(value, (pd.DataFrame, Loader)):
            raise TypeError(f"{self.name}: a pandas DataFrame or a Loader, not {type(value).__name__}")
        obj.__dict__[self.slot] = value


def held(obj, name: str) -> pd.DataFrame | Loader:
    """What the :class:`TableField` ``name`` of ``obj`` stores (a table, or its :class:`Loader`)."""
    return obj.__dict__["_table_" + name]


def empty_table(obj, name: str) -> pd.DataFrame:
    """The columns of ``obj.name`` without rows, in arrays of their own (not reading a loader's rows)."""
    value = held(obj, name)
    return value.empty() if isinstance(value, Loader) else value.iloc[:0].copy()  # a slice keeps its base
