"""``sandbox.heap.release_free_heap``: freed C-heap pages go back to the system (issue 28)."""

from __future__ import annotations

import sys

import pytest

from sandbox.heap import _TRIM, release_free_heap


def _rss_kb() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 // 1024


@pytest.mark.skipif(not sys.platform.startswith("linux") or _TRIM is None, reason="glibc malloc_trim only")
def test_freed_pages_below_a_live_block_are_returned():
    # 1,600 blocks of 64 KiB (under glibc's mmap threshold: heap memory), then all freed but the
    # last, which pins the heap's top: free() cannot shrink the heap, only malloc_trim can
    blocks = [bytes(64 * 1024) for _ in range(1600)]  # 100 MiB
    pin = blocks[-1]
    del blocks
    before = _rss_kb()
    assert release_free_heap() is True
    after = _rss_kb()
    assert before - after > 50 * 1024, (before, after)  # most of the 100 MiB (sampling noise: pages, not MiB)
    del pin


def test_nothing_left_to_release_is_no_error():
    release_free_heap()
    assert release_free_heap() in (True, False)
