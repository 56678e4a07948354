"""Sweeps: a base scenario plus axes (grid and zipped lists) and seeds, run in parallel local
processes or on a Ray cluster, resumable after an interruption, collected into one table.

>>> from sandbox.sweep import load_sweep, run_sweep, load_results   # doctest: +SKIP
>>> outcome = run_sweep(load_sweep("scenarios/sweeps/lag_lr_quadratic.toml"))   # doctest: +SKIP
>>> df = load_results(outcome.out)                                   # doctest: +SKIP
"""

from .execute import SweepError, SweepOutcome, default_out, execute_run, run_sweep
from .results import load_metrics, load_results, load_time_to_target, param_columns, read_manifest, refresh
from .spec import RunSpec, SweepSpec, is_label_key, load_sweep, parse_sweep, run_id, value_label

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
