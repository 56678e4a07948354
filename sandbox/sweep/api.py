"""The public names of :mod:`sandbox.sweep` (its ``__init__`` stays light, so that the command module loads without them)."""

from __future__ import annotations

from sandbox.sweep.execute import SweepError, SweepOutcome, default_out, execute_run, run_sweep
from sandbox.sweep.results import load_metrics, load_results, load_time_to_target, param_columns, read_manifest, refresh
from sandbox.sweep.spec import RunSpec, SweepSpec, is_label_key, load_sweep, parse_sweep, run_id, value_label

__all__ = [
    "RunSpec",
    "SweepSpec",
    "SweepError",
    "SweepOutcome",
    "default_out",
    "execute_run",
    "is_label_key",
    "load_metrics",
    "load_results",
    "load_time_to_target",
    "load_sweep",
    "param_columns",
    "parse_sweep",
    "read_manifest",
    "refresh",
    "run_id",
    "run_sweep",
    "value_label",
]
