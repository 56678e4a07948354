"""VCPO fork of verl (mit-han-lab/vcpo git c7f030f0): VCPO's keys (grad_baselining, ess_scaling), the
fully-async staleness budget, refusals, every shipped variant against the pinned key list, the upstream check
that the VCPO keys are fork-only, negative validator tests, a refresh check of the pinned list from a checkout
(when one is available) and golden files."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest
from export_cases import SCENARIOS, SHIPPED, check_golden
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError

import sandbox.frameworks.verl_vcpo.export  # noqa: F401  registers the exporter
from sandbox.export.api import ExportRefused, export_scenario
from sandbox.frameworks.verl.validation import GENERATED
from sandbox.frameworks.verl_vcpo.validation import pinned, validate
from sandbox.scenario.api import load_scenario

SHIPPED_BY_NAME = dict(SHIPPED)
A = "actor_rollout_ref.actor"
C = "algorithm.rollout_correction"
GB = f"{A}.grad_baselining"
ESS = f"{A}.ess_scaling"
VCPO_GIT = Path(os.environ.get("SANDBOX_VCPO_GIT", "/work/.mirror/mit-han-lab+vcpo/repo"))


def vcpo(**overrides):
    """lm_mission's VCPO variant (REINFORCE + OPOB + sequence TIS C = 8 + ESS LR) with dotted overrides."""
    base = {
        "algorithm.objective": {
            "name": "reinforce",
            "baseline": "opob",
            "normalize_std": True,
            "aggregation": "seq_mean_token_mean",
        },
        "algorithm.correction": {"name": "tis", "level": "sequence", "C": 8.0},
        "algorithm.stabilizers": [{"name": "vcpo_lr"}],
        "system.staleness": {"kind": "max_lag", "k_max": 10},
    }
    return load_scenario(
        SCENARIOS / "lm_mission.toml", {**base, **{k.replace("__", "."): v for k, v in overrides.items()}}
    )[0]


def export(scn):
    return export_scenario(scn, "verl-vcpo", allow_partial=True)


def gaps(scn):
    return {r.source for r in export(scn).plan.gaps()}


# --------------------------------------------------------------------------------------------
# VCPO
# --------------------------------------------------------------------------------------------


def test_vcpo_variant_writes_the_scripts_settings():
    exp = export(SHIPPED_BY_NAME["lm_mission:vcpo"])
    s = exp.plan.settings
    assert (s[f"{GB}.enable"], s[f"{GB}.scope"], s[f"{GB}.norm_by_std"], s[f"{GB}.use_is_weights"]) == (
        True,
        "group",
        True,
        True,
    )
    assert (s[f"{GB}.agg_mode"], s[f"{GB}.use_clipped_is_ratios"], s[f"{GB}.normalize_by_length"]) == (
        "mean",
        False,
        False,
    )
    assert (s[f"{ESS}.enable"], s[f"{ESS}.base_ess_ratio"], s[f"{ESS}.scaling_rule"], s[f"{ESS}.use_clipped"]) == (
        True,
        1.0,
        "sqrt",
        False,
    )
    assert s[f"{A}.update_policy_per_traj"] is True and s[f"{A}.ppo_micro_batch_size_per_gpu"] == 1
    assert (s[f"{C}.rollout_is"], s[f"{C}.rollout_is_threshold"]) == ("sequence", 8.0)
    assert s["async_training.skip_recompute_old_log_prob"] is True and s["algorithm.adv_estimator"] == "grpo"
    assert s[f"{A}.loss_agg_mode"] == "seq-mean-token-mean"
    # lm_mission trains at a fixed lag, and the sandbox default README weight is not what the fork computes
    assert {r.source for r in exp.plan.gaps()} == {"system.staleness", "algorithm.objective.opob_weight"}
    note = next(r.note for r in exp.plan.gaps() if r.source == "algorithm.objective.opob_weight")
    assert "opob_weight = 'code'" in note and "opob_clip_c = 8" in note


def test_opob_weight_matches_the_forks_gradient():
    assert not gaps(
        vcpo(
            algorithm__objective={
                "name": "reinforce",
                "baseline": "opob",
                "normalize_std": True,
                "aggregation": "seq_mean_token_mean",
                "opob_weight": "code",
            }
        )
    )
    assert "algorithm.objective.opob_weight" in gaps(
        vcpo(
            algorithm__objective={
                "name": "reinforce",
                "baseline": "opob",
                "normalize_std": True,
                "aggregation": "seq_mean_token_mean",
                "opob_weight": "code",
                "opob_clip_c": 4.0,
            }
        )
    )
    assert not gaps(vcpo(algorithm__correction={"name": "none"}))  # no IS factor in g_i: README weight
    optimal = export(
        vcpo(
            algorithm__objective={"name": "reinforce", "baseline": "optimal", "aggregation": "seq_mean_token_sum"},
            algorithm__correction={"name": "none"},
        )
    )
    assert optimal.plan.settings[f"{GB}.use_is_weights"] is False and not optimal.plan.gaps()


