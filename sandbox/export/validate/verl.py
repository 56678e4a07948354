"""The verl 0.9.1 export validator; what it checks and from which upstream files: docs/promotion.md#how-each-validator-checks-its-framework."""

from __future__ import annotations

import ast
import functools
import math
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from .wheels import import_from_wheel

CONFIG_DIR = Path("verl/trainer/config")
GENERATED = CONFIG_DIR / "_generated_ppo_trainer.yaml"


# ------------------------------------------------------------------------------------------------
# lists read from source files by AST (shared with the VCPO fork's key-list generator)
# ------------------------------------------------------------------------------------------------


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def assigned_strings(path: Path, name: str) -> list[str]:
    """String elements of every ``name = [...]`` / ``{...}`` assignment (annotated or not) in the file."""
    out: list[str] = []
    for node in ast.walk(_tree(path)):
        plain = isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        annotated = isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name
        if (plain or annotated) and node.value is not None:
            out += _strings(node.value)
    return out


def decorator_args(paths: list[Path], decorator: str) -> list[str]:
    """First string argument of every ``@decorator("x")`` / ``@obj.decorator("x")`` in the files."""
    out: list[str] = []
    for path in paths:
        for node in ast.walk(_tree(path)):
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                continue
            for dec in node.decorator_list:
                if not isinstance(dec, ast.Call) or not dec.args:
                    continue
                func = dec.func
                named = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
                arg = dec.args[0]
                if named == decorator and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    out.append(arg.value)
    return out


def enum_values(path: Path, cls: str) -> list[str]:
    """String values of the members of ``class cls(..., Enum)``."""
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return [s.value.value for s in node.body
                    if isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)]
    return []


def membership_strings(path: Path, attribute: str, within: str | None = None) -> list[str]:
    """Strings of every ``<...>.attribute in [...]`` / ``attribute in (...)`` test in the file (only inside
    ``class within`` when given)."""
    out: list[str] = []
    root: ast.AST = _tree(path)
    if within is not None:
        root = next((n for n in ast.walk(root) if isinstance(n, ast.ClassDef) and n.name == within), ast.Module(body=[], type_ignores=[]))
    for node in ast.walk(root):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In):
            left = node.left
            named = left.attr if isinstance(left, ast.Attribute) else left.id if isinstance(left, ast.Name) else None
            if named == attribute:
                out += _strings(node.comparators[0])
    return out


def compared_strings(path: Path, function: str, variable: str) -> list[str]:
    """Strings that ``variable`` is compared with (``==`` or ``in``) inside ``def function``."""
    out: list[str] = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            for cmp in ast.walk(node):
                if isinstance(cmp, ast.Compare) and isinstance(cmp.left, ast.Name) and cmp.left.id == variable:
                    for op, right in zip(cmp.ops, cmp.comparators):
                        if isinstance(op, ast.Eq) and isinstance(right, ast.Constant) and isinstance(right.value, str):
                            out.append(right.value)
                        elif isinstance(op, ast.In):
                            out += _strings(right)
    return out


@functools.lru_cache(maxsize=4)
def wheel_choices(wheel: Path) -> dict[str, set[str]]:
    """The allowed strings of every enum-valued key the exporter writes, read from the verl 0.9.1 sources."""
    v = wheel / "verl"
    core = v / "trainer/ppo/core_algos.py"
    helper = v / "trainer/ppo/rollout_corr_helper.py"
    return {
        "loss_agg_mode": set(assigned_strings(v / "workers/config/actor.py", "valid_loss_agg_modes")),
        "loss_mode": set(decorator_args([core], "register_policy_loss")),
        "adv_estimator": set(enum_values(core, "AdvantageEstimator")),
        "rollout_rs": set(assigned_strings(helper, "SUPPORTED_ROLLOUT_RS_OPTIONS")),
        "rollout_is": set(assigned_strings(helper, "valid_is_levels")),
        "trainer_mode": set(decorator_args(sorted((v / "trainer/ppo/v1").glob("*.py")), "register_trainer")),
        "max_off_policy_strategy": set(membership_strings(v / "trainer/ppo/v1/replay_buffer.py", "max_off_policy_strategy")),
        "kl_loss_type": set(compared_strings(core, "kl_penalty_forward", "kl_penalty")),
        "lr_scheduler_type": set(membership_strings(v / "workers/config/optimizer.py", "lr_scheduler_type",
                                                 within="FSDPOptimizerConfig")),
        "checkpoint_backend": set(decorator_args(sorted((v / "checkpoint_engine").glob("*.py")), "register")),
    }


# ------------------------------------------------------------------------------------------------
# threshold strings (rules of rollout_corr_helper._parse_rollout_is_threshold / _parse_rollout_rs_thresholds)
# ------------------------------------------------------------------------------------------------


def _positive(text: str) -> float | None:
    try:
        x = float(text)
    except ValueError:
        return None
    return x if x > 0 else None


