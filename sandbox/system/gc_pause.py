"""Pausing Python's cyclic garbage collector around a timing-only simulation.

A simulation without learning (:func:`sandbox.system.timing_only.simulate_timing`,
:func:`sandbox.system.schedule.record_schedule`) allocates a few small objects per event and keeps
one :class:`~sandbox.system.cluster.Job` record per job. The cyclic collector, triggered by those
allocations, rescans the growing set of surviving records again and again: 20–30% of a 500-step
schedule (``benchmarks/bench_seeds.py``). Pausing it changes no number and bounds no memory worse:
what dies during the run is freed by reference counting at once, and the only cycle the run makes is
the cluster itself (its processes refer back to it), which lives until the run ends anyway.

When the block ends, that cycle is dead (the simulation function has returned) and young: nothing
was collected during the block, so one collection of the youngest generation frees it. Left to the
collector, the block's objects would instead be scanned by a young collection, promoted, scanned
again by the middle one and promoted again, as much work as the pause saved.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def paused_cyclic_gc():
    """Disable the cyclic collector for the block; at its end collect the youngest generation and
    restore the collector's previous state (an inner block leaves both to the outermost). Wrap a
    call whose frame holds the simulation, so that it is garbage when the block ends."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.collect(0)
            gc.enable()
