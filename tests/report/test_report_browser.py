"""The HTML reports render in a real browser: headless Chromium loads the page, every embedded
figure decodes (``naturalWidth > 0``), and the screenshot is not blank.

Chromium comes from the Debian package (``apt-get install chromium``); ``.ci/run`` installs it, and
under CI a missing browser is a failure, not a skip."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sandbox.report.api import write_report
from sandbox.run.runner import run_scenario
from sandbox.scenario.load import validate_scenario

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
if CHROMIUM is None:
    if os.environ.get("CI"):
        pytest.fail("CI: chromium is not installed (.ci/run installs the Debian package)", pytrace=False)
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

TINY = {
    "title": "browser check",
    "task": {"name": "bandit", "num_arms": 4, "replicas": 2},
    "system": {
        "num_workers": 3,
        "generation_time": {"kind": "exponential", "mean": 1.0},
        "staleness": {"kind": "max_lag", "k_max": 2},
    },
    "algorithm": {"group_size": 4, "groups_per_step": 2},
    "run": {"steps": 12, "eval_every": 3, "figures": True},
}

PROBE = """<script>
window.addEventListener('load', () => {
  const ok = [...document.images].map(i => (i.complete && i.naturalWidth > 0) ? 1 : 0);
  document.body.setAttribute('data-images', ok.join(','));
});
</script>"""


def _chromium(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--user-data-dir={cwd / 'profile'}",
        "--virtual-time-budget=5000",
        *args,
    ]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_run_report_renders_with_every_figure(tmp_path):
    run_dir = tmp_path / "run"
    run_scenario(validate_scenario(TINY), run_dir)
    report = write_report(run_dir)
    n_figures = len(list((run_dir / "figures").glob("*.png")))
    assert n_figures == 4

    probed = tmp_path / "probed.html"
    probed.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
    dom = _chromium("--dump-dom", probed.as_uri(), cwd=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    m = re.search(r'data-images="([01,]*)"', dom.stdout)
    assert m, "the page's load handler did not run"
    flags = [int(x) for x in m.group(1).split(",") if x]
    assert len(flags) >= n_figures and all(flags), flags  # every embedded figure decoded

    shot = tmp_path / "shot.png"
    res = _chromium(f"--screenshot={shot}", "--window-size=1200,1600", report.as_uri(), cwd=tmp_path)
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    import matplotlib.image as mpimg

    pixels = mpimg.imread(shot)[..., :3]
    assert pixels.std() > 0.05  # not a blank page: text, tables and figures
    assert (pixels.mean(axis=2) < 0.5).mean() > 0.005  # some dark ink (text) on the page
