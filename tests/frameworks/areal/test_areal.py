"""The AReaL exporter (areal 1.0.4): exact mappings, refusals, every shipped variant checked against
AReaL's own GRPOConfig (the unzipped wheel, in a child process), negative checks and golden files."""

from __future__ import annotations

from pathlib import Path

import pytest
from export_cases import CONCEPTS, SHIPPED, check_golden, pairs

import sandbox.frameworks.areal.export  # noqa: F401  registers the exporter
from sandbox.export.api import ExportRefused, Given, export_scenario, get_exporter
from sandbox.frameworks.areal.export import CONFIG_FILE, LAUNCH_FILE, warmup_proportion, yaml_scalar
from sandbox.frameworks.areal.validation import validate, validate_many
from sandbox.scenario.api import load_scenario

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = ROOT / "scenarios" / "quickstart.toml"
VARIANTS = dict(SHIPPED)


def scenario(**overrides):
    """The quickstart base (sync GRPO, 8 x 8) with dotted overrides (``__`` stands for ``.``)."""
    scn, _ = load_scenario(QUICKSTART, overrides={k.replace("__", "."): v for k, v in overrides.items()})
    return scn


def export(scn, **kw):
    kw.setdefault("allow_partial", True)
    return export_scenario(scn, "areal", **kw)


def rows(exp, kind):
    return {r.source: r for r in exp.plan.rows if r.kind == kind}


def gap_sources(exp):
    return " | ".join(r.source for r in exp.plan.gaps())


ASYNC = {"system__staleness": {"kind": "max_lag", "k_max": 4}}
TOKEN_AGG = {"algorithm__objective": {"name": "grpo", "aggregation": "token_mean"}}


# --------------------------------------------------------------------------------------------
# registration
# --------------------------------------------------------------------------------------------


def test_registered_with_version_and_concepts():
    exp = get_exporter("areal")
    assert [(v.series, v.release) for v in exp.versions] == [("1.0", "1.0.4")]
    assert set(CONCEPTS) <= set(exp.expresses)
    assert exp.expresses["sequence TIS"].startswith("no equivalent")


# --------------------------------------------------------------------------------------------
# staleness, batch geometry, rollouts
# --------------------------------------------------------------------------------------------


def test_max_lag_is_head_offpolicyness_with_one_optimizer_step_per_version():
    s = export(VARIANTS["quickstart:async"]).plan.settings
    assert s["rollout.max_head_offpolicyness"] == 4
    assert s["actor.ppo_n_minibatches"] == 1
    assert s["rollout.consumer_batch_size"] == 8 and s["train_dataset.batch_size"] == 8
    assert s["gconfig.n_samples"] == 8
    assert s["actor.use_decoupled_loss"] is False and s["actor.recompute_logprob"] is False
    assert s["actor.kl_ctl"] == 0.0 and s["actor.adv_norm"] is None


def test_sync_is_zero_offpolicyness_and_needs_no_in_flight_updates():
    exp = export(scenario(**TOKEN_AGG), allow_partial=False)  # GRPO with token-mean: nothing missing
    assert exp.plan.settings["rollout.max_head_offpolicyness"] == 0
    assert rows(exp, "implicit")["system.partial_rollouts"].value is False
    assert not exp.plan.gaps()


def test_throttle_is_implicit_and_names_the_residual_drop():
    exp = export(
        scenario(
            **ASYNC,
            system__partial_rollouts=True,
            run__schedules="shared",
            system__generation_time={"kind": "cost_model", "prefill": 0.1, "per_token": 0.01},
            **TOKEN_AGG,
        ),
        allow_partial=False,
    )
    row = rows(exp, "implicit")["system.staleness.enforcement + system.staleness.queue_capacity"]
    assert "dropped" in row.note
    assert rows(exp, "implicit")["system.partial_rollouts"].value is True


def test_partial_rollouts_off_is_a_gap_when_streaming():
    exp = export(scenario(**ASYNC, **TOKEN_AGG))
    assert gap_sources(exp) == "system.partial_rollouts"
    with pytest.raises(ExportRefused, match="system.partial_rollouts"):
        export(scenario(**ASYNC, **TOKEN_AGG), allow_partial=False)