def test_ess_rule_and_reference_ratio():
    s = export(
        vcpo(
            algorithm__stabilizers=[{"name": "vcpo_lr", "rho_ref": 0.55, "mode": "linear"}],
            algorithm__objective={
                "name": "reinforce",
                "baseline": "group_mean",
                "normalize_std": True,
                "aggregation": "seq_mean_token_mean",
            },
        )
    ).plan.settings
    assert (s[f"{ESS}.base_ess_ratio"], s[f"{ESS}.scaling_rule"]) == (0.55, "linear")
    assert f"{GB}.enable" not in s and s[f"{A}.update_policy_per_traj"] is True


def test_vcpo_pieces_need_the_reinforce_route():
    grpo = vcpo(algorithm__objective={"name": "grpo", "baseline": "opob"})
    assert {"algorithm.stabilizers[0]", "algorithm.correction"} <= gaps(grpo)
    assert any(g.startswith("algorithm.objective.baseline") for g in gaps(grpo))
    loo = vcpo(
        algorithm__objective={"name": "reinforce", "baseline": "leave_one_out", "aggregation": "seq_mean_token_mean"}
    )
    assert "algorithm.stabilizers[0]" in gaps(loo)  # rloo writes no advantage_scalar for the per-trajectory path
    minibatch = vcpo(
        algorithm__objective={
            "name": "reinforce",
            "baseline": "opob",
            "normalize_std": True,
            "aggregation": "seq_mean_token_mean",
            "opob_scope": "minibatch",
        }
    )
    assert "algorithm.objective.normalize_std" in gaps(minibatch)
    bessel = export(
        vcpo(
            algorithm__objective={
                "name": "reinforce",
                "baseline": "opob",
                "normalize_std": True,
                "aggregation": "seq_mean_token_mean",
                "opob_scope": "minibatch_bessel",
                "opob_weight": "code",
            }
        )
    )
    assert not bessel.plan.gaps()  # the fork's convention: grpo advantages with the Bessel std as values
    assert (bessel.plan.settings[f"{GB}.scope"], bessel.plan.settings["algorithm.norm_adv_by_std_in_grpo"]) == (
        "minibatch",
        True,
    )


# --------------------------------------------------------------------------------------------
# staleness, objectives, corrections, optimizer
# --------------------------------------------------------------------------------------------


def test_staleness_budget():
    s = export(SHIPPED_BY_NAME["quickstart:async"]).plan.settings  # k_max = 4, throttle
    assert s["async_training.staleness_threshold"] == 4.0
    assert (s["async_training.trigger_parameter_sync_step"], s["async_training.require_batches"]) == (1, 1)
    assert s["async_training.partial_rollout"] is False and s["actor_rollout_ref.hybrid_engine"] is False
    assert s[f"{A}.ppo_mini_batch_size"] == 8 and s["data.train_batch_size"] == 0
    assert (
        export(SHIPPED_BY_NAME["lm_partial_rollouts:partial"]).plan.settings["async_training.partial_rollout"] is True
    )
    assert export(SHIPPED_BY_NAME["quickstart:sync"]).plan.settings["async_training.staleness_threshold"] == 0.0
    assert "system.staleness.enforcement + system.staleness.queue_capacity" in gaps(
        SHIPPED_BY_NAME["max_lag_drop:base"]
    )


def test_objectives_the_fork_lacks():
    quick = lambda **o: load_scenario(SCENARIOS / "quickstart.toml", {k.replace("__", "."): v for k, v in o.items()})[0]
    assert "algorithm.objective" in gaps(quick(algorithm__objective={"name": "cispo"}))
    assert "algorithm.objective.aggregation" in gaps(quick(algorithm__objective={"name": "ppo"}))  # token_mean
    s = export(quick(algorithm__objective={"name": "grpo"})).plan.settings
    assert s["async_training.skip_recompute_old_log_prob"] is False and s[f"{A}.clip_ratio_c"] == 1e9


def test_fork_rejection_bands_are_on_pi_over_mu():
    geo = export(vcpo(algorithm__correction={"name": "geo_mis", "lo": 0.8, "hi": 1.25})).plan.settings
    assert (geo[f"{C}.rollout_rs"], geo[f"{C}.rollout_rs_threshold_lower"], geo[f"{C}.rollout_rs_threshold"]) == (
        "geometric",
        0.8,
        1.25,
    )
    mis = export(
        vcpo(algorithm__correction={"name": "mis", "level": "sequence", "C": 3.0, "veto_low": 1e-4})
    ).plan.settings
    assert (mis[f"{C}.rollout_rs"], mis[f"{C}.rollout_is"], mis[f"{C}.rollout_token_veto_threshold"]) == (
        "sequence",
        "sequence",
        1e-4,
    )


