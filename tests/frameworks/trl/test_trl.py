"""The TRL exporter (GRPOConfig / AsyncGRPOConfig, trl 1.16.0): exact mappings, refusals, every shipped
variant validated against the installed trl, negative validator checks and golden files."""

from __future__ import annotations

import json
import os

import pytest
from export_cases import CONCEPTS, SHIPPED, check_golden, pairs

import sandbox.frameworks.trl.export  # noqa: F401  registers the exporter
from sandbox.export.api import ExportRefused, Given, export_scenario
from sandbox.frameworks.trl.export import ASYNC_CLASS, CONFIG_FILE, SCRIPT_FILE, SYNC_CLASS, TRLExporter, config_class
from sandbox.frameworks.trl.validation import validate
from sandbox.scenario.api import Scenario
from sandbox.scenario.load import set_dotted

VARIANTS = dict(SHIPPED)


@pytest.fixture(scope="module")
def trl_installed():
    try:
        import trl  # noqa: F401
    except ImportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must have trl installed: {exc}")
        pytest.skip(f"trl not installed here: {exc}")


def scenario(base: str = "quickstart:sync", **dotted) -> Scenario:
    """A shipped variant with dotted overrides (``algorithm__objective={...}`` for ``algorithm.objective``)."""
    data = VARIANTS[base].model_dump(mode="json")
    for key, value in dotted.items():
        set_dotted(data, key.replace("__", "."), value)
    return Scenario.model_validate(data)


def export(scn: Scenario, **kw):
    return export_scenario(scn, "trl", allow_partial=True, **kw)


def settings(scn: Scenario, **kw) -> dict:
    return export(scn, **kw).plan.settings


def gaps(scn: Scenario) -> list[str]:
    return [r.source for r in export(scn).plan.gaps()]


# ------------------------------------------------------------------------------------------------
# staleness and batch geometry
# ------------------------------------------------------------------------------------------------


def test_sync_is_grpo_config_with_one_generation_batch_per_optimizer_step():
    exp = export(VARIANTS["quickstart:sync"])
    s = exp.plan.settings
    assert config_class(exp.plan) == SYNC_CLASS
    assert (s["num_generations"], s["per_device_train_batch_size"], s["gradient_accumulation_steps"]) == (8, 8, 8)
    assert s["steps_per_generation"] == s["gradient_accumulation_steps"] and s["num_iterations"] == 1
    assert exp.plan.gaps() == []


def test_max_lag_is_async_grpo_config_with_k_max_as_max_staleness():
    exp = export(VARIANTS["quickstart:async"])  # k_max = 4, throttle, 8 groups of 8
    s = exp.plan.settings
    assert config_class(exp.plan) == ASYNC_CLASS
    assert s["max_staleness"] == 4 and s["weight_sync_steps"] == 1
    assert (s["per_device_train_batch_size"], s["gradient_accumulation_steps"], s["token_budget"]) == (64, 1, 0)
    # throttle capacity (k_max + 1)·B = 40 groups: 32 running + 8 waiting
    assert (s["max_inflight_tasks"], s["queue_maxsize"]) == (4 * 8 * 8, 8 * 8)
    assert not any(k.startswith("vllm_importance_sampling") for k in s)


def test_drop_enforcement_uses_the_queue_capacity():
    s = settings(VARIANTS["max_lag_drop:base"])  # k_max = 2, queue_capacity = 16 groups, B = 4, G = 8
    assert s["max_staleness"] == 2
    assert (s["max_inflight_tasks"], s["queue_maxsize"]) == ((16 - 4) * 8, 4 * 8)


def test_fixed_lag_and_async_ratio_have_no_equivalent_and_fall_back_to_grpo_config():
    for name in ("fixed_lag:base", "async_ratio:base", "lm_mission:tis"):
        exp = export(VARIANTS[name])
        assert config_class(exp.plan) == SYNC_CLASS
        assert "system.staleness" in [r.source for r in exp.plan.gaps()]
        assert exp.plan.settings["steps_per_generation"] == exp.plan.settings["gradient_accumulation_steps"]
    note = next(r.note for r in export(VARIANTS["fixed_lag:base"]).plan.gaps() if r.source == "system.staleness")
    assert "k_max = 8" in note and "num_iterations·steps_per_generation/gradient_accumulation_steps − 1" in note


def test_partial_rollouts():
    assert "system.partial_rollouts" not in gaps(VARIANTS["partial_rollouts:base"])  # AsyncGRPO: in-flight always
    assert "system.partial_rollouts" in gaps(VARIANTS["quickstart:async"])  # whole rollouts cannot be requested


def test_group_size_one_has_no_equivalent():
    scn = scenario(algorithm__objective={"name": "reinforce", "baseline": "none"}, algorithm__group_size=1)
    assert "algorithm.group_size" in gaps(scn)
    assert "num_generations" not in settings(scn)


