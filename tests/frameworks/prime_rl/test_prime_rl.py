"""prime-rl exporter (PrimeIntellect-ai/prime-rl git 559b4477): exact mappings, refusals, every shipped
variant held against the pinned key list, negative checks of the validator, golden files."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from export_cases import SHIPPED, check_golden

import sandbox.frameworks.prime_rl.export  # noqa: F401  registers the exporter
from sandbox.export.api import ExportRefused, Given, export_scenario
from sandbox.frameworks.prime_rl import validation as checker
from sandbox.frameworks.prime_rl.export import PrimeRLExporter
from sandbox.scenario.api import validate_scenario
from sandbox.scenario.load import apply_overrides

FW = "prime-rl"
BY_ID = dict(SHIPPED)
MIRROR = Path(os.environ.get("PRIME_RL_MIRROR", "/work/.mirror/PrimeIntellect-ai+prime-rl/repo"))

# Everything in this scenario has a prime-rl equivalent: the unclipped ratio objective with the
# centred advantage and token-mean aggregation, the DPPO mask, drop enforcement, in-flight updates.
EXPRESSIBLE = {
    "task": {"name": "bitstring", "horizon": 32},
    "system": {
        "num_workers": 8,
        "generation_time": {"kind": "cost_model", "prefill": 0.05, "per_token": 0.02},
        "staleness": {"kind": "max_lag", "k_max": 3, "enforcement": "drop", "queue_capacity": 12},
        "partial_rollouts": True,
    },
    "algorithm": {
        "group_size": 8,
        "groups_per_step": 4,
        "objective": {
            "name": "grpo",
            "normalize_std": False,
            "eps_low": 1.0,
            "eps_high": float("inf"),
            "aggregation": "token_mean",
        },
        "correction": {
            "name": "dppo_mask",
            "dppo_mask_low": 0.1,
            "dppo_mask_high": 0.3,
            "adv_tau": 0.5,
            "kl_tau": 0.01,
        },
        "optimizer": {"name": "adamw", "lr": 0.01, "betas": [0.9, 0.95], "weight_decay": 0.1},
    },
    "run": {"steps": 50},
}


def scenario(**overrides):
    return validate_scenario(apply_overrides(EXPRESSIBLE, overrides))


def rows_for(plan, source):
    return [r for r in plan.rows if r.source == source or source in [s.strip() for s in r.source.split("+")]]


def read_back(files):
    return tomllib.loads(files["rl.toml"])


def lookup(data, dotted):
    node = data
    for part in dotted.split("."):
        node = node[part]
    return node


# ------------------------------------------------------------------------------------------------
# exact mappings
# ------------------------------------------------------------------------------------------------


def test_fully_expressible_scenario_maps_exactly_and_is_not_refused():
    exp = export_scenario(scenario(), FW)
    s = exp.plan.settings
    assert s["orchestrator.max_off_policy_steps"] == 3
    assert s["orchestrator.batch_size"] == 32 and s["orchestrator.group_size"] == 8
    assert s["trainer.loss.type"] == "default"
    assert (s["trainer.loss.dppo_mask_low"], s["trainer.loss.dppo_mask_high"]) == (0.1, 0.3)
    assert (s["trainer.loss.adv_tau"], s["trainer.loss.kl_tau"]) == (0.5, 0.01)
    assert (s["trainer.optim.type"], s["trainer.optim.betas1"], s["trainer.optim.betas2"]) == ("adamw", 0.9, 0.95)
    assert s["trainer.optim.weight_decay"] == 0.1
    assert s["orchestrator.algo.type"] == "grpo" and s["orchestrator.train.filter_zero_advantages"] is False
    assert "trainer.optim.lr" not in s and "trainer.optim.max_norm" not in s  # scale-dependent, not given
    assert exp.plan.gaps() == []
    assert checker.validate(exp.files) == []


def test_max_lag_k_is_max_off_policy_steps_and_throttle_has_no_equivalent():
    exp = export_scenario(BY_ID["quickstart:async"], FW, allow_partial=True)
    assert exp.plan.settings["orchestrator.max_off_policy_steps"] == 4
    (row,) = rows_for(exp.plan, "system.staleness.enforcement")
    assert row.kind == "no_equivalent" and "TARGET_LAG" in row.note and '"drop"' in row.note
    drop = export_scenario(BY_ID["max_lag_drop:base"], FW, allow_partial=True)
    assert drop.plan.settings["orchestrator.max_off_policy_steps"] == 2
    assert rows_for(drop.plan, "system.staleness.enforcement")[0].kind == "implicit"
    assert rows_for(drop.plan, "system.staleness.queue_capacity")[0].kind == "setup"


def test_sync_is_refused_and_pins_bound_zero():
    with pytest.raises(ExportRefused) as err:
        export_scenario(BY_ID["sync:base"], FW)
    assert "system.staleness = sync" in str(err.value)
    exp = export_scenario(BY_ID["sync:base"], FW, allow_partial=True)
    assert exp.plan.settings["orchestrator.max_off_policy_steps"] == 0
    assert rows_for(exp.plan, "system.partial_rollouts")[0].kind == "implicit"  # bound 0: single-version rollouts


def test_fixed_lag_and_async_ratio_have_no_equivalent_but_pin_the_closest_bound():
    exp = export_scenario(BY_ID["fixed_lag:base"], FW, allow_partial=True)
    assert rows_for(exp.plan, "system.staleness")[0].kind == "no_equivalent"
    assert exp.plan.settings["orchestrator.max_off_policy_steps"] == 8
    exp = export_scenario(BY_ID["async_ratio:base"], FW, allow_partial=True)  # alpha = 1.5
    assert rows_for(exp.plan, "system.staleness")[0].kind == "no_equivalent"
    assert exp.plan.settings["orchestrator.max_off_policy_steps"] == 2


def test_partial_rollouts_false_is_a_difference_when_lag_is_allowed():
    exp = export_scenario(BY_ID["lm_partial_rollouts:whole"], FW, allow_partial=True)
    assert rows_for(exp.plan, "system.partial_rollouts")[0].kind == "no_equivalent"
    exp = export_scenario(BY_ID["lm_partial_rollouts:partial"], FW, allow_partial=True)
    assert rows_for(exp.plan, "system.partial_rollouts")[0].kind == "implicit"


def test_ipo_variant():
    exp = export_scenario(
        scenario(**{"algorithm.correction": {"name": "dppo_mask", "variant": "ipo", "ipo_threshold": 0.15}}), FW
    )
    s = exp.plan.settings
    assert s["trainer.loss.type"] == "ipo" and s["trainer.loss.ipo_threshold"] == 0.15
    assert "trainer.loss.dppo_mask_low" not in s
    assert checker.validate(exp.files) == []


def test_rloo_advantage_is_folded_into_adv_tau():
    exp = export_scenario(
        scenario(
            **{"algorithm.objective": {"name": "rloo", "eps_low": 1.0, "eps_high": float("inf"), "dual_clip_c": None}}
        ),
        FW,
    )
    assert exp.plan.settings["trainer.loss.adv_tau"] == pytest.approx(0.5 * 8 / 7)
    assert exp.plan.gaps() == []


def test_no_correction_switches_the_dppo_mask_and_kl_off():
    s = export_scenario(BY_ID["quickstart:async"], FW, allow_partial=True).plan.settings
    assert (s["trainer.loss.type"], s["trainer.loss.dppo_mask_low"], s["trainer.loss.dppo_mask_high"]) == (
        "default",
        1.0,
        1.0,
    )
    assert (s["trainer.loss.kl_tau"], s["trainer.loss.adv_tau"]) == (0.0, 1.0)


def test_clip_std_and_aggregation_of_default_grpo_are_named_in_the_refusal():
    with pytest.raises(ExportRefused) as err:
        export_scenario(BY_ID["quickstart:async"], FW)
    text = str(err.value)
    for name in (
        "algorithm.objective.eps_low",
        "algorithm.objective.eps_high",
        "algorithm.objective.normalize_std",
        "algorithm.objective.aggregation",
        "system.staleness.enforcement",
        "system.partial_rollouts",
    ):
        assert name in text


def test_corrections_without_equivalent_are_refused_or_listed():
    scn = scenario(**{"algorithm.correction": {"name": "tis", "level": "token", "C": 2.0}})
    with pytest.raises(ExportRefused) as err:
        export_scenario(scn, FW)
    assert "algorithm.correction" in str(err.value)
    exp = export_scenario(scn, FW, allow_partial=True)
    (row,) = exp.plan.gaps()
    assert 'trainer.loss.type = "custom"' in row.note
    assert exp.plan.settings["trainer.loss.dppo_mask_high"] == 1.0  # the rest runs uncorrected
    assert "algorithm.correction" in exp.files["PROMOTION.md"].split("## Mapped as is")[0]
    for name in ("decoupled_ppo", "m2po_mask", "bapo"):
        gaps = export_scenario(scenario(**{"algorithm.correction": {"name": name}}), FW, allow_partial=True).plan.gaps()
        assert [g.source for g in gaps] == ["algorithm.correction"]


def test_reinforce_surrogate_differs_off_policy_only():
    refused = export_scenario(BY_ID["lm_mission:naive"], FW, allow_partial=True)
    assert rows_for(refused.plan, "algorithm.objective.name")[0].kind == "no_equivalent"
    sync = export_scenario(BY_ID["lm_mission:sync"], FW, allow_partial=True)
    assert rows_for(sync.plan, "algorithm.objective.name")[0].kind == "implicit"


def test_stabilizers_have_no_equivalent_and_say_what_to_do():
    vcpo = export_scenario(BY_ID["lm_mission:vcpo"], FW, allow_partial=True)
    (row,) = rows_for(vcpo.plan, "algorithm.stabilizers[0]")
    assert row.kind == "no_equivalent" and "verl-vcpo" in row.note and "sandbox.algorithms" in row.note
    gac = export_scenario(BY_ID["lm_mission:gac"], FW, allow_partial=True)
    (row,) = rows_for(gac.plan, "algorithm.stabilizers[0]")
    assert row.kind == "no_equivalent" and "between backward" in row.note


def test_optimizer_variants():
    sgd = export_scenario(
        scenario(**{"algorithm.optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.8}}), FW
    ).plan.settings
    assert (sgd["trainer.optim.type"], sgd["trainer.optim.momentum"], sgd["trainer.optim.nesterov"]) == (
        "sgd",
        0.8,
        False,
    )
    adam_wd = export_scenario(
        scenario(**{"algorithm.optimizer": {"name": "adam", "lr": 0.1, "weight_decay": 0.01}}), FW, allow_partial=True
    )
    assert [g.source for g in adam_wd.plan.gaps()] == ["algorithm.optimizer.weight_decay"]
    assert adam_wd.plan.settings["trainer.optim.weight_decay"] == 0.0
    lin = export_scenario(
        scenario(**{"algorithm.optimizer": {"name": "adamw", "lr": 0.1, "schedule": "linear", "warmup_steps": 5}}), FW
    )
    s = lin.plan.settings
    assert (s["trainer.scheduler.type"], s["trainer.scheduler.warmup_steps"], s["trainer.scheduler.decay_steps"]) == (
        "linear",
        5,
        45,
    )
    assert checker.validate(lin.files) == []
    warm = export_scenario(
        scenario(**{"algorithm.optimizer": {"name": "adamw", "lr": 0.1, "warmup_steps": 3}}), FW
    ).plan.settings
    assert (warm["trainer.scheduler.type"], warm["trainer.scheduler.decay_steps"]) == ("linear", 0)


def test_scale_values_only_when_given():
    exp = export_scenario(scenario(), FW, given=Given(lr=2e-6, grad_clip=0.5))
    assert exp.plan.settings["trainer.optim.lr"] == 2e-6 and exp.plan.settings["trainer.optim.max_norm"] == 0.5
    assert checker.validate(exp.files) == []


def test_exporter_metadata():
    assert PrimeRLExporter.resolve_version(None).release == "559b4477"
    concepts = {
        "max lag",
        "fixed lag",
        "async ratio",
        "partial rollouts",
        "batch geometry",
        "learning rate",
        "clip range",
        "dual clip",
        "KL penalty",
        "loss aggregation",
        "advantage",
        "token TIS",
        "sequence TIS",
        "masked IS / IcePop",
        "M2PO",
        "decoupled PPO",
        "VCPO",
        "GAC",
    }
    assert concepts <= set(PrimeRLExporter.expresses)


# ------------------------------------------------------------------------------------------------
# every shipped variant against the pinned key list
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", [c for c, _ in SHIPPED])
def test_every_shipped_variant_validates_and_reads_back(case):
    exp = export_scenario(BY_ID[case], FW, allow_partial=True)
    assert checker.validate(exp.files) == []
    data = read_back(exp.files)
    for key, value in exp.plan.settings.items():
        assert lookup(data, key) == value, key
    assert set(data) <= {"trainer", "orchestrator"}


# ------------------------------------------------------------------------------------------------
# the validator can fail
# ------------------------------------------------------------------------------------------------


def _edited(mutate):
    exp = export_scenario(scenario(), FW)
    data = read_back(exp.files)
    mutate(data)
    import tomli_w

    return {**exp.files, "rl.toml": tomli_w.dumps(data)}


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda d: d["orchestrator"].__setitem__("max_async_level", 1), "orchestrator.max_async_level: unknown key"),
        (lambda d: d["trainer"]["loss"].__setitem__("clip_ratio", 8.0), "trainer.loss.clip_ratio: unknown key"),
        (lambda d: d["trainer"]["loss"].__setitem__("ipo_threshold", 0.1), "trainer.loss.ipo_threshold: unknown key"),
        (lambda d: d["orchestrator"].__setitem__("max_off_policy_steps", -1), "must be >= 0"),
        (lambda d: d["trainer"]["loss"].__setitem__("kl_tau", -0.1), "trainer.loss.kl_tau = -0.1: must be >= 0"),
        (lambda d: d["trainer"]["optim"].__setitem__("type", "adam"), "trainer.optim.type = 'adam'"),
        (lambda d: d["orchestrator"].__setitem__("batch_size", 30), "not divisible"),
        (lambda d: d["orchestrator"].__setitem__("batch_size", "32"), "orchestrator.batch_size = '32': expected"),
        (lambda d: d["orchestrator"]["train"].__setitem__("filter_zero_advantages", "no"), "expected bool"),
        (lambda d: d.__setitem__("max_steps", 10), "max_steps: the exporter writes only"),
    ],
)
def test_validator_rejects(mutate, expected):
    problems = checker.validate(_edited(mutate))
    assert any(expected in p for p in problems), problems


# A stand-in for prime-rl's own pydantic models (prime_rl.configs is ~565 MB of dependencies, never installed
# here): OrchestratorConfig rejects batch_size above LIMIT and reads it back times FACTOR.
FAKE_CONFIGS = """from pydantic import BaseModel, ConfigDict, field_validator

