"""OpenRLHF exporter (openrlhf 0.11.2): exact flag values, refusals, every shipped variant validated
against the real argparse parser rebuilt from the wheel, negative validator tests and golden files."""

from __future__ import annotations

import copy
import shlex
from pathlib import Path

import pytest
from export_cases import SHIPPED, check_golden

import sandbox.frameworks.openrlhf.export  # noqa: F401  registers the exporter
from sandbox.export.api import ExportRefused, Given, export_scenario, get_exporter
from sandbox.export.common import scenario_leaves
from sandbox.frameworks.openrlhf.validation import build_parser, validate
from sandbox.scenario.api import load_scenario

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = ROOT / "scenarios" / "quickstart.toml"
SHIPPED_BY_ID = dict(SHIPPED)


@pytest.fixture(scope="module")
def openrlhf_wheel(wheel):
    return wheel("openrlhf")


def scenario(**overrides):
    """quickstart with dotted overrides (``algorithm__objective={...}`` style keys use '.')."""
    scn, _ = load_scenario(QUICKSTART, {k.replace("__", "."): v for k, v in overrides.items()})
    return scn


def export(scn, allow_partial=True, given=None):
    return export_scenario(scn, "openrlhf", allow_partial=allow_partial, given=given)


def settings(**overrides):
    return export(scenario(**overrides)).plan.settings


def row(plan, source):
    hits = [r for r in plan.rows if r.source == source]
    assert hits, f"no row for {source}: {[r.source for r in plan.rows]}"
    return hits[0]


# ----------------------------------------------------------------------------------------------
# staleness and batch geometry
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k_max", [1, 4, 7])
def test_max_lag_is_the_queue_size(k_max):
    s = settings(system__staleness={"kind": "max_lag", "k_max": k_max})
    assert s["--train.async_enable"] is True
    assert s["--train.async_queue_size"] == k_max  # lag <= Q rollout batches = Q optimizer steps


def test_one_optimizer_step_per_rollout_batch():
    s = settings(
        system__staleness={"kind": "max_lag", "k_max": 4}, algorithm__group_size=6, algorithm__groups_per_step=5
    )
    assert s["--rollout.n_samples_per_prompt"] == 6
    assert s["--rollout.batch_size"] == 5
    assert s["--train.batch_size"] == 30
    assert s["--train.max_epochs"] == 1
    assert s["--rollout.vllm_generate_batch_size"] == 5


@pytest.mark.parametrize(
    "staleness",
    [
        {"kind": "sync"},
        {"kind": "max_lag", "k_max": 0},
        {"kind": "fixed_lag", "k": 0},
        {"kind": "async_ratio", "alpha": 0.0},
    ],
)
def test_zero_lag_runs_the_synchronous_trainer(staleness):
    exp = export(scenario(system__staleness=staleness))
    assert "--train.async_enable" not in exp.plan.settings
    assert "--train.async_queue_size" not in exp.plan.settings
    assert row(exp.plan, "system.staleness").kind == "implicit"


def test_fixed_lag_is_refused_with_the_max_lag_alternative():
    scn = scenario(system__staleness={"kind": "fixed_lag", "k": 8})
    with pytest.raises(ExportRefused) as info:
        export(scn, allow_partial=False)
    assert "system.staleness" in str(info.value)
    gap = row(export(scn).plan, "system.staleness")
    assert gap.kind == "no_equivalent" and "k_max = 8" in gap.note and "--train.async_queue_size 8" in gap.note


def test_async_ratio_is_refused():
    exp = export(scenario(system__staleness={"kind": "async_ratio", "alpha": 1.5}))
    gap = row(exp.plan, "system.staleness")
    assert gap.kind == "no_equivalent" and "k_max = 2" in gap.note
    assert "--train.async_enable" not in exp.plan.settings


