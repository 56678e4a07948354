"""Fuzzing the scenario loader and short runs (hypothesis, seeded, bounded).

Inputs: a shipped toy scenario with 1-3 ``--set``-style overrides on its real leaves (and on a few
misspelled keys), each value drawn from extremes (inf, nan, negatives, zero, huge integers, strings,
lists, tables) or plausible values. Properties:

* loading either succeeds or raises :class:`ScenarioError` whose message names the first segment of
  an overridden key (no other exception type escapes);
* a sample of the scenarios that load runs for a few steps under a wall-clock bound, ending either
  with a result whose written metrics contain no NaN unless the run says it diverged, or with a
  ScenarioError (budget, stuck simulation), never another exception or a hang.
"""

from __future__ import annotations

import math
import signal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from sandbox.run.runner import run_scenario
from sandbox.scenario.api import ScenarioError, load_scenario
from sandbox.scenario.load import apply_overrides, read_toml, validate_scenario

ROOT = Path(__file__).resolve().parents[2]
BASES = ["sync.toml", "max_lag.toml", "fixed_lag.toml", "async_ratio.toml", "partial_rollouts.toml"]


def _leaves(node, path=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, f"{path}.{k}" if path else k)
    else:
        yield path


def _keys():
    keys = set()
    for name in BASES:
        scn, _ = load_scenario(ROOT / "scenarios" / name)
        keys |= {k for k in _leaves(scn.model_dump(mode="json", exclude={"title", "description", "variants"}))}
    keys |= {"system.staleness.kmax", "algorithm.optimiser.lr", "task.horizn", "run.stepz"}
    return sorted(keys)


KEYS = _keys()
EXTREMES = [
    math.inf,
    -math.inf,
    math.nan,
    -1,
    0,
    1,
    2**64,
    10**9,
    1e308,
    -1e-300,
    "16",
    "",
    "inf",
    True,
    [],
    [1, 2],
    {"kind": "constant", "value": 1.0},
    {"kind": "pareto", "alpha": 0.5, "scale": 1.0},
    {"kind": "max_lag", "k_max": 0, "enforcement": "drop", "queue_capacity": 1},
    {"name": "gac"},
]
values = st.one_of(
    st.sampled_from(EXTREMES),
    st.integers(-5, 64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.booleans(),
)
plausible = st.one_of(
    st.integers(0, 16),
    st.floats(0.01, 4.0),
    st.booleans(),
    st.sampled_from(["independent", "shared", ["png"], ["png", "svg"]]),
)  # run.schedules, figure_formats
overrides = st.dictionaries(st.sampled_from(KEYS), values, min_size=1, max_size=3)
plausible_overrides = st.dictionaries(
    st.sampled_from(KEYS), st.one_of(plausible, plausible, plausible, values), min_size=1, max_size=2
)

TRIED = {"inputs": 0, "loaded": 0, "clear_errors": 0, "runs": 0, "run_errors": 0}


def _load(base: str, ov: dict):
    raw = read_toml(ROOT / "scenarios" / base)
    raw.pop("variants", None)
    return validate_scenario(apply_overrides(raw, ov), base)


@seed(20261123)
@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(base=st.sampled_from(BASES), ov=overrides)
def test_loader_accepts_or_names_the_field(base, ov):
    TRIED["inputs"] += 1
    try:
        _load(base, ov)
        TRIED["loaded"] += 1
    except ScenarioError as exc:
        TRIED["clear_errors"] += 1
        text = str(exc)
        assert any(k.split(".")[0] in text for k in ov), f"error names none of {list(ov)}: {text}"


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


@seed(7)
@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(base=st.sampled_from(BASES), ov=plausible_overrides)
def test_short_runs_end_cleanly_and_bounded(base, ov, tmp_path_factory):
    ov = {**ov, "run.steps": 3, "run.figures": False, "run.eval_every": 1}
    try:
        scn = _load(base, ov)
    except ScenarioError:
        return
    TRIED["runs"] += 1
    out = tmp_path_factory.mktemp("fuzz")
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(60)
    try:
        res = run_scenario(scn, out)
    except ScenarioError:
        TRIED["run_errors"] += 1
        return
    except _Timeout:
        pytest.fail(f"run did not finish in 60 s: {base} {ov}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    if res.status == "completed":
        reward = res.metrics["reward/mean"] if "reward/mean" in res.metrics else None
        assert reward is None or not reward.isna().any(), f"NaN reward in a completed run: {base} {ov}"


def test_report_counts():
    """Runs last (file order): the fuzzers above really tried inputs of both outcomes."""
    assert TRIED["inputs"] >= 300 and TRIED["clear_errors"] > 50 and TRIED["loaded"] > 5 and TRIED["runs"] >= 10, TRIED
    print("fuzz counts:", TRIED)