def test_megatron_optimizer_fields():
    sgd = export(vcpo(algorithm__optimizer={"name": "sgd", "lr": 0.1}))
    assert "+actor_rollout_ref.actor.optim.override_optimizer_config.sgd_momentum=0.0" in sgd.files["overrides.txt"]
    assert "algorithm.optimizer.name" in gaps(vcpo(algorithm__optimizer={"name": "adam", "weight_decay": 0.1}))
    adamw = export(vcpo(algorithm__optimizer={"name": "adamw", "betas": [0.9, 0.95]})).plan.settings
    assert adamw[f"{A}.optim.override_optimizer_config.adam_beta2"] == 0.95


def test_refusal_lists_the_settings():
    with pytest.raises(ExportRefused) as err:
        export_scenario(SHIPPED_BY_NAME["lm_mission:vcpo"], "verl-vcpo")
    assert "system.staleness" in str(err.value) and "opob_weight" in str(err.value)


# --------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n, _ in SHIPPED])
def test_every_shipped_variant_matches_the_pinned_fork_keys(name):
    assert validate(export(SHIPPED_BY_NAME[name]).files) == []


def test_vcpo_keys_are_fork_only(wheel):
    verl_wheel = wheel("verl")
    files = export(vcpo()).files
    assert validate(files, verl_wheel) == []  # each fork-only key is refused by upstream's strict merge
    base = OmegaConf.load(verl_wheel / GENERATED)
    OmegaConf.set_struct(base, True)
    with pytest.raises(ConfigKeyError, match="ess_scaling"):
        OmegaConf.merge(base, OmegaConf.create({"actor_rollout_ref": {"actor": {"ess_scaling": {"enable": True}}}}))


def test_validator_rejects_a_misspelled_key_an_invalid_value_and_a_stray_append():
    files = export(
        vcpo(
            algorithm__objective={
                "name": "reinforce",
                "baseline": "opob",
                "normalize_std": True,
                "aggregation": "seq_mean_token_mean",
                "opob_weight": "code",
            }
        )
    ).files
    assert validate(files) == []
    both = lambda old, new: {n: t.replace(old, new) for n, t in files.items()}
    assert any("not a key" in p for p in validate(both("ess_scaling.base_ess_ratio", "ess_scaling.base_ess")))
    assert any(
        "scaling_rule" in p
        for p in validate(
            both("scaling_rule=sqrt", "scaling_rule=cube")
            | {"vcpo_config.yaml": files["vcpo_config.yaml"].replace("scaling_rule: sqrt", "scaling_rule: cube")}
        )
    )
    assert any("type" in p for p in validate(both("update_policy_per_traj=true", "update_policy_per_traj=1")))
    stray = dict(files, **{"overrides.txt": files["overrides.txt"] + "+async_training.bsz_per_dp_rank=32\n"})
    assert any("appends" in p for p in validate(stray))
    off_rule = both("ppo_micro_batch_size_per_gpu=1", "ppo_micro_batch_size_per_gpu=2")
    assert any("micro_batch" in p for p in validate(off_rule))


# --------------------------------------------------------------------------------------------
# against a checkout of the fork (skipped where none is available)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    if os.environ.get("SANDBOX_VCPO_CHECKOUT"):
        return Path(os.environ["SANDBOX_VCPO_CHECKOUT"])
    if not (VCPO_GIT / "HEAD").exists():
        pytest.skip("no checkout or mirror of mit-han-lab/vcpo here (set SANDBOX_VCPO_CHECKOUT)")
    out = tmp_path_factory.mktemp("vcpo")
    paths = [
        "verl/trainer/config",
        "verl/workers/config",
        "verl/workers/actor/megatron_actor.py",
        "verl/trainer/ppo/core_algos.py",
        "verl/trainer/ppo/rollout_corr_helper.py",
        "recipe/fully_async_policy",
    ]
    archive = subprocess.run(
        ["git", "-C", str(VCPO_GIT), "archive", "c7f030f0", *paths], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out


def test_pinned_key_list_is_current(checkout):
    spec = importlib.util.spec_from_file_location("vcpo_keys", Path(__file__).parents[3] / "tools" / "vcpo_keys.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.generate_key_list(checkout) == pinned()


def test_fork_composes_the_export(checkout):
    files = export(SHIPPED_BY_NAME["lm_mission:vcpo"]).files
    assert validate(files, checkout) == []
    typo = dict(
        files, **{"overrides.txt": files["overrides.txt"].replace("grad_baselining.scope", "grad_baselining.scopes")}
    )
    assert any("rejects" in p for p in validate(typo, checkout))


# --------------------------------------------------------------------------------------------
# golden files
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["lm_mission:vcpo", "quickstart:async"])
def test_golden(case):
    exp = export_scenario(
        SHIPPED_BY_NAME[case], "verl-vcpo", allow_partial=True, provenance=f"scenarios/{case.split(':')[0]}.toml"
    )
    check_golden("verl-vcpo", case.replace(":", "-"), exp.files)
