"""Ctrl-C and SIGTERM in the commands that stage a whole output directory (import, preflight,
export, plan): exit 128 + the signal, one line saying what was kept, no traceback, and the previous
output byte for byte as it was (issue 28: SIGTERM is treated as Ctrl-C)."""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sandbox.cli import app

DATA = Path(__file__).resolve().parents[1] / "importers" / "data"


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def _stop(how: str):
    def stop(*_a, **_k):
        if how == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
        raise KeyboardInterrupt

    return stop


def _import_args(out: Path) -> list[str]:
    return ["import", str(DATA / "trl_async_grpo.json"), "-f", "trl", "--out", str(out)]


@pytest.mark.parametrize("how, status", [("ctrl-c", 130), ("sigterm", 143)])
def test_import_interrupted_keeps_the_previous_scenario(tmp_path, monkeypatch, how, status):
    import sandbox.base.outputs

    out = tmp_path / "imported"
    assert _invoke(*_import_args(out)).exit_code == 0
    before = _snapshot(out)
    monkeypatch.setattr(sandbox.base.outputs, "write_text", _stop(how))  # inside the staged directory
    res = _invoke(*_import_args(out))
    assert res.exit_code == status, res.output
    assert f"nothing was kept; the previous output in {out} is unchanged" in " ".join(res.output.split())
    assert "Traceback" not in res.output
    assert _snapshot(out) == before
    assert not [p for p in out.iterdir() if p.name.startswith((".staging-", ".replaced-"))]


@pytest.mark.parametrize("how, status", [("ctrl-c", 130), ("sigterm", 143)])
def test_preflight_interrupted_while_simulating_keeps_nothing(tmp_path, monkeypatch, how, status):
    import sandbox.preflight.questions

    out = tmp_path / "new" / "pre"
    monkeypatch.setattr(sandbox.preflight.questions, "run_plan", _stop(how))
    res = _invoke(
        "preflight", str(DATA / "trl_async_grpo.json"), "-f", "trl", "--quick", "--seeds", "2", "--out", str(out), "-q"
    )
    assert res.exit_code == status, res.output
    assert "interrupted: nothing was kept" in res.output and "Traceback" not in res.output
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("how, status", [("ctrl-c", 130), ("sigterm", 143)])
def test_export_interrupted_during_the_move_completes_it(tmp_path, monkeypatch, how, status):
    import sandbox.export.promotion as promotion

    out = tmp_path / "promote"
    args = ["export", "scenarios/quickstart.toml", "--variant", "sync", "-f", "trl", "--lr", "1e-6", "--out", str(out)]
    assert _invoke(*args).exit_code == 0
    before = _snapshot(out)
    real = os.replace
    sent = []

    def signal_then_replace(*a, **k):  # the signal arrives in the middle of the move (the first file moved)
        if not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGTERM if how == "sigterm" else signal.SIGINT)
        return real(*a, **k)

    monkeypatch.setattr(promotion.os, "replace", signal_then_replace)
    res = _invoke(*args[:-4], "--lr", "2e-6", "--out", str(out))
    assert res.exit_code == status, res.output
    assert "interrupted" in res.output and "Traceback" not in res.output
    # the signal waited for the move: the new export is whole (its manifest written), not a mix
    after = _snapshot(out)
    assert after.keys() == before.keys() and after != before
    assert not [p for p in out.iterdir() if p.name.startswith(".staging-")]