def test_drop_enforcement_keeps_the_bound_but_has_no_drop():
    scn = SHIPPED_BY_ID["max_lag_drop:base"]
    with pytest.raises(ExportRefused) as info:
        export(scn, allow_partial=False)
    assert "system.staleness.enforcement" in str(info.value)
    exp = export(scn)
    assert exp.plan.settings["--train.async_queue_size"] == 2
    assert row(exp.plan, "system.staleness.enforcement + system.staleness.queue_capacity").kind == "no_equivalent"


def test_partial_rollouts_need_the_async_trainer():
    exp = export(SHIPPED_BY_ID["lm_partial_rollouts:partial"])
    assert exp.plan.settings["--train.partial_rollout_enable"] is True
    assert exp.plan.settings["--train.async_queue_size"] == 4
    whole = export(SHIPPED_BY_ID["lm_partial_rollouts:whole"])
    assert "--train.partial_rollout_enable" not in whole.plan.settings


# ----------------------------------------------------------------------------------------------
# objectives
# ----------------------------------------------------------------------------------------------


def test_reinforce_group_baselines_map_to_estimators():
    obj = {"name": "reinforce", "aggregation": "seq_mean_token_mean"}
    cases = {("group_mean", True): "group_norm", ("group_mean", False): "dr_grpo", ("leave_one_out", False): "rloo"}
    for (baseline, norm), estimator in cases.items():
        s = settings(algorithm__objective={**obj, "baseline": baseline, "normalize_std": norm})
        assert s["--algo.advantage.estimator"] == estimator
        assert s["--actor.policy_loss_type"] == "ppo"
        assert s["--algo.kl.init_coef"] == 0.0


@pytest.mark.parametrize("baseline", ["none", "constant", "ema"])
def test_reinforce_batch_free_baselines_are_refused(baseline):
    scn = scenario(algorithm__objective={"name": "reinforce", "baseline": baseline, "aggregation": "token_mean"})
    with pytest.raises(ExportRefused, match="algorithm.objective.baseline"):
        export(scn, allow_partial=False)
    assert export(scn).plan.settings["--algo.advantage.estimator"] == "dr_grpo"  # critic-free stand-in


def test_reinforce_default_aggregation_has_no_equivalent():
    exp = export(scenario(algorithm__objective={"name": "reinforce", "baseline": "group_mean"}))
    assert row(exp.plan, "algorithm.objective.aggregation").kind == "no_equivalent"
    assert "--actor.loss_agg_mode" not in exp.plan.settings


def test_grpo_eps_std_is_a_guard_within_tolerance_and_a_gap_beyond():
    exp = export(scenario())  # 1e-6 vs group_norm's 1e-9: both zero-division guards
    assert row(exp.plan, "algorithm.objective.eps_std").kind == "implicit"
    damped = export(scenario(algorithm__objective={"name": "grpo", "eps_std": 0.05}))
    assert row(damped.plan, "algorithm.objective.eps_std").kind == "no_equivalent"
    ok = export(scenario(algorithm__objective={"name": "grpo", "eps_std": 1e-9}), allow_partial=False)
    assert ok.plan.settings["--algo.advantage.estimator"] == "group_norm"
    assert ok.plan.settings["--actor.eps_clip_low_high"] == [0.2, 0.2]
    assert ok.plan.settings["--actor.loss_agg_mode"] == "seq-mean-token-mean"
    assert row(ok.plan, "algorithm.objective.std_unbiased").kind == "implicit"
    population = export(scenario(algorithm__objective={"name": "grpo", "eps_std": 1e-9, "std_unbiased": False}))
    assert row(population.plan, "algorithm.objective.std_unbiased").kind == "no_equivalent"


def test_clip_range_at_lag_zero_dapo_clip_higher_and_dual_clip():
    s = settings(algorithm__objective={"name": "dapo", "advantage": "rloo"})
    assert s["--actor.eps_clip_low_high"] == [0.2, 0.28]
    assert s["--algo.advantage.estimator"] == "rloo"
    assert s["--actor.loss_agg_mode"] == "token-mean"
    s = settings(algorithm__objective={"name": "ppo", "advantage": "dr_grpo", "dual_clip_c": 3.0, "eps_low": 0.1})
    assert s["--actor.dual_clip"] == 3.0
    assert s["--actor.eps_clip_low_high"] == [0.1, 0.2]


