"""The VCPO fork c7f030f0 export validator; what it checks and from which upstream files: docs/promotion.md#how-each-validator-checks-its-framework."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from sandbox.export.validate.common import is_int, is_number, plain, readback
from sandbox.frameworks.verl.validation import GENERATED, _generated_config, compose, exported_yaml, override_lines
from sandbox.frameworks.verl_vcpo.config_names import CONFIG_NAME, KEYS_FILE

CONFIG_DIR = Path("recipe/fully_async_policy/config")
FORK_ONLY = (
    "actor_rollout_ref.actor.ess_scaling",
    "actor_rollout_ref.actor.grad_baselining",
    "actor_rollout_ref.actor.update_policy_per_traj",
)

A = "actor_rollout_ref.actor"


# ------------------------------------------------------------------------------------------------
# the pinned key list (written by tools/vcpo_keys.py)
# ------------------------------------------------------------------------------------------------


def compose_fork(checkout: Path, overrides: list[str]) -> DictConfig:
    """Hydra composition of the recipe's config from a checkout of the fork (its YAML names the base configs
    with a search path relative to the working directory, replaced here by an absolute one)."""
    checkout = Path(checkout).resolve()
    return compose(
        checkout / CONFIG_DIR,
        CONFIG_NAME,
        [f"hydra.searchpath=[file://{checkout / 'verl/trainer/config'}]", *overrides],
    )


@functools.lru_cache(maxsize=1)
def pinned() -> dict[str, Any]:
    return json.loads(KEYS_FILE.read_text())


# ------------------------------------------------------------------------------------------------
# the checks
# ------------------------------------------------------------------------------------------------


def _type_problem(key: str, value: Any, default: Any) -> str | None:
    if default is None or (isinstance(default, str) and (default.startswith("${") or default == "???")):
        return None
    fits = {int: is_int, float: is_number}.get(type(default), lambda x: isinstance(x, type(default)))
    ok = fits(value) or (value is None and isinstance(default, dict))
    return None if ok else f"{key} = {value!r}: the fork's default {default!r} has type {type(default).__name__}"


def _upstream_accepts(key: str, value: Any, verl_wheel: Path) -> bool:
    base = _generated_config(verl_wheel)
    patch = OmegaConf.create({})
    OmegaConf.update(patch, key, value, force_add=True)
    try:
        OmegaConf.merge(base, patch)
    except Exception:  # ConfigKeyError: not a key of upstream verl
        return False
    return True


def validate(files: dict[str, str], wheel_dir: Path | None = None) -> list[str]:
    """Problems with a VCPO-fork export (empty when the pinned key list, types and choices accept it and both
    files agree); ``wheel_dir`` adds the checkout or upstream check described in the module docstring."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    lines = override_lines(files.get("overrides.txt", ""))
    if not lines:
        return ["overrides.txt is missing or empty"]
    try:
        parsed = OverridesParser.create().parse_overrides(lines)
    except Exception as exc:
        return [f"overrides.txt is not valid Hydra override syntax: {exc}"]
    ref = pinned()
    keys, choices = ref["keys"], ref["choices"]
    problems: list[str] = []
    settings: dict[str, Any] = {}
    for ov in parsed:
        key = ov.key_or_group
        value = plain(ov.value())
        open_parent = key.rpartition(".")[0]
        if ov.is_delete() or (ov.is_add() and keys.get(open_parent, None) != {}):
            problems.append(
                f"override {ov.input_line!r} appends or deletes a key; only the fork's open maps (empty "
                "dicts such as optim.override_optimizer_config) take new keys"
            )
            continue
        settings[key] = value
        if ov.is_add():
            if key in keys or not isinstance(value, (int, float, str, bool)):
                problems.append(f"{key}: an appended key must be new and scalar")
            continue
        if key not in keys:
            problems.append(f"{key} is not a key of the fork's {ref['config']} ({ref['source']})")
            continue
        problem = _type_problem(key, value, keys[key])
        if problem:
            problems.append(problem)
        if key in choices and value not in choices[key]:
            problems.append(f"{key} = {value!r} is not one of the fork's values {choices[key]}")
    problems += startup_problems(
        get=settings.get,
        has=settings.__contains__,
        is_int=is_int,
        is_number=is_number,
        startswith=lambda text, prefix: str(text).startswith(prefix),
    )

    exported, uncovered = exported_yaml(files, "vcpo_config.yaml", settings)
    problems += uncovered
    if exported is None:
        return problems
    problems += readback(
        settings,
        lambda key: OmegaConf.select(exported, key, default="<missing>"),
        lambda key, value, got: f"{key}: vcpo_config.yaml has {got!r}, overrides.txt {value!r}",
    )

    if wheel_dir is not None:
        wheel_dir = Path(wheel_dir)
        if (wheel_dir / CONFIG_DIR).is_dir():
            try:
                composed = compose_fork(wheel_dir, lines)
            except Exception as exc:
                return problems + [f"the fork's Hydra config rejects the overrides: {type(exc).__name__}: {exc}"]
            problems += readback(
                settings,
                lambda key: OmegaConf.select(composed, key),
                lambda key, value, got: f"{key}: composed value {got!r} != exported {value!r}",
            )
        elif (wheel_dir / GENERATED).is_file():
            problems += [
                f"{k} is accepted by upstream verl's strict merge, so it is not a fork-only key"
                for k, v in settings.items()
                if k.startswith(FORK_ONLY) and _upstream_accepts(k, v, wheel_dir)
            ]
    return problems


