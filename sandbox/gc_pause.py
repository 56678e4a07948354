"""Pausing Python's cyclic garbage collector around work that builds many long-lived objects and
then drops them together.

Two such jobs: a timing-only simulation (:func:`sandbox.system.timing_only.simulate_timing`,
:func:`sandbox.system.schedule.record_schedule`) keeps one :class:`~sandbox.system.cluster.Job`
record per job, and a figure is tens of thousands of matplotlib objects alive until it is closed.
Collections triggered by those allocations rescan the growing set of survivors again and again, and
the full collections their number triggers walk every object of the process (hundreds of thousands
once torch and pandas are loaded): 20–30% of a 500-step schedule (``benchmarks/bench_seeds.py``),
about a fifth of a run's figure time (``benchmarks/bench_learner.py``). Pausing the collector changes
no number and no byte and costs no memory: what dies during the block is freed by reference counting
at once, and the cycles it makes (the cluster, whose processes refer back to it; a closed figure)
live until the block ends anyway.

When the block ends those cycles are dead (the function that held them has returned) and young:
nothing was collected during the block, so one collection of the youngest generation frees them.
Left to the collector, the block's objects would instead be scanned by a young collection, promoted,
scanned again by the middle one and promoted again, as much work as the pause saved.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def paused_cyclic_gc():
    """Disable the cyclic collector for the block; at its end collect the youngest generation and
    restore the collector's previous state (an inner block leaves both to the outermost). Wrap a
    call whose frame holds the objects, so that they are garbage when the block ends; also a
    decorator (``@paused_cyclic_gc()``)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.collect(0)
            gc.enable()
