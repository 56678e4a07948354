"""Compact, columnar records of a run (with a Python object per record, memory grew linearly with run length).

A run keeps three records that grow with its length: the per-step metrics rows, the per-replica
metric arrays and the jobs. Held as Python objects (a dict of floats per row, a dict of ``(R,)``
arrays per step, a :class:`~sandbox.system.cluster.Job` per group) they cost about 10 KB a step on
the quickstart; held here as typed columns they cost the bytes of their numbers (8 B a value plus a
presence byte), and the tables built from them are bitwise the ones built from the objects:

- :class:`ColumnTable`: rows of ``{column: value}`` stored as one int64, float64 or object column
  each; :meth:`ColumnTable.to_frame` is ``pd.DataFrame(list_of_row_dicts)`` (same columns in order of
  first appearance, same dtypes and values: pandas's own inference of ints, floats and missing
  values, reproduced for plain ``int`` and ``float`` values, and pandas itself for anything else).
- :class:`MetricRows`: the metrics rows of a cluster (a sequence of dicts, appended in order).
- :class:`ReplicaColumns`: the learner's per-replica arrays, ``{metric: (steps, R) float64}`` with NaN
  where a metric was not computed, preallocated for ``run.steps`` rows.

Every column grows by doubling, so appending is amortised O(1).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Mapping
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np

_INT64 = (-(2**63), 2**63)
_EXACT_FLOAT_INT = 2**53  # ints a float64 holds exactly (larger ones keep their object)
_ABSENT = object()  # a row without the column


class _Column:
    """One column: ``kind`` "i" (every value so far an ``int``), "f" (``float`` values, or ints and
    floats: ``ints`` marks the ints, as pandas turns a mixed column into float64 but a row read back
    keeps its int) or "o" (anything else, the objects themselves)."""

    __slots__ = ("kind", "data", "present", "ints")

    def __init__(self, kind: str, capacity: int):
        self.kind = kind
        self.present = np.zeros(capacity, dtype=bool)
        self.ints: np.ndarray | None = None
        if kind == "o":
            self.data: Any = [None] * capacity
        else:
            self.data = np.zeros(capacity, dtype=np.int64 if kind == "i" else np.float64)

    def grow(self, capacity: int) -> None:
        n = len(self.present)
        present = np.zeros(capacity, dtype=bool)
        present[:n] = self.present
        self.present = present
        if self.kind == "o":
            self.data.extend([None] * (capacity - n))
            return
        data = np.zeros(capacity, dtype=self.data.dtype)
        data[:n] = self.data
        self.data = data
        if self.ints is not None:
            ints = np.zeros(capacity, dtype=bool)
            ints[:n] = self.ints
            self.ints = ints

    def _to_float(self) -> None:
        self.ints = self.present.copy()
        self.data = self.data.astype(np.float64)
        self.kind = "f"

    def _to_object(self) -> None:
        data = [None] * len(self.present)
        for i in np.flatnonzero(self.present).tolist():
            data[i] = self.get(i)
        self.data, self.kind, self.ints = data, "o", None

    def set(self, i: int, v: Any) -> None:
        t = type(v)
        kind = self.kind
        if kind != "o":
            if t is float:
                if kind == "i":
                    self._to_float()
                self.data[i] = v
                if self.ints is not None:
                    self.ints[i] = False
                self.present[i] = True
                return
            if t is int and _INT64[0] <= v < _INT64[1]:
                if kind == "i":
                    self.data[i] = v
                    self.present[i] = True
                    return
                if -_EXACT_FLOAT_INT <= v <= _EXACT_FLOAT_INT:
                    self.data[i] = v
                    if self.ints is None:
                        self.ints = np.zeros(len(self.present), dtype=bool)
                    self.ints[i] = True
                    self.present[i] = True
                    return
            self._to_object()
        self.data[i] = v
        self.present[i] = True

    def get(self, i: int) -> Any:
        if self.kind == "o":
            return self.data[i]
        if self.kind == "i":
            return int(self.data[i])
        if self.ints is not None and self.ints[i]:
            return int(self.data[i])
        x = float(self.data[i])
        return math.nan if x != x else x  # the shared NaN, as the defaults it was (``nan is nan`` in tuples)

    def nbytes(self) -> int:
        if self.kind == "o":
            return 8 * len(self.data) + self.present.nbytes
        return self.data.nbytes + self.present.nbytes + (0 if self.ints is None else self.ints.nbytes)


class ColumnTable:
    """Rows ``{column: value}`` put at row indices, stored column by column (see the module)."""

    def __init__(self, capacity: int = 64):
        self._cols: dict[str, _Column] = {}
        self._capacity = max(int(capacity), 1)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def put(self, i: int, row: Mapping[str, Any]) -> None:
        """Write ``row`` at index ``i`` (rows past the end are created empty)."""
        if i >= self._capacity:
            capacity = self._capacity
            while capacity <= i:
                capacity *= 2
            for col in self._cols.values():
                col.grow(capacity)
            self._capacity = capacity
        cols = self._cols
        for k, v in row.items():
            col = cols.get(k)
            t = type(v)
            if col is None:
                kind = "i" if t is int else "f" if t is float else "o"
                col = cols[k] = _Column(kind, self._capacity)
            if t is float and col.kind == "f" and col.ints is None:  # _Column.set's float case, inline
                col.data[i] = v
                col.present[i] = True
            elif t is int and col.kind == "i" and _INT64[0] <= v < _INT64[1]:  # its int case, inline
                col.data[i] = v
                col.present[i] = True
            else:
                col.set(i, v)
        if i >= self._n:
            self._n = i + 1

    def put_rows(self, start: int, rows: list[Mapping[str, Any]]) -> None:
        """Write ``rows`` at indices ``start``, ``start + 1``, ...: the state :meth:`put` of each row in turn
        leaves (columns created in order of first appearance, the same kinds, values and capacity), column
        by column; a column whose values are all ``float`` (a float column) or all ``int`` in int64 (an int
        column) is written with one numpy assignment, any other with :meth:`_Column.set` value by value, in
        row order (columns are independent, so the order across columns does not matter)."""
        if not rows:
            return
        end = start + len(rows)
        if end - 1 >= self._capacity:  # the capacity put reaches at the last row (doubling is monotone)
            capacity = self._capacity
            while capacity <= end - 1:
                capacity *= 2
            for col in self._cols.values():
                col.grow(capacity)
            self._capacity = capacity
        n = len(rows)
        counts = Counter(chain.from_iterable(rows))  # keys in order of first appearance, and in how many rows
        for k, m in counts.items():
            if m == n:  # in every row (the usual case)
                self._put_column(k, start, list(map(itemgetter(k), rows)), None)
            else:
                values = [r.get(k, _ABSENT) for r in rows]
                self._put_column(k, start, values, [v is not _ABSENT for v in values])
        if end > self._n:
            self._n = end

    def _put_column(self, k: str, start: int, values, present: list[bool] | None) -> None:
        """Column ``k``'s values of rows ``start, ...`` (``present``: which rows have one; None: all)."""
        given = values if present is None else [v for v, p in zip(values, present) if p]
        col = self._cols.get(k)
        types = set(map(type, given))
        if col is None:
            t = type(given[0])
            col = self._cols[k] = _Column("i" if t is int else "f" if t is float else "o", self._capacity)
        end = start + len(values)
        if types == {float} and col.kind == "f" and col.ints is None:
            fast = True
        elif types == {int} and col.kind == "i":
            fast = _INT64[0] <= min(given) and max(given) < _INT64[1]
        else:
            fast = False
        if not fast:
            for i, v in enumerate(values, start):
                if present is None or present[i - start]:
                    col.set(i, v)
            return
        if present is None:
            col.data[start:end] = values
            col.present[start:end] = True
            return
        mask = np.asarray(present)
        col.data[start:end][mask] = given
        col.present[start:end][mask] = True

    def row(self, i: int) -> dict[str, Any]:
        """Row ``i`` as the dict that was put (values of a mixed int/float column keep their type)."""
        return {k: col.get(i) for k, col in self._cols.items() if col.present[i]}

    def nbytes(self) -> int:
        """Bytes held by the columns (their buffers; the capacity, not only the rows used)."""
        return sum(col.nbytes() for col in self._cols.values())

    def to_frame(self):
        """``pd.DataFrame`` of the rows, bitwise ``pd.DataFrame([row(i) for i in range(len(self))])``."""
        import pandas as pd

        n = self._n
        if n == 0:
            return pd.DataFrame([])
        out: dict[str, Any] = {}
        objects = [k for k, col in self._cols.items() if col.kind == "o"]
        if objects:  # pandas's own inference, column by column as it does for a list of dicts
            cols = [self._cols[k] for k in objects]
            frame = pd.DataFrame([{k: c.data[i] for k, c in zip(objects, cols) if c.present[i]} for i in range(n)])
        for k, col in self._cols.items():
            if col.kind == "o":
                out[k] = frame[k]
                continue
            present = col.present[:n]
            if col.kind == "i" and present.all():
                out[k] = col.data[:n].copy()
                continue
            data = col.data[:n].astype(np.float64)  # ints with missing values: float64, as pandas
            data[~present] = np.nan
            out[k] = data
        return pd.DataFrame(out, copy=False)  # fresh arrays: kept as they are, not copied into blocks