def startup_problems(*, get, has, is_int, is_number, startswith) -> list[str]:
    """The start-up assertions of the fork's fully-async recipe and of VCPO's update that the config breaks,
    one problem each."""
    out = []
    if get("data.train_batch_size", 0) != 0:
        out.append("data.train_batch_size must be 0 (the fully-async rollouter asserts it)")
    if get("actor_rollout_ref.hybrid_engine", False):
        out.append("actor_rollout_ref.hybrid_engine must be false (the fully-async trainer asserts it)")
    if get("async_training.staleness_threshold", 0) < 0:
        out.append("async_training.staleness_threshold must be >= 0")
    if has("async_training.trigger_parameter_sync_step") and not (
        is_int(get("async_training.trigger_parameter_sync_step"))
        and get("async_training.trigger_parameter_sync_step") >= 1
    ):
        out.append("async_training.trigger_parameter_sync_step must be an integer >= 1")
    if has("async_training.require_batches") and not (
        is_int(get("async_training.require_batches")) and get("async_training.require_batches") >= 1
    ):
        out.append("async_training.require_batches must be an integer >= 1")
    if has("actor_rollout_ref.actor.ppo_mini_batch_size") and not (
        is_int(get("actor_rollout_ref.actor.ppo_mini_batch_size"))
        and get("actor_rollout_ref.actor.ppo_mini_batch_size") >= 1
    ):
        out.append("actor_rollout_ref.actor.ppo_mini_batch_size must be an integer >= 1")
    if has("actor_rollout_ref.actor.clip_ratio_c") and not get("actor_rollout_ref.actor.clip_ratio_c") > 1:
        out.append("actor_rollout_ref.actor.clip_ratio_c must be > 1 (vanilla asserts it)")
    if get("actor_rollout_ref.actor.grad_baselining.enable", False) and not get(
        "actor_rollout_ref.actor.update_policy_per_traj", False
    ):
        out.append(
            "actor_rollout_ref.actor.grad_baselining.enable needs actor_rollout_ref.actor.update_policy_per_traj = true (only the per-trajectory update reads it)"
        )
    if get("actor_rollout_ref.actor.ess_scaling.enable", False) and not get(
        "actor_rollout_ref.actor.update_policy_per_traj", False
    ):
        out.append(
            "actor_rollout_ref.actor.ess_scaling.enable needs actor_rollout_ref.actor.update_policy_per_traj = true (only the per-trajectory update reads it)"
        )
    if get("actor_rollout_ref.actor.update_policy_per_traj", False) and (
        get("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu") != 1
        or get("actor_rollout_ref.actor.use_dynamic_bsz", False)
    ):
        out.append("update_policy_per_traj asserts ppo_micro_batch_size_per_gpu = 1 and use_dynamic_bsz = false")
    if get("actor_rollout_ref.actor.update_policy_per_traj", False) and get("algorithm.adv_estimator") != "grpo":
        out.append("update_policy_per_traj reads advantage_scalar, which only algorithm.adv_estimator = grpo writes")
    if get("actor_rollout_ref.actor.grad_baselining.enable", False) and not startswith(
        get("actor_rollout_ref.actor.loss_agg_mode", ""), "seq-mean"
    ):
        out.append("grad_baselining asserts a seq-mean-* loss_agg_mode")
    if get("algorithm.rollout_correction.rollout_is_threshold") is not None and not (
        is_number(get("algorithm.rollout_correction.rollout_is_threshold"))
        and get("algorithm.rollout_correction.rollout_is_threshold") > 0
    ):
        out.append(
            f"algorithm.rollout_correction.rollout_is_threshold = {get('algorithm.rollout_correction.rollout_is_threshold')!r} must be a positive number (the fork has no 'lo_hi' form)"
        )
    if get("algorithm.rollout_correction.rollout_rs") is not None and not (
        is_number(get("algorithm.rollout_correction.rollout_rs_threshold"))
        and get("algorithm.rollout_correction.rollout_rs_threshold") > 0
    ):
        out.append("algorithm.rollout_correction.rollout_rs_threshold must be a positive number when rollout_rs is set")
    if (
        get("algorithm.rollout_correction.rollout_rs") is not None
        and is_number(get("algorithm.rollout_correction.rollout_rs_threshold"))
        and get("algorithm.rollout_correction.rollout_rs_threshold") > 0
        and get("algorithm.rollout_correction.rollout_rs_threshold_lower") is not None
        and not (
            0
            <= get("algorithm.rollout_correction.rollout_rs_threshold_lower")
            <= get("algorithm.rollout_correction.rollout_rs_threshold")
        )
    ):
        out.append(
            f"algorithm.rollout_correction.rollout_rs_threshold_lower = {get('algorithm.rollout_correction.rollout_rs_threshold_lower')!r} must lie in [0, rollout_rs_threshold]"
        )
    return out
