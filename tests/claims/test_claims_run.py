"""Claims end to end in quick mode, the CLI once, and a broken simulator that must change a verdict."""

import json
import math

import pytest
import torch
from typer.testing import CliRunner

from sandbox.claims import _runs
from sandbox.claims.api import CLAIMS
from sandbox.claims.base import DIRECTIONS, REPRODUCED
from sandbox.claims.published_engine import ENGINE_SETUPS, VERL_ABLATION
from sandbox.claims.published_scaling import QUICK_POINTS
from sandbox.cli import app
from sandbox.system.staleness.fixed_lag import FixedLagControl


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    _runs.clear_cache()
    yield
    _runs.clear_cache()
    torch.set_num_threads(previous)


def _well_formed(result):
    assert result.rows and result.curves
    for row in result.rows:
        assert row.direction in DIRECTIONS
        assert len(row.values) == 2
        if math.isfinite(row.low):
            assert row.low <= row.mean <= row.high
    json.dumps(result.to_dict())


def test_vcpo_claim_quick_ess_falls_with_lag():
    result = CLAIMS["vcpo"].run(quick=True, seeds=2, lm_seeds=0)
    _well_formed(result)
    rows = {r.label: r for r in result.rows}
    assert rows["ESS/N falls: lag 4 → lag 16"].mean > 0
    assert rows["ESS/N falls: sync → lag 4"].mean > 0


def test_throughput_claim_quick_fixed_lag_matches_theory():
    result = CLAIMS["throughput"].run(quick=True, seeds=2)
    _well_formed(result)
    rows = {r.label: r for r in result.rows}
    # constant generation times: B = 4 groups split in 2 parts on P = 8 workers, sync step 0.5 + 0.2, async 4·1/8 = 0.5
    assert rows["fixed_lag: speed-up matches theory"].mean == pytest.approx(1.0, abs=0.01)
    assert rows["fixed_lag: async faster than sync"].verdict == REPRODUCED


def test_broken_staleness_breaks_the_ess_claim(monkeypatch):
    """A fixed lag that consumes the fresh version (a staleness bug) must not reproduce 'ESS falls with lag'."""
    ok = CLAIMS["vcpo"].run(quick=True, seeds=3, lm_seeds=0)
    label = "ESS/N falls: lag 4 → lag 16"
    assert next(r for r in ok.rows if r.label == label).verdict == REPRODUCED
    _runs.clear_cache()

    def fresh(self):
        step = self.dispatched // self.B
        return step, step

    monkeypatch.setattr(FixedLagControl, "_next", fresh)
    broken = CLAIMS["vcpo"].run(quick=True, seeds=3, lm_seeds=0)
    assert next(r for r in broken.rows if r.label == label).verdict != REPRODUCED


def test_cli_quick_all_claims(tmp_path):
    out = tmp_path / "claims"
    # --lm-seeds 0: the LM context (about a minute more) is run end to end in tests/claims/test_claims_premise.py
    res = CliRunner().invoke(app, ["claims", "--quick", "--seeds", "2", "--lm-seeds", "0", "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "claims.json").read_text())
    assert [c["name"] for c in data["claims"]] == list(CLAIMS)
    # published_speedups_engine (34 s of this run) is checked here rather than run a second time on its own:
    # one finite, positive row per opted-in setup and per mode of verl's ablation, each naming the mean step
    engine = next(c for c in data["claims"] if c["name"] == "published_speedups_engine")
    assert len(engine["rows"]) == len(ENGINE_SETUPS) + len(VERL_ABLATION) + len(QUICK_POINTS)
    for row in engine["rows"]:
        assert len(row["values"]) == 2 and all(math.isfinite(v) and v > 0 for v in row["values"])
        assert "mean step" in row["note"]
    md = (out / "claims.md").read_text()
    assert "| claim | context | statistic | mean [95% CI] | threshold | verdict | seeds |" in md
    assert data["lm_seeds"] == 0 and not any(r["context"] == "lm" for c in data["claims"] for r in c["rows"])
    for name in CLAIMS:
        assert (out / f"{name}.png").exists() and (out / f"{name}.svg").exists()


def test_cli_refuses_one_lm_seed(tmp_path):
    res = CliRunner().invoke(app, ["claims", "--quick", "--lm-seeds", "1", "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert "--lm-seeds" in res.output and "Traceback" not in res.output


def test_cli_refuses_unknown_claim(tmp_path):
    res = CliRunner().invoke(app, ["claims", "--quick", "--only", "nope", "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert "--only" in res.output and "nope" in res.output
