"""The explorer driven in headless Chromium (the Debian package) through Playwright's Python package:
the default task is the delayed quadratic where a large lag diverges and the staleness-aware LR
rescues it; a tour step scrolls to its chart and outlines it; the URL hash follows the controls and a
link with a hash reopens that selection; at 390 px nothing overflows horizontally."""

from __future__ import annotations

import os
import shutil

import pytest

from sandbox.explore.api import Grid
from sandbox.explore.data import compute_page, time_to_target
from sandbox.explore.grid import QUADRATIC
from sandbox.explore.page import write_page

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
try:
    from playwright.sync_api import sync_playwright
except ImportError:  # the `test` extra installs it
    sync_playwright = None

needs_browser = pytest.mark.skipif(
    (CHROMIUM is None or sync_playwright is None) and not os.environ.get("CI"),
    reason="chromium or playwright is not installed (apt-get install chromium; pip install -e .[test])",
)

# The teaching task, small: lag bound 1 and 16, lr 0.3 and 1, no correction and the staleness-aware LR.
QUAD = QUADRATIC.with_(
    lags=(1, 16),
    lrs=(0.3, 1.0),
    methods=("none", "staleness_lr"),
    tails=("exponential",),
    replicas=2,
    steps=80,
    budget_seconds=300.0,
)
BITS = Grid(
    lags=(1, 6),
    lrs=(0.3, 1.0),
    methods=("none", "tis"),
    tails=("exponential",),
    replicas=2,
    steps=12,
    horizon=12,
    num_workers=8,
    timeline_seconds=10.0,
    budget_seconds=300.0,
)


def test_time_to_target_per_replica():
    import numpy as np

    t = np.array([1.0, 2.0, 3.0])
    loss = np.array([[20.0, 20.0, 20.0], [0.4, 5.0, np.nan], [0.3, 30.0, 0.6]])  # steps x replicas
    assert time_to_target(t, loss, 0.5, higher=False) == [2.0, None, None]
    reward = np.array([[0.1, 0.1], [0.95, 0.0], [1.0, 0.05]])
    assert time_to_target(t, reward, 0.9, higher=True) == [2.0, None]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    return write_page(compute_page((QUAD, BITS)), tmp_path_factory.mktemp("explore"))


@pytest.fixture(scope="module")
def data():
    return compute_page((QUAD, BITS))


def test_the_quadratic_diverges_at_a_large_lag_and_the_staleness_lr_prevents_it(data):
    """The teaching claim, on the simulator's runs: lr = 1 is stable at lag bound 1 and at every
    replica of the synchronous reference, diverges on every replica at lag bound 16 (realised mean lag
    ~5, T1's critical step 2 sin(π/22) ≈ 0.28 < 1), and the staleness-aware LR keeps every replica
    converging to the target. Divergence is by orders of magnitude (loss 20 -> 1e3), far from the
    replica spread."""
    runs = data["tasks"][0]["runs"]
    sync, k1 = runs["exponential|exact|sync|1|none"], runs["exponential|exact|1|1|none"]
    k16, rescued = runs["exponential|exact|16|1|none"], runs["exponential|exact|16|1|staleness_lr"]
    assert not any(sync["collapsed"]) and not any(k1["collapsed"]) and all(t is not None for t in k1["ttt"])
    assert all(k16["collapsed"]) and all(t is None for t in k16["ttt"])
    assert min(r[-1] for r in k16["rep_reward"]) > 10 * k16["rep_reward"][0][0]
    assert not any(rescued["collapsed"]) and all(t is not None for t in rescued["ttt"])
    assert rescued["headline"]["lr_scale"] < 0.5  # what the method did: the step divided by the lag
    assert k16["headline"]["staleness_mean"] > 3  # the realised lag T1 is drawn at