# ------------------------------------------------------------------------------------------------
# objectives
# ------------------------------------------------------------------------------------------------


def test_grpo_objective():
    s = settings(VARIANTS["quickstart:sync"])
    assert (s["loss_type"], s["scale_rewards"], s["importance_sampling_level"]) == ("grpo", "group", "token")
    assert (s["epsilon"], s["epsilon_high"], s["beta"]) == (0.2, 0.2, 0.0)
    assert "delta" not in s and "use_bias_correction_kl" not in s


def test_kl_keeps_the_plain_k3():
    s = settings(scenario(algorithm__objective={"name": "grpo", "beta_kl": 0.04}))
    assert s["beta"] == 0.04 and s["use_bias_correction_kl"] is False
    async_kl = scenario("quickstart:async", algorithm__objective={"name": "grpo", "beta_kl": 0.04})
    assert "algorithm.objective.beta_kl" in gaps(async_kl)


def test_aggregations_choose_loss_type():
    def loss_type(obj):
        return settings(scenario(algorithm__objective=obj))["loss_type"]

    assert loss_type({"name": "dapo"}) == "dapo"
    assert loss_type({"name": "reinforce", "baseline": "group_mean", "aggregation": "seq_mean_token_sum"}) == "luspo"
    assert loss_type({"name": "dr_grpo"}) == "dr_grpo"
    assert loss_type({"name": "grpo", "aggregation": "token_mean"}) == "dapo"


def test_dr_grpo_centres_and_uses_max_completion_length():
    s = settings(scenario(algorithm__objective={"name": "dr_grpo", "max_len": 1024}))
    assert (s["loss_type"], s["scale_rewards"], s["max_completion_length"]) == ("dr_grpo", "none", 1024)
    assert "max_completion_length" not in settings(scenario(algorithm__objective={"name": "dr_grpo"}))


def test_dual_clip_is_delta_when_it_does_not_touch_the_positive_side():
    assert settings(scenario(algorithm__objective={"name": "ppo"}))["delta"] == 3.0  # c = 3 >= 1 + 0.2
    low = scenario(algorithm__objective={"name": "ppo", "dual_clip_c": 1.1})
    assert "algorithm.objective.dual_clip_c" in gaps(low) and "delta" not in settings(low)
    assert "algorithm.objective.dual_clip_c" in gaps(scenario("quickstart:async", algorithm__objective={"name": "ppo"}))


def test_cispo_cap_is_absolute():
    s = settings(scenario(algorithm__objective={"name": "cispo", "eps_high": 4.0}))
    assert (s["loss_type"], s["epsilon_high"]) == ("cispo", 5.0)
    assert "epsilon" not in s
    assert "algorithm.objective.eps_low" in gaps(scenario(algorithm__objective={"name": "cispo", "eps_low": 0.5}))


def test_gspo_is_the_sequence_level_ratio():
    s = settings(scenario(algorithm__objective={"name": "gspo"}))
    assert (s["importance_sampling_level"], s["loss_type"]) == ("sequence", "grpo")
    assert (s["epsilon"], s["epsilon_high"]) == (3e-4, 4e-4)


def test_advantages_without_equivalent():
    assert "algorithm.objective.name" in gaps(scenario(algorithm__objective={"name": "rloo"}))
    assert settings(scenario(algorithm__objective={"name": "rloo"}))["scale_rewards"] == "none"
    assert "algorithm.objective.advantage" in gaps(
        scenario(algorithm__objective={"name": "dapo", "advantage": "reward"})
    )
    assert "algorithm.objective.eps_std" in gaps(scenario(algorithm__objective={"name": "grpo", "eps_std": 0.1}))
    assert gaps(scenario(algorithm__objective={"name": "grpo", "eps_std": 1e-4})) == []


def test_population_std_is_harmless_under_adam_only():
    opt = {"name": "sgd", "lr": 0.1}
    assert "algorithm.objective.std_unbiased" in gaps(
        scenario(algorithm__objective={"name": "grpo", "std_unbiased": False}, algorithm__optimizer=opt)
    )
    assert gaps(scenario(algorithm__objective={"name": "grpo", "std_unbiased": False})) == []


def test_objectives_async_grpo_cannot_run_are_one_gap():
    for name in ("reinforce", "gspo", "cispo", "tba"):
        obj = {"name": name} | ({"baseline": "group_mean"} if name == "reinforce" else {})
        scn = scenario("quickstart:async", algorithm__objective=obj)
        assert "algorithm.objective" in gaps(scn)
        assert "epsilon" not in settings(scn)
    assert "algorithm.objective" in gaps(scenario(algorithm__objective={"name": "tba"}))


