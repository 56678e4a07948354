"""The AReaL 1.0.4 export validator; what it checks and from which upstream files: docs/promotion.md#how-each-validator-checks-its-framework."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

from sandbox.frameworks.areal.config_names import CONFIG_FILE

RESULT_MARK = "AREAL-VALIDATION-RESULT "


def validate(files: dict[str, str], wheel_dir: Path) -> list[str]:
    """Problems with ``files[areal_config.yaml]`` under AReaL's schema (empty list = accepted)."""
    return validate_many([files], wheel_dir)[0]


def validate_many(exports: list[dict[str, str]], wheel_dir: Path, complete: bool = False) -> list[list[str]]:
    """:func:`validate` for several exports in one child process. ``complete=True`` checks a config
    ready to launch (after launch.sh's overrides): a required key without a value is then a problem
    instead of getting a placeholder."""
    texts = [files.get(CONFIG_FILE) for files in exports]
    if all(t is None for t in texts):
        return [[f"{CONFIG_FILE} missing from the export"] for _ in texts]
    proc = subprocess.run(
        [sys.executable, "-P", str(Path(__file__).resolve()), "--child"],
        input=json.dumps(
            {"wheel": str(wheel_dir), "complete": complete, "configs": [t for t in texts if t is not None]}
        ),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    marked = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if proc.returncode != 0 or not marked:
        raise RuntimeError(f"AReaL validator process failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    results = iter(json.loads(marked[-1][len(RESULT_MARK) :]))
    return [[f"{CONFIG_FILE} missing from the export"] if t is None else next(results) for t in texts]


# ------------------------------------------------------------------------------------------------
# child process
# ------------------------------------------------------------------------------------------------


def _install_stubs(wheel: Path, facts: dict) -> None:
    import importlib.abc
    import importlib.machinery
    import types

    class _AnyMeta(type):
        def __getattr__(cls, name):
            if name.startswith("__") and name.endswith("__"):
                raise AttributeError(name)
            return _Any

        def __call__(cls, *args, **kwargs):
            if len(args) == 1 and not kwargs and callable(args[0]):
                return args[0]  # used as a decorator (numba.njit, ray.remote)
            return _Any

        def __getitem__(cls, item):
            return _Any

        def __or__(cls, other):
            return _Any

        __ror__ = __or__

    class _Any(metaclass=_AnyMeta):
        """Stands for any attribute of a stubbed module: subclassable, callable, subscriptable."""

    class _StubModule(types.ModuleType):
        __getattr__ = _AnyMeta.__getattr__

    class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, fullname, path, target=None):
            if fullname.split(".")[0] in facts["stubbed"]:
                return importlib.machinery.ModuleSpec(fullname, self, is_package=True)  # __path__ = [] on import
            return None

        def create_module(self, spec):
            return _StubModule(spec.name)

        def exec_module(self, module):
            pass

    sys.meta_path.insert(0, _StubFinder())
    sys.path.insert(0, str(wheel))
    for name in facts["skipped_inits"]:
        package = types.ModuleType(name)
        package.__path__ = [str(wheel / name.replace(".", "/"))]
        sys.modules[name] = package


def _choices(cls, prefix: str = "", depth: int = 0) -> dict[str, list]:
    """Dotted field path -> the ``choices`` its dataclass metadata declares (areal/api/cli_args.py), through
    fields whose type is a dataclass or a union with one dataclass, six levels deep."""
    import dataclasses
    import types
    import typing

    out: dict[str, list] = {}
    for f in dataclasses.fields(cls):
        if "choices" in f.metadata:
            out[prefix + f.name] = list(f.metadata["choices"])
        union = typing.get_origin(f.type) in (typing.Union, types.UnionType)
        subs = [t for t in (typing.get_args(f.type) if union else [f.type]) if dataclasses.is_dataclass(t)]
        if len(subs) == 1 and depth < 6:
            out.update(_choices(subs[0], f"{prefix}{f.name}.", depth + 1))
    return out


def _leaves(node: dict, prefix: str = "") -> list[tuple[str, object]]:
    """``(dotted path, leaf)`` of a mapping (an empty mapping below the top is a leaf)."""
    return [
        leaf
        for key, value in node.items()
        for leaf in (
            _leaves(value, f"{prefix}{key}.") if isinstance(value, dict) and value else [(f"{prefix}{key}", value)]
        )
    ]


def _missing(node, prefix: str = "") -> list[str]:
    """Paths of the required values (``???``) left missing in an OmegaConf tree."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if not isinstance(node, (DictConfig, ListConfig)) or node._is_none() or node._is_missing():
        return []
    if isinstance(node, ListConfig):
        return [p for i in range(len(node)) for p in _missing(node._get_node(i), f"{prefix}[{i}]")]
    paths = {key: f"{prefix}.{key}" if prefix else str(key) for key in node}
    return [
        p
        for key, path in paths.items()
        for p in ([path] if OmegaConf.is_missing(node, key) else _missing(node._get_node(key), path))
    ]


def _one_line(exc: Exception) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def _check_one(text: str, cli_args, base, choices: dict[str, list], complete: bool, placeholders: list) -> list[str]:
    from omegaconf import OmegaConf

    try:
        raw = OmegaConf.create(text)
    except Exception as exc:  # noqa: BLE001 - any parse error is a finding
        return [f"not valid YAML: {_one_line(exc)}"]
    try:  # AReaL's to_structured_cfg, with OmegaConf.structured(GRPOConfig) built once
        cli_args._migrate_legacy_rejection_sampling(raw)
        cfg = OmegaConf.merge(base, raw)
    except Exception as exc:  # noqa: BLE001 - unknown key, wrong type, removed key
        return [f"rejected by GRPOConfig: {_one_line(exc)}"]
    problems: list[str] = []
    for path, value in _leaves(OmegaConf.to_container(raw, resolve=False)):
        if value == "???" or (isinstance(value, str) and value.startswith("${")):
            continue  # set by launch.sh or wired to another key
        back = OmegaConf.select(cfg, path, throw_on_missing=False)
        if back != value:
            problems.append(f"{path}: exported {value!r}, reads back {back!r}")
        if path in choices and value not in choices[path]:
            problems.append(f"{path}: {value!r} is not one of {choices[path]}")
    missing = _missing(cfg)
    if complete and missing:
        return problems + [f"required keys without a value: {', '.join(missing)}"]
    for path in missing:
        OmegaConf.update(cfg, path, next(value for suffix, value in placeholders if f".{path}".endswith(suffix)))
    try:
        built = OmegaConf.to_object(cfg)
    except Exception as exc:  # noqa: BLE001 - __post_init__ checks
        problems.append(f"GRPOConfig could not be built: {_one_line(exc)}")
    else:
        if not isinstance(built, cli_args.GRPOConfig):
            problems.append(f"built {type(built).__name__}, expected GRPOConfig")
    return problems


def _child() -> int:
    import logging
    import warnings

    job = json.loads(sys.stdin.read())
    facts = tomllib.loads(
        Path(__file__).resolve().parents[2].joinpath("export", "validate", "facts.toml").read_text(encoding="utf-8")
    )["areal"]  # no sandbox import here
    _install_stubs(Path(job["wheel"]), facts)
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    try:
        from areal.api import cli_args
    except Exception as exc:  # noqa: BLE001 - report instead of crashing
        results = [
            [f"cannot import areal.api.cli_args from {job['wheel']}: {type(exc).__name__}: {exc}"]
            for _ in job["configs"]
        ]
    else:
        from omegaconf import OmegaConf

        choices = _choices(cli_args.GRPOConfig)
        base = OmegaConf.structured(cli_args.GRPOConfig)
        results = [
            _check_one(text, cli_args, base, choices, job["complete"], facts["placeholders"]) for text in job["configs"]
        ]
    print(RESULT_MARK + json.dumps(results))
    return 0


if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
    sys.path = [p for p in sys.path if Path(p).resolve() != Path(__file__).resolve().parent]
    raise SystemExit(_child())