def test_clip_on_stale_data_has_no_equivalent():
    scn = scenario(
        system__staleness={"kind": "max_lag", "k_max": 2},
        algorithm__objective={"name": "dapo", "advantage": "rloo", "dual_clip_c": 3.0},
    )
    with pytest.raises(ExportRefused, match="eps_low"):
        export(scn, allow_partial=False)
    exp = export(scn)
    gap = row(exp.plan, "algorithm.objective.eps_low + algorithm.objective.eps_high + algorithm.objective.dual_clip_c")
    assert gap.kind == "no_equivalent"
    assert 'name="reinforce",baseline="leave_one_out",normalize_std=false,aggregation="token_mean"' in gap.note
    assert "--actor.eps_clip_low_high" not in exp.plan.settings and "--actor.dual_clip" not in exp.plan.settings


def test_reinforce_on_stale_data_exports_cleanly():
    exp = export(
        scenario(
            system__staleness={"kind": "max_lag", "k_max": 3},
            algorithm__objective={
                "name": "reinforce",
                "baseline": "group_mean",
                "normalize_std": True,
                "aggregation": "seq_mean_token_mean",
            },
            algorithm__correction={"name": "tis", "level": "token", "C": 2.0},
        ),
        allow_partial=False,
    )
    assert exp.plan.gaps() == []
    assert exp.plan.settings["--train.async_queue_size"] == 3


def test_gspo_is_taken_against_the_rollout_log_probs():
    scn = scenario(
        system__staleness={"kind": "max_lag", "k_max": 2}, algorithm__objective={"name": "gspo", "advantage": "rloo"}
    )
    exp = export(scn, allow_partial=False)
    s = exp.plan.settings
    assert s["--actor.policy_loss_type"] == "gspo"
    assert s["--algo.advantage.is_correction_level"] == "token"  # switches the ratio to pi_theta/mu
    assert s["--actor.eps_clip_low_high"] == [3e-4, 4e-4]
    assert s["--actor.loss_agg_mode"] == "seq-mean-token-mean"
    with_tis = export(
        scenario(algorithm__objective={"name": "gspo", "advantage": "rloo"}, algorithm__correction={"name": "tis"})
    )
    assert row(with_tis.plan, "algorithm.correction").kind == "no_equivalent"


def test_cispo_is_the_token_clip_gate():
    scn = scenario(
        system__staleness={"kind": "max_lag", "k_max": 2},
        algorithm__objective={"name": "cispo", "advantage": "rloo", "eps_low": 0.8, "eps_high": 4.0},
    )
    s = export(scn, allow_partial=False).plan.settings
    assert s["--actor.policy_loss_type"] == "ppo"
    assert (s["--algo.advantage.is_correction_level"], s["--algo.advantage.is_correction_mode"]) == ("token", "clip")
    assert s["--algo.advantage.is_correction_threshold"] == pytest.approx([0.2, 5.0])
    with_tis = export(
        scenario(algorithm__objective={"name": "cispo", "advantage": "rloo"}, algorithm__correction={"name": "tis"})
    )
    assert row(with_tis.plan, "algorithm.correction").kind == "no_equivalent"


def test_tba_has_no_equivalent():
    exp = export(scenario(algorithm__objective={"name": "tba"}))
    assert row(exp.plan, "algorithm.objective").kind == "no_equivalent"
    assert exp.plan.settings["--actor.policy_loss_type"] == "ppo"
    assert exp.plan.settings["--algo.advantage.estimator"] == "group_norm"  # critic-free stand-in