class TrainerConfig(BaseModel):
    model_config = ConfigDict(extra="allow")

class OrchestratorConfig(BaseModel):
    model_config = ConfigDict(extra="allow")
    batch_size: int

    @field_validator("batch_size")
    @classmethod
    def _batch(cls, v):
        if v > {limit}:
            raise ValueError("batch_size too large")
        return v * {factor}
"""


@pytest.mark.parametrize(
    "limit, factor, expected",
    [
        (10**6, 1, None),
        (10**6, 2, "orchestrator.batch_size: reads back as 128, exported 64"),
        (1, 1, "orchestrator: rejected by prime-rl's OrchestratorConfig"),
    ],
)
def test_validator_builds_the_tables_with_prime_rls_models_from_a_checkout(
    tmp_path, monkeypatch, limit, factor, expected
):
    src = tmp_path / "packages/prime-rl-configs/src/prime_rl"
    (src / "configs").mkdir(parents=True)
    for init in (src / "__init__.py", src / "configs/__init__.py"):
        init.write_text("")
    for name in ("trainer", "orchestrator"):
        (src / "configs" / f"{name}.py").write_text(FAKE_CONFIGS.format(limit=limit, factor=factor))
    for name in [m for m in sys.modules if m == "prime_rl" or m.startswith("prime_rl.")]:
        monkeypatch.delitem(sys.modules, name)
    exp = export_scenario(BY_ID["quickstart:async"], FW, allow_partial=True)
    assert tomllib.loads(exp.files["rl.toml"])["orchestrator"]["batch_size"] == 64
    path = list(sys.path)
    try:
        problems = checker.validate(exp.files, tmp_path)
    finally:
        for name in [m for m in sys.modules if m == "prime_rl" or m.startswith("prime_rl.")]:
            del sys.modules[name]
    assert sys.path == path  # the checkout is taken off the path again
    if expected is None:
        assert problems == []
    else:
        assert len(problems) == 1 and expected in problems[0], problems


def test_validator_rejects_bad_toml_and_missing_launch():
    assert "not valid TOML" in checker.validate({"rl.toml": "[trainer", "launch.sh": ""})[0]
    exp = export_scenario(scenario(), FW)
    assert any("launch.sh" in p for p in checker.validate({"rl.toml": exp.files["rl.toml"]}))


# ------------------------------------------------------------------------------------------------
# pinned key list, launch script, golden files
# ------------------------------------------------------------------------------------------------


def test_pinned_key_list_has_the_facts_the_exporter_relies_on():
    keys = checker.load_key_list()
    models = keys["models"]
    orch = models["orchestrator.OrchestratorConfig"]["fields"]
    assert orch["max_off_policy_steps"]["ge"] == 0 and "max_async_level" not in orch
    loss = models["trainer.TrainerConfig"]["fields"]["loss"]["type"]
    assert loss["variants"] == {
        "default": "trainer.DefaultLossConfig",
        "ipo": "trainer.IPOLossConfig",
        "custom": "trainer.CustomLossConfig",
    }
    assert set(models["trainer.DefaultLossConfig"]["fields"]) == {
        "type",
        "dppo_mask_low",
        "dppo_mask_high",
        "adv_tau",
        "kl_tau",
    }
    assert set(models["trainer.TrainerConfig"]["fields"]["optim"]["type"]["variants"]) == {
        "adamw",
        "sgd",
        "muon",
        "sign_sgd",
    }
    assert {r["rule"] for r in keys["rules"]} >= {"batch_size_divisible", "one_batch_size"}


@pytest.mark.skipif(not (MIRROR / "HEAD").exists(), reason="prime-rl mirror not available (refresh check only)")
def test_key_list_refreshes_identically_from_the_mirror(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "prime_rl_keys", Path(__file__).parents[3] / "tools" / "prime_rl_keys.py"
    )
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    out = tmp_path / "keys.json"
    assert tool.main(["--refresh", str(MIRROR), "--commit", "559b4477", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == checker.load_key_list()


def test_launch_script_has_placeholders_and_stops_until_they_are_filled(tmp_path):
    exp = export_scenario(scenario(), FW)
    script = exp.files["launch.sh"]
    assert "<FILL IN" in script and 'uv run rl @ "$EXPORT_DIR/rl.toml" @ "$SETUP"' in script
    (tmp_path / "launch.sh").write_text(script)
    assert subprocess.run(["bash", "-n", str(tmp_path / "launch.sh")], check=False).returncode == 0
    env = {k: v for k, v in os.environ.items() if k not in ("MODEL", "ENV_ID", "MAX_STEPS")}
    proc = subprocess.run(["bash", str(tmp_path / "launch.sh")], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "set MODEL, ENV_ID and MAX_STEPS" in proc.stderr


@pytest.mark.parametrize("case", ["quickstart:async", "lm_mission:vcpo"])
def test_golden(case):
    exp = export_scenario(BY_ID[case], FW, allow_partial=True)
    check_golden(FW, case.replace(":", "-"), exp.files)


def _merge(base: dict, overlay: dict) -> dict:
    out = dict(base)
    for k, v in overlay.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def test_launch_setup_merged_with_rl_toml_is_a_valid_rl_config():
    exp = export_scenario(BY_ID["quickstart:async"], FW, allow_partial=True)
    script = exp.files["launch.sh"]
    setup = script.split("<<EOF\n", 1)[1].split("\nEOF\n", 1)[0]
    setup = setup.replace("$MAX_STEPS", "100").replace("$MODEL", "Qwen/Qwen3-0.6B").replace("$ENV_ID", "reverse-text")
    merged = _merge(read_back(exp.files), tomllib.loads(setup))
    assert (
        merged["orchestrator"]["train"]["filter_zero_advantages"] is False and merged["orchestrator"]["train"]["source"]
    )
    assert checker.schema_problems(merged) == []


def test_launch_names_how_to_install_the_example_taskset():
    """reverse-text is not built into verifiers (verifiers.v1.tasksets at deps/verifiers a60a606e holds harbor,
    lean, nemo_gym, openenv, textarena); it is an opt-in uv workspace member of the prime-rl checkout."""
    launch = export_scenario(SHIPPED[0][1], "prime-rl", allow_partial=True).files["launch.sh"]
    assert "uv sync --all-extras --package prime-rl --package reverse-text" in launch
    assert "git submodule update --init" in launch
    assert "textarena" in launch