@needs_browser
def test_tour_scrolls_to_and_outlines_its_chart_and_the_hash_follows(page):
    assert CHROMIUM and sync_playwright, "CI: chromium and playwright are required"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        pg = browser.new_page(viewport={"width": 1280, "height": 900})
        errors = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.goto(page.as_uri())
        assert pg.evaluate("window.scrollY") == 0
        assert "task=quadratic" in pg.evaluate("location.hash")  # the default task is the quadratic
        pg.get_by_role("button", name="Show why (T1 at the mean lag)").click()
        top = pg.evaluate("document.getElementById('c-theory').closest('figure').getBoundingClientRect().top")
        bar = pg.evaluate("document.getElementById('controls').offsetHeight")
        assert pg.evaluate("window.scrollY") > 300 and 0 <= top - bar <= 40, (top, bar)  # in view, under the bar
        assert pg.evaluate("document.querySelectorAll('figure.highlight').length") == 1
        assert pg.evaluate("document.getElementById('c-theory').closest('figure').classList.contains('highlight')")
        assert "lag=16" in pg.evaluate("location.hash") and "lr=1" in pg.evaluate("location.hash")
        assert "3 of" not in pg.inner_text("#headline")
        assert pg.get_attribute("#hl-collapsed", "data-value") == "2"  # both replicas diverge
        pg.get_by_role("button", name="Apply the staleness-aware LR").click()
        assert pg.get_attribute("#hl-collapsed", "data-value") == "0"
        assert float(pg.get_attribute("#hl-speedup", "data-value")) > 1  # faster to the target than sync
        assert "method=staleness_lr" in pg.evaluate("location.hash")
        # moving a control rewrites the hash; a link with a hash reopens the selection
        pg.select_option("#ctl-task", "bitstring")
        h = pg.evaluate("location.hash")
        assert "task=bitstring" in h
        pg2 = browser.new_page()
        pg2.goto(page.as_uri() + "#task=quadratic&lag=1&lr=0.3&method=staleness_lr")
        assert pg2.input_value("#ctl-task") == "quadratic" and pg2.input_value("#ctl-method") == "staleness_lr"
        assert pg2.text_content("#out-lag") == "1" and pg2.text_content("#out-lr") == "0.3"
        # each replica is drawn as its own thin line
        assert pg2.evaluate("document.querySelectorAll('#c-reward-time path[data-series^=async-replica]').length") == 2
        assert errors == []
        browser.close()


@needs_browser
def test_390px_layout_has_no_horizontal_overflow(page):
    assert CHROMIUM and sync_playwright, "CI: chromium and playwright are required"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        pg = browser.new_page(viewport={"width": 390, "height": 844})
        pg.goto(page.as_uri())
        assert pg.evaluate("document.documentElement.scrollWidth") <= 390
        for cid in ("c-reward-time", "c-theory", "c-timeline"):
            box = pg.locator(f"#{cid}").bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= 390, (cid, box)
        assert pg.evaluate("document.getElementById('controls').offsetHeight") < 844 / 3  # the bar stays compact
        browser.close()


@needs_browser
def test_replay_crosshair_and_phase_map(page):
    """Play/step/reset of the event log change what the timeline and the histogram draw; a histogram bar
    outlines its groups; one pointer position puts a crosshair on the three learner-step charts; the
    phase map has one cell per (lag, lr), T1's boundary on the quadratic, and a click selects a cell."""
    assert CHROMIUM and sync_playwright, "CI: chromium and playwright are required"
    count = "document.querySelectorAll('#{} {}').length"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        pg = browser.new_page(viewport={"width": 1280, "height": 900})
        errors = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.goto(page.as_uri())
        whole = pg.evaluate(count.format("c-timeline", "rect.gen"))
        groups = pg.evaluate(
            "[...document.querySelectorAll('#c-hist rect.bar')].reduce((a, r) => a + +r.dataset.count, 0)"
        )
        pg.click("#replay-step")  # clock at 0: nothing drawn yet
        assert (
            pg.evaluate(count.format("c-timeline", "rect.gen")) == 0 and pg.text_content("#replay-clock") == "t = 0 s"
        )
        for _ in range(10):
            pg.click("#replay-step")
        mid = pg.evaluate(count.format("c-timeline", "rect.gen"))
        consumed = pg.evaluate(
            "[...document.querySelectorAll('#c-hist rect.bar')].reduce((a, r) => a + +r.dataset.count, 0)"
        )
        assert 0 < mid < whole and 0 < consumed < groups, (mid, whole, consumed, groups)
        assert pg.evaluate(count.format("c-timeline", "line.clock")) == 1
        pg.click("#replay-play")
        assert pg.text_content("#replay-play") == "Pause the replay"
        pg.wait_for_timeout(600)
        pg.click("#replay-play")  # pause
        later = pg.evaluate(count.format("c-timeline", "rect.gen"))
        assert later > mid and pg.text_content("#replay-play") == "Play the event log"
        pg.click("#replay-reset")
        assert pg.evaluate(count.format("c-timeline", "rect.gen")) == whole
        # a histogram bar outlines its groups on the timeline
        pg.hover("#c-hist rect.bar >> nth=0")
        assert pg.evaluate("document.getElementById('c-timeline').classList.contains('hl')")
        assert 0 < pg.evaluate(count.format("c-timeline", "rect.gen.on")) < whole
        # the crosshair: one pointer position, three charts
        pg.hover("#c-ess")
        assert pg.evaluate(count.format("c-ess", "line.crosshair")) == 1
        assert pg.evaluate(count.format("c-cos", "line.crosshair")) == 1
        assert pg.evaluate(count.format("c-reward-step", "line.crosshair")) == 1
        # the phase map: 2 lags x 2 learning rates, the T1 boundary, a click selects
        assert pg.evaluate(count.format("c-phase", "rect.cell")) == 4
        assert pg.evaluate(count.format("c-phase", "path[data-series=t1-boundary]")) == 1
        pg.click("#c-phase rect.cell[data-lag='1'][data-lr='0.3']")
        assert "lag=1&lr=0.3" in pg.evaluate("location.hash")
        assert errors == []
        browser.close()