def test_kl_loss():
    s = settings(algorithm__objective={"name": "grpo", "eps_std": 1e-9, "beta_kl": 0.04, "aggregation": "token_mean"})
    assert s["--algo.kl.init_coef"] == 0.04
    assert s["--algo.kl.use_loss"] is True
    assert s["--algo.kl.estimator"] == "k3"
    exp = export(scenario(algorithm__objective={"name": "grpo", "eps_std": 1e-9, "beta_kl": 0.04}))
    assert row(exp.plan, "algorithm.objective.beta_kl").kind == "no_equivalent"  # KL loss is token-mean only
    assert exp.plan.settings["--algo.kl.init_coef"] == 0.0


def test_opob_baseline_points_to_the_vcpo_fork():
    exp = export(SHIPPED_BY_ID["lm_mission:vcpo"])
    gaps = {r.source.split(" + ")[0]: r.note for r in exp.plan.gaps()}
    assert "verl-vcpo" in gaps["algorithm.objective.baseline"]
    assert "verl-vcpo" in gaps["algorithm.stabilizers[0]"]
    assert "examples/plain_torch_loop.py" in gaps["algorithm.stabilizers[0]"]
    assert not any("TRL" in note for note in gaps.values())


def test_gac_is_refused_with_the_sandbox_component():
    scn = SHIPPED_BY_ID["lm_mission:gac"]
    with pytest.raises(ExportRefused, match=r"algorithm.stabilizers\[0\]"):
        export(scn, allow_partial=False)
    note = row(export(scn).plan, "algorithm.stabilizers[0]").note
    assert "no public code" in note and "ppo_actor.py" in note and "GACConfig" in note


# ----------------------------------------------------------------------------------------------
# corrections
# ----------------------------------------------------------------------------------------------


def correction(corr, objective=None):
    return settings(algorithm__objective=objective or {"name": "grpo", "eps_std": 1e-9}, algorithm__correction=corr)


def test_token_tis_cap():
    s = correction({"name": "tis", "level": "token"})
    assert (s["--algo.advantage.is_correction_level"], s["--algo.advantage.is_correction_mode"]) == ("token", "clip")
    assert s["--algo.advantage.is_correction_gating"] == "ratio"
    assert s["--algo.advantage.is_correction_threshold"] == [0.0, 2.0]
    assert correction({"name": "tis", "level": "token", "C": 3.0, "C_low": 0.5})[
        "--algo.advantage.is_correction_threshold"
    ] == [0.5, 3.0]


def test_masks_on_the_token_ratio():
    icepop = correction({"name": "icepop", "alpha": 0.5, "beta": 5.0})
    assert (icepop["--algo.advantage.is_correction_level"], icepop["--algo.advantage.is_correction_mode"]) == (
        "token",
        "mask",
    )
    assert icepop["--algo.advantage.is_correction_threshold"] == [0.5, 5.0]
    mis = correction({"name": "mis", "level": "token", "C": 3.0, "C_low": 0.2})
    assert mis["--algo.advantage.is_correction_threshold"] == [0.2, 3.0]
    assert mis["--algo.advantage.is_correction_mode"] == "mask"
    decoupled = correction({"name": "decoupled_ppo", "behave_imp_weight_cap": 4.0})
    assert decoupled["--algo.advantage.is_correction_threshold"] == [0.0, 4.0]


def test_geometric_sequence_mask():
    s = correction({"name": "geo_mis", "lo": 0.99, "hi": 1.01})
    assert (s["--algo.advantage.is_correction_level"], s["--algo.advantage.is_correction_mode"]) == ("seq", "mask")
    assert s["--algo.advantage.is_correction_threshold"] == [0.99, 1.01]
    exp = export(
        scenario(
            algorithm__objective={"name": "reinforce", "baseline": "group_mean", "aggregation": "token_mean"},
            algorithm__correction={"name": "geo_mis"},
        )
    )
    assert row(exp.plan, "algorithm.correction.token_weight + algorithm.correction.C").kind == "no_equivalent"


