"""Upstream verl 0.9.1 exporter: exact key mappings in verl's own conventions, refusals, every shipped
variant accepted by the real wheel (Hydra composition, strict merge, read-back, enums by AST), negative
validator tests and golden files."""

from __future__ import annotations

import math

import pytest
from export_cases import SCENARIOS, SHIPPED, check_golden

import sandbox.frameworks.verl.export  # noqa: F401  registers the exporter
from sandbox.export.api import ExportRefused, Given, export_scenario
from sandbox.frameworks.verl.export import NO_DUAL_CLIP, hydra_value
from sandbox.frameworks.verl.validation import validate
from sandbox.scenario.api import load_scenario

SHIPPED_BY_NAME = dict(SHIPPED)
A = "actor_rollout_ref.actor"
C = "algorithm.rollout_correction"
S = "trainer.v1.sampler"


def quickstart(**overrides):
    """The quickstart scenario (synchronous GRPO) with dotted-key overrides (``__`` for ``.``)."""
    return load_scenario(SCENARIOS / "quickstart.toml", {k.replace("__", "."): v for k, v in overrides.items()})[0]


def reinforce(**overrides):
    return quickstart(
        algorithm__objective={
            "name": "reinforce",
            "baseline": "group_mean",
            "normalize_std": True,
            "aggregation": "seq_mean_token_mean",
        },
        **overrides,
    )


def settings(scn, **kw):
    return export_scenario(scn, "verl", allow_partial=True, **kw).plan.settings


def gaps(scn):
    return {r.source for r in export_scenario(scn, "verl", allow_partial=True).plan.gaps()}


@pytest.fixture(scope="module")
def verl_wheel(wheel):
    return wheel("verl")


# --------------------------------------------------------------------------------------------
# staleness and trainer mode
# --------------------------------------------------------------------------------------------


def test_max_lag_throttle_counts_versions_spanned():
    s = settings(SHIPPED_BY_NAME["quickstart:async"])  # k_max = 4, throttle
    assert s["trainer.use_v1"] is True
    assert s["trainer.v1.trainer_mode"] == "separate_async"
    assert s["trainer.v1.separate_async.parameter_sync_step"] == 1
    assert s[f"{S}.max_off_policy_threshold"] == 5  # k_max + 1: both ends of the span
    assert s[f"{S}.max_off_policy_strategy"] == "drop"
    assert s["trainer.v1.separate_async.num_warmup_batches"] == 4  # (k_max + 1)·B outstanding
    assert s["actor_rollout_ref.rollout.checkpoint_engine.backend"] == "nccl"


def test_max_lag_drop_window_is_the_queue_capacity():
    s = settings(SHIPPED_BY_NAME["max_lag_drop:base"])  # k_max = 2, queue 16 groups, B = 4
    assert s[f"{S}.max_off_policy_threshold"] == 3
    assert s["trainer.v1.separate_async.num_warmup_batches"] == 3  # 16/4 − 1
    assert s[f"{S}.max_off_policy_strategy"] == "drop"


def test_sync_and_unexpressible_controls_train_on_policy():
    assert settings(SHIPPED_BY_NAME["quickstart:sync"])["trainer.v1.trainer_mode"] == "sync"
    for name in ("fixed_lag:base", "async_ratio:base"):
        exp = export_scenario(SHIPPED_BY_NAME[name], "verl", allow_partial=True)
        assert exp.plan.settings["trainer.v1.trainer_mode"] == "sync"
        assert f"{S}.max_off_policy_threshold" not in exp.plan.settings
        assert "system.staleness" in {r.source for r in exp.plan.gaps()}
    row = next(
        r
        for r in export_scenario(SHIPPED_BY_NAME["fixed_lag:base"], "verl", allow_partial=True).plan.gaps()
        if r.source == "system.staleness"
    )
    assert "max_lag" in row.note
    one = quickstart(system__staleness={"kind": "fixed_lag", "k": 1})
    note = next(r.note for r in export_scenario(one, "verl", allow_partial=True).plan.gaps())
    assert "one_step_off_policy" in note


def test_partial_rollouts_are_always_on_in_async_v1():
    assert "system.partial_rollouts" not in gaps(SHIPPED_BY_NAME["lm_partial_rollouts:partial"])
    assert "system.partial_rollouts" in gaps(SHIPPED_BY_NAME["lm_partial_rollouts:whole"])
    assert "system.partial_rollouts" not in gaps(SHIPPED_BY_NAME["quickstart:sync"])


# --------------------------------------------------------------------------------------------
# batch geometry, objective and routes
# --------------------------------------------------------------------------------------------


