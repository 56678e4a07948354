"""Every scenario field the sandbox treats as essential is either written or listed as having no
equivalent, for every exporter, and no framework default is left to decide an essential part of the
algorithm (issue 25, item 7).

Two tables drive the test, so that a new exporter or a new essential field fails until it is accounted for:

* :data:`ESSENTIAL`: concept -> the scenario fields (dotted prefixes) that carry it. Each leaf of a probe
  scenario under one of them must be covered by a row that writes a key, states "no equivalent", or states
  "same behaviour, no key" (``implicit``); a row that only describes the simulation, the user's setup
  without a key, or nothing, fails.
* :data:`DEFAULT_GUARDS`: framework -> concept -> the framework keys that must be written in *every* export
  (each inner tuple: one of these keys), because the framework's default would change the algorithm
  (verl's ``adv_estimator`` defaults to ``gae``, which trains a critic; AReaL's ``reward_norm`` defaults to
  None, raw rewards; verl's ``RolloutCorrectionConfig.rollout_is`` defaults to ``"sequence"``; ...), even when
  the scenario's own value has no equivalent. A string instead says why no key needs guarding (the
  framework's default is the sandbox's behaviour, or the key only exists on some targets and the field rule
  covers it). Defaults read in the pinned releases: verl 0.9.1 (``_generated_ppo_trainer.yaml``), AReaL 1.0.4
  (``areal/api/cli_args.py``), TRL 1.16.0 (``GRPOConfig``), OpenRLHF 0.11.2 (``cli/train_ppo_ray.py``),
  prime-rl 559b4477 (``sandbox/frameworks/prime_rl/keys/prime_rl_559b4477.json``).
"""

from __future__ import annotations

import pytest
from export_cases import SCENARIOS, SHIPPED

from sandbox.export.api import EXPORTERS, export_scenario
from sandbox.export.common import scenario_leaves
from sandbox.scenario.api import load_scenario

ESSENTIAL: dict[str, tuple[str, ...]] = {
    "advantage baseline": ("algorithm.objective.name", "algorithm.objective.baseline", "algorithm.objective.advantage"),
    "advantage normalisation": ("algorithm.objective.normalize_std",),
    "group size": ("algorithm.group_size",),
    # the control and its bound; queue_capacity sizes the sandbox's drop queue (the user's fleet: "setup" rows)
    "staleness bound": (
        "system.staleness.kind",
        "system.staleness.k",
        "system.staleness.k_max",
        "system.staleness.alpha",
        "system.staleness.enforcement",
    ),
    "correction and its band": ("algorithm.correction",),
    "clip": ("algorithm.objective.eps_low", "algorithm.objective.eps_high", "algorithm.objective.dual_clip_c"),
    "KL": ("algorithm.objective.beta_kl",),
    "mini-batches": ("algorithm.minibatches", "algorithm.epochs"),
}

_VERL_COMMON = {
    "advantage baseline": (("algorithm.adv_estimator",),),  # default gae: a critic
    "advantage normalisation": (("algorithm.norm_adv_by_std_in_grpo",),),
    "group size": (("actor_rollout_ref.rollout.n",),),  # default 1
    "correction and its band": (
        ("algorithm.rollout_correction.rollout_is",),
        ("algorithm.rollout_correction.rollout_rs",),
    ),
    "clip": "clip_ratio_low/high/c are written on the ratio route; on the REINFORCE route verl's ratio is 1 "
    "(the clip never fires) and the objective's clip rows say so",
    "KL": (("actor_rollout_ref.actor.use_kl_loss",), ("algorithm.use_kl_in_reward",)),
    "mini-batches": (("actor_rollout_ref.actor.ppo_mini_batch_size",), ("actor_rollout_ref.actor.ppo_epochs",)),
}