@pytest.mark.parametrize(
    "corr",
    [
        {"name": "tis", "level": "sequence"},
        {"name": "mis", "level": "sequence"},
        {"name": "opsm"},
        {"name": "m2po_mask"},
        {"name": "m2po_clipband"},
        {"name": "bapo"},
        {"name": "topr"},
        {"name": "dppo_mask"},
        {"name": "decoupled_ppo", "level": "sequence"},
    ],
)
def test_corrections_openrlhf_lacks(corr):
    scn = scenario(algorithm__objective={"name": "grpo", "eps_std": 1e-9}, algorithm__correction=corr)
    with pytest.raises(ExportRefused, match="algorithm.correction"):
        export(scn, allow_partial=False)
    exp = export(scn)
    assert exp.plan.settings["--algo.advantage.is_correction_level"] == "off"
    assert row(exp.plan, "algorithm.correction").kind == "no_equivalent"


def test_sequence_tis_says_geometric_mean_is_not_the_product():
    note = row(export(SHIPPED_BY_ID["quickstart:async+tis"]).plan, "algorithm.correction").note
    assert "geometric mean" in note and "Π_t w_t" in note


# ----------------------------------------------------------------------------------------------
# optimizer and scale-dependent values
# ----------------------------------------------------------------------------------------------


def test_optimizer_keys_and_scale_values_only_when_given():
    scn = scenario(
        algorithm__optimizer={
            "name": "adamw",
            "lr": 0.05,
            "betas": [0.9, 0.98],
            "eps": 1e-6,
            "weight_decay": 0.1,
            "schedule": "cosine",
            "warmup_steps": 12,
            "grad_clip": 0.5,
        }
    )
    s = export(scn).plan.settings
    assert s["--actor.optim"] == "adam"
    assert s["--actor.adam.betas"] == [0.9, 0.98]
    assert s["--actor.adam.eps"] == 1e-6
    assert s["--actor.adam.weight_decay"] == 0.1
    assert s["--actor.lr_scheduler"] == "cosine"
    assert s["--actor.lr_warmup_ratio"] == pytest.approx(12 / scn.run.steps)
    assert "--actor.adam.lr" not in s and "--actor.max_norm" not in s
    given = export(scn, given=Given(lr=1e-6, grad_clip=1.0)).plan.settings
    assert given["--actor.adam.lr"] == 1e-6 and given["--actor.max_norm"] == 1.0
    assert (
        settings(algorithm__optimizer={"name": "adam", "warmup_steps": 5})["--actor.lr_scheduler"]
        == "constant_with_warmup"
    )


@pytest.mark.parametrize("opt", [{"name": "sgd", "momentum": 0.9}, {"name": "adam", "weight_decay": 0.01}])
def test_optimizers_openrlhf_lacks(opt):
    with pytest.raises(ExportRefused, match="algorithm.optimizer.name"):
        export(
            scenario(algorithm__objective={"name": "grpo", "eps_std": 1e-9}, algorithm__optimizer=opt),
            allow_partial=False,
        )


# ----------------------------------------------------------------------------------------------
# every shipped variant against the real parser
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", [c for c, _ in SHIPPED])
def test_shipped_variants_validate(case, openrlhf_wheel):
    scn = SHIPPED_BY_ID[case]
    exp = export(scn)
    assert exp.plan.uncovered(scenario_leaves(scn)) == []
    assert not [r.note for r in exp.plan.rows if "|" in r.note]  # notes go into markdown table cells unescaped
    assert validate(exp.files, openrlhf_wheel) == []
    parser = build_parser(openrlhf_wheel)  # each flag's value as argparse parses it, for typed comparisons
    parsed = parser.parse_args(shlex.split(exp.files["flags.txt"]))
    for key, value in exp.plan.settings.items():
        got = getattr(parsed, parser._option_string_actions[key].dest)
        if isinstance(value, list):
            assert list(got) == value, key
        else:
            assert got == value and type(got) is type(value), (key, got, value)