def is_threshold_problem(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return f"rollout_is_threshold must be a number or a 'lo_hi' string, got {value!r}"
    if isinstance(value, (int, float)):
        return None if value > 0 else f"rollout_is_threshold must be positive, got {value}"
    lo, _, hi = value.strip().partition("_")
    if not _:
        return None if _positive(lo) else f"rollout_is_threshold {value!r} is not a positive number"
    a, b = _positive(lo), _positive(hi)
    if a is None or b is None or a > b:
        return f"rollout_is_threshold {value!r} must be 'lo_hi' with 0 < lo <= hi"
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
        lo, sep, hi = spec.partition("_")
        if option.endswith("k1"):
            a, b = (_positive(lo), _positive(hi)) if sep else (_positive(lo), _positive(lo))
            if a is None or b is None or (sep and a > b):
                out.append(f"rollout_rs_threshold {spec!r} for {option}: expected 'lo_hi' with 0 < lo <= hi (ratio space)")
        elif sep or _positive(spec) is None:
            out.append(f"rollout_rs_threshold {spec!r} for {option}: expected one positive upper bound")
    return out


# ------------------------------------------------------------------------------------------------
# the checks
# ------------------------------------------------------------------------------------------------


def override_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value, resolve=False) if isinstance(value, (DictConfig, ListConfig)) else value


def same_value(a: Any, b: Any) -> bool:
    a, b = _plain(a), _plain(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0) or a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return a == b


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


def _leaves(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict) and node:
        return [leaf for k, v in node.items() for leaf in _leaves(v, f"{prefix}.{k}" if prefix else str(k))]
    return [prefix]


def _enum_problems(cfg: DictConfig, choices: dict[str, set[str]]) -> list[str]:
    out: list[str] = []
    sel = lambda key: OmegaConf.select(cfg, key)

    def check(key: str, kind: str, value: Any) -> None:
        if value not in choices[kind]:
            out.append(f"{key} = {value!r} is not one of verl's {kind} values {sorted(choices[kind])}")

    actor = "actor_rollout_ref.actor"
    corr = "algorithm.rollout_correction"
    check(f"{actor}.loss_agg_mode", "loss_agg_mode", sel(f"{actor}.loss_agg_mode"))
    check(f"{actor}.policy_loss.loss_mode", "loss_mode", sel(f"{actor}.policy_loss.loss_mode"))
    check("algorithm.adv_estimator", "adv_estimator", sel("algorithm.adv_estimator"))
    check("trainer.v1.trainer_mode", "trainer_mode", sel("trainer.v1.trainer_mode"))
    check("trainer.v1.sampler.max_off_policy_strategy", "max_off_policy_strategy", sel("trainer.v1.sampler.max_off_policy_strategy"))
    check(f"{actor}.optim.lr_scheduler_type", "lr_scheduler_type", sel(f"{actor}.optim.lr_scheduler_type"))
    check("actor_rollout_ref.rollout.checkpoint_engine.backend", "checkpoint_backend",
          sel("actor_rollout_ref.rollout.checkpoint_engine.backend"))
    if sel(f"{actor}.use_kl_loss"):
        check(f"{actor}.kl_loss_type", "kl_loss_type", sel(f"{actor}.kl_loss_type").rstrip("+"))
    rollout_is = sel(f"{corr}.rollout_is")
    if rollout_is is not None:
        check(f"{corr}.rollout_is", "rollout_is", rollout_is)
        problem = is_threshold_problem(sel(f"{corr}.rollout_is_threshold"))
        if problem:
            out.append(f"{corr}.{problem}")
    rollout_rs = sel(f"{corr}.rollout_rs")
    if rollout_rs is not None:
        options = [o.strip() for o in str(rollout_rs).split(",") if o.strip()]
        for o in options:
            check(f"{corr}.rollout_rs", "rollout_rs", o)
        out += [f"{corr}.{p}" for p in rs_threshold_problems(options, sel(f"{corr}.rollout_rs_threshold"))]

    threshold = sel("trainer.v1.sampler.max_off_policy_threshold")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int) or threshold <= 0):
        out.append(f"trainer.v1.sampler.max_off_policy_threshold = {threshold!r} must be null or a positive integer")
    if not sel(f"{actor}.clip_ratio_c") > 1.0:
        out.append(f"{actor}.clip_ratio_c = {sel(f'{actor}.clip_ratio_c')} must be > 1 (vanilla asserts it)")
    if sel("trainer.v1.trainer_mode") == "separate_async":
        sync_step = sel("trainer.v1.separate_async.parameter_sync_step")
        if sel("data.train_batch_size") != sync_step * sel(f"{actor}.ppo_mini_batch_size"):
            out.append("separate_async needs data.train_batch_size == parameter_sync_step * actor.ppo_mini_batch_size")
        if sel("actor_rollout_ref.rollout.checkpoint_engine.backend") == "naive":
            out.append("separate_async refuses actor_rollout_ref.rollout.checkpoint_engine.backend = naive")
    return out


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
"""What the exported ``launch.sh`` adds to ``overrides.txt`` with its defaults (``sandbox/export/verl.py``:
``_launch_script``); ``actor_rollout_ref.model.path`` is a placeholder (verl's post-load checks do not read
the model unless a critic is built)."""