@pytest.mark.parametrize(
    "staleness, source",
    [
        ({"kind": "fixed_lag", "k": 8}, "system.staleness"),
        ({"kind": "async_ratio", "alpha": 1.5}, "system.staleness"),
        (
            {"kind": "max_lag", "k_max": 2, "enforcement": "drop"},
            "system.staleness.enforcement + system.staleness.queue_capacity",
        ),
    ],
)
def test_staleness_controls_areal_cannot_express_are_refused(staleness, source):
    scn = scenario(system__staleness=staleness, **TOKEN_AGG)
    with pytest.raises(ExportRefused) as err:
        export(scn, allow_partial=False)
    assert source in {r.source for r in err.value.rows}
    exp = export(scn)
    assert source in {r.source for r in exp.plan.gaps()}
    if staleness["kind"] == "max_lag":
        assert exp.plan.settings["rollout.max_head_offpolicyness"] == 2
    else:
        assert "rollout.max_head_offpolicyness" not in exp.plan.settings
    if staleness["kind"] == "async_ratio":
        assert "k_max = 2" in rows(exp, "no_equivalent")["system.staleness"].note


# --------------------------------------------------------------------------------------------
# objectives and advantages
# --------------------------------------------------------------------------------------------


def test_grpo_group_normalisation_and_clip_in_bypass_mode():
    exp = export(
        scenario(
            algorithm__objective={"name": "grpo", "eps_std": 1e-4, "std_unbiased": False, "aggregation": "token_mean"}
        ),
        allow_partial=False,
    )
    s = exp.plan.settings
    assert (s["actor.eps_clip"], s["actor.eps_clip_higher"], s["actor.c_clip"]) == (0.2, 0.2, None)
    assert s["actor.reward_norm.mean_level"] == "group" and s["actor.reward_norm.std_level"] == "group"
    assert s["actor.reward_norm.eps"] == 1e-4 and s["actor.reward_norm.std_unbiased"] is False
    assert s["actor.reward_norm.group_size"] == 8 and s["actor.reward_norm.mean_leave1out"] is False


def test_dapo_clip_higher_and_dual_clip():
    s = export(scenario(algorithm__objective={"name": "dapo", "dual_clip_c": 3.0}), allow_partial=False).plan.settings
    assert (s["actor.eps_clip"], s["actor.eps_clip_higher"], s["actor.c_clip"]) == (0.2, 0.28, 3.0)


def test_gspo_is_sequence_level_importance_sampling():
    exp = export(scenario(algorithm__objective={"name": "gspo"}))
    s = exp.plan.settings
    assert s["actor.importance_sampling_level"] == "sequence"
    assert (s["actor.eps_clip"], s["actor.eps_clip_higher"]) == (3e-4, 4e-4)
    assert gap_sources(exp) == "algorithm.objective.aggregation"  # GSPO is seq-mean-token-mean


def test_rloo_and_dr_grpo_advantages():
    s = export(scenario(algorithm__objective={"name": "rloo"}), allow_partial=False).plan.settings
    assert s["actor.reward_norm.mean_leave1out"] is True and s["actor.reward_norm.std_level"] is None
    exp = export(scenario(algorithm__objective={"name": "dr_grpo"}))
    assert exp.plan.settings["actor.reward_norm.std_level"] is None
    assert gap_sources(exp) == "algorithm.objective.aggregation + algorithm.objective.max_len"


def test_cispo_is_a_clamp_band_in_decoupled_mode():
    s = export(scenario(algorithm__objective={"name": "cispo"}), allow_partial=False).plan.settings
    assert s["actor.use_decoupled_loss"] is True and s["actor.prox_logp_method"] == "recompute"
    assert s["actor.rejection_sampling.action"] == "clamp"
    assert s["actor.rejection_sampling.upper"] == 5.0 and s["actor.rejection_sampling.lower"] is None
    s = export(scenario(algorithm__objective={"name": "cispo", "eps_low": 0.2, "eps_high": 0.28})).plan.settings
    assert s["actor.rejection_sampling.lower"] == pytest.approx(0.8)