DEFAULT_GUARDS: dict[str, dict[str, tuple[tuple[str, ...], ...] | str]] = {
    "verl": {**_VERL_COMMON, "staleness bound": (("trainer.v1.trainer_mode",), ("trainer.use_v1",))},
    "verl-vcpo": {**_VERL_COMMON, "staleness bound": (("async_training.staleness_threshold",),)},
    "trl": {
        "advantage baseline": "TRL has no baseline key: both trainers subtract the group mean; other baselines are "
        "no-equivalent rows",
        "advantage normalisation": "GRPOConfig: scale_rewards is written with the objective; AsyncGRPOConfig has no "
        "such key (its row says what the worker does)",
        "group size": (("num_generations",),),
        "staleness bound": (("steps_per_generation", "max_staleness"),),  # the lag key of GRPOConfig / AsyncGRPOConfig
        "correction and its band": "GRPOConfig: vllm_importance_sampling_correction/mode written by every correction "
        "row; AsyncGRPOConfig 1.16.0 has no correction key",
        "clip": "epsilon/epsilon_high written with a ratio objective; TRL's default 0.2 is the sandbox's default",
        "KL": "TRL 1.16.0's beta defaults to 0.0 (no KL), the sandbox's default; beta > 0 is written",
        "mini-batches": (("gradient_accumulation_steps",),),
    },
    "openrlhf": {
        "advantage baseline": (("--algo.advantage.estimator",),),
        "advantage normalisation": (("--algo.advantage.estimator",),),  # group_norm vs dr_grpo
        "group size": (("--rollout.n_samples_per_prompt",),),
        "staleness bound": "OpenRLHF without --train.async_enable is synchronous; max_lag writes --train.async_enable "
        "and --train.async_queue_size",
        "correction and its band": (("--algo.advantage.is_correction_level",),),
        "clip": "--actor.eps_clip_low_high is written where the clip binds; at lag > 0 OpenRLHF's recomputed ratio is 1, "
        "which the clip rows state",
        "KL": (("--algo.kl.init_coef",),),
        "mini-batches": (("--train.batch_size",), ("--train.max_epochs",)),
    },
    "areal": {
        "advantage baseline": (("actor.reward_norm", "actor.reward_norm.mean_level"),),  # default None: raw rewards
        "advantage normalisation": (("actor.reward_norm", "actor.reward_norm.std_level"), ("actor.adv_norm",)),
        "group size": (("gconfig.n_samples",),),
        "staleness bound": "AReaL's default rollout.max_head_offpolicyness = 0 is synchronous; max_lag writes it",
        "correction and its band": "actor.rejection_sampling defaults to null (no correction); a correction writes it",
        "clip": "actor.eps_clip / c_clip are written when they differ from AReaL's defaults (0.2, null), which the "
        "implicit rows state",
        "KL": (("actor.kl_ctl",),),  # AReaL's default subtracts a KL estimate from the reward
        "mini-batches": (("actor.ppo_n_minibatches",),),
    },
    "prime-rl": {
        "advantage baseline": (("orchestrator.algo.type",),),
        "advantage normalisation": (("orchestrator.algo.type",),),
        "group size": (("orchestrator.group_size",),),
        "staleness bound": (("orchestrator.max_off_policy_steps",),),
        "correction and its band": (("trainer.loss.dppo_mask_low",), ("trainer.loss.dppo_mask_high",)),
        "clip": "prime-rl's loss has no ratio clip; the clip rows say no equivalent",
        "KL": (("trainer.loss.kl_tau",),),
        "mini-batches": "one optimizer step per batch, no key; the rows say same behaviour or no equivalent",
    },
}


def _quickstart(**overrides):
    return load_scenario(SCENARIOS / "quickstart.toml", {k.replace("__", "."): v for k, v in overrides.items()})[0]


PROBES = list(SHIPPED) + [
    (f"quickstart+{name}", _quickstart(**kw))
    for name, kw in {
        "reinforce_opob": {"algorithm__objective": {"name": "reinforce", "baseline": "opob", "normalize_std": True}},
        "reinforce_ema": {"algorithm__objective": {"name": "reinforce", "baseline": "ema"}},
        "reinforce_none_std": {
            "algorithm__objective": {"name": "reinforce", "baseline": "none", "normalize_std": True}
        },
        "grpo_opob": {"algorithm__objective": {"name": "grpo", "baseline": "opob"}},
        "ppo_reward": {"algorithm__objective": {"name": "ppo", "advantage": "reward"}},
        "rloo": {"algorithm__objective": {"name": "rloo"}},
        "tba": {"algorithm__objective": {"name": "tba"}},
        "grpo_kl": {"algorithm__objective": {"name": "grpo", "beta_kl": 0.04}},
        "icepop_maxlag": {
            "algorithm__objective": {"name": "reinforce", "baseline": "group_mean", "normalize_std": True},
            "algorithm__correction": {"name": "icepop"},
            "system__staleness": {"kind": "max_lag", "k_max": 2},
        },
        "minibatches": {"algorithm__minibatches": 2, "algorithm__epochs": 2},
    }.items()
]

WRITTEN_OR_LISTED = ("no_equivalent", "implicit")


def test_tables_cover_every_exporter_and_every_essential_field():
    assert set(DEFAULT_GUARDS) == set(EXPORTERS), "a new exporter needs its row in DEFAULT_GUARDS"
    for fw, guards in DEFAULT_GUARDS.items():
        assert set(guards) == set(ESSENTIAL), f"{fw}: DEFAULT_GUARDS must account for every ESSENTIAL concept"
        for concept, guard in guards.items():
            assert guard, f"{fw}/{concept}: a guard needs keys or a reason"


def _covers(source: str, leaf: str) -> bool:
    return leaf == source or leaf.startswith(source + ".") or leaf.startswith(source + "[")


@pytest.mark.parametrize("framework", sorted(EXPORTERS))
def test_every_essential_field_is_written_or_listed(framework):
    failures = []
    for name, scn in PROBES:
        plan = export_scenario(scn, framework, allow_partial=True).plan
        leaves = scenario_leaves(scn)
        for concept, prefixes in ESSENTIAL.items():
            for leaf in (lf for lf in leaves if any(_covers(p, lf) for p in prefixes)):
                rows = [r for r in plan.rows if any(_covers(s.strip(), leaf) for s in r.source.split("+"))]
                if not any(r.target is not None or r.kind in WRITTEN_OR_LISTED for r in rows):
                    failures.append(
                        f"{name}: {concept} field {leaf} is neither written nor listed (rows: {[r.kind for r in rows]})"
                    )
            guard = DEFAULT_GUARDS[framework][concept]
            if isinstance(guard, str):
                continue
            for alternatives in guard:
                if not any(k in plan.settings for k in alternatives):
                    failures.append(
                        f"{name}: {concept}: none of {list(alternatives)} is written, so {framework}'s "
                        "default decides it"
                    )
    assert not failures, "\n".join(failures)
