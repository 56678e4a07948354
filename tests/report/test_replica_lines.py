"""Sweep figures show every replica, not only a mean over them: a planted collapsed replica (its
reward falls to 0) is a thin line of the learning-curve and time-to-target figures (its ``gid`` in
the SVG), a dot of the summary figure, and the title counts it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import sandbox.report.figures as F
from sandbox.analysis.time_to_target import Curves, replica_series

STEPS = 20
RUNS = {"a0": ("sync", 0), "a1": ("sync", 1), "b0": ("none", 0), "b1": ("none", 1)}
COLLAPSED = ("b1", 1)  # run b1's replica 1 falls to 0


def _curves(rid: str) -> Curves:
    step = np.arange(STEPS, dtype=float)
    values = np.stack([np.linspace(0.1, 0.9, STEPS), np.linspace(0.1, 0.8, STEPS)], axis=1)
    if rid == COLLAPSED[0]:
        values[:, COLLAPSED[1]] = np.linspace(0.1, 0.0, STEPS)
    counts = {"samples": (step + 1) * 16, "generated": (step + 1) * 16, "tokens": np.zeros(STEPS)}
    return Curves("eval/expected_reward", True, step, step * 0.5, counts, values, float(values[-2:].mean()))


@pytest.fixture(scope="module")
def sweep_tables():
    replicas = {rid: _curves(rid) for rid in RUNS}
    results = pd.DataFrame(
        [
            {
                "id": rid,
                "method": m,
                "seed": s,
                "status": "completed",
                "final_expected_reward": replicas[rid].final,
                "replicas": 2,
                "collapsed_replicas": int(rid == COLLAPSED[0]),
                "diverged_replicas": 0,
            }
            for rid, (m, s) in RUNS.items()
        ]
    )
    metrics = pd.concat(
        [
            pd.DataFrame(
                {
                    "id": rid,
                    "method": RUNS[rid][0],
                    "step": c.step,
                    "time": c.time,
                    "eval/expected_reward": c.values.mean(axis=1),
                }
            )
            for rid, c in replicas.items()
        ]
    )
    return metrics, results, replicas


def _svg_ids(path: Path) -> set[str]:
    return set(re.findall(r'id="([^"]+)"', path.with_suffix(".svg").read_text()))


def test_learning_curves_draw_each_replica_and_count_the_collapsed(sweep_tables, tmp_path):
    metrics, results, replicas = sweep_tables
    fig = F.learning_curves(metrics, results, ["method"], tmp_path / "lc.png", ("png", "svg"), replicas=replicas)
    ids = _svg_ids(fig.path)
    for rid, (method, _) in RUNS.items():
        for r in range(2):
            assert f"replica:{method}:{rid}:{r}" in ids, (rid, r)
    assert "each of the 8 replicas" in fig.caption and "none 1/4" in fig.caption


def test_learning_curves_without_replica_curves_keep_the_band(sweep_tables, tmp_path):
    metrics, results, _ = sweep_tables
    fig = F.learning_curves(metrics, results, ["method"], tmp_path / "lc.png", ("png", "svg"))
    assert not any(i.startswith("replica:") for i in _svg_ids(fig.path))
    assert "band = min..max over seeds" in fig.caption


def test_replica_series_keeps_the_collapsed_replica():
    c = _curves(COLLAPSED[0])
    series = replica_series(c)
    assert [r for r, _, _ in series] == [0, 1]
    assert series[1][2][-1] < 0.1  # the collapsed replica ends near 0, the mean (about 0.4) would hide it


def test_summary_draws_each_replica_final(sweep_tables, tmp_path):
    _, results, replicas = sweep_tables
    layout = F.build_layout(results, ["method"])
    fig = F.summary_figure(results, None, layout, tmp_path / "summary.png", ("png", "svg"), replicas=replicas)
    ids = _svg_ids(fig.path)
    assert {"replica-finals:sync", "replica-finals:none"} <= ids


def test_config_fields_say_when_intervals_cover_one_schedule():
    from dataclasses import replace

    from sandbox.analysis.time_to_target import Arm, compare

    def arm(label, sync, seeds):
        return Arm(label, [replace(_curves("a0"), synchronous=sync, seed=s) for s in seeds])

    one = compare([arm("sync", True, [0]), arm("async", False, [0])], {"sync": "sync", "async": "sync"})
    assert one.config_fields("async")["one_schedule"] is True
    many = compare([arm("sync", True, [0, 1]), arm("async", False, [0, 1])], {"sync": "sync", "async": "sync"})
    assert many.config_fields("async")["one_schedule"] is False
