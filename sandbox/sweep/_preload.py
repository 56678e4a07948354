"""Imported once by the forkserver that forks the sweep's worker processes: everything a run
needs that is slow to import (torch, its compiler front end that the optimizers load lazily,
sympy for the theory predictions, pandas/pyarrow), so each forked worker starts warm.
Importing leaves no thread of ours running, so forking afterwards is safe. The forkserver imports
:mod:`sandbox.base._forkserver` before this module (before the package ``sandbox.sweep`` starts importing
torch), which binds the server and every worker it forks to the command's life
(:mod:`sandbox.base.processes`)."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pandas  # noqa: E402,F401
import pyarrow.parquet  # noqa: E402,F401
import torch  # noqa: E402,F401

try:  # loaded lazily by torch.optim on the first step (about 1.5 s)
    import torch._dynamo  # noqa: E402,F401
except Exception:  # pragma: no cover - optional speed-up only
    pass
try:
    import sympy  # noqa: E402,F401
except Exception:  # pragma: no cover
    pass

import sandbox.run.runner  # noqa: E402,F401
import sandbox.sweep.execute  # noqa: E402,F401
