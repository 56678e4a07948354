"""``sandbox.base.heap.release_free_heap``: freed C-heap pages go back to the system (issue 28)."""

from __future__ import annotations

import sys

import pytest

from sandbox.base.heap import _TRIM, release_free_heap


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


def test_a_written_run_releases_the_heap_after_its_tables_and_after_each_file(tmp_path, monkeypatch):
    """``run_scenario`` with an output directory hands freed pages back after building the tables and
    after writing each of them, so that the three conversions to parquet do not stack their peaks
    (issue 28; the measured effect is in ``sandbox/run/runner.py``'s ``_write_into``)."""
    import sandbox.run.runner as runner
    from sandbox.scenario.api import validate_scenario

    calls: list[str] = []
    write_table = runner.write_table
    monkeypatch.setattr(runner, "release_free_heap", lambda: calls.append("release") or True)
    monkeypatch.setattr(runner, "write_table", lambda path, df: (calls.append(path.name), write_table(path, df))[1])
    scn = validate_scenario(
        {
            "task": {"name": "bitstring", "horizon": 8},
            "algorithm": {"group_size": 2, "groups_per_step": 2},
            "run": {"steps": 3, "figures": False},
        }
    )
    runner.run_scenario(scn, tmp_path / "run", force=True)
    assert calls == [
        "release",
        "release",
        "metrics.parquet",
        "release",
        "jobs.parquet",
        "release",
        "events.parquet",
        "release",
    ], calls
    assert (tmp_path / "run" / "summary.json").is_file()


def test_a_run_held_in_memory_does_not_release(monkeypatch):
    """Without an output directory the caller holds the tables and the process's next run reuses the free
    heap: nothing is handed back (its pages would be faulted in again by that run)."""
    import sandbox.run.runner as runner
    from sandbox.scenario.api import validate_scenario

    calls: list[str] = []
    monkeypatch.setattr(runner, "release_free_heap", lambda: calls.append("release") or True)
    scn = validate_scenario(
        {
            "task": {"name": "bitstring", "horizon": 8},
            "algorithm": {"group_size": 2, "groups_per_step": 2},
            "run": {"steps": 3, "figures": False},
        }
    )
    result = runner.run_scenario(scn, force=True)
    assert calls == [] and len(result.metrics) == 3
