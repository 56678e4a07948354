"""``sandbox preflight``: a known-unsafe setting (a learning rate 1000x the user's at the user's bound,
no correction) is "unsafe" on Q1 and Q2 over 4 seeds, a known-safe one (x1) is not; the three outputs
exist and the page loads in headless Chromium. The plan is pruned to the cells the verdicts read (the
user's cell of the map, Q2, Q6) to keep the test short; the full --quick plan is the same code."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sandbox.importers.api import import_config
from sandbox.preflight import questions as P
from sandbox.preflight.figures import write_outputs

ROOT = Path(__file__).resolve().parents[1]
VERL = ROOT / "importers" / "data" / "verl_gsm8k_async.yaml"


def _pruned(mult: float) -> dict:
    imp = import_config(VERL, "verl")
    plan = P.make_plan(imp.data, quick=True, lr_mult=mult, framework="verl")
    plan.jobs = [
        j for j in plan.jobs if j.question != "Q1" or (j.bound in (0, plan.user_bound) and j.lr == plan.user_lr)
    ]
    P.check_plan(plan)
    return P.run_plan(plan)


@pytest.fixture(scope="module")
def unsafe() -> dict:
    return _pruned(1000.0)


@pytest.fixture(scope="module")
def safe() -> dict:
    return _pruned(1.0)


def test_known_unsafe_is_unsafe(unsafe):
    assert unsafe["Q1"]["user_cell"]["verdict"] == "unsafe", unsafe["Q1"]["user_cell"]
    # --quick cannot place the user's learning rate on the bit-string proxy: never "safe", whatever the cell says
    assert unsafe["Q1"]["verdict"] == "cannot tell" and "--quick" in unsafe["Q1"]["reason"]
    yours = unsafe["Q2"]["rows"][0]
    assert yours["correction"].startswith("yours: none") and yours["verdict"] == "unsafe"


def test_known_safe_is_not_unsafe(safe):
    assert safe["Q1"]["user_cell"]["verdict"] == "safe", safe["Q1"]["user_cell"]
    assert safe["Q1"]["verdict"] == "cannot tell" and safe["premise"]["learns"]
    assert safe["Q2"]["rows"][0]["verdict"] == "safe" and safe["Q2"]["verdict"].startswith("safe")
    assert safe["Q6"]["bitwise_equal"]


def test_q5_reports_the_framework_metrics(safe):
    q5 = safe["Q5"]
    lo, hi = q5["framework_metrics"]["rollout_corr/k3_kl"]["last_quarter"]
    assert 0 < lo <= hi
    # at a bound >= 1 the learner has moved since sampling: the staleness part is not zero
    assert q5["sandbox_metrics"]["staleness/kl_k3"]["first_quarter"][0] > 0
    assert q5["length_buckets"]["mismatch/kl_k3_len1"]["first_quarter"] is None  # one length on bit strings


def test_outputs_and_browser(safe, tmp_path):
    names = write_outputs(tmp_path, safe, "verl", str(VERL))
    for n in names:
        assert (tmp_path / n).stat().st_size > 0
    body = json.loads((tmp_path / "preflight.json").read_text())
    assert body["Q1"]["verdict"] == safe["Q1"]["verdict"] and body["Q3"]["verdict"] == "not answered"
    md = (tmp_path / "preflight.md").read_text()
    assert "multiples of the proxy's own rate" in md and "What does not transfer" in md and "premise gate" in md
    chromium = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    res = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", (tmp_path / "preflight.html").as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Q1: safe staleness bound" in res.stdout and "<img" in res.stdout


def test_slower_marks_time_to_target_not_collapse():
    row = lambda name, reached, t: {"correction": name, "reached": reached, "time_to_target": t}  # noqa: E731
    rows = [
        row("yours", 4, [30.0, 28.0, 32.0]),
        row("tis", 4, [20.0, 18.0, 22.0]),
        row("m2po", 4, [23.0, 21.0, 25.0]),
        row("none", 2, [19.0, 10.0, 28.0]),
    ]
    P.mark_slower(rows)
    assert [r["slower"] for r in rows] == [True, False, False, True]  # 28 > 22; 21 <= 22 overlaps; fewer seeds
    assert rows[0]["fastest"] == "tis" and abs(rows[0]["slower_by"] - 0.5) < 1e-12  # 30 / 20 - 1


def test_over_budget_refused_naming_option():
    imp = import_config(VERL, "verl")
    plan = P.make_plan(imp.data, quick=True, budget=1.0)
    with pytest.raises(P.PreflightError, match="--seeds 2"):
        P.check_plan(plan)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--budget", "soon"], "--budget"),
        (["--budget", "1s"], "--budget"),  # a plan over its budget: refused before running, naming the option
        (["--lr-mult", "-2"], "--lr-mult"),
        (["-f", "nope"], "--framework"),
        (["--gpu", "B200"], "--gpu"),  # Q3/Q4/Q7 cluster facts
        (["--model", "gpt-5"], "--model"),
        (["--gpus", "2"], "--gpus"),  # the config's engines of 2 GPUs leave no trainer GPU
        (["--cluster", "/nonexistent/cluster.toml"], "--cluster"),
    ],
)
def test_cli_bad_input_is_one_line_naming_the_option(tmp_path, args, needle):
    from typer.testing import CliRunner

    from sandbox.cli import app

    base = ["preflight", str(VERL), "-f", "verl", "--quick", "--out", str(tmp_path / "o")]
    res = CliRunner().invoke(app, base + args)
    assert res.exit_code == 2 and needle in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "o").exists()


def test_cli_missing_config_is_named(tmp_path):
    from typer.testing import CliRunner

    from sandbox.cli import app

    res = CliRunner().invoke(app, ["preflight", str(tmp_path / "none.yaml"), "-f", "verl", "--quick"])
    assert res.exit_code == 2 and "none.yaml" in res.output and "Traceback" not in res.output, res.output