class MetricRows:
    """The metrics rows of a cluster: a sequence of dicts (``append``, ``len``, indexing, slicing,
    iteration) stored as a :class:`ColumnTable`; :meth:`to_frame` is ``pd.DataFrame(rows)``.

    Appended rows wait as dicts (a copy of each: a caller may go on using its own) and go into the table
    ``BLOCK`` at a time with :meth:`ColumnTable.put_rows` (one numpy assignment per column and block
    instead of two per value), or before any read; the table is then the one :meth:`ColumnTable.put` of
    each row would have built."""

    __slots__ = ("_table", "_pending")

    BLOCK = 256
    """Rows held as dicts before they go into the columns (at most this many dicts alive at once)."""

    def __init__(self, capacity: int = 64):
        self._table = ColumnTable(capacity)
        self._pending: list[dict] = []

    @property
    def table(self) -> ColumnTable:
        """The rows' :class:`ColumnTable` (every appended row in it)."""
        self._flush()
        return self._table

    def _flush(self) -> None:
        pending = self._pending
        if pending:
            self._table.put_rows(len(self._table), pending)
            pending.clear()

    def append(self, row: Mapping[str, Any]) -> None:
        pending = self._pending
        pending.append(dict(row))
        if len(pending) >= self.BLOCK:
            self._flush()

    def __len__(self) -> int:
        return len(self._table) + len(self._pending)

    def __getitem__(self, i):
        table = self.table
        n = len(table)
        if isinstance(i, slice):
            return [table.row(k) for k in range(*i.indices(n))]
        if not -n <= i < n:
            raise IndexError("row index out of range")
        return table.row(i % n)

    def __iter__(self) -> Iterator[dict]:
        table = self.table
        return (table.row(i) for i in range(len(table)))

    def __eq__(self, other) -> bool:
        if isinstance(other, (MetricRows, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def nbytes(self) -> int:
        return self.table.nbytes()

    def clear(self) -> None:
        """Drop every row (and the columns' buffers)."""
        self._table = ColumnTable()
        self._pending.clear()

    def to_frame(self):
        return self.table.to_frame()

    def __repr__(self) -> str:
        return f"MetricRows({len(self)} rows)"


class ReplicaRow(Mapping):
    """Row ``i`` of a :class:`ReplicaColumns`: a read-only mapping ``metric -> (R,)`` view, plus
    ``update`` (writes into the columns, as ``dict.update`` wrote into the row it replaces)."""

    __slots__ = ("_store", "_i")

    def __init__(self, store: ReplicaColumns, i: int):
        self._store, self._i = store, i

    def __getitem__(self, k: str) -> np.ndarray:
        present = self._store._present.get(k)
        if present is None or not present[self._i]:
            raise KeyError(k)
        return self._store._cols[k][self._i]

    def __iter__(self):
        i = self._i
        return (k for k, p in self._store._present.items() if p[i])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def update(self, values: Mapping[str, Any]) -> None:
        self._store.put(self._i, values)


class ReplicaColumns:
    """The learner's per-replica metrics, ``{metric: (capacity, R) float64}`` (NaN where a metric was
    not computed, the values cast to float64 by assignment, as the stacked arrays of per-step dicts
    were), a presence flag per metric and row; sized for ``capacity`` rows (``run.steps``), doubled
    past it. Reads as the list of per-step dicts it replaces (``len``, indexing, slicing, iteration:
    :class:`ReplicaRow`)."""

    def __init__(self, replicas: int, capacity: int = 64):
        self.R = int(replicas)
        self._capacity = max(int(capacity), 1)
        self._cols: dict[str, np.ndarray] = {}
        self._present: dict[str, np.ndarray] = {}
        self._n = 0
        # append_values's writes per tuple of metric names: [(the column, or its one-replica 1-D view, its flags)]
        self._layouts: dict[tuple[str, ...], list[tuple[np.ndarray, np.ndarray]]] = {}

    def __len__(self) -> int:
        return self._n

    def _grow(self, need: int) -> None:
        capacity = self._capacity
        while capacity < need:
            capacity *= 2
        for k, a in self._cols.items():
            grown = np.full((capacity, self.R), np.nan)
            grown[: len(a)] = a
            self._cols[k] = grown
            present = np.zeros(capacity, dtype=bool)
            present[: len(a)] = self._present[k]
            self._present[k] = present
        self._capacity = capacity
        self._layouts.clear()  # they view the replaced arrays

    def put(self, i: int, values: Mapping[str, Any]) -> None:
        if i >= self._capacity:
            self._grow(i + 1)
        for k, v in values.items():
            col = self._cols.get(k)
            if col is None:  # a metric given as None only still has its column (all NaN)
                col = self._cols[k] = np.full((self._capacity, self.R), np.nan)
                self._present[k] = np.zeros(self._capacity, dtype=bool)
            if v is not None:
                col[i] = v  # broadcast and cast to float64 by the assignment
            self._present[k][i] = True
        if i >= self._n:
            self._n = i + 1

    def append(self, values: Mapping[str, Any]) -> None:
        self.put(self._n, values)

    def append_values(self, keys: tuple[str, ...], values: list[float]) -> None:
        """``append(dict(zip(keys, values)))`` for a row of Python floats, one per metric (what a one-replica
        learner step gives): each value is written into its column (broadcast over the replicas, cast to
        float64 by the assignment, as ``append`` does with a ``(1,)`` array of it) and its presence flag set,
        through the columns (or, with one replica, their 1-D views) looked up once per tuple of names."""
        i = self._n
        layout = self._layouts.get(keys)
        if layout is None or i >= self._capacity:
            self.put(i, dict(zip(keys, values)))
            cols, present = self._cols, self._present
            self._layouts[keys] = [(cols[k][:, 0] if self.R == 1 else cols[k], present[k]) for k in keys]
            return
        for (col, present), x in zip(layout, values):
            col[i] = x
            present[i] = True
        self._n = i + 1

    def __getitem__(self, i):
        n = self._n
        if isinstance(i, slice):
            return [ReplicaRow(self, k) for k in range(*i.indices(n))]
        if not -n <= i < n:
            raise IndexError("row index out of range")
        return ReplicaRow(self, i % n)

    def __iter__(self):
        return (ReplicaRow(self, i) for i in range(self._n))

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._cols.values()) + sum(p.nbytes for p in self._present.values())

    def arrays(self) -> dict[str, np.ndarray]:
        """``{metric: (rows, R)}`` in sorted metric order (the columns themselves when they are full)."""
        n = self._n
        return {k: a if len(a) == n else a[:n].copy() for k, a in sorted(self._cols.items())}
