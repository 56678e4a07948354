"""A sweep in which every run failed is not a success (issue 42, finding 8): exit status 1 with a
line saying so; a sweep with one run left standing still exits 0."""

from __future__ import annotations

import tomli_w
from typer.testing import CliRunner

from sandbox.cli import app


def _sweep_file(tmp_path, raw) -> str:
    raw = {**raw, "seeds": [0], "grid": {"system.staleness.k": [0, 2]}}
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(raw))
    return str(path)


def test_every_run_failed_exits_non_zero(tiny_raw, tmp_path, monkeypatch):
    import sandbox.run.runner as runner

    def broken(scn, out_dir=None, **kw):
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(runner, "run_scenario", broken)
    res = CliRunner().invoke(
        app, ["sweep", _sweep_file(tmp_path, tiny_raw), "--out", str(tmp_path / "sw"), "-j", "1", "-q"]
    )
    assert res.exit_code == 1, res.output
    assert "every run of the sweep failed" in " ".join(res.output.split())


def test_one_run_standing_exits_zero(tiny_raw, tmp_path, monkeypatch):
    import sandbox.run.runner as runner

    real = runner.run_scenario

    def half(scn, out_dir=None, **kw):
        if scn.system.staleness.k == 2:
            raise RuntimeError("simulated failure")
        return real(scn, out_dir, **kw)

    monkeypatch.setattr(runner, "run_scenario", half)
    res = CliRunner().invoke(
        app, ["sweep", _sweep_file(tmp_path, tiny_raw), "--out", str(tmp_path / "sw"), "-j", "1", "-q"]
    )
    assert res.exit_code == 0, res.output
