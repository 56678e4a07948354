"""``sandbox claims --score FILE``: one published setup scored from one scenario file with a [published] table,
through the claim's own code (``sandbox.claims.published_engine.step_times``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sandbox.base.errors import ScenarioError
from sandbox.claims.published import SETUPS, setup_variants
from sandbox.claims.published_engine import ENGINE_SETUPS, step_times
from sandbox.claims.published_score import load_published, score

REPO = Path(__file__).resolve().parents[2]
PUBLISHED = """
[published]
system = "verl one_step_off (FSDP2)"
low = 1.23
measure = "throughput"
source = "verl documentation advance/one_step_off"
gpu = "H20"
model = "qwen2.5-7b"
tp = 2
max_sequences = 1024
step_floor = 0.0042
baseline_step_floor = 0.0042
sync = "drain"
median = 1000
sigma = 0.819
max_tokens = 20480
measured = "per-step training seconds"
"""


def _file(tmp_path, extra: str = PUBLISHED) -> Path:
    path = tmp_path / "setup.toml"
    path.write_text((REPO / "scenarios" / "published" / "verl_one_step_off.toml").read_text() + "\n" + extra)
    return path


def test_score_is_the_claims_row_for_the_same_setup(tmp_path):
    # the shipped verl one-step-off scenario plus a [published] table equal to its claim mapping: the same step times
    r = score(_file(tmp_path), steps=2, seeds=2)
    pub = next(p for p in SETUPS if p.scenario == "verl_one_step_off")
    mode, base = step_times(pub, ENGINE_SETUPS["verl_one_step_off"], None, 2, 2, runs=setup_variants(pub.scenario))
    assert r["predicted"] == pytest.approx(float(np.mean(base / mode)), rel=1e-12)
    assert r["ratio"] == pytest.approx(r["predicted"] / 1.23, rel=1e-12)
    assert r["kind"] == "consistency check" and r["predicted_low"] <= r["predicted"] <= r["predicted_high"]


def test_the_examples_load():
    for path in sorted((REPO / "examples").glob("score_*.toml")):
        table, runs = load_published(path)
        assert {"async", table.baseline} <= set(runs) and table.local_updates == 4
        assert runs["async"].system.staleness.kind == "stream_sync"


@pytest.mark.parametrize(
    "bad, field",
    [
        ("", "published: missing"),
        (PUBLISHED.replace('measure = "throughput"', 'measure = "speed"'), "published.measure"),
        (PUBLISHED.replace('gpu = "H20"', 'gpu = "B200"'), "published.gpu"),
        (PUBLISHED.replace("low = 1.23", "low = 1.23\nhigh = 1.1"), "high: 1.1 is below low"),
        (PUBLISHED + 'baseline = "nope"\n', "variants.nope: missing"),
    ],
)
def test_bad_published_tables_name_the_field(tmp_path, bad, field):
    with pytest.raises(ScenarioError, match=field.replace(".", r"\.")):
        load_published(_file(tmp_path, bad))


def test_moe_example_states_the_sources_numbers():
    """verl's 30B mixture-of-experts run (advance/fully_async, "30B Model Mode Experiment"): the published figure
    is the ratio of the 400-step total times and the training times are the sums of the source's trainer rows."""
    table, runs = load_published(REPO / "examples" / "score_verl_fully_async_30b_moe.toml")
    colocated_h, async_h = 2 * 24 + 11 + 39 / 60, 24 + 10 + 41 / 60  # 2d 11h 39m, 1d 10h 41m
    assert round(colocated_h / async_h, 2) == table.low == 1.72
    assert table.model == "qwen3-30b-a3b" and table.measured  # source-measured times in: a consistency check
    assert runs["async"].system.train_time.value == pytest.approx(50.05 + 206.63)  # ref + update_actor
    assert runs["colocated_sync"].system.train_time.value == pytest.approx(28.73 + 20.86 + 86.27)
    assert (runs["async"].system.num_workers, runs["colocated_sync"].system.num_workers) == (96 * 16, 128 * 16)