def test_reinforce_runs_decoupled_without_weight():
    exp = export(VARIANTS["lm_mission:sync"])
    s = exp.plan.settings
    assert s["actor.use_decoupled_loss"] is True and "actor.rejection_sampling.level" not in s
    assert s["actor.reward_norm.eps"] == 1e-6 and s["actor.reward_norm.std_level"] == "group"
    assert gap_sources(exp) == "algorithm.objective.aggregation"  # lm_mission uses seq-mean-token-mean


def test_reinforce_baselines():
    def obj(**kw):
        return scenario(algorithm__objective={"name": "reinforce", "aggregation": "token_mean", **kw})

    s = export(obj(baseline="constant", constant_baseline=0.5), allow_partial=False).plan.settings
    assert s["actor.reward_bias"] == -0.5 and s["actor.reward_norm"] is None
    s = export(obj(baseline="leave_one_out"), allow_partial=False).plan.settings
    assert s["actor.reward_norm.mean_leave1out"] is True
    for kw in (
        {"baseline": "leave_one_out", "normalize_std": True},
        {"baseline": "ema"},
        {"baseline": "none", "normalize_std": True},
    ):
        assert "algorithm.objective.baseline" in gap_sources(export(obj(**kw)))


def test_tba_and_loss_side_kl_are_gaps():
    assert gap_sources(export(scenario(algorithm__objective={"name": "tba"}))) == "algorithm.objective"
    exp = export(scenario(algorithm__objective={"name": "grpo", "beta_kl": 0.04, "aggregation": "token_mean"}))
    assert gap_sources(exp) == "algorithm.objective.beta_kl"
    assert exp.plan.settings["actor.kl_ctl"] == 0.0


# --------------------------------------------------------------------------------------------
# corrections
# --------------------------------------------------------------------------------------------


def test_token_tis_cap_is_a_clamp_and_the_ratio_clip_cannot_follow():
    exp = export(VARIANTS["max_lag:base"])  # GRPO + token TIS C = 2
    s = exp.plan.settings
    assert s["actor.use_decoupled_loss"] is True
    assert (
        s["actor.rejection_sampling.level"],
        s["actor.rejection_sampling.action"],
        s["actor.rejection_sampling.metric"],
        s["actor.rejection_sampling.upper"],
        s["actor.rejection_sampling.lower"],
    ) == ("token", "clamp", "ratio", 2.0, None)
    assert "actor.eps_clip" not in s
    assert "algorithm.objective.eps_low + algorithm.objective.eps_high" in gap_sources(exp)


def test_token_tis_with_reinforce_is_exact():
    exp = export(
        scenario(
            algorithm__objective={"name": "reinforce", "baseline": "group_mean", "aggregation": "token_mean"},
            algorithm__correction={"name": "tis", "level": "token", "C": 3.0, "C_low": 0.5},
        ),
        allow_partial=False,
    )
    s = exp.plan.settings
    assert (s["actor.rejection_sampling.upper"], s["actor.rejection_sampling.lower"]) == (3.0, 0.5)


def test_sequence_tis_is_refused_with_the_reason():
    scn = VARIANTS["quickstart:async+tis"]
    with pytest.raises(ExportRefused) as err:
        export(scn, allow_partial=False)
    assert "algorithm.correction" in {r.source for r in err.value.rows}
    row = rows(export(scn), "no_equivalent")["algorithm.correction"]
    assert "geometric mean" in row.note and "product" in row.note
    assert "actor.rejection_sampling.level" not in export(scn).plan.settings
    assert export(scn).plan.settings["actor.use_decoupled_loss"] is False


