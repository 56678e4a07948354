"""The trace-driven delay (docs/system.md#trace): loading CSV and JSONL traces, resampling and the
least-squares cost fit against hand values, errors naming the line and column, paths relative to
the scenario file, nothing written while reading, and the trace generator."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
import tomli_w

from sandbox.scenario.api import ScenarioError, load_scenario
from sandbox.system.delays.trace import TraceDelay, TraceError, fit_cost, read_trace

ROOT = Path(__file__).resolve().parents[2]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def make_trace_module():
    spec = importlib.util.spec_from_file_location("make_trace", ROOT / "tools" / "make_trace.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.component("delay", "trace")
def test_fit_recovers_prefill_and_per_token_by_hand(tmp_path):
    # seconds = 1 + 0.1 · tokens exactly: prefill 1, per_token 0.1, no jitter
    p = write(tmp_path / "t.csv", "step,tokens,seconds\n0,0,1\n1,10,2\n2,20,3\n")
    d = TraceDelay(path=str(p), mode="fit")
    assert d.fitted == (pytest.approx(1.0), pytest.approx(0.1), 0.0)
    assert d.expected(tokens=5) == pytest.approx(1.5)
    assert d.sample(np.random.default_rng(0), tokens=30) == pytest.approx(4.0)
    assert d.per_token_model and d.prefill == pytest.approx(1.0)


@pytest.mark.component("delay", "trace")
def test_fit_jitter_is_the_spread_of_the_log_residuals(tmp_path):
    # two lengths, each measured e^{+0.1} and e^{-0.1} around its level: the least-squares line goes
    # through the two level means 2 cosh(0.1) and 3 cosh(0.1), so log(seconds / fitted) = ±0.1 − log cosh(0.1): σ = 0.1
    e = math.exp(0.1)
    rows = [(10, 2 * e), (10, 2 / e), (20, 3 * e), (20, 3 / e)]
    p = write(tmp_path / "t.jsonl", "".join(json.dumps({"tokens": t, "seconds": s}) + "\n" for t, s in rows))
    d = TraceDelay(path=str(p), mode="fit")
    prefill, per_token, sigma = d.fitted
    assert per_token == pytest.approx(0.1 * math.cosh(0.1)) and prefill == pytest.approx(math.cosh(0.1))
    assert sigma == pytest.approx(0.1)
    # the noise factor has mean one: the sample mean is the fitted line
    rng = np.random.default_rng(1)
    x = np.array([d.sample(rng, tokens=15) for _ in range(20_000)])
    mean = d.expected(15)
    assert abs(x.mean() - mean) < 5 * mean * math.sqrt(math.exp(sigma**2) - 1) / math.sqrt(len(x))


@pytest.mark.component("delay", "trace")
def test_resample_draws_rows_uniformly(tmp_path):
    p = write(tmp_path / "t.csv", "seconds\n1\n2\n7\n")
    d = TraceDelay(path=str(p))
    assert d.expected() == pytest.approx(10 / 3) and not d.per_token_model
    rng, ref = np.random.default_rng(3), np.random.default_rng(3)
    assert [d.sample(rng, tokens=99) for _ in range(20)] == [[1.0, 2.0, 7.0][int(ref.integers(3))] for _ in range(20)]


def test_constrained_fit():
    # a decreasing trace would give a negative per-token time: it is 0 and the prefill is the mean
    assert fit_cost(np.array([0, 10, 20]), np.array([3.0, 2.0, 1.0]))[:2] == (pytest.approx(2.0), 0.0)
    # a negative intercept: the line through the origin, per_token = Σ t·s / Σ t²
    t, s = np.array([10.0, 20.0]), np.array([0.5, 2.5])
    assert fit_cost(t, s)[:2] == (0.0, pytest.approx((t @ s) / (t @ t)))


@pytest.mark.parametrize(
    "name,text,expected",
    [
        ("empty.csv", "", "no data rows"),
        ("header.csv", "seconds,tokens\n", "no data rows"),
        ("nocol.csv", "time,tokens\n1,2\n", "no column 'seconds'.*columns: time, tokens"),
        ("neg.csv", "seconds,tokens\n1,2\n-0.5,3\n", r"line 3, column 'seconds': -0.5 is negative"),
        ("text.csv", "seconds,tokens\n1,2\nabc,3\n", r"line 3, column 'seconds': 'abc' is not a number"),
        ("blank.csv", "seconds,tokens\n1,2\n,3\n", r"line 3, column 'seconds': empty"),
        ("inf.csv", "seconds\ninf\n", r"line 2, column 'seconds': 'inf' is not finite"),
        ("wide.csv", "seconds\n1,2\n", r"line 2: more values than the 1 columns"),
        ("bad.jsonl", '{"seconds": 1}\n[1, 2]\n', r"line 2: expected a JSON object"),
        ("broken.jsonl", '{"seconds": 1}\n{"seconds": \n', r"line 2: not valid JSON"),
        ("miss.jsonl", '{"seconds": 1, "tokens": 2}\n{"tokens": 1}\n', r"line 2, column 'seconds': missing"),
        ("some.jsonl", '{"seconds": 1}\n{"seconds": 2, "tokens": 1}\n', r"line 1, column 'tokens': missing"),
        ("t.txt", "seconds\n1\n", r"unknown trace format '.txt'"),
    ],
)
def test_bad_traces_name_the_line_and_column(tmp_path, name, text, expected):
    p = write(tmp_path / name, text)
    with pytest.raises(TraceError, match=expected):
        read_trace(p)


def test_fit_needs_tokens_that_vary(tmp_path):
    with pytest.raises(TraceError, match="no column 'tokens'.*mode = 'fit'"):
        read_trace(write(tmp_path / "a.csv", "seconds\n1\n"), tokens_required=True)
    with pytest.raises(ValueError, match="every row has tokens = 5"):
        TraceDelay(path=str(write(tmp_path / "b.csv", "seconds,tokens\n1,5\n2,5\n")), mode="fit")


def scenario_with_trace(tmp_path: Path, trace_rel: str, mode: str = "resample") -> Path:
    data = {
        "task": {"name": "bitstring", "horizon": 4, "threshold": 0.5},
        "system": {
            "num_workers": 2,
            "generation_time": {"kind": "trace", "path": trace_rel, "mode": mode},
            "train_time": {"kind": "constant", "value": 0.1},
            "staleness": {"kind": "sync"},
        },
        "algorithm": {"group_size": 2, "groups_per_step": 2},
        "run": {"steps": 4, "figures": False, "eval_every": 2},
    }
    return write(tmp_path / "scen" / "s.toml", tomli_w.dumps(data))


def test_path_is_relative_to_the_scenario_file_and_reading_writes_nothing(tmp_path, monkeypatch):
    write(tmp_path / "scen" / "traces" / "gen.csv", "tokens,seconds\n2,0.5\n4,0.9\n")
    path = scenario_with_trace(tmp_path, "traces/gen.csv", mode="fit")
    monkeypatch.chdir(tmp_path)  # not the scenario's directory
    before = sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    scn, _ = load_scenario(path)
    assert Path(scn.system.generation_time.path) == (tmp_path / "scen" / "traces" / "gen.csv").resolve()
    assert scn.system.generation_time.expected(3) == pytest.approx(0.7)  # 0.1 + 0.2 · 3
    assert sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*")) == before

    from sandbox.run.runner import run_scenario

    res = run_scenario(scn, force=True)
    done = res.jobs[res.jobs.finish_time.notna()]  # the last jobs may be unfinished when the run ends
    # every generation job of the bit-string task decodes 4 tokens: 0.1 + 0.2 · 4 = 0.9 s
    assert len(done) >= 8 and np.allclose(done.finish_time - done.dispatch_time, 0.9)


def test_a_bad_trace_is_a_scenario_error_naming_the_field(tmp_path):
    write(tmp_path / "scen" / "gen.csv", "seconds\n1\n-2\n")
    with pytest.raises(ScenarioError, match=r"system\.generation_time.*gen\.csv line 3, column 'seconds'"):
        load_scenario(scenario_with_trace(tmp_path, "gen.csv"))
    with pytest.raises(ScenarioError, match=r"system\.generation_time.*cannot read the trace"):
        load_scenario(scenario_with_trace(tmp_path, "missing.csv"))


def test_generator_writes_a_trace_the_fit_recovers(tmp_path):
    mod = make_trace_module()
    mod.main(
        [
            str(tmp_path / "g.csv"),
            "--rows",
            "2000",
            "--prefill",
            "0.3",
            "--per-token",
            "0.004",
            "--jitter",
            "0.1",
            "--growth",
            "1.0",
        ]
    )
    mod.main([str(tmp_path / "g.jsonl"), "--rows", "50"])
    seconds, tokens = read_trace(tmp_path / "g.csv")
    assert len(seconds) == 2000
    prefill, per_token, sigma = fit_cost(tokens, seconds)
    assert prefill == pytest.approx(0.3, abs=0.05) and per_token == pytest.approx(0.004, rel=0.05)
    assert sigma == pytest.approx(0.1, rel=0.1)
    # lengths grow: the second half's median is larger
    assert np.median(tokens[1000:]) > 1.2 * np.median(tokens[:1000])
    assert len(read_trace(tmp_path / "g.jsonl")[0]) == 50
    # seeded: the same arguments, the same file
    mod.main(
        [
            str(tmp_path / "h.csv"),
            "--rows",
            "2000",
            "--prefill",
            "0.3",
            "--per-token",
            "0.004",
            "--jitter",
            "0.1",
            "--growth",
            "1.0",
        ]
    )
    assert (tmp_path / "h.csv").read_text() == (tmp_path / "g.csv").read_text()