def test_one_optimizer_step_per_trainer_step():
    s = settings(quickstart(algorithm__group_size=16, algorithm__groups_per_step=32))
    assert s["actor_rollout_ref.rollout.n"] == 16
    assert s["data.train_batch_size"] == 32
    assert s[f"{A}.ppo_mini_batch_size"] == 32
    assert s[f"{A}.ppo_epochs"] == 1


def test_ratio_objectives_use_bypass_mode():
    s = settings(SHIPPED_BY_NAME["quickstart:sync"])  # grpo, no correction
    assert s[f"{C}.bypass_mode"] is True
    assert s[f"{C}.rollout_is"] is None and f"{C}.rollout_is" in s  # written, null included
    assert s[f"{A}.policy_loss.loss_mode"] == "vanilla"
    assert (s[f"{A}.clip_ratio_low"], s[f"{A}.clip_ratio_high"]) == (0.2, 0.2)
    assert s[f"{A}.clip_ratio_c"] == NO_DUAL_CLIP and NO_DUAL_CLIP > math.exp(20)  # dual clip off
    assert s["algorithm.adv_estimator"] == "grpo" and s["algorithm.norm_adv_by_std_in_grpo"] is True
    assert s[f"{A}.loss_agg_mode"] == "seq-mean-token-mean"
    assert s[f"{A}.use_kl_loss"] is False

    ppo = settings(quickstart(algorithm__objective={"name": "ppo", "eps_high": 0.28}))
    assert ppo[f"{A}.clip_ratio_c"] == 3.0 and ppo[f"{A}.clip_ratio_high"] == 0.28
    assert ppo[f"{A}.loss_agg_mode"] == "token-mean"
    gspo = settings(quickstart(algorithm__objective={"name": "gspo"}))
    assert gspo[f"{A}.policy_loss.loss_mode"] == "gspo" and gspo[f"{A}.clip_ratio_low"] == 3e-4
    assert f"{A}.clip_ratio_c" not in gspo
    cispo = settings(quickstart(algorithm__objective={"name": "cispo"}))
    assert (cispo[f"{A}.policy_loss.loss_mode"], cispo[f"{A}.clip_ratio_low"], cispo[f"{A}.clip_ratio_high"]) == (
        "cispo",
        1.0,
        4.0,
    )
    dr = settings(quickstart(algorithm__objective={"name": "dr_grpo", "max_len": 512}))
    assert dr["algorithm.norm_adv_by_std_in_grpo"] is False
    assert (dr[f"{A}.loss_agg_mode"], dr[f"{A}.loss_scale_factor"]) == ("seq-mean-token-sum-norm", 512)
    assert settings(quickstart(algorithm__objective={"name": "rloo"}))["algorithm.adv_estimator"] == "rloo"
    kl = settings(quickstart(algorithm__objective={"name": "grpo", "beta_kl": 0.04}))
    assert (kl[f"{A}.use_kl_loss"], kl[f"{A}.kl_loss_coef"], kl[f"{A}.kl_loss_type"]) == (True, 0.04, "k3")


def test_reinforce_objective_uses_decoupled_mode_with_correction_weights():
    s = settings(SHIPPED_BY_NAME["lm_partial_rollouts:partial"])  # reinforce group_mean/std + sequence TIS C = 8
    assert s[f"{C}.bypass_mode"] is False
    assert (s[f"{C}.rollout_is"], s[f"{C}.rollout_is_threshold"]) == ("sequence", 8.0)
    assert s[f"{A}.policy_loss.loss_mode"] == "vanilla"
    assert (s["algorithm.adv_estimator"], s["algorithm.norm_adv_by_std_in_grpo"]) == ("grpo", True)
    assert s[f"{A}.loss_agg_mode"] == "seq-mean-token-mean"
    assert not gaps(SHIPPED_BY_NAME["lm_partial_rollouts:partial"])
    assert (
        settings(reinforce(algorithm__correction={"name": "tis"}))[f"{C}.rollout_is_threshold"] == 2.0
    )  # token default


