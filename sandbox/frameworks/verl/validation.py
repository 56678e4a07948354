"""The verl 0.9.1 export validator; what it checks and from which upstream files: docs/promotion.md#how-each-validator-checks-its-framework."""

from __future__ import annotations

import contextlib
import functools
import io
import warnings
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from sandbox.export.validate.common import facts, flat, is_int, plain, same, source_strings
from sandbox.export.validate.wheels import import_from_wheel
from sandbox.frameworks.verl.config_names import ACTOR, CORR

CONFIG_DIR = Path("verl/trainer/config")
GENERATED = CONFIG_DIR / "_generated_ppo_trainer.yaml"


@functools.lru_cache(maxsize=4)
def wheel_choices(wheel: Path) -> dict[str, set[str]]:
    """The allowed strings of every enum-valued key the exporter writes, read from the verl 0.9.1 sources
    (where: ``[verl.choices]`` of ``facts.toml``)."""
    return {kind: set(source_strings(wheel / "verl", spec)) for kind, spec in facts("verl")["choices"].items()}


# ------------------------------------------------------------------------------------------------
# threshold strings (rules of rollout_corr_helper._parse_rollout_is_threshold / _parse_rollout_rs_thresholds)
# ------------------------------------------------------------------------------------------------


def _positive(text: str) -> float | None:
    try:
        x = float(text)
    except ValueError:
        return None
    return x if x > 0 else None


def _band(text: str) -> tuple[float | None, float | None, bool]:
    """``'lo_hi'`` or one number (lo = hi) as (lo, hi, is a band), each None unless a positive number."""
    lo, sep, hi = text.strip().partition("_")
    return _positive(lo), _positive(hi if sep else lo), bool(sep)