def test_masks_icepop_geo_and_decoupled_ppo():
    reinforce = {"name": "reinforce", "baseline": "group_mean", "aggregation": "token_mean"}
    s = export(
        scenario(algorithm__objective=reinforce, algorithm__correction={"name": "icepop"}), allow_partial=False
    ).plan.settings
    assert (
        s["actor.rejection_sampling.action"],
        s["actor.rejection_sampling.lower"],
        s["actor.rejection_sampling.upper"],
    ) == ("mask", 0.5, 5.0)
    s = export(
        scenario(algorithm__objective=reinforce, algorithm__correction={"name": "mis", "C": 3.0}), allow_partial=False
    ).plan.settings
    assert (s["actor.rejection_sampling.action"], s["actor.rejection_sampling.upper"]) == ("mask", 3.0)
    s = export(
        scenario(algorithm__objective=reinforce, algorithm__correction={"name": "geo_mis"}), allow_partial=False
    ).plan.settings
    assert (
        s["actor.rejection_sampling.level"],
        s["actor.rejection_sampling.agg"],
        s["actor.rejection_sampling.lower"],
        s["actor.rejection_sampling.upper"],
    ) == ("sequence", "mean", 0.999, 1.001)
    s = export(
        scenario(algorithm__objective=reinforce, algorithm__correction={"name": "decoupled_ppo"}), allow_partial=False
    ).plan.settings
    assert (s["actor.rejection_sampling.action"], s["actor.rejection_sampling.upper"]) == ("mask", 5.0)
    for corr in (
        {"name": "mis", "level": "sequence"},
        {"name": "decoupled_ppo", "level": "sequence"},
        {"name": "opsm"},
        {"name": "bapo"},
        {"name": "m2po_clipband"},
        {"name": "dppo_mask"},
    ):
        if not pairs(reinforce, corr):  # bapo and m2po_clipband replace the PPO clip bounds: refused with REINFORCE
            continue
        assert (
            gap_sources(export(scenario(algorithm__objective=reinforce, algorithm__correction=corr)))
            == "algorithm.correction"
        )


def test_m2po_mask_threshold_and_behaviour_weight():
    s = export(VARIANTS["lm_mission:m2po"]).plan.settings
    assert s["actor.m2_threshold"] == 0.04 and s["actor.use_decoupled_loss"] is True
    assert s["actor.rejection_sampling.upper"] == float("inf") and s["actor.rejection_sampling.action"] == "clamp"
    s = export(
        scenario(
            algorithm__objective={"name": "reinforce", "baseline": "group_mean", "aggregation": "token_mean"},
            algorithm__correction={"name": "m2po_mask", "behaviour_weight": False},
        ),
        allow_partial=False,
    ).plan.settings
    assert s["actor.m2_threshold"] == 0.04 and "actor.rejection_sampling.upper" not in s


def test_gspo_takes_no_correction():
    exp = export(
        scenario(algorithm__objective={"name": "gspo"}, algorithm__correction={"name": "tis", "level": "token"})
    )
    assert "algorithm.correction" in gap_sources(exp) and exp.plan.settings["actor.use_decoupled_loss"] is False


def test_cispo_leaves_no_slot_for_a_second_weight():
    exp = export(
        scenario(algorithm__objective={"name": "cispo"}, algorithm__correction={"name": "tis", "level": "token"})
    )
    assert gap_sources(exp) == "algorithm.correction"
    assert "one such slot" in rows(exp, "no_equivalent")["algorithm.correction"].note


@pytest.mark.parametrize("objective", ["reinforce", "grpo", "dr_grpo", "rloo", "ppo", "dapo", "gspo", "cispo", "tba"])
def test_every_objective_and_correction_gets_a_row_for_every_knob(objective):
    corrections = [
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
    ]
    for corr in corrections if objective != "tba" else ["none"]:
        if not pairs({"name": objective}, {"name": corr}):
            continue
        exp = export(scenario(algorithm__objective={"name": objective}, algorithm__correction={"name": corr}))
        assert exp.plan.rows  # export_scenario's finish() raises if a scenario field has no row


# --------------------------------------------------------------------------------------------
# stabilizers and optimizer
# --------------------------------------------------------------------------------------------


def test_stabilizers_are_gaps_with_what_to_do():
    gap = {r.source: r.note for r in export(VARIANTS["lm_mission:vcpo"]).plan.gaps()}
    assert "verl-vcpo" in gap["algorithm.stabilizers[0]"] and "plain_torch_loop" in gap["algorithm.stabilizers[0]"]
    gac = {r.source: r.note for r in export(VARIANTS["lm_mission:gac"]).plan.gaps()}["algorithm.stabilizers[0]"]
    assert "no public implementation" in gac and "StabilizedOptimizer" in gac


