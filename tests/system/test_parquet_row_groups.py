"""``outputs.write_table`` writes a table one parquet row group at a time and its file is, byte for
byte, the one ``DataFrame.to_parquet(index=False)`` writes (pyarrow's default row-group length,
``outputs.ROW_GROUP``), for tables below, at and above that length, in the dtypes of a run's tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from sandbox.outputs import ROW_GROUP, write_table


def _frame(n: int, seed: int = 0) -> pd.DataFrame:
    """The dtypes of the jobs, events and metrics tables: int64, float64 with NaN, pandas strings."""
    rng = np.random.default_rng(seed)
    kinds = np.array(["dispatch", "finish", "consume", "drop"], dtype=object)
    return pd.DataFrame({
        "time": rng.random(n).cumsum(),
        "kind": pd.array(kinds[rng.integers(0, len(kinds), n)], dtype="str"),
        "worker": rng.integers(0, 8, n),
        "job": np.arange(n, dtype=np.int64),
        "dropped_at": rng.integers(-1, 50, n),
        "loss": np.where(rng.random(n) < 0.1, np.nan, rng.random(n)),
    })


def _same_bytes(tmp_path, df: pd.DataFrame) -> int:
    ours, theirs = tmp_path / "ours.parquet", tmp_path / "theirs.parquet"
    write_table(ours, df)
    df.to_parquet(theirs, index=False)
    assert ours.read_bytes() == theirs.read_bytes()
    return pq.ParquetFile(ours).metadata.num_row_groups


def test_row_group_length_is_pyarrows_default():
    import inspect

    assert inspect.signature(pq.write_table).parameters["row_group_size"].default is None
    assert "1024 * 1024" in (pq.ParquetWriter.write_table.__doc__ or "")  # what None means (pyarrow 26)
    assert ROW_GROUP == 1024 * 1024


@pytest.mark.parametrize("n, groups", [(0, 1), (10, 1), (ROW_GROUP - 1, 1), (ROW_GROUP, 1), (ROW_GROUP + 1, 2)])
def test_same_file_as_to_parquet(tmp_path, n, groups):
    assert _same_bytes(tmp_path, _frame(n)) == groups


def test_same_file_several_row_groups(tmp_path):
    assert _same_bytes(tmp_path, _frame(5 * ROW_GROUP // 2, seed=1)) == 3  # 2.5 row groups


def test_same_file_nulls_only_in_a_later_row_group(tmp_path):
    """A column whose first row group holds no NaN and a later one does: the schema is the whole table's."""
    df = _frame(ROW_GROUP + 5, seed=2)
    df["loss"] = np.where(np.arange(len(df)) >= ROW_GROUP, np.nan, 1.0)
    assert _same_bytes(tmp_path, df) == 2


def test_attrs_kept(tmp_path):
    df = _frame(10)
    df.attrs["note"] = "x"
    _same_bytes(tmp_path, df)