def is_threshold_problem(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return f"rollout_is_threshold must be a number or a 'lo_hi' string, got {value!r}"
    if isinstance(value, (int, float)):
        return None if value > 0 else f"rollout_is_threshold must be positive, got {value}"
    lo, hi, band = _band(value)
    if lo is None or hi is None or lo > hi:
        return (
            f"rollout_is_threshold {value!r} must be 'lo_hi' with 0 < lo <= hi"
            if band
            else f"rollout_is_threshold {value!r} is not a positive number"
        )
    return None


def rs_threshold_problems(options: list[str], value: Any) -> list[str]:
    if value is None:
        return ["rollout_rs is set but rollout_rs_threshold is null"]
    specs = [s.strip() for s in str(value).split(",") if s.strip()]
    if len(specs) not in (1, len(options)):
        return [f"rollout_rs_threshold {value!r}: give one threshold or one per rollout_rs option ({len(options)})"]
    specs = specs * len(options) if len(specs) == 1 else specs
    out = []
    for option, spec in zip(options, specs):
        lo, hi, band = _band(spec)
        if option.endswith("k1") and (lo is None or hi is None or lo > hi):
            out.append(f"rollout_rs_threshold {spec!r} for {option}: expected 'lo_hi' with 0 < lo <= hi (ratio space)")
        elif not option.endswith("k1") and (band or lo is None):
            out.append(f"rollout_rs_threshold {spec!r} for {option}: expected one positive upper bound")
    return out


# ------------------------------------------------------------------------------------------------
# the checks
# ------------------------------------------------------------------------------------------------


def override_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def exported_yaml(files: dict[str, str], name: str, keys) -> tuple[DictConfig | None, list[str]]:
    """The file ``name`` as a mapping (None if it does not parse) and a problem for each leaf it sets that no
    override key in ``keys`` covers (or the parse error)."""
    try:
        exported = OmegaConf.create(files.get(name, ""))
        if not isinstance(exported, DictConfig):
            raise ValueError("not a mapping")
    except Exception as exc:
        return None, [f"{name} does not parse: {exc}"]
    return exported, [
        f"{name} sets {leaf}, which overrides.txt does not"
        for leaf in sorted(flat(OmegaConf.to_container(exported, resolve=False)))
        if not any(leaf == k or leaf.startswith(k + ".") for k in keys)
    ]


def compose(config_dir: Path, config_name: str, overrides: list[str]) -> DictConfig:
    """Hydra's own composition (raises ``ConfigCompositionException`` on unknown keys). Hydra keeps global
    state, so it is cleared before and after."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir.resolve()), version_base=None):
            return hydra_compose(config_name, overrides=overrides)
    finally:
        GlobalHydra.instance().clear()


def _enum_problems(cfg: DictConfig, choices: dict[str, set[str]]) -> list[str]:
    sel = lambda key: OmegaConf.select(cfg, key)
    checked = [(key, kind, sel(key)) for key, kind in facts("verl")["enum_keys"].items()]
    if sel(f"{ACTOR}.use_kl_loss"):
        checked.append((f"{ACTOR}.kl_loss_type", "kl_loss_type", sel(f"{ACTOR}.kl_loss_type").rstrip("+")))
    if (rollout_is := sel(f"{CORR}.rollout_is")) is not None:
        checked.append((f"{CORR}.rollout_is", "rollout_is", rollout_is))
    rs = sel(f"{CORR}.rollout_rs")
    options = [] if rs is None else [o.strip() for o in str(rs).split(",") if o.strip()]
    checked += [(f"{CORR}.rollout_rs", "rollout_rs", o) for o in options]
    out = [
        f"{key} = {value!r} is not one of verl's {kind} values {sorted(choices[kind])}"
        for key, kind, value in checked
        if value not in choices[kind]
    ]
    if rollout_is is not None and (problem := is_threshold_problem(sel(f"{CORR}.rollout_is_threshold"))):
        out.append(f"{CORR}.{problem}")
    if rs is not None:
        out += [f"{CORR}.{p}" for p in rs_threshold_problems(options, sel(f"{CORR}.rollout_rs_threshold"))]
    return out + startup_problems(sel=sel, is_int=is_int)


@functools.lru_cache(maxsize=4)
def _generated_config(wheel_dir: Path) -> DictConfig:
    """The wheel's fully expanded ``ppo_trainer`` tree in struct mode (merging copies it, so it is cached)."""
    base = OmegaConf.load(wheel_dir / GENERATED)
    OmegaConf.set_struct(base, True)
    return base


VERL_POST_LOAD_MODULES = ("verl.trainer.ppo.utils", "verl.utils.config", "verl.trainer.config.algorithm")
"""The verl modules :func:`post_load_problems` imports from the wheel."""

LAUNCH_FILLS = (
    "actor_rollout_ref.model.path=/path/to/model",
    "data.train_files=/path/to/train.parquet",
    "data.val_files=/path/to/val.parquet",
    "data.max_prompt_length=1024",
    "data.max_response_length=2048",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "trainer.nnodes=1",
    "trainer.n_gpus_per_node=8",
)
"""What the exported ``launch.sh`` adds to ``overrides.txt`` with its defaults (``sandbox/frameworks/verl/export.py``,
``VerlExporter.files``); ``actor_rollout_ref.model.path`` is a placeholder (verl's post-load checks do not read
the model unless a critic is built)."""


def post_load_problems(lines: list[str], wheel_dir: Path) -> list[str]:
    """Run verl 0.9.1's own post-load validation on ``lines`` + :data:`LAUNCH_FILLS` (step 5 of the module
    docstring). Raises ``WheelUnavailable`` when verl cannot be imported here."""
    utils, config_mod, algo = import_from_wheel("verl", *VERL_POST_LOAD_MODULES)
    given = {ln.split("=", 1)[0].lstrip("+") for ln in lines}
    fills = [f for f in LAUNCH_FILLS if f.split("=", 1)[0] not in given]
    try:
        cfg = compose(wheel_dir / CONFIG_DIR, "ppo_trainer", lines + fills)
    except Exception as exc:
        return [f"verl's Hydra config rejects the overrides with launch.sh's values: {type(exc).__name__}: {exc}"]
    problems: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # need_critic warns that a non-gae estimator disables the critic
        use_critic = bool(utils.need_critic(cfg))
        use_ref = bool(utils.need_reference_policy(cfg))
    if use_critic:
        problems.append(
            f"verl would train a critic (need_critic: algorithm.adv_estimator = "
            f"{OmegaConf.select(cfg, 'algorithm.adv_estimator')!r}, critic.enable = "
            f"{OmegaConf.select(cfg, 'critic.enable')!r}); no sandbox objective has one"
        )
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # validate_config prints its progress
            config_mod.validate_config(cfg, use_reference_policy=use_ref, use_critic=use_critic)
    except Exception as exc:  # AssertionError / ValueError / anything verl raises before training
        problems.append(f"verl's validate_config rejects the config: {type(exc).__name__}: {str(exc)[:400]}")
    for section, cls in (
        ("algorithm", None),
        ("algorithm.rollout_correction", algo.RolloutCorrectionConfig),
        ("actor_rollout_ref.rollout", None),
    ):
        node = OmegaConf.select(cfg, section)
        if node is None:
            continue
        try:
            config_mod.omega_conf_to_dataclass(node, cls)
        except Exception as exc:
            problems.append(f"verl cannot build {section} as its dataclass: {type(exc).__name__}: {str(exc)[:400]}")
    return problems


def validate(files: dict[str, str], wheel_dir: Path, post_load: bool = True) -> list[str]:
    """Problems with an upstream-verl export (empty when verl 0.9.1's own config accepts it as meant).
    ``post_load=False`` skips step 5 (verl's own code, which needs verl importable)."""
    wheel_dir = Path(wheel_dir)
    lines = override_lines(files.get("overrides.txt", ""))
    if not lines:
        return ["overrides.txt is missing or empty"]
    appends = [ln for ln in lines if ln.startswith(("+", "~"))]
    if appends:
        return [
            f"override {ln!r} appends or deletes a key; upstream verl exports must only set existing keys"
            for ln in appends
        ]
    keys = [ln.split("=", 1)[0] for ln in lines]

    try:
        composed = compose(wheel_dir / CONFIG_DIR, "ppo_trainer", lines)
    except Exception as exc:  # hydra raises ConfigCompositionException (and OverrideParseException for bad syntax)
        return [f"verl's Hydra config rejects the overrides: {type(exc).__name__}: {exc}".strip()]

    exported, uncovered = exported_yaml(files, "verl_config.yaml", keys)
    if exported is None:
        return uncovered
    try:
        merged, problems = OmegaConf.merge(_generated_config(wheel_dir), exported), []
    except Exception as exc:  # ConfigKeyError for unknown keys, ValidationError for type clashes
        merged, problems = (
            None,
            [f"verl_config.yaml does not merge onto {GENERATED.name}: {type(exc).__name__}: {exc}".strip()],
        )
    problems += uncovered
    for key in keys:
        want = OmegaConf.select(exported, key, default="<missing>")
        if plain(want) == "<missing>":
            problems.append(f"{key} is in overrides.txt but not in verl_config.yaml")
            continue
        got = OmegaConf.select(composed, key)
        if not same(got, want):
            problems.append(f"{key}: composed value {plain(got)!r} != exported {plain(want)!r}")
        if merged is not None and not same(OmegaConf.select(merged, key), want):
            problems.append(f"{key}: merged value {plain(OmegaConf.select(merged, key))!r} != exported {plain(want)!r}")

    problems += _enum_problems(composed, wheel_choices(wheel_dir))
    if post_load:
        problems += post_load_problems(lines, wheel_dir)
    return problems


def startup_problems(*, sel, is_int) -> list[str]:
    """The start-up assertions of verl 0.9.1 that the config breaks, one problem each."""
    out = []
    if sel("trainer.v1.sampler.max_off_policy_threshold") is not None and not (
        is_int(sel("trainer.v1.sampler.max_off_policy_threshold"))
        and sel("trainer.v1.sampler.max_off_policy_threshold") > 0
    ):
        out.append(
            f"trainer.v1.sampler.max_off_policy_threshold = {sel('trainer.v1.sampler.max_off_policy_threshold')!r} must be null or a positive integer"
        )
    if not sel("actor_rollout_ref.actor.clip_ratio_c") > 1.0:
        out.append(
            f"actor_rollout_ref.actor.clip_ratio_c = {sel('actor_rollout_ref.actor.clip_ratio_c')} must be > 1 (vanilla asserts it)"
        )
    if sel("trainer.v1.trainer_mode") == "separate_async" and sel("data.train_batch_size") != sel(
        "trainer.v1.separate_async.parameter_sync_step"
    ) * sel("actor_rollout_ref.actor.ppo_mini_batch_size"):
        out.append("separate_async needs data.train_batch_size == parameter_sync_step * actor.ppo_mini_batch_size")
    if (
        sel("trainer.v1.trainer_mode") == "separate_async"
        and sel("actor_rollout_ref.rollout.checkpoint_engine.backend") == "naive"
    ):
        out.append("separate_async refuses actor_rollout_ref.rollout.checkpoint_engine.backend = naive")
    return out
