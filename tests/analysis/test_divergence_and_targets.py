"""Regression tests of issue 27 (time-to-target and the end-to-end speed-up): diverged runs and
references, baselines that missed their own target, vacuous "at most" bounds, a loss labelled as a
reward, and a speed-up claimed with an interval that contains 1 (docs/time_to_target.md)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
import tomli_w
from typer.testing import CliRunner

from sandbox.analysis.time_to_target import Arm, Curves, TargetConfig, compare, describe

ROOT = Path(__file__).resolve().parents[2]


def _curves(values, *, step_time=1.0, final=1.0, sync=False) -> Curves:
    values = np.asarray(values, dtype=float)
    n = len(values)
    step = np.arange(n, dtype=float)
    counts = {"samples": 10.0 * (step + 1), "generated": 10.0 * (step + 1), "tokens": np.zeros(n)}
    return Curves(
        "eval/expected_reward",
        True,
        step,
        step_time * (step + 1),
        counts,
        values,
        final,
        sync,
        TargetConfig(window=1),
        0,
    )


# ------------------------------------------------------------------------------------------------
# the growth rule and the wording, by hand
# ------------------------------------------------------------------------------------------------


def test_growth_rule_flags_a_loss_that_comes_back_up_and_only_that():
    from sandbox.analysis.divergence import growth_divergence

    steps = np.arange(0, 200, 10, dtype=float)  # 20 evaluations: the tail is the last 2
    falls = 200.0 * 0.7 ** np.arange(20)  # converging fast: the tail is far below the early values
    rises = np.concatenate([200.0 * 0.5 ** np.arange(10), 0.4 * 3.0 ** np.arange(10)])  # down to 0.39, back up to 7873
    noisy = 1.0 + 0.3 * np.sin(np.arange(20))  # a noise floor
    values = np.stack([falls, rises, noisy], 1)
    at, why = growth_divergence(steps, values, factor=10.0, window=1)
    assert at[0] == -1 and at[2] == -1
    # minimum before the tail: 200 * 0.5**9 = 0.39 at step 90; the first value above 10 x that is 0.4 * 3**3 = 10.8 (step 130)
    assert at[1] == 130
    assert "replica 1" in why and "10" in why
    # a larger factor leaves it alone: the tail mean (2362 + 7873) / 2 = 5117 is 13,100 x the minimum
    assert growth_divergence(steps, values, factor=2e4, window=1)[0][1] == -1


def test_an_interval_that_contains_one_is_no_significant_difference():
    # absolute target 0.5; sync replicas reach it at 11 s and 21 s, the variant's at 13 s and 15 s:
    # 16 / 14 = 1.14x, and the paired bootstrap draws range from 11/13 = 0.85 to 21/15 = 1.4
    ramp = lambda n: np.clip(np.arange(41) / n, 0, 1)  # noqa: E731 - reaches 0.5 at step n/2, t = n/2 + 1 s
    target = TargetConfig(reward=0.5, window=1)
    sync, var = _curves(np.stack([ramp(20), ramp(40)], 1), sync=True), _curves(np.stack([ramp(24), ramp(28)], 1))
    sync.target = var.target = target
    comp = compare([Arm("sync", [sync]), Arm("async", [var])], {"sync": "sync", "async": "sync"})
    sp = comp.speedups["async"]
    assert sp.value == pytest.approx(16 / 14)
    assert (sp.ci_low, sp.ci_high) == (pytest.approx(11 / 13), pytest.approx(21 / 15))
    text = describe(comp, "async")
    assert "no significant difference" in text and "faster" not in text and "slower" not in text, text
    assert "1.14×" in text and "95% CI 0.85–1.40×" in text, text  # the estimate and its interval are still given


# ------------------------------------------------------------------------------------------------
# the quadratic sweep (reduced: lag 0 and 8, three step sizes), as shipped otherwise
# ------------------------------------------------------------------------------------------------

CONFIGS_DIVERGED = ("k=0, lr=2.2", "k=8, lr=2.2")


@pytest.fixture(scope="module")
def quadratic_sweep(tmp_path_factory):
    from sandbox.cli import app

    raw = tomllib.loads((ROOT / "scenarios/sweeps/lag_lr_quadratic.toml").read_text())
    raw["base"] = str(ROOT / "scenarios/delayed_quadratic.toml")
    # lr 0.05: the synchronous baseline used to miss its own target in one of its two replicas;
    # lr 1.6: lag 8 never reaches its baseline's target (was "at most 37x faster"); lr 2.2: everything diverges
    raw["grid"] = {"system.staleness.k": [0, 8], "algorithm.optimizer.lr": [0.05, 1.6, 2.2]}
    tmp = tmp_path_factory.mktemp("lag_lr")
    path = tmp / "sweep.toml"
    path.write_text(tomli_w.dumps(raw))
    from sandbox import cli

    width, cli.console.width = cli.console.width, 400  # no header wrapped over lines
    try:
        res = CliRunner().invoke(app, ["sweep", str(path), "--out", str(tmp / "sw"), "-q", "-j", "1"])
    finally:
        cli.console.width = width
    assert res.exit_code == 0, res.output
    return tmp / "sw", " ".join(res.output.split())


def test_a_diverged_reference_defines_no_target_and_a_diverged_run_reaches_none(quadratic_sweep):
    from sandbox.sweep.api import load_results, load_time_to_target

    out, text = quadratic_sweep
    df = load_results(out)
    by = load_time_to_target(out).set_index("configuration")
    for c in CONFIGS_DIVERGED:
        assert by.loc[c, "target_level"] is None or np.isnan(by.loc[c, "target_level"]), by.loc[c].to_dict()
        assert by.loc[c, "time_to_target"] is None or np.isnan(by.loc[c, "time_to_target"])
        assert by.loc[c, "speedup_vs_sync"] is None or np.isnan(by.loc[c, "speedup_vs_sync"])
        assert "diverged" in by.loc[c, "target_rule"]
    diverged = df[df.status == "diverged"]
    assert len(diverged) >= 2 and diverged.time_to_target.isna().all()  # the Runs table of the report
    assert "1.00× faster" not in text and "reaches 1.21e+03" not in text
    assert "k=8, lr=2.2: no target" in text and "no speed-up" in text.split("k=8, lr=2.2: no target")[1][:300]


def test_a_converged_baseline_reaches_its_own_target(quadratic_sweep):
    from sandbox.sweep.api import load_time_to_target

    out, _ = quadratic_sweep
    by = load_time_to_target(out).set_index("configuration")
    for c in ("k=0, lr=0.05", "k=0, lr=1.6"):
        assert by.loc[c, "reached_units"] == "2/2", by.loc[c].to_dict()
        assert by.loc[c, "time_to_target"] > 0
        assert by.loc[c, "speedup_vs_sync"] == pytest.approx(1.0)


def test_no_vacuous_bound_when_a_run_misses_the_target(quadratic_sweep):
    out, text = quadratic_sweep
    assert "at most" not in text and "at least" not in text
    line = text.split("k=8, lr=1.6")[1][:400]
    assert "does not reach" in line and "no end-to-end speed-up" in line, line
    # the table's loss column says it is a loss
    assert "final loss (lower is better)" in text


# ------------------------------------------------------------------------------------------------
# the README's unstable quadratic run
# ------------------------------------------------------------------------------------------------


def test_the_unstable_quadratic_run_is_diverged_and_labelled_as_a_loss(tmp_path, monkeypatch):
    from sandbox import cli
    from sandbox.cli import app
    from sandbox.run import plots

    titles = []
    real_save = plots._save

    def save(fig, path, formats):
        titles.append(fig._suptitle.get_text() if fig._suptitle is not None else "")
        real_save(fig, path, formats)

    monkeypatch.setattr(plots, "_save", save)
    monkeypatch.setattr(cli.console, "width", 400)
    out = tmp_path / "unstable"
    res = CliRunner().invoke(
        app,
        [
            "run",
            str(ROOT / "scenarios/delayed_quadratic.toml"),
            "--set",
            "algorithm.optimizer.lr=0.19",
            "--set",
            "task.replicas=2",
            "--out",
            str(out),
            "-q",
            "--wide",
        ],
    )
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "diverged" and s["diverged_replicas"] == 2, s["status"]
    assert s["collapsed_replicas"] == 2 and s["collapsed"] == [True, True]  # diverged replicas count as collapsed
    assert "run.max_loss_growth" in s["divergence"]
    assert s["target_level"] is None and s["time_to_target"] is None and "diverged" in s["target_rule"]
    assert "final reward" not in text and "final loss (lower is better)" in text
    assert "diverged (2/2)" in text and "reached in" not in text
    assert any(t.startswith("Learning curve (diverged; 2/2 replicas collapsed)") for t in titles), titles
