"""Worker processes for the parts of the simulator that run in parallel (sweeps, the schedules of
independent replicas)."""

from __future__ import annotations


def pool_context():
    """forkserver where available: a clean server process (no threads: forking after torch has
    started its thread pools is unsafe) that imports the simulator once and forks each worker from
    it, so workers start in milliseconds instead of re-importing torch; spawn elsewhere."""
    import multiprocessing as mp

    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["sandbox.sweep._preload"])
        return ctx
    return mp.get_context("spawn")