def test_opob_vcpo_and_gac_point_to_the_trl_integration_that_exists():
    exp = export(VARIANTS["lm_mission:vcpo"])
    notes = {r.source.split(" + ")[0]: r.note for r in exp.plan.gaps()}
    for key in ("algorithm.objective.baseline", "algorithm.stabilizers[0]"):
        assert "SandboxGRPOTrainer" in notes[key] and "verl-vcpo" in notes[key]
        assert "docs/promotion.md#trl" in notes[key]
    gac = export(scenario("quickstart:sync", algorithm__stabilizers=[{"name": "gac"}]))
    gac_notes = {r.source: r.note for r in gac.plan.gaps()}
    assert "SandboxGRPOTrainer" in gac_notes["algorithm.stabilizers[0]"]
    from sandbox.integrations.trl import SandboxGRPOConfig, SandboxGRPOTrainer  # what the notes name is real

    assert callable(SandboxGRPOConfig.from_scenario) and issubclass(SandboxGRPOConfig, __import__("trl").GRPOConfig)
    assert issubclass(SandboxGRPOTrainer, __import__("trl").GRPOTrainer)


# ------------------------------------------------------------------------------------------------
# corrections
# ------------------------------------------------------------------------------------------------


def correction(corr: dict, base: str = "quickstart:sync") -> dict:
    return settings(scenario(base, algorithm__correction=corr))


def test_no_correction_switches_trl_default_off():
    assert correction({"name": "none"})["vllm_importance_sampling_correction"] is False


def test_tis_caps():
    s = correction({"name": "tis", "level": "token", "C": 2.0})
    assert (s["vllm_importance_sampling_correction"], s["vllm_importance_sampling_mode"]) == (True, "token_truncate")
    assert (s["vllm_importance_sampling_clip_max"], s["vllm_importance_sampling_clip_min"]) == (2.0, 0.0)
    s = correction({"name": "tis", "level": "sequence"})  # C unset: the sandbox's sequence default 8
    assert (s["vllm_importance_sampling_mode"], s["vllm_importance_sampling_clip_max"]) == ("sequence_truncate", 8.0)


def test_masks():
    s = correction({"name": "mis", "level": "sequence", "C": 3.0, "C_low": 0.5})
    assert (
        s["vllm_importance_sampling_mode"],
        s["vllm_importance_sampling_clip_min"],
        s["vllm_importance_sampling_clip_max"],
    ) == ("sequence_mask", 0.5, 3.0)
    s = correction({"name": "icepop"})
    assert (
        s["vllm_importance_sampling_mode"],
        s["vllm_importance_sampling_clip_min"],
        s["vllm_importance_sampling_clip_max"],
    ) == ("token_mask", 0.5, 5.0)
    s = correction({"name": "decoupled_ppo"})
    assert (s["vllm_importance_sampling_mode"], s["vllm_importance_sampling_clip_max"]) == ("token_mask", 5.0)
    s = correction({"name": "opsm", "delta": 0.5})
    assert (s["off_policy_mask_threshold"], s["vllm_importance_sampling_correction"]) == (0.5, False)


def test_corrections_without_equivalent_switch_trl_default_off():
    for corr in (
        {"name": "geo_mis"},
        {"name": "m2po_mask"},
        {"name": "mis", "level": "sequence", "seq_weight": "one"},
        {"name": "decoupled_ppo", "level": "sequence"},
        {"name": "bapo"},
    ):
        scn = scenario(algorithm__correction=corr, algorithm__objective={"name": "grpo"})
        assert gaps(scn) == ["algorithm.correction"]
        assert settings(scn)["vllm_importance_sampling_correction"] is False
        assert "vllm_importance_sampling_mode" not in settings(scn)


def test_async_grpo_has_no_correction_keys():
    scn = VARIANTS["quickstart:async+tis"]
    assert "algorithm.correction" in gaps(scn)
    with pytest.raises(ExportRefused, match="algorithm.correction"):
        export_scenario(scn, "trl")


# ------------------------------------------------------------------------------------------------
# optimizer, scale-dependent values, refusals
# ------------------------------------------------------------------------------------------------


def test_optimizer():
    s = settings(
        scenario(
            algorithm__optimizer={
                "name": "adamw",
                "weight_decay": 0.01,
                "schedule": "cosine",
                "warmup_steps": 10,
                "betas": [0.9, 0.95],
                "eps": 1e-6,
            }
        )
    )
    assert (s["optim"], s["weight_decay"], s["adam_beta1"], s["adam_beta2"], s["adam_epsilon"]) == (
        "adamw_torch",
        0.01,
        0.9,
        0.95,
        1e-6,
    )
    assert (s["lr_scheduler_type"], s["warmup_steps"]) == ("cosine", 10)
    assert settings(scenario(algorithm__optimizer={"warmup_steps": 5}))["lr_scheduler_type"] == "constant_with_warmup"
    s = settings(scenario(algorithm__optimizer={"name": "sgd", "momentum": 0.9}))
    assert (s["optim"], s["optim_args"]) == ("sgd", "momentum=0.9")
    assert "algorithm.optimizer.name + algorithm.optimizer.weight_decay" in gaps(
        scenario(algorithm__optimizer={"name": "adam", "weight_decay": 0.01})
    )


