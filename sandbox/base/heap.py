"""Handing the C heap's free pages back to the operating system between the variants of a run
(without it, a run's peak memory grew with its length).

The end of a variant builds its tables, writes them and draws its figures, then frees all of it;
glibc's ``malloc`` keeps those freed pages in the process (its heap is only shrunk from the top, and
Python's and numpy's many mid-sized blocks leave it fragmented), so the next variant's end starts
from that high-water mark and adds its own fragments to it. ``malloc_trim(0)`` (glibc, ``man 3
malloc_trim``) returns every whole free page of every arena to the system (``madvise``), so each
variant's end starts again from what is really alive. It frees nothing that is in use and changes
no number and no byte; elsewhere than glibc (macOS, musl) it is a no-op.

Measured on the quickstart (3 variants, peak RSS by ``/usr/bin/time -f %M``, fresh processes, old
and new trees alternated): with figures, 478 -> 472 MB at 480 steps and 490 -> 484 MB at 1,920
(the slope unchanged, about 8.5 KB a step: the figures' own share); without figures, 456 -> 456 MB
and 465 -> 463 MB (slope 5.8 -> 4.8 KB a step).

A written run also releases after building its tables and after writing each parquet file
(:func:`sandbox.run.runner.run_scenario`), so that the three conversions' freed buffers do not stack.
Measured the same way (two rounds, each pair run side by side, all output files byte-identical):
without figures 450.7 -> 450.9 MB at 480 steps and 460.9 -> 459.4 MB at 1,920 (slope 7.1 -> 5.8 KB a
step); with figures 468.7 -> 468.8 MB and 481.1 -> 481.3 MB (slope 8.7 KB a step either way: the
peak is then in the figures, which read the whole jobs and events tables).

A run held in memory (no output directory: the checks, the claims, the benchmarks, many runs in one
process) does not release: its caller holds its tables, and the next run of the process reuses the free
heap, which, handed back, it had to fault in again page by page (the largest fixed cost of a short LM run
after the issue 48 rounds: ``benchmarks/README.md`` row 13; ``benchmarks/HISTORY.md``, section "Issue 48
round 4 (LM fixed cost)").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_TRIM = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _TRIM = _libc.malloc_trim
        _TRIM.argtypes, _TRIM.restype = [ctypes.c_size_t], ctypes.c_int
    except (OSError, AttributeError):  # not glibc: nothing to trim
        _TRIM = None


def release_free_heap() -> bool:
    """``malloc_trim(0)`` where the C library has it; True when it returned memory to the system."""
    return bool(_TRIM(0)) if _TRIM is not None else False