def test_optimizer_mapping():
    s = export(
        scenario(
            algorithm__optimizer={
                "name": "adamw",
                "lr": 0.01,
                "weight_decay": 0.1,
                "betas": [0.9, 0.95],
                "eps": 1e-6,
                "schedule": "cosine",
                "warmup_steps": 7,
            },
            **TOKEN_AGG,
        ),
        allow_partial=False,
    ).plan.settings
    assert (s["actor.optimizer.type"], s["actor.optimizer.weight_decay"]) == ("adam", 0.1)
    assert (s["actor.optimizer.beta1"], s["actor.optimizer.beta2"], s["actor.optimizer.eps"]) == (0.9, 0.95, 1e-6)
    assert s["actor.optimizer.lr_scheduler_type"] == "cosine"
    assert int(s["actor.optimizer.warmup_steps_proportion"] * 120) == 7
    assert "actor.optimizer.lr" not in s  # scale-dependent: only when given
    exp = export(scenario(algorithm__optimizer={"name": "adam", "weight_decay": 0.01}, **TOKEN_AGG))
    assert gap_sources(exp) == "algorithm.optimizer.weight_decay"
    exp = export(scenario(algorithm__optimizer={"name": "sgd", "momentum": 0.9}, **TOKEN_AGG))
    assert gap_sources(exp) == "algorithm.optimizer.momentum" and exp.plan.settings["actor.optimizer.type"] == "sgd"


def test_scale_values_written_only_when_given():
    s = export(VARIANTS["quickstart:sync"], given=Given(lr=1e-6, grad_clip=1.0)).plan.settings
    assert s["actor.optimizer.lr"] == 1e-6 and s["actor.optimizer.gradient_clipping"] == 1.0


@pytest.mark.parametrize("warmup, steps", [(0, 120), (3, 120), (7, 120), (10, 3000), (1, 7)])
def test_warmup_proportion_truncates_back(warmup, steps):
    assert int(warmup_proportion(warmup, steps) * steps) == warmup


# --------------------------------------------------------------------------------------------
# files and validation against the wheel
# --------------------------------------------------------------------------------------------


def test_yaml_scalars():
    assert [
        yaml_scalar(v) for v in (1e-6, 0.2, 3, True, None, float("inf"), "group", "fsdp:d4", "no", "${x}", "???")
    ] == ["1.0e-06", "0.2", "3", "true", "null", ".inf", "group", "fsdp:d4", '"no"', '"${x}"', "???"]


def test_launch_script_placeholders():
    exp = export(VARIANTS["quickstart:async"])
    launch = exp.files[LAUNCH_FILE]
    assert f'--config "$HERE/{CONFIG_FILE}"' in launch
    for var in ("ENTRY_SCRIPT", "MODEL_PATH", "DATASET_PATH", "EXPERIMENT_NAME", "TRIAL_NAME"):
        assert f'{var}="${{{var}:-<' in launch
    assert "bash launch.sh" in exp.launch
    assert "+" not in launch.split("python3", 1)[1]  # no Hydra appends: every key exists in the YAML


def test_every_shipped_variant_validates_against_the_wheel(wheel):
    from omegaconf import OmegaConf

    exports = [export(scn) for _, scn in SHIPPED]
    for (name, _), exp in zip(SHIPPED, exports):
        cfg = OmegaConf.create(exp.files[CONFIG_FILE])
        for key, value in exp.plan.settings.items():
            assert OmegaConf.select(cfg, key) == value, (name, key)
    problems = validate_many([e.files for e in exports], wheel("areal"))
    assert {name: p for (name, _), p in zip(SHIPPED, problems) if p} == {}


def test_validator_rejects_old_key_bad_choice_and_bad_type(wheel):
    base = export(VARIANTS["quickstart:async"]).files
    text = base[CONFIG_FILE]
    assert "ppo_n_minibatches: 1" in text

    def with_line(line):
        return {**base, CONFIG_FILE: text.replace("ppo_n_minibatches: 1", line)}

    cases = [
        with_line("behav_imp_weight_cap: 5.0"),
        with_line("importance_sampling_level: seq"),
        with_line("ppo_n_minibatches: four"),
        with_line("rejection_sampling: {level: token, action: truncate}"),
    ]
    old_key, bad_choice, bad_type, bad_action = validate_many(cases, wheel("areal"))
    assert any("behav_imp_weight_cap" in p for p in old_key)
    assert any("importance_sampling_level" in p and "'seq'" in p for p in bad_choice)
    assert any("ppo_n_minibatches" in p for p in bad_type)
    assert any("action" in p for p in bad_action)
    assert validate({}, wheel("areal")) == [f"{CONFIG_FILE} missing from the export"]


