"""The results of a sweep: one table of runs, one table of per-step metrics.

``<out>/results.parquet`` has one row per run of the sweep: ``id``, every swept key as a column
(tables and lists as compact text), ``seed``, ``status`` (completed | diverged | failed | pending),
``error``, ``wall_s`` and the run summary (``final_reward``, ``throughput_samples_per_s``,
``staleness_mean``, ...). The time-to-target columns (``target_level``, ``time_to_target``,
``steps_to_target``, ``samples_to_target``, ...) are recomputed against the target of the run's
configuration, and ``speedup_vs_sync`` (with ``speedup_ci_low`` / ``speedup_ci_high``,
``throughput_gain_vs_sync``, ``sample_efficiency_vs_sync``, ``speedup_reason``,
``speedup_baseline``) is the configuration's end-to-end speed-up against its synchronous
baseline, the same on every seed of the configuration (``docs/time_to_target.md``;
:func:`load_time_to_target` gives one row per configuration). ``<out>/metrics.parquet`` holds the per-step metrics of every finished run
with an ``id`` column. Both are rebuilt from the run directories at any time, so they can never
disagree with what is on disk for long.

>>> from sandbox.sweep import load_results, load_metrics      # doctest: +SKIP
>>> df = load_results("runs/sweeps/lag_lr_quadratic")          # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from sandbox.analysis.time_to_target import sweep_comparison
from sandbox.base.outputs import write_json, write_table
from sandbox.base.readfile import read_own_json
from sandbox.sweep.spec import value_label

MANIFEST = "sweep.json"
RESULTS = "results.parquet"
METRICS = "metrics.parquet"
RUNS = "runs"

# summary fields kept as JSON text (not scalars)
_JSON_FIELDS = ("staleness_hist", "diverged_at")


def run_dir(out: Path, rid: str) -> Path:
    return Path(out) / RUNS / rid


def run_state(path: Path) -> str:
    """``done`` (summary.json present: the runner writes it last), ``failed`` (error.json) or ``pending``.
    A marker that is a symbolic link (not a file the sweep wrote) counts as absent: the run is run
    again and the link replaced."""
    if _marker(path / "summary.json"):
        return "done"
    if _marker(path / "error.json"):
        return "failed"
    return "pending"


def _marker(p: Path) -> bool:
    return p.is_file() and not p.is_symlink() and not p.parent.is_symlink()


def worker_died(path: Path) -> bool:
    """Whether the run at ``path`` failed because the process running it died (killed, out of
    memory, a lost node) rather than by raising: such a run is run again when the sweep resumes."""
    return bool((_read_json(path / "error.json") or {}).get("worker_died"))


def _read_json(path: Path) -> dict | None:
    try:  # bounded, no link followed: a FIFO or /dev/zero planted there is no file of ours
        return read_own_json(path)
    except ValueError:
        return None


def result_row(entry: dict, out: Path) -> dict[str, Any]:
    """One row of the results table for a manifest entry (``id``, ``params``, ``seed``)."""
    path = run_dir(out, entry["id"])
    row: dict[str, Any] = {"id": entry["id"]}
    for k, v in entry["params"].items():
        row[k] = value_label(v)
    row["seed"] = entry["seed"]
    state = run_state(path)
    summary = _read_json(path / "summary.json") if state == "done" else None
    if state == "done" and summary is None:
        state = "pending"  # unreadable summary: treat as unfinished
    timing = _read_json(path / "timing.json") or {}
    row["status"] = summary["status"] if summary else ("failed" if state == "failed" else "pending")
    err = _read_json(path / "error.json") if state == "failed" else None
    row["error"] = (err or {}).get("error", "") if state == "failed" else ""
    row["wall_s"] = float(timing.get("wall_s", math.nan))
    for k, v in (summary or {}).items():
        if k in _JSON_FIELDS or isinstance(v, (dict, list)):
            row[k] = json.dumps(v)
        elif k != "status":
            row[k] = v
    return row


def results_frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    if "id" not in df:
        df = pd.DataFrame(columns=["id", "seed", "status", "error", "wall_s"])
    return df


def write_results(out: Path, rows: list[dict]) -> pd.DataFrame:
    df = with_time_to_target(results_frame(rows), out)
    write_table(Path(out) / RESULTS, df)
    return df


def with_time_to_target(df: pd.DataFrame, out: str | Path) -> pd.DataFrame:
    """``df`` with the time-to-target and speed-up columns of its finished runs (module docstring)."""
    if df.empty or "status" not in df:
        return df
    per_run, _, _ = sweep_comparison(df, out, read_manifest(out)["axes"], run_dir)
    df = df.copy()
    for col in per_run.columns:
        df[col] = per_run[col]
    return df


def load_time_to_target(out: str | Path) -> pd.DataFrame:
    """One row per configuration of a sweep (the swept values, seeds pooled): the target level and
    how it was set, the mean time, steps and samples to reach it with a bootstrap interval of the
    time, and the end-to-end speed-up against the synchronous baseline with its interval, throughput
    gain and sample-efficiency ratio (``docs/time_to_target.md``). The first columns are the swept
    keys, one column each with the configuration's value as :func:`load_results` has it, then
    ``configuration`` (its label). Reads the run directories, writes nothing."""
    out = Path(out)
    manifest = read_manifest(out)
    df = results_frame([result_row(e, out) for e in manifest["runs"]])
    _, table, comp = sweep_comparison(df, out, manifest["axes"], run_dir)
    keys = [k for group in manifest["axes"] for k in group if k in df.columns]
    if comp is None or table.empty or not keys:
        return table
    by_id = df.set_index("id")
    values = []
    for label in table["configuration"]:
        ids = [r for r in comp.arm(label).run_ids if r in by_id.index]
        values.append({k: by_id.at[ids[0], k] if ids else None for k in keys})
    return pd.concat([pd.DataFrame(values, index=table.index), table], axis=1)


def time_to_target_comparison(out: str | Path):
    """The :class:`sandbox.analysis.time_to_target.Comparison` of a sweep (what the report's
    time-to-target figure draws); None when no run is finished."""
    out = Path(out)
    manifest = read_manifest(out)
    df = results_frame([result_row(e, out) for e in manifest["runs"]])
    return sweep_comparison(df, out, manifest["axes"], run_dir)[2]


def collect_metrics(out: Path, ids: list[str]) -> pd.DataFrame:
    frames = []
    for rid in ids:
        path = run_dir(out, rid)
        if run_state(path) != "done":
            continue
        try:
            m = pd.read_parquet(path / "metrics.parquet")
        except (OSError, ValueError):
            continue
        m.insert(0, "id", rid)
        frames.append(m)
    if not frames:
        return pd.DataFrame(columns=["id", "step", "time"])
    return pd.concat(frames, ignore_index=True, sort=False)


def write_metrics(out: Path, ids: list[str]) -> pd.DataFrame:
    df = collect_metrics(out, ids)
    write_table(Path(out) / METRICS, df)
    return df


def read_manifest(out: Path) -> dict:
    data = _read_json(Path(out) / MANIFEST)
    if data is None:
        raise FileNotFoundError(f"{out} is not a sweep directory (no readable {MANIFEST})")
    return data


def write_manifest(out: Path, manifest: dict) -> None:
    write_json(Path(out) / MANIFEST, manifest)


def refresh(out: str | Path) -> pd.DataFrame:
    """Rebuild ``results.parquet`` and ``metrics.parquet`` from the run directories."""
    out = Path(out)
    manifest = read_manifest(out)
    rows = [result_row(e, out) for e in manifest["runs"]]
    df = write_results(out, rows)
    write_metrics(out, [e["id"] for e in manifest["runs"]])
    return df


def load_results(out: str | Path, refresh_tables: bool = False) -> pd.DataFrame:
    """The runs of a sweep as a DataFrame (one row per run: id, swept keys, seed, status, error,
    summary). Rebuilt from the run directories when the table is missing or ``refresh_tables``."""
    out = Path(out)
    if refresh_tables or not (out / RESULTS).exists():
        return refresh(out)
    return pd.read_parquet(out / RESULTS)


def load_metrics(out: str | Path, with_params: bool = True, refresh_tables: bool = False) -> pd.DataFrame:
    """Per-step metrics of every finished run, with an ``id`` column; with ``with_params`` also the
    swept keys, ``seed`` and ``status`` of each run (joined from the results table)."""
    out = Path(out)
    if refresh_tables or not (out / METRICS).exists():
        refresh(out)
    m = pd.read_parquet(out / METRICS)
    if not with_params:
        return m
    res = load_results(out)
    keys = param_columns(out) + ["seed", "status"]
    keys = [k for k in keys if k in res.columns and k not in m.columns]
    return m.merge(res[["id"] + keys], on="id", how="left")


def param_columns(out: str | Path) -> list[str]:
    """The swept keys of a sweep, in axis order (the table columns that define a run)."""
    manifest = read_manifest(Path(out))
    return [k for group in manifest["axes"] for k in group]
