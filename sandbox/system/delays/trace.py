"""Trace-driven delay (``docs/system.md#trace``): durations measured on a real cluster, read from a
CSV or JSONL file, either resampled or fitted by a cost model.

File format (``docs/system.md#trace``): one row per measured job (a generation call, a learner
step, a weight sync); a CSV file with a header row, or a JSONL file with one JSON object per line.
Columns: ``seconds`` (the measured duration, required), ``tokens`` (the work: decode steps of the
generation call, i.e. its longest response, or the batch's token count; required to fit), and any
others (``step``, ``prompt_tokens``, ...), which are ignored. ``time_column`` / ``tokens_column``
rename the two read.

* ``mode = "resample"``: each draw is the ``seconds`` of a row picked uniformly from the timing
  random stream (the empirical distribution, Efron 1979's bootstrap resampling);
* ``mode = "fit"``: ``seconds ≈ prefill + per_token · tokens`` by least squares (constrained to
  ``prefill, per_token ≥ 0``: when the unconstrained fit makes one negative, it is set to 0 and the
  other refitted), with a multiplicative log-normal residual ``σ`` = the standard deviation of
  ``log(seconds / fitted)`` over the rows with both positive; a draw is
  ``(prefill + per_token · tokens) · exp(σ z − σ²/2)``, ``z ~ N(0, 1)``, whose mean is the fitted
  line (the correction ``−σ²/2`` makes the factor mean one). The fitted model times generation token by
  token like ``cost_model``, so it also drives ``system.partial_rollouts``.

A relative ``path`` is resolved against the scenario file that names it (``sandbox.scenario.load``
does it when it reads the file) and otherwise against the current directory. The file is only
read, once per (path, modification time, size), never written; a bad file is refused when the
scenario loads, with the line and the column at fault. It must be a regular file (a FIFO, a device or
a directory is refused rather than read forever) of at most 256 MiB of UTF-8 text
(``sandbox.base.readfile``); a CSV field over 131,072 characters (the ``csv`` module's limit) is refused
naming its line.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, PrivateAttr

from sandbox.base.readfile import TRACE_LIMIT, InputFileError, read_text
from sandbox.system.delays.base import DELAYS, Delay

FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
_CACHE: dict[tuple, tuple[np.ndarray, np.ndarray | None]] = {}


class TraceError(ValueError):
    """A trace file that cannot be used; the message names the file, the line and the column."""


def read_trace(
    path: str | Path, time_column: str = "seconds", tokens_column: str | None = "tokens", tokens_required: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """``(seconds, tokens)`` of a trace file (``tokens`` None when the column is absent and not
    required); :class:`TraceError` naming the line and the column of the first bad value."""
    path = Path(path)
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise TraceError(f"{path}: unknown trace format {path.suffix!r}; expected a .csv or .jsonl file")
    try:
        stat = path.stat()
        key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size, time_column, tokens_column, tokens_required)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace ({exc.strerror or exc})") from None
    if key not in _CACHE:
        _CACHE[key] = _parse(path, fmt, time_column, tokens_column, tokens_required)
    return _CACHE[key]


def _rows(path: Path, fmt: str):
    """``(line number, {column: raw value})`` per data row; the CSV header is line 1. The file is
    read through :func:`sandbox.base.readfile.read_text`: a regular file (a FIFO, a device or a directory
    is refused), at most :data:`~sandbox.base.readfile.TRACE_LIMIT` (256 MiB) of UTF-8 text."""
    try:
        text = read_text(path, TRACE_LIMIT, "trace")
    except InputFileError as exc:
        raise TraceError(str(exc)) from None
    if fmt == "csv":
        reader = csv.DictReader(io.StringIO(text, newline=""))
        try:
            if reader.fieldnames is None:
                return [], []
            header = [c.strip() for c in reader.fieldnames]
            rows = []
            for row in reader:
                if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
                    continue  # a blank line
                if None in row:
                    raise TraceError(
                        f"{path} line {reader.line_num}: more values than the {len(header)} columns of the header"
                    )
                rows.append((reader.line_num, {k.strip(): v for k, v in row.items()}))
        except csv.Error as exc:
            line = reader.reader.line_num or 1  # the csv reader counts the line it failed on; DictReader not yet
            if "field larger than field limit" in str(exc):
                raise TraceError(
                    f"{path} line {line}: a field longer than {csv.field_size_limit():,} characters "
                    "(the CSV reader's limit); is this a CSV trace?"
                ) from None
            raise TraceError(f"{path} line {line}: not valid CSV ({exc})") from None
        return header, rows
    rows, header = [], []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path} line {n}: not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise TraceError(f"{path} line {n}: JSON nested too deeply; expected an object of numbers") from None
        if not isinstance(obj, dict):
            raise TraceError(
                f"{path} line {n}: expected a JSON object with the columns as keys, got {type(obj).__name__}"
            )
        header.extend(k for k in obj if k not in header)
        rows.append((n, obj))
    return header, rows


def _number(path: Path, line: int, column: str, raw) -> float:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raise TraceError(f"{path} line {line}, column {column!r}: empty; every row needs a value")
    if isinstance(raw, bool):
        raise TraceError(f"{path} line {line}, column {column!r}: {raw!r} is not a number")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise TraceError(f"{path} line {line}, column {column!r}: {raw!r} is not a number") from None
    if not math.isfinite(value):
        raise TraceError(f"{path} line {line}, column {column!r}: {raw!r} is not finite")
    if value < 0:
        raise TraceError(f"{path} line {line}, column {column!r}: {value:g} is negative; the values must be >= 0")
    return value


def _parse(path: Path, fmt: str, time_column: str, tokens_column: str | None, tokens_required: bool):
    header, rows = _rows(path, fmt)
    if not rows:
        raise TraceError(f"{path}: no data rows (an empty trace)")
    if time_column not in header:
        raise TraceError(
            f"{path}: no column {time_column!r} (the durations in seconds); columns: {', '.join(map(str, header))}"
        )
    with_tokens = tokens_column is not None and tokens_column in header
    if tokens_required and not with_tokens:
        raise TraceError(
            f"{path}: no column {tokens_column!r} (the tokens of each row), which mode = 'fit' needs; "
            f"columns: {', '.join(map(str, header))}"
        )
    seconds = np.empty(len(rows))
    tokens = np.empty(len(rows)) if with_tokens else None
    for i, (line, row) in enumerate(rows):
        if time_column not in row:
            raise TraceError(f"{path} line {line}, column {time_column!r}: missing")
        seconds[i] = _number(path, line, time_column, row[time_column])
        if tokens is not None:
            if tokens_column not in row:
                raise TraceError(f"{path} line {line}, column {tokens_column!r}: missing")
            tokens[i] = _number(path, line, tokens_column, row[tokens_column])
    return seconds, tokens


def fit_cost(tokens: np.ndarray, seconds: np.ndarray) -> tuple[float, float, float]:
    """``(prefill, per_token, sigma)``: least squares of ``seconds = prefill + per_token · tokens``
    with both coefficients ≥ 0, and the standard deviation of the log residual ratio."""
    t, d = np.asarray(tokens, dtype=float), np.asarray(seconds, dtype=float)
    if np.ptp(t) > 0:
        per_token, prefill = np.polyfit(t, d, 1)
    else:
        per_token, prefill = 0.0, float(d.mean())
    if per_token < 0:
        per_token, prefill = 0.0, float(d.mean())
    elif prefill < 0:
        prefill, per_token = 0.0, float((t @ d) / (t @ t))
    fitted = prefill + per_token * t
    ok = (d > 0) & (fitted > 0)
    sigma = float(np.std(np.log(d[ok] / fitted[ok]))) if ok.sum() >= 2 else 0.0
    if sigma < 1e-9:  # the rounding noise of an exact fit: no jitter, so draws equal the fitted line
        sigma = 0.0
    return float(prefill), float(per_token), sigma


class TraceDelay(Delay):
    """Durations from a measured trace (CSV or JSONL): resampled, or fitted as prefill + per-token
    time with log-normal residual jitter (module docstring; ``docs/system.md#trace``)."""

    kind: Literal["trace"] = "trace"
    path: str = Field(
        ...,
        min_length=1,
        description="Trace file (.csv with a header row, or .jsonl), relative to the "
        "scenario file; read only (docs/system.md#trace).",
    )
    mode: Literal["resample", "fit"] = Field(
        "resample",
        description="resample: draw a row's duration uniformly; fit: "
        "least-squares prefill + per_token · tokens with log-normal residual jitter.",
    )
    time_column: str = Field(
        "seconds", min_length=1, description="Column holding the measured durations in seconds (>= 0)."
    )
    tokens_column: str = Field(
        "tokens",
        min_length=1,
        description="Column holding the work of each row in tokens "
        "(decode steps of a generation call, the batch's tokens of a learner step); needed by fit.",
    )

    mean_check_note: ClassVar[str] = " (trace fit: checked as max(prefill + per_token, 1))"
    check_settings: ClassVar[dict] = {"path": "{workdir}/trace.csv"}
    check_files: ClassVar[dict] = {"trace.csv": "seconds,tokens\n0.5,10\n1.0,20\n1.5,30\n"}
    """A tiny trace for the component checker (``sandbox.component_check``)."""
    _seconds: np.ndarray | None = PrivateAttr(None)
    _fit: tuple[float, float, float] | None = PrivateAttr(None)

    def _load(self) -> None:
        if self._seconds is not None:
            return
        seconds, tokens = read_trace(self.resolved_path(), self.time_column, self.tokens_column, self.mode == "fit")
        if self.mode == "fit":
            if np.ptp(tokens) == 0:
                raise TraceError(
                    f"{self.path}: every row has {self.tokens_column} = {tokens[0]:g}, so a time per token "
                    "cannot be fitted; use mode = 'resample', or a trace with varied lengths"
                )
            self._fit = fit_cost(tokens, seconds)
        self._seconds = seconds

    def resolved_path(self) -> Path:
        return Path(os.path.expanduser(self.path))

    # per-token timing (partial rollouts) when fitted: ``prefill`` and ``per_token_time``
    @property
    def per_token_model(self) -> bool:  # type: ignore[override]
        return self.mode == "fit"

    @property
    def fitted(self) -> tuple[float, float, float]:
        """``(prefill, per_token, sigma)`` of mode = 'fit'."""
        self._load()
        if self._fit is None:
            raise ValueError("trace: mode = 'resample' has no fitted cost model")
        return self._fit

    @property
    def prefill(self) -> float:
        return self.fitted[0]

    def per_token_time(self, rng: np.random.Generator) -> float:
        _, per_token, sigma = self.fitted
        return per_token * math.exp(rng.normal(0.0, sigma) - sigma**2 / 2) if sigma > 0 else per_token

    def sample(self, rng, tokens=0):
        self._load()
        if self._fit is None:
            return float(self._seconds[int(rng.integers(len(self._seconds)))])
        prefill, per_token, sigma = self._fit
        base = prefill + per_token * tokens
        return float(base * math.exp(rng.normal(0.0, sigma) - sigma**2 / 2)) if sigma > 0 else base

    def expected(self, tokens=0.0):
        self._load()
        if self._fit is None:
            return float(np.mean(self._seconds))
        return self._fit[0] + self._fit[1] * tokens

    def _mean_for_check(self) -> float:
        self._load()  # a bad trace is refused here, when the scenario is validated
        if self._fit is None:
            return self.expected()
        return max(self._fit[0] + self._fit[1], 1.0)


DELAYS.register(TraceDelay, TraceDelay)