def test_refused_export_names_the_settings_and_partial_lists_them():
    scn = SHIPPED_BY_ID["lm_mission:vcpo"]
    with pytest.raises(ExportRefused) as info:
        export(scn, allow_partial=False)
    for source in ("system.staleness", "algorithm.correction", "algorithm.stabilizers[0]"):
        assert source in str(info.value)
    exp = export(scn)
    assert "Partial export" in exp.files["PROMOTION.md"]
    assert exp.manifest["partial"] is True


def test_parser_is_the_real_one(openrlhf_wheel):
    parser = build_parser(openrlhf_wheel)
    flags = [s for a in parser._actions for s in a.option_strings]
    assert len(parser._actions) == 168
    assert "--actor.adam.lr" in flags and "--critic.adam.lr" in flags  # generated by the per-model loop


# ----------------------------------------------------------------------------------------------
# the validator can fail
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def async_export():
    return export(SHIPPED_BY_ID["quickstart:async"])


def with_flags_text(files, old, new):
    return {
        **files,
        "flags.txt": files["flags.txt"].replace(old, new),
        "launch.sh": files["launch.sh"].replace(old, new),
    }


def test_old_flag_name_is_reported(async_export, openrlhf_wheel):
    problems = validate(with_flags_text(async_export.files, "--train.async_enable", "--async_train"), openrlhf_wheel)
    assert any("unrecognized arguments: --async_train" in p for p in problems)


def test_invalid_choice_is_reported(async_export, openrlhf_wheel):
    files = with_flags_text(async_export.files, "is_correction_level off", "is_correction_level sequence")
    problems = validate(files, openrlhf_wheel)
    assert any("invalid choice: 'sequence'" in p for p in problems)


def test_abbreviation_and_mismatched_launch_are_reported(async_export, openrlhf_wheel):
    files = with_flags_text(async_export.files, "--train.async_queue_size", "--train.async_queue")
    assert any("abbreviation of --train.async_queue_size" in p for p in validate(files, openrlhf_wheel))
    files = {**async_export.files, "flags.txt": async_export.files["flags.txt"].replace("queue_size 4", "queue_size 5")}
    assert validate(files, openrlhf_wheel) == ["launch.sh: EXPORTED_FLAGS differ from flags.txt"]


def test_framework_cross_checks_are_reported(async_export, openrlhf_wheel):
    exporter = get_exporter("openrlhf")
    plan = copy.deepcopy(async_export.plan)
    del plan.settings["--train.async_enable"]
    plan.settings["--train.partial_rollout_enable"] = True
    assert any("requires --train.async_enable" in p for p in validate(exporter.files(plan), openrlhf_wheel))
    plan = copy.deepcopy(async_export.plan)
    plan.settings.update({"--algo.advantage.is_correction_level": "seq", "--algo.advantage.is_correction_mode": "clip"})
    assert any("PolicyLoss rejects" in p for p in validate(exporter.files(plan), openrlhf_wheel))
    plan = copy.deepcopy(async_export.plan)
    plan.settings["--actor.lr_scheduler"] = "cosine_decay"
    assert any("not a transformers scheduler" in p for p in validate(exporter.files(plan), openrlhf_wheel))


# ----------------------------------------------------------------------------------------------
# golden files
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["quickstart:async", "lm_partial_rollouts:partial"])
def test_golden(case):
    exp = export(SHIPPED_BY_ID[case])
    check_golden("openrlhf", case.replace(":", "-"), exp.files)


def test_a_critic_path_is_reported(async_export, openrlhf_wheel):
    """OpenRLHF's default estimator is gae, which makes train_ppo_ray.py build a critic (issue 25 item 7)."""
    files = with_flags_text(
        async_export.files, "--algo.advantage.estimator group_norm", "--algo.advantage.estimator gae"
    )
    assert files != async_export.files
    assert any("would train a critic" in p for p in validate(files, openrlhf_wheel))
