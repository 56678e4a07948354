"""Sweeps: a base scenario plus axes (grid and zipped lists) and seeds, run in parallel local
processes or on a Ray cluster, resumable after an interruption, collected into one table.

>>> from sandbox.sweep import load_sweep, run_sweep, load_results   # doctest: +SKIP
>>> outcome = run_sweep(load_sweep("scenarios/sweeps/lag_lr_quadratic.toml"))   # doctest: +SKIP
>>> df = load_results(outcome.out)                                   # doctest: +SKIP
"""

from sandbox.base.lazy_api import api_getattr

__getattr__ = api_getattr(__name__)