def post_load_problems(lines: list[str], wheel_dir: Path, config_name: str = "ppo_trainer",
                       config_dir: Path | None = None) -> list[str]:
    """Run verl 0.9.1's own post-load validation on ``lines`` + :data:`LAUNCH_FILLS` (step 5 of the module
    docstring). Raises ``WheelUnavailable`` when verl cannot be imported here."""
    utils, config_mod, algo = import_from_wheel("verl", *VERL_POST_LOAD_MODULES)
    given = {ln.split("=", 1)[0].lstrip("+") for ln in lines}
    fills = [f for f in LAUNCH_FILLS if f.split("=", 1)[0] not in given]
    try:
        cfg = compose(config_dir or wheel_dir / CONFIG_DIR, config_name, lines + fills)
    except Exception as exc:
        return [f"verl's Hydra config rejects the overrides with launch.sh's values: {type(exc).__name__}: {exc}"]
    import warnings

    problems: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # need_critic warns that a non-gae estimator disables the critic
        use_critic = bool(utils.need_critic(cfg))
        use_ref = bool(utils.need_reference_policy(cfg))
    if use_critic:
        problems.append(f"verl would train a critic (need_critic: algorithm.adv_estimator = "
                        f"{OmegaConf.select(cfg, 'algorithm.adv_estimator')!r}, critic.enable = "
                        f"{OmegaConf.select(cfg, 'critic.enable')!r}); no sandbox objective has one")
    import contextlib
    import io

    try:
        with contextlib.redirect_stdout(io.StringIO()):  # validate_config prints its progress
            config_mod.validate_config(cfg, use_reference_policy=use_ref, use_critic=use_critic)
    except Exception as exc:  # AssertionError / ValueError / anything verl raises before training
        problems.append(f"verl's validate_config rejects the config: {type(exc).__name__}: {str(exc)[:400]}")
    for section, cls in (("algorithm", None), ("algorithm.rollout_correction", algo.RolloutCorrectionConfig),
                         ("actor_rollout_ref.rollout", None)):
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
    problems: list[str] = []
    lines = override_lines(files.get("overrides.txt", ""))
    if not lines:
        return ["overrides.txt is missing or empty"]
    appends = [ln for ln in lines if ln.startswith(("+", "~"))]
    if appends:
        return [f"override {ln!r} appends or deletes a key; upstream verl exports must only set existing keys" for ln in appends]
    keys = [ln.split("=", 1)[0] for ln in lines]

    try:
        composed = compose(wheel_dir / CONFIG_DIR, "ppo_trainer", lines)
    except Exception as exc:  # hydra raises ConfigCompositionException (and OverrideParseException for bad syntax)
        return [f"verl's Hydra config rejects the overrides: {type(exc).__name__}: {exc}".strip()]

    try:
        exported = OmegaConf.create(files.get("verl_config.yaml", ""))
        if not isinstance(exported, DictConfig):
            raise ValueError("not a mapping")
    except Exception as exc:
        return problems + [f"verl_config.yaml does not parse: {exc}"]
    base = _generated_config(wheel_dir)
    try:
        merged = OmegaConf.merge(base, exported)
    except Exception as exc:  # ConfigKeyError for unknown keys, ValidationError for type clashes
        problems.append(f"verl_config.yaml does not merge onto {GENERATED.name}: {type(exc).__name__}: {exc}".strip())
        merged = None

    yaml_leaves = set(_leaves(OmegaConf.to_container(exported, resolve=False)))
    uncovered = sorted(leaf for leaf in yaml_leaves if not any(leaf == k or leaf.startswith(k + ".") for k in keys))
    problems += [f"verl_config.yaml sets {leaf}, which overrides.txt does not" for leaf in uncovered]
    for key in keys:
        want = OmegaConf.select(exported, key, default="<missing>")
        if _plain(want) == "<missing>":
            problems.append(f"{key} is in overrides.txt but not in verl_config.yaml")
            continue
        got = OmegaConf.select(composed, key)
        if not same_value(got, want):
            problems.append(f"{key}: composed value {_plain(got)!r} != exported {_plain(want)!r}")
        if merged is not None and not same_value(OmegaConf.select(merged, key), want):
            problems.append(f"{key}: merged value {_plain(OmegaConf.select(merged, key))!r} != exported {_plain(want)!r}")

    problems += _enum_problems(composed, wheel_choices(wheel_dir))
    if post_load:
        problems += post_load_problems(lines, wheel_dir)
    return problems
