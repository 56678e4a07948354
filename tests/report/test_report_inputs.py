"""``sandbox report`` on what one-replica runs and damaged files leave (issue 28): a speed-up measured
without an interval (one replica) crashed with a TypeError; a damaged summary.json with a
JSONDecodeError traceback."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.report.html import _generated_summary


def _summary(**kw) -> dict:
    s = {
        "status": "completed",
        "speedup_vs_sync": 3.6,
        "speedup_ci_low": None,
        "speedup_ci_high": None,
        "speedup_baseline": "sync",
        "target_rule": ">= 0.9",
        "throughput_gain_vs_sync": 2.0,
        "replicas": 1,
    }
    s.update(kw)
    return s


def test_a_speedup_without_interval_is_written_without_one(tmp_path):
    text = _generated_summary([("sync", tmp_path, _summary(speedup_vs_sync=1.0)), ("async", tmp_path, _summary())])
    assert "3.6× faster" in text and "no confidence interval" in text
    text = _generated_summary([("async", tmp_path, _summary(speedup_ci_low=2.0, speedup_ci_high=5.0))])
    assert "95% CI 2–5×" in text


def test_report_of_a_one_replica_multi_variant_run_directory(tmp_path):
    for name, speed in (("sync", 1.0), ("async", 3.6)):
        d = tmp_path / name
        d.mkdir()
        (d / "summary.json").write_text(json.dumps(_summary(speedup_vs_sync=speed, final_reward=0.5)))
        (d / "scenario.toml").write_text('title = "t"\n')
    res = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "report.html").read_text()
    assert "3.6×" in html and "no confidence interval" in html


def test_a_damaged_summary_is_one_error_naming_the_file(tmp_path):
    d = tmp_path / "async"
    d.mkdir()
    (d / "summary.json").write_text('{"status": "comp')
    res = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit)
    out = " ".join(res.output.split())  # rich wraps at spaces
    assert out.startswith("error:") and str(d / "summary.json") in out and "line 1, column 12" in out