def test_band_directions():
    geo = settings(reinforce(algorithm__correction={"name": "geo_mis", "lo": 0.5, "hi": 2.0}))
    assert (geo[f"{C}.rollout_rs"], geo[f"{C}.rollout_rs_threshold"]) == ("seq_mean_k1", "0.5_2.0")
    geo = settings(reinforce(algorithm__correction={"name": "geo_mis", "lo": 0.8, "hi": 1.25, "token_weight": "tis"}))
    assert geo[f"{C}.rollout_rs_threshold"] == "0.8_1.25"  # k1 bands are on μ/π: [1/hi, 1/lo]
    assert (geo[f"{C}.rollout_is"], geo[f"{C}.rollout_is_threshold"]) == ("token", 2.0)
    ice = settings(reinforce(algorithm__correction={"name": "icepop", "alpha": 0.5, "beta": 5.0}))
    assert (ice[f"{C}.rollout_is"], ice[f"{C}.rollout_is_threshold"]) == ("token", "0.5_5.0")  # on π/μ itself
    mis = settings(
        reinforce(
            algorithm__correction={"name": "mis", "level": "sequence", "C": 4.0, "C_low": 0.5, "seq_weight": "one"}
        )
    )
    assert (mis[f"{C}.rollout_rs"], mis[f"{C}.rollout_rs_threshold"]) == ("seq_sum_k1", "0.25_2.0")
    mis = settings(reinforce(algorithm__correction={"name": "mis", "level": "sequence", "C": 3.0}))
    assert (mis[f"{C}.rollout_is"], mis[f"{C}.rollout_is_threshold"]) == ("sequence", "1e-09_3.0")
    dec = settings(reinforce(algorithm__correction={"name": "decoupled_ppo"}))
    assert (dec[f"{C}.rollout_is"], dec[f"{C}.rollout_is_threshold"]) == ("token", "1e-09_5.0")


def test_optimizer_keys():
    s = settings(
        quickstart(
            algorithm__optimizer={
                "name": "adamw",
                "lr": 0.01,
                "betas": [0.9, 0.95],
                "eps": 1e-6,
                "weight_decay": 0.1,
                "schedule": "cosine",
                "warmup_steps": 10,
                "grad_clip": 1.0,
            }
        ),
        given=Given(lr=1e-6, grad_clip=0.5),
    )
    o = f"{A}.optim"
    assert s[f"{o}.optimizer"] == "AdamW" and s[f"{o}.betas"] == [0.9, 0.95]
    assert s[f"{o}.override_optimizer_config"] == {"eps": 1e-6}
    assert (s[f"{o}.weight_decay"], s[f"{o}.lr_scheduler_type"], s[f"{o}.min_lr_ratio"]) == (0.1, "cosine", 0.0)
    assert s[f"{o}.lr_warmup_steps"] == 10
    assert (s[f"{o}.lr"], s[f"{o}.clip_grad"]) == (1e-6, 0.5)  # only from the command line
    toy = settings(quickstart())
    assert f"{o}.lr" not in toy and f"{o}.clip_grad" not in toy
    sgd = settings(quickstart(algorithm__optimizer={"name": "sgd", "momentum": 0.9}))
    assert sgd[f"{o}.optimizer"] == "SGD" and sgd[f"{o}.override_optimizer_config"] == {"momentum": 0.9}
    assert "algorithm.optimizer.schedule" in gaps(quickstart(algorithm__optimizer={"schedule": "linear"}))


# --------------------------------------------------------------------------------------------
# refusals
# --------------------------------------------------------------------------------------------


def test_refusal_names_the_settings_and_partial_export_lists_them():
    scn = SHIPPED_BY_NAME["quickstart:async+tis"]  # grpo (clips π_θ/μ) + sequence TIS, whole responses
    with pytest.raises(ExportRefused) as err:
        export_scenario(scn, "verl")
    assert "algorithm.correction" in str(err.value) and "system.partial_rollouts" in str(err.value)
    exp = export_scenario(scn, "verl", allow_partial=True)
    assert exp.plan.settings[f"{C}.rollout_is"] is None  # the rest is written, the correction is not
    assert exp.plan.settings[f"{S}.max_off_policy_threshold"] == 5
    promotion = exp.files["PROMOTION.md"]
    assert "Partial export" in promotion and "`algorithm.correction`" in promotion


@pytest.mark.parametrize(
    "correction",
    [
        {"name": "opsm"},
        {"name": "m2po_mask"},
        {"name": "topr"},
        {"name": "dppo_mask"},
        {"name": "tis", "C": 2.0, "C_low": 0.5},
        {"name": "decoupled_ppo", "level": "sequence"},
        {"name": "mis", "batch_normalize": True},
        {"name": "mis", "level": "sequence", "veto_low": 1e-4},
    ],
)
def test_corrections_verl_cannot_express(correction):
    assert {g.split(".")[0] for g in gaps(reinforce(algorithm__correction=correction))} == {"algorithm"}


