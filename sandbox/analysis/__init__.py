"""Results derived from finished runs (never from the simulation itself): time-to-target and the
end-to-end speed-up against synchronous training (``docs/time_to_target.md``).

The package imports nothing heavy at import time (numpy, pandas, pydantic only), so the runner,
sweeps and reports can all use it."""

from sandbox.analysis.time_to_target import TargetConfig

__all__ = ["TargetConfig"]
