"""The shared progress helper (sandbox.base.progress): tasks are inert outside a session, recorded in a
recording session, weighted ETAs come from the completed units, and the display is off when stderr
is not a terminal or the command is quiet."""

from __future__ import annotations

import os

import pytest

from sandbox.base import progress


def test_tasks_are_inert_outside_a_session():
    assert not progress.active()
    with progress.task("work", total=3) as t:
        t.advance()
        t.advance_to(3, info="x")
    assert t.done == 3 and t.completed == 3.0


def test_recording_nests_and_counts():
    with progress.recording() as rec:
        assert progress.active()
        with progress.task("outer", total=2, unit="items") as outer:
            with progress.phase("inner phase"):
                pass
            outer.advance(info="first")
            outer.advance(info="second")
    assert not progress.active()
    outer_rec, inner_rec = rec.tasks.values()
    assert (outer_rec.description, outer_rec.depth, outer_rec.count, outer_rec.unit) == ("outer", 0, 2, "items")
    assert (inner_rec.description, inner_rec.depth, inner_rec.total) == ("inner phase", 1, None)
    assert outer_rec.updates == [(1, 1.0, "first"), (2, 2.0, "second")]
    assert rec.events == [("start", "outer"), ("start", "inner phase"), ("stop", "inner phase"), ("stop", "outer")]


def test_weighted_units_count_by_unit_and_weigh_the_eta():
    with progress.recording() as rec:
        with progress.task("runs", weights=[1.0, 3.0]) as t:
            t.advance()
    (r,) = rec.tasks.values()
    assert r.count == 2 and r.total == 4.0
    assert r.updates == [(1, 1.0, "")]  # one unit done, a quarter of the work
    # remaining = elapsed x (total - completed) / completed: 10 s for the first quarter -> 30 s more
    assert progress.eta_seconds(10.0, 1.0, 4.0) == pytest.approx(30.0)
    assert progress.eta_seconds(10.0, 0.0, 4.0) is None  # nothing done yet: no ETA
    assert progress.format_eta(3725) == "ETA 1:02:05" and progress.format_eta(None) == "ETA -:--:--"


def test_a_forked_worker_never_draws(monkeypatch):
    with progress.recording():
        real = os.getpid()
        monkeypatch.setattr(os, "getpid", lambda: real + 1)
        assert not progress.active()


def test_display_is_off_when_quiet_or_not_a_terminal(monkeypatch):
    monkeypatch.delenv(progress.ENV, raising=False)
    assert progress.enabled(quiet=False) is False  # pytest's stderr is not a terminal
    monkeypatch.setenv(progress.ENV, "1")
    assert progress.enabled(quiet=False) is True
    assert progress.enabled(quiet=True) is False
    monkeypatch.setenv(progress.ENV, "0")
    assert progress.enabled(quiet=False) is False


def test_rich_display_has_the_columns():
    """Description, bar, done/total, elapsed and ETA, drawn on a terminal console."""
    import io

    from rich.console import Console

    buf = io.StringIO()
    sink = progress.RichSink(Console(file=buf, force_terminal=True, width=160))
    with progress.session(True, sink=sink):
        with progress.task("simulating", total=4, unit="steps") as t:
            t.advance(info="t=1.0s")
    text = buf.getvalue()
    for piece in ("simulating", "1/4 steps", "t=1.0s", "ETA"):
        assert piece in text, (piece, text)