def test_vcpo_and_gac_point_elsewhere():
    exp = export_scenario(SHIPPED_BY_NAME["lm_mission:vcpo"], "verl", allow_partial=True)
    rows = {r.source: r.note for r in exp.plan.gaps()}
    assert "--framework verl-vcpo" in rows["algorithm.stabilizers[0]"]
    assert "--framework verl-vcpo" in rows["algorithm.objective.baseline"]
    assert "opob_weight" in " ".join(rows)
    gac = export_scenario(SHIPPED_BY_NAME["lm_mission:gac"], "verl", allow_partial=True)
    note = next(r.note for r in gac.plan.gaps() if r.source == "algorithm.stabilizers[0]")
    assert "between backward and the optimizer" in note
    assert "algorithm.objective" in gaps(quickstart(algorithm__objective={"name": "tba"}))


# --------------------------------------------------------------------------------------------
# validation against the real wheel
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n, _ in SHIPPED])
def test_every_shipped_variant_is_accepted_by_verl(name, verl_wheel):
    exp = export_scenario(SHIPPED_BY_NAME[name], "verl", allow_partial=True)
    assert validate(exp.files, verl_wheel) == []


@pytest.mark.parametrize(
    "scn",
    [
        quickstart(
            algorithm__objective={"name": "dr_grpo", "max_len": 512},
            algorithm__optimizer={"name": "sgd", "momentum": 0.9},
        ),
        quickstart(
            algorithm__objective={"name": "grpo", "beta_kl": 0.04},
            algorithm__optimizer={"name": "adamw", "eps": 1e-6, "schedule": "cosine"},
        ),
        reinforce(algorithm__correction={"name": "geo_mis", "token_weight": "tis"}),
        reinforce(algorithm__correction={"name": "mis", "level": "sequence", "C": 4.0, "seq_weight": "one"}),
        reinforce(algorithm__correction={"name": "icepop"}),
    ],
    ids=["dr_grpo+sgd", "grpo_kl+adamw_cosine", "geo_mis+tis", "seq_mis_reject", "icepop"],
)
def test_mapped_methods_are_accepted_by_verl(scn, verl_wheel):
    exp = export_scenario(scn, "verl", allow_partial=True)
    assert validate(exp.files, verl_wheel) == []


def test_validator_rejects_a_misspelled_key_and_an_invalid_value(verl_wheel):
    files = export_scenario(SHIPPED_BY_NAME["quickstart:sync"], "verl").files
    typo = dict(files, **{"overrides.txt": files["overrides.txt"].replace("ppo_epochs", "ppo_epoch")})
    assert any("ConfigCompositionException" in p for p in validate(typo, verl_wheel))
    yaml_typo = dict(files, **{"verl_config.yaml": files["verl_config.yaml"].replace("ppo_epochs", "ppo_epoch")})
    problems = validate(yaml_typo, verl_wheel)
    assert any("does not merge" in p for p in problems) and any("ppo_epochs" in p for p in problems)
    bad = {name: text.replace("seq-mean-token-mean", "seq_mean_token_mean") for name, text in files.items()}
    assert any("is not one of verl's loss_agg_mode values" in p for p in validate(bad, verl_wheel))
    bad_threshold = {
        n: t.replace("max_off_policy_threshold=5", "max_off_policy_threshold=0")
        for n, t in export_scenario(SHIPPED_BY_NAME["quickstart:async"], "verl", allow_partial=True).files.items()
    }
    bad_threshold["verl_config.yaml"] = bad_threshold["verl_config.yaml"].replace(
        "max_off_policy_threshold: 5", "max_off_policy_threshold: 0"
    )
    assert any("positive integer" in p for p in validate(bad_threshold, verl_wheel))


def test_validator_rejects_appends_and_disagreeing_files(verl_wheel):
    files = export_scenario(SHIPPED_BY_NAME["quickstart:sync"], "verl").files
    appended = dict(
        files, **{"overrides.txt": files["overrides.txt"] + "+actor_rollout_ref.actor.ess_scaling.enable=true\n"}
    )
    assert any("appends" in p for p in validate(appended, verl_wheel))
    drifted = dict(files, **{"verl_config.yaml": files["verl_config.yaml"].replace("ppo_epochs: 1", "ppo_epochs: 2")})
    assert any("ppo_epochs" in p and "!=" in p for p in validate(drifted, verl_wheel))
    icepop = export_scenario(reinforce(algorithm__correction={"name": "icepop"}), "verl").files
    inverted = {n: t.replace("0.5_5.0", "5.0_0.5") for n, t in icepop.items()}
    assert any("rollout_is_threshold" in p for p in validate(inverted, verl_wheel))