def test_scale_dependent_values_are_written_only_when_given():
    scn = VARIANTS["lm_mission:sync"]
    assert "learning_rate" not in settings(scn) and "max_grad_norm" not in settings(scn)
    s = settings(scn, given=Given(lr=1e-6, grad_clip=0.5))
    assert (s["learning_rate"], s["max_grad_norm"]) == (1e-6, 0.5)


def test_refusal_names_the_settings_and_partial_writes_the_rest():
    scn = VARIANTS["lm_mission:gac"]
    with pytest.raises(ExportRefused) as err:
        export_scenario(scn, "trl")
    assert "system.staleness" in str(err.value) and "algorithm.stabilizers[0]" in str(err.value)
    exp = export(scn)
    assert exp.manifest["partial"] and "loss_type" in exp.plan.settings
    assert "No equivalent in trl" in exp.files["PROMOTION.md"]


def test_versions_and_concepts():
    assert TRLExporter.resolve_version("1.16").release == TRLExporter.resolve_version("1.16.0").release == "1.16.0"
    assert set(TRLExporter.expresses) <= set(CONCEPTS)


# ------------------------------------------------------------------------------------------------
# files and validation against the installed trl
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["quickstart:sync", "quickstart:async"])
def test_files_are_pure_kwargs_and_a_compiling_script(name):
    exp = export(VARIANTS[name])
    assert json.loads(exp.files[CONFIG_FILE]) == exp.plan.settings
    script = exp.files[SCRIPT_FILE]
    compile(script, SCRIPT_FILE, "exec")
    assert config_class(exp.plan) + "(output_dir=OUTPUT_DIR, **settings)" in script
    assert script.count("TODO(") == 3
    assert "--num_processes 1" in exp.launch


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_shipped_variant_validates(name, trl_installed):
    exp = export(VARIANTS[name])
    assert validate(exp.files, None) == []


OBJECTIVES = ("reinforce", "grpo", "dr_grpo", "rloo", "ppo", "dapo", "gspo", "cispo", "tba")
CORRECTIONS = (
    "none",
    "tis",
    "mis",
    "geo_mis",
    "icepop",
    "opsm",
    "decoupled_ppo",
    "m2po_mask",
    "m2po_clipband",
    "bapo",
    "topr",
    "dppo_mask",
)


@pytest.mark.parametrize("base", ["quickstart:sync", "quickstart:async"])
def test_every_objective_and_correction_is_covered_and_validates(base, trl_installed):
    for objective in OBJECTIVES:
        for corr in CORRECTIONS:
            obj = {"name": objective} | ({"baseline": "group_mean"} if objective == "reinforce" else {})
            if not pairs(obj, {"name": corr}):
                continue
            exp = export(scenario(base, algorithm__objective=obj, algorithm__correction={"name": corr}))
            assert validate(exp.files, None) == [], (objective, corr)
            assert all(r.note and r.target is None for r in exp.plan.gaps()), (objective, corr)


def _with(files: dict, **changes) -> dict:
    data = json.loads(files[CONFIG_FILE])
    data.update(changes)
    return {**files, CONFIG_FILE: json.dumps(data)}


def test_validator_can_fail(trl_installed):
    sync = export(VARIANTS["quickstart:sync"]).files
    problems = validate(_with(sync, num_generatons=8), None)
    assert len(problems) == 1 and "num_generatons" in problems[0]
    assert validate(_with(sync, loss_type="foo"), None) == [
        "loss_type: 'foo' is not one of grpo, dr_grpo, dapo, bnpo, cispo, sapo, luspo, vespo"
    ]
    assert any(
        "vllm_importance_sampling_mode" in p for p in validate(_with(sync, vllm_importance_sampling_mode="token"), None)
    )
    assert any("divisible" in p for p in validate(_with(sync, num_generations=7), None))
    asyn = export(VARIANTS["quickstart:async"]).files
    assert any(
        "AsyncGRPOConfig has no importance-sampling" in p
        for p in validate(_with(asyn, vllm_importance_sampling_mode="token_truncate"), None)
    )
    assert any("does not compile" in p for p in validate({**sync, SCRIPT_FILE: "def main(:\n"}, None))
    assert any("exactly one" in p for p in validate({**sync, SCRIPT_FILE: "import json\n"}, None))


# ------------------------------------------------------------------------------------------------
# golden files
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["quickstart:async", "lm_mission:vcpo"])
def test_golden(name):
    check_golden("trl", name.replace(":", "-"), export(VARIANTS[name]).files)
