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


@contextmanager
def collected_on_exit():
    """Collect, when the block ends, the cycles that died in it: a full collection over the objects
    created in the block only. The objects alive when it starts are frozen (``gc.freeze``: moved to
    the permanent generation, which no collection scans) and unfrozen after the collection
    (``gc.unfreeze``: back into the oldest generation, where the collector finds any garbage among
    them later as it would have). Frozen objects count as referenced from outside, so nothing they
    reach is freed: the same objects are freed as by ``gc.collect()`` at the end of the block, except
    garbage older than the block, which waits for a later collection.

    Why: ``sandbox run`` drops each variant's cluster and learner (reference cycles) before the next
    variant; a plain full collection walks every object of the process, which in a long-lived process
    (a test session, the component checker: hundreds of thousands of objects) took about 1.3 s per
    variant, a third of a component check (``tests/components``), against milliseconds for the block's
    own objects. When something else froze objects before (a fork server), the freeze is left alone and
    the block ends with a plain ``gc.collect()``."""
    own = gc.get_freeze_count() == 0
    if own:
        gc.freeze()
    try:
        yield
    finally:
        gc.collect()
        if own:
            gc.unfreeze()