def test_hydra_values_round_trip_as_hydra_reads_them():
    assert hydra_value(None) == "null" and hydra_value(True) == "true" and hydra_value(8) == "8"
    assert hydra_value([0.9, 0.999]) == "[0.9,0.999]" and hydra_value({"eps": 1e-6}) == "{eps:1e-06}"
    assert hydra_value("seq-mean-token-mean") == "seq-mean-token-mean"
    assert hydra_value("0.5_2.0") == "'0.5_2.0'" and hydra_value("null") == "'null'"


# --------------------------------------------------------------------------------------------
# golden files
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["quickstart:async", "lm_partial_rollouts:partial"])
def test_golden(case):
    exp = export_scenario(
        SHIPPED_BY_NAME[case], "verl", allow_partial=True, provenance=f"scenarios/{case.split(':')[0]}.toml"
    )
    check_golden("verl", case.replace(":", "-"), exp.files)


# --------------------------------------------------------------------------------------------
# regression (issue 25, item 7): a baseline verl cannot express must not fall back to verl's default
# adv_estimator = gae, which trains a critic and which verl's own validate_config rejects
# --------------------------------------------------------------------------------------------


def test_vcpo_variant_writes_the_nearest_group_estimator_and_passes_verl_validate_config(verl_wheel):
    from sandbox.frameworks.verl.validation import override_lines, post_load_problems

    exp = export_scenario(SHIPPED_BY_NAME["lm_mission:vcpo"], "verl", given=Given(lr=1e-6), allow_partial=True)
    s = exp.plan.settings
    assert s["algorithm.adv_estimator"] == "grpo" and s["algorithm.norm_adv_by_std_in_grpo"] is True
    assert "algorithm.objective.baseline" in {r.source for r in exp.plan.gaps()}  # still reported as a gap
    row = next(r for r in exp.plan.rows if r.target == "algorithm.adv_estimator")
    assert "OPOB" in row.note and "gae" in row.note
    assert "`algorithm.adv_estimator` = `grpo`" in exp.files["PROMOTION.md"]
    assert post_load_problems(override_lines(exp.files["overrides.txt"]), verl_wheel) == []


@pytest.mark.parametrize(
    "objective",
    [
        {"name": "reinforce", "baseline": "none"},
        {"name": "reinforce", "baseline": "ema"},
        {"name": "reinforce", "baseline": "optimal"},
        {"name": "reinforce", "baseline": "leave_one_out", "normalize_std": True},
        {"name": "ppo", "advantage": "reward"},
        {"name": "tba"},
    ],
    ids=["none", "ema", "optimal", "loo_std", "ppo_reward", "tba"],
)
def test_every_inexpressible_baseline_still_writes_a_group_estimator(objective):
    exp = export_scenario(quickstart(algorithm__objective=objective), "verl", allow_partial=True)
    assert exp.plan.settings["algorithm.adv_estimator"] in ("grpo", "rloo")
    assert exp.plan.gaps()


def test_post_load_validation_rejects_verl_default_critic_path(verl_wheel):
    from sandbox.frameworks.verl.validation import override_lines, post_load_problems

    files = export_scenario(SHIPPED_BY_NAME["lm_mission:vcpo"], "verl", allow_partial=True).files
    lines = [
        ln
        for ln in override_lines(files["overrides.txt"])
        if not ln.startswith(("algorithm.adv_estimator=", "algorithm.norm_adv_by_std_in_grpo="))
    ]
    problems = post_load_problems(lines, verl_wheel)  # what the export wrote before the fix
    assert any("would train a critic" in p for p in problems)
    assert any("validate_config rejects" in p for p in problems)
    fine = post_load_problems(lines + ["algorithm.adv_estimator=grpo"], verl_wheel)
    assert fine == []
    bad_batch = post_load_problems(
        lines
        + ["algorithm.adv_estimator=grpo", "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=4"],
        verl_wheel,
    )
    assert any("validate_config rejects" in p and "ppo_mini_batch_size" in p for p in bad_batch), bad_batch


def test_a_correction_verl_lacks_points_at_the_sandbox_loss_as_external_lib():
    exp = export_scenario(SHIPPED_BY_NAME["lm_mission:m2po"], "verl", allow_partial=True)
    note = next(r.note for r in exp.plan.gaps() if r.source == "algorithm.correction")
    assert "actor_rollout_ref.model.external_lib=sandbox.integrations.verl" in note
    assert "policy_loss.loss_mode=sandbox_m2po_mask" in note
