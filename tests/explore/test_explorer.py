"""`sandbox explore`: the grid's validation and refusal, the page's determinism and size, and the
page in a real browser (headless Chromium from the Debian package, as tests/report/test_report_browser.py):
no script error, every control changes the drawn data, the numbers shown equal the runner's metrics
for that grid point, a screenshot is saved."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sandbox.explore.api import Grid, GridError, build_explorer
from sandbox.explore.data import compute, headline, r4
from sandbox.explore.grid import Point, points, scenario
from sandbox.explore.page import render
from sandbox.run.runner import run_scenario

# The test grid: every control has two values, 2 x 2 x 2 x 2 x 2 runs + 8 references, a few seconds.
TINY = Grid(
    lags=(1, 6),
    lrs=(0.3, 1.0),
    methods=("none", "tis"),
    replicas=2,
    steps=12,
    horizon=12,
    num_workers=8,
    eval_every=2,
    timeline_seconds=10.0,
    budget_seconds=600.0,
)


@pytest.fixture(scope="module")
def data():
    return compute(TINY)


def test_bad_grid_names_the_field():
    with pytest.raises(GridError, match="grid.methods"):
        Grid(methods=("none", "bogus"))
    with pytest.raises(GridError, match="grid.lrs"):
        Grid(lrs=(0.1, -1.0))
    with pytest.raises(GridError, match="grid.lags"):
        Grid(lags=())
    with pytest.raises(GridError, match="grid.steps"):
        Grid(steps=0)
    with pytest.raises(GridError, match="grid.task"):
        Grid(task="chess")
    with pytest.raises(GridError, match=r"grid.methods: \['tis'\] do not act on the quadratic"):
        Grid(task="quadratic", methods=("none", "tis"), engines=("exact",))
    with pytest.raises(GridError, match="grid.engines.*no sampler"):
        Grid(task="quadratic", methods=("none",))


def test_grid_over_budget_is_refused_with_the_estimate(tmp_path):
    with pytest.raises(GridError, match=r"grid too large: \d+ runs, about .* over the budget"):
        build_explorer(tmp_path, TINY.with_(budget_seconds=1.0))
    assert not (tmp_path / "explorer.html").exists()


def test_cli_refuses_a_grid_over_budget(tmp_path):
    from typer.testing import CliRunner

    from sandbox.cli import app

    res = CliRunner().invoke(app, ["explore", "--quick", "--budget", "1", "--out", str(tmp_path)])
    assert res.exit_code == 2, res.output
    assert "grid too large" in res.output and "Traceback" not in res.output


def test_cli_refuses_an_out_that_is_a_file(tmp_path):
    from typer.testing import CliRunner

    from sandbox.cli import app

    f = tmp_path / "file"
    f.write_text("x")
    res = CliRunner().invoke(app, ["explore", "--quick", "--out", str(f)])
    assert res.exit_code == 2, res.output
    assert "--out" in res.output and "not a writable directory" in res.output and "Traceback" not in res.output


def test_points_cover_the_grid():
    pts = points(TINY)
    assert len(pts) == 2 * 2 * 2 * 2 * 2 + 2 * 2 * 2  # runs + one synchronous reference per (tail, engine, lr)
    assert len({p.key for p in pts}) == len(pts)
    assert scenario(TINY, pts[0]).system.staleness.kind == "sync"


def test_page_is_reproducible_and_small(data):
    again = compute(TINY)
    assert render(again) == render(data)  # same grid and seeds: same bytes
    assert len(render(data).encode()) < 400_000
    assert "http://" not in render(data).replace("http://www.w3.org/2000/svg", "")  # nothing fetched
    assert "https://" not in render(data)


def test_data_match_the_runner(data):
    p = Point("heavy", "logit_noise", 1.0, "tis", 6)
    res = run_scenario(scenario(TINY, p))
    run = data["runs"][p.key]
    assert run["headline"] == headline(res.metrics)
    ev = res.metrics["eval/expected_reward"].dropna()
    assert run["reward"] == [r4(v) for v in ev]
    assert (
        len(run["cos"]) == len(res.metrics)
        and any(c is None for c in run["cos"]) == res.metrics["grad/cos_prev"].isna().any()
    )
    hist = dict(run["hist"])
    assert sum(hist.values()) == len(res.jobs[res.jobs.consume_step >= 0])
    assert max(hist) <= 6  # the bound


CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def _chromium(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--user-data-dir={cwd / 'profile'}",
        "--virtual-time-budget=5000",
        "--enable-logging=stderr",
        "--v=0",
        *args,
    ]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"), reason="chromium is not installed (apt-get install chromium)"
)
def test_page_in_a_real_browser(tmp_path, data):
    assert CHROMIUM, "CI: chromium is not installed (.ci/run installs the Debian package)"
    from sandbox.explore.page import write_page

    page = write_page(data, tmp_path)
    dom = _chromium("--dump-dom", page.as_uri() + "#selftest", cwd=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert not re.search(r"CONSOLE.*(Uncaught|Error)|Uncaught", dom.stderr), dom.stderr[-3000:]
    m = re.search(r'<pre id="selftest">([^<]*)</pre>', dom.stdout)
    assert m, "the page's self-test did not run"
    result = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert result["errors"] == []
    assert 0 < result["load_ms"] < 2000  # navigation start to the first drawing
    # every control switches to another run and redraws what depends on it
    expect = {"ctl-tail": 4, "ctl-engine": 4, "ctl-lag": 5, "ctl-lr": 4, "ctl-method": 3, "ctl-all": 3}
    assert set(result["controls"]) == set(expect)
    for ctl, r in result["controls"].items():
        assert r["changed"] >= expect[ctl], (ctl, r)
        if ctl != "ctl-all":
            assert r["from"] != r["to"], (ctl, r)
        assert r["ms"] < 100, (ctl, r)  # a control redraws in under 100 ms
    # keyboard: every control is labelled and focusable; every tour step lands on a precomputed run
    assert all(a["focusable"] and a["label"] for a in result["a11y"].values()), result["a11y"]
    from sandbox.explore.texts import TOURS

    assert len(result["tours"]) == sum(len(steps) for _, steps in TOURS.values())
    assert all(key in data["runs"] for key in result["tours"]), result["tours"]
    # the numbers shown are the runner's metrics for that grid point
    tail, engine, lag, lr, method = result["run"].split("|")
    res = run_scenario(scenario(TINY, Point(tail, engine, float(lr), method, None if lag == "sync" else int(lag))))
    h = headline(res.metrics)
    shown = result["numbers"]
    for key, field in (
        ("n-final", "final_reward"),
        ("n-time", "sim_time"),
        ("n-ess", "ess_mean"),
        ("n-stale", "staleness_mean"),
        ("n-cos", "cos_mean"),
    ):
        assert math.isclose(float(shown[key]), h[field], rel_tol=1e-3), (key, shown[key], h[field])
    assert math.isclose(
        float(res.metrics["eval/expected_reward"].dropna().iloc[-1]), float(shown["n-final"]), rel_tol=1e-3
    )

    shot = tmp_path / "explorer.png"
    res = _chromium(f"--screenshot={shot}", "--window-size=1300,2400", "--hide-scrollbars", page.as_uri(), cwd=tmp_path)
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    import matplotlib.image as mpimg

    pixels = mpimg.imread(shot)[..., :3]
    assert pixels.std() > 0.05
    blue = (
        (abs(pixels[..., 0] - 0 / 255) < 0.05)
        & (abs(pixels[..., 1] - 114 / 255) < 0.05)
        & (abs(pixels[..., 2] - 178 / 255) < 0.05)
    )
    # the Okabe-Ito blue of the selected run's curves is drawn (only they: the timeline is coloured by lag);
    # a page without them has 0 such pixels, two 2 px curves across the plots give ~0.0008 of this window
    assert blue.mean() > 0.0003


def test_t12_overlay_matches_the_first_step_of_many_replicas():
    """The ESS panel's T12 line: the expected Kish ESS/N of the engine's logit noise at the initial
    policy. 400 replicas of the synchronous run's first batch (policy still at init) measure it;
    the tolerance is 4 standard errors of their mean (the log-normal sum of 32 bits is approximate:
    the prediction was 0.370 against 0.380 +- 0.006 measured). With noise on one logit only (half
    the variance) the prediction would be ~0.55 and this fails."""
    import numpy as np

    from sandbox.explore.data import theory

    g = TINY.with_(replicas=400, steps=1, horizon=32, eval_every=1)
    res = run_scenario(scenario(g, Point("exponential", "logit_noise", 0.3, "none", None)))
    x = res.replica_metrics["is/ess_ratio"][0]
    pred = theory(g)["ess_init"]["logit_noise"]["expected_kish"]
    se = x.std(ddof=1) / np.sqrt(len(x))
    assert abs(x.mean() - pred) < 4 * se, (x.mean(), se, pred)


def test_report_links_to_the_explorer(tmp_path, data):
    from sandbox.explore.page import write_page
    from sandbox.report.api import write_report
    from sandbox.scenario.load import validate_scenario

    run_dir = tmp_path / "run"
    tiny = {
        "task": {"name": "bandit", "num_arms": 4},
        "system": {"num_workers": 2},
        "algorithm": {"group_size": 4, "groups_per_step": 2},
        "run": {"steps": 4, "figures": False},
    }
    run_scenario(validate_scenario(tiny), run_dir)
    assert 'href="explorer.html"' not in write_report(run_dir).read_text()  # no page, no link
    write_page(data, run_dir)
    assert 'href="explorer.html"' in write_report(run_dir).read_text()
    elsewhere = write_report(run_dir, tmp_path / "out" / "r.html")
    assert 'href="../run/explorer.html"' in elsewhere.read_text()