def test_launch_overrides_compose_into_a_complete_config(wheel, tmp_path):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    files = export(VARIANTS["quickstart:async"]).files
    overrides = {
        "experiment_name": "exp",
        "trial_name": "t0",
        "actor.path": "/models/m",
        "train_dataset.path": "/data/d",
        "actor.backend": "fsdp:d4",
        "rollout.backend": "sglang:d4",
    }
    assert all(f" {key}=" in files[LAUNCH_FILE] for key in overrides)
    (tmp_path / CONFIG_FILE).write_text(files[CONFIG_FILE])
    with initialize_config_dir(config_dir=str(tmp_path), version_base=None):  # as AReaL's parse_cli_args
        cfg = compose(CONFIG_FILE.removesuffix(".yaml"), overrides=[f"{k}={v}" for k, v in overrides.items()])
    assert OmegaConf.select(cfg, "actor.path") == "/models/m"
    assert validate_many([{CONFIG_FILE: OmegaConf.to_yaml(cfg)}], wheel("areal"), complete=True) == [[]]
    assert "required keys without a value" in validate_many([files], wheel("areal"), complete=True)[0][0]


def test_golden_files():
    for case in ("quickstart:async", "lm_mission:m2po"):
        exp = export(VARIANTS[case], provenance=f"scenarios/{case.split(':')[0]}.toml, variant {case.split(':')[1]}")
        check_golden("areal", case.replace(":", "-"), exp.files)


# --------------------------------------------------------------------------------------------
# regression (issue 25, item 7): an advantage AReaL cannot express must still get the group normalisation
# its objective implies; AReaL 1.0.4 defaults actor.reward_norm = adv_norm = None (raw, uncentred rewards)
# --------------------------------------------------------------------------------------------


def test_vcpo_variant_writes_the_objectives_group_normalisation(wheel):
    exp = export_scenario(VARIANTS["lm_mission:vcpo"], "areal", given=Given(lr=1e-6), allow_partial=True)
    s = exp.plan.settings
    assert s["actor.reward_norm.mean_level"] == "group" and s["actor.reward_norm.std_level"] == "group"
    assert s["actor.reward_norm.group_size"] == 8 and s["actor.reward_norm.mean_leave1out"] is False
    assert s["actor.adv_norm"] is None
    assert any(r.source.startswith("algorithm.objective.baseline + ") for r in exp.plan.gaps())  # still a gap
    assert "raw rewards" in next(r.note for r in exp.plan.rows if r.target == "actor.reward_norm.mean_level")
    assert "`actor.reward_norm.mean_level` = `group`" in exp.files["PROMOTION.md"]
    assert validate(exp.files, wheel("areal")) == []


@pytest.mark.parametrize(
    "objective, mean, std",
    [
        ({"name": "reinforce", "baseline": "ema"}, "group", None),
        ({"name": "reinforce", "baseline": "optimal", "normalize_std": True}, "group", "group"),
        ({"name": "reinforce", "baseline": "none", "normalize_std": True}, None, "group"),
        ({"name": "reinforce", "baseline": "leave_one_out", "normalize_std": True}, "group", "group"),
        ({"name": "grpo", "baseline": "opob"}, "group", "group"),
        ({"name": "dr_grpo", "baseline": "opob"}, "group", None),
        ({"name": "ppo", "advantage": "opob"}, "group", "group"),
    ],
    ids=["ema", "optimal_std", "none_std", "loo_std", "grpo_opob", "dr_grpo_opob", "ppo_opob"],
)
def test_every_inexpressible_advantage_still_writes_its_normalisation(objective, mean, std):
    exp = export(scenario(algorithm__objective=objective))
    s = exp.plan.settings
    assert s["actor.reward_norm.mean_level"] == mean and s["actor.reward_norm.std_level"] == std
    assert exp.plan.gaps()
