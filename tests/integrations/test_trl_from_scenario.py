"""``SandboxGRPOConfig.from_scenario(..., variant=...)`` keeps the variant's method (GAC survives
``variant="gac"`` on lm_mission), says when the scenario's objective replaces TRL's loss, refuses a
multi-variant scenario without a variant with a line that works, and the runnable example
(examples/trl_grpo_from_scenario.py: a tiny Llama built from a config, no downloads) trains two steps."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import pytest

pytest.importorskip("trl")
from sandbox.integrations.trl import SandboxGRPOConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def base(tmp_path):
    return {"output_dir": str(tmp_path), "report_to": [], "use_cpu": True}


def test_gac_survives_the_gac_variant_and_the_objective_replacing_trls_loss_is_said(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="sandbox.integrations.trl"):
        args = SandboxGRPOConfig.from_scenario("lm_mission", variant="gac", **base(tmp_path))
    assert [s["name"] for s in args.sandbox_stabilizers] == ["gac"]
    assert args.sandbox.objective.name == "reinforce"  # the scenario's method, not TRL's GRPO loss ...
    assert "objective 'reinforce'" in caplog.text and "replaces TRL's GRPO loss" in caplog.text  # ... and said so
    vcpo = SandboxGRPOConfig.from_scenario("lm_mission", variant="vcpo", **base(tmp_path))
    assert [s["name"] for s in vcpo.sandbox_stabilizers] == ["vcpo_lr"] and vcpo.sandbox.objective.baseline == "opob"
    assert vcpo.sandbox.correction.name == "tis"


def test_trl_loss_keeps_trls_loss_and_the_stabilizers(tmp_path):
    args = SandboxGRPOConfig.from_scenario("lm_mission", variant="gac", trl_loss=True, **base(tmp_path))
    assert args.sandbox_objective is None and [s["name"] for s in args.sandbox_stabilizers] == ["gac"]


def test_a_multi_variant_scenario_needs_a_variant_and_the_refusal_is_a_working_line(tmp_path):
    with pytest.raises(ValueError, match=r"has variants \(sync, naive, tis, m2po, vcpo, gac\)") as err:
        SandboxGRPOConfig.from_scenario("lm_mission", **base(tmp_path))
    line = (
        str(err.value)
        .split("e.g. ", 1)[1]
        .replace("output_dir=...", f"output_dir={str(tmp_path)!r}, use_cpu=True, report_to=[]")
    )
    args = eval(line, {"SandboxGRPOConfig": SandboxGRPOConfig})  # the suggested call runs as written
    assert args.sandbox_stabilizers
    with pytest.raises(ValueError, match="did you mean 'gac'"):
        SandboxGRPOConfig.from_scenario("lm_mission", variant="gca", **base(tmp_path))


def test_export_refusal_gives_the_from_scenario_line_for_this_source_and_variant(tmp_path):
    from typer.testing import CliRunner

    from sandbox.cli import app

    res = CliRunner().invoke(
        app, ["export", "lm_mission", "--variant", "gac", "-f", "trl", "--out", str(tmp_path / "e")]
    )
    assert res.exit_code == 3, res.output
    flat = " ".join(res.output.split())
    assert "SandboxGRPOConfig.from_scenario('lm_mission', variant='gac'" in flat


def test_the_example_trains_two_steps_with_the_variants_method(tmp_path):
    spec = importlib.util.spec_from_file_location("trl_example", ROOT / "examples" / "trl_grpo_from_scenario.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    trainer = example.main(["--steps", "2", "--out", str(tmp_path)])
    assert trainer.state.global_step == 2
    assert [s.name for s in trainer.sandbox.stabilizers] == ["gac"]
    logged = [h for h in trainer.state.log_history if "gac/cos_ref" in h]
    assert logged, "GAC ran inside TRL's optimizer step (its metrics are logged from the second step)"
