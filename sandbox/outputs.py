"""The run directory: resolved scenario, metrics table, event log, jobs, summary, figures.

Every file is written atomically (temporary file in the same directory, then ``os.replace``), so
an interrupted run never leaves a half-written result that looks complete.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp_path)`` and move the result to ``path`` in one step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda p: p.write_text(text))


def write_json(path: Path, obj) -> None:
    write_text(path, json.dumps(obj, indent=2, default=_json_default, allow_nan=True) + "\n")


def write_table(path: Path, df: pd.DataFrame) -> None:
    atomic_write(path, lambda p: df.to_parquet(p, index=False))


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    def w(p: Path) -> None:
        with open(p, "wb") as fh:
            np.savez_compressed(fh, **arrays)

    atomic_write(path, w)


def _json_default(o):
    if isinstance(o, np.generic):  # numpy scalars: bool_, integer, floating
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o)}")
