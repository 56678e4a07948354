"""The OpenRLHF 0.11.2 export validator; what it checks and from which upstream files: docs/promotion.md#how-each-validator-checks-its-framework."""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import io
import re
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from sandbox.export.validate.common import installed_file, is_int, same, source_strings

SCRIPT = "openrlhf/cli/train_ppo_ray.py"
CONFIG = "openrlhf/utils/config.py"


def _wheel_file(wheel_dir: Path, rel: str) -> Path:
    hits = sorted(Path(wheel_dir).glob(f"*.data/purelib/{rel}")) or sorted(Path(wheel_dir).glob(rel))
    if not hits:
        raise FileNotFoundError(f"{rel} not found in the unpacked wheel {wheel_dir}")
    return hits[0]


def _index(body: list[ast.stmt], pattern: str) -> int:
    for i, stmt in enumerate(body):
        if re.search(pattern, ast.unparse(stmt)):
            return i
    raise ValueError(f"no statement matching {pattern!r}")


def _stdlib_scope(tree: ast.Module) -> dict[str, Any]:
    """The script's module-level imports that come from the standard library (argparse, os, datetime)."""
    scope: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            top = (node.module if isinstance(node, ast.ImportFrom) else node.names[0].name).split(".")[0]
            if top in sys.stdlib_module_names:
                exec(compile(ast.Module([node], []), "<imports>", "exec"), scope)
    return scope


@functools.lru_cache(maxsize=4)
def _script(wheel_dir: str) -> tuple[argparse.ArgumentParser, list[ast.stmt], dict[str, Any]]:
    """The real parser, the statements that follow ``parse_args`` (up to ``train(args)``) and the scope
    to run them in."""
    tree = ast.parse(_wheel_file(Path(wheel_dir), SCRIPT).read_text())
    body = tree.body[_index(tree.body, r"^if __name__ == .__main__.:")].body
    start = _index(body, r"^parser = argparse\.ArgumentParser\(")
    stop = _index(body, r"parser\.parse_args\(")
    scope = _stdlib_scope(tree)
    exec(compile(ast.Module(body[start:stop], []), SCRIPT, "exec"), scope)
    parser = scope["parser"]
    parser.prog = "openrlhf.cli.train_ppo_ray"
    end = _index(body, r"^train\(args\)")
    checks = [
        s for s in body[stop + 1 : end] if not (isinstance(s, ast.ImportFrom) and s.module == "openrlhf.utils.config")
    ]
    config_scope: dict[str, Any] = {}
    exec(compile(_wheel_file(Path(wheel_dir), CONFIG).read_text(), CONFIG, "exec"), config_scope)
    return parser, checks, {**scope, "hierarchize": config_scope["hierarchize"]}


def build_parser(wheel_dir: Path) -> argparse.ArgumentParser:
    """The ``train_ppo_ray`` parser of the unpacked wheel."""
    return _script(str(wheel_dir))[0]


def _parse(parser: argparse.ArgumentParser, lines: list[list[str]]) -> tuple[argparse.Namespace | None, str]:
    """argparse's namespace of the flag lines, else None and the last line of its message."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_args([t for tokens in lines for t in tokens]), ""
    except SystemExit:
        lines = err.getvalue().strip().splitlines()
        return None, lines[-1] if lines else "argparse exited"


def _literal(token: str) -> Any:
    for kind in (int, float):
        try:
            return kind(token)
        except ValueError:
            pass
    return token


def _expected(action: argparse.Action, values: list[str]) -> Any:
    if not values:
        return action.const if isinstance(action, (argparse._StoreConstAction,)) else None
    items = [_literal(v) for v in values]
    return items if action.nargs not in (None, "?") else items[0]


def _read_back(parser: argparse.ArgumentParser, lines: list[list[str]], ns: argparse.Namespace) -> list[str]:
    problems = []
    for flag, *values in lines:
        action = parser._option_string_actions[flag]
        parsed = getattr(ns, action.dest)
        expected = _expected(action, values)
        if not same(parsed, expected) or (
            action.type is int and not all(map(is_int, parsed if isinstance(parsed, list) else [parsed]))
        ):
            problems.append(f"flags.txt: {flag} reads back as {parsed!r} (dest {action.dest}), expected {expected!r}")
    return problems


def _exact_flags(parser: argparse.ArgumentParser, lines: list[list[str]], where: str) -> list[str]:
    problems, seen = [], set()
    for tokens in lines:
        flag = tokens[0]
        if not flag.startswith("--"):
            problems.append(f"{where}: line {' '.join(tokens)!r} does not start with a flag")
        elif flag not in parser._option_string_actions:
            close = [s for s in parser._option_string_actions if s.startswith(flag)]
            hint = f" (argparse would take it as an abbreviation of {close[0]})" if len(close) == 1 else ""
            problems.append(f"{where}: {flag} is not a flag of train_ppo_ray{hint}")
        if flag in seen:
            problems.append(f"{where}: {flag} is given twice (argparse keeps the last)")
        seen.add(flag)
    return problems


# ----------------------------------------------------------------------------------------------
# launch.sh
# ----------------------------------------------------------------------------------------------

_VARIABLE = re.compile(r'^(\w+)="\$\{\1(:[-?])([^}]*)\}"')


def _launch_arrays(text: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Bash arrays ``NAME=( ... )`` (comments dropped) and the defaults of ``VAR="${VAR:-default}"``
    (``${VAR:?msg}`` becomes the placeholder ``<VAR>``)."""
    arrays: dict[str, list[str]] = {}
    variables: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        stripped = line.strip()
        if current is not None:
            if stripped == ")":
                current = None
            elif stripped and not stripped.startswith("#"):
                arrays[current].append(stripped)
            continue
        if m := re.match(r"^(\w+)=\($", stripped):
            current = m.group(1)
            arrays[current] = []
        elif m := _VARIABLE.match(stripped):
            variables[m.group(1)] = m.group(3) if m.group(2) == ":-" else f"<{m.group(1)}>"
    return arrays, variables


def _expand(line: str, variables: dict[str, str]) -> list[str]:
    tokens = shlex.split(line, comments=True)
    return [re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m.group(1), m.group(0)), t) for t in tokens]


def _post_parse_checks(ns: argparse.Namespace, wheel_dir: Path) -> list[str]:
    """The asserts of ``train_ppo_ray.py`` after ``parse_args`` and the flag checks of ``PolicyLoss``."""
    _, checks, scope = _script(str(wheel_dir))
    run_scope = {**scope, "args": argparse.Namespace(**vars(ns))}
    problems = []
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(ast.Module(checks, []), SCRIPT, "exec"), run_scope)
    except AssertionError as exc:
        problems.append(f"train_ppo_ray.py rejects the launch command: {exc}")
    except Exception as exc:  # the script's own code failing on these flags is a rejection too
        problems.append(f"train_ppo_ray.py fails on the launch command: {type(exc).__name__}: {exc}")
    args = run_scope["args"]
    if not isinstance(args, SimpleNamespace):
        return problems
    return problems + startup_problems(
        adv=args.algo.advantage,
        actor=args.actor,
        train=args.train,
        critic_path=getattr(args.critic, "model_name_or_path", None),
    )


def _check_launch(parser: argparse.ArgumentParser, text: str, lines: list[list[str]], wheel_dir: Path) -> list[str]:
    if "openrlhf.cli.train_ppo_ray" not in text:
        return ["launch.sh: does not run python -m openrlhf.cli.train_ppo_ray"]
    arrays, variables = _launch_arrays(text)
    if "EXPORTED_FLAGS" not in arrays or "SETUP_FLAGS" not in arrays:
        return ["launch.sh: expected the arrays SETUP_FLAGS and EXPORTED_FLAGS"]
    exported = [shlex.split(line) for line in arrays["EXPORTED_FLAGS"]]
    if exported != lines:
        return ["launch.sh: EXPORTED_FLAGS differ from flags.txt"]
    setup = [_expand(line, variables) for line in arrays["SETUP_FLAGS"]]
    problems = _exact_flags(parser, setup + exported, "launch.sh")
    if problems:
        return problems
    ns, error = _parse(parser, setup + exported)
    if ns is None:
        return [f"launch.sh: argparse rejects the command: {error}"]
    return _post_parse_checks(ns, wheel_dir)


# ----------------------------------------------------------------------------------------------


def validate(files: dict[str, str], wheel_dir: Path) -> list[str]:
    """Problems of an OpenRLHF export (empty when accepted); see the module docstring."""
    if "flags.txt" not in files:
        return ["flags.txt is missing"]
    parser = build_parser(wheel_dir)
    lines = [shlex.split(line) for line in files["flags.txt"].splitlines() if line.strip()]  # one token list per flag
    ns, error = _parse(parser, lines)
    problems = _exact_flags(parser, lines, "flags.txt")
    if ns is None:
        return problems + [f"flags.txt: argparse rejects the flags: {error}"]
    if problems:
        return problems
    problems += _read_back(parser, lines, ns)
    path = installed_file(
        "transformers", "trainer_utils.py"
    )  # its SchedulerType members, read by AST (nothing imported)
    names = set(source_strings(path.parent, ["enum", path.name, "SchedulerType"])) if path else None
    scheduler = getattr(ns, "actor.lr_scheduler")
    if names is not None and scheduler not in names:
        problems.append(
            f"flags.txt: --actor.lr_scheduler {scheduler!r} is not a transformers scheduler "
            f"({', '.join(sorted(names))})"
        )
    if "launch.sh" not in files:
        return problems + ["launch.sh is missing"]
    return problems + _check_launch(parser, files["launch.sh"], lines, wheel_dir)


def startup_problems(*, adv, actor, train, critic_path) -> list[str]:
    """What the launch command's namespace must not be (after train_ppo_ray.py's own asserts): a critic, and
    the flag combinations models/loss.py PolicyLoss and the async trainer reject; one problem each."""
    out = []
    if adv.estimator == "gae" or critic_path is not None:
        out.append(
            f"train_ppo_ray.py would train a critic (--algo.advantage.estimator {adv.estimator}); no sandbox objective has one"
        )
    if adv.is_correction_mode == "clip" and (adv.is_correction_level == "seq" or adv.is_correction_gating != "ratio"):
        out.append("models/loss.py PolicyLoss rejects is_correction_mode=clip without level token and gating ratio")
    if adv.is_correction_gating != "ratio" and adv.is_correction_level != "off" and adv.is_correction_threshold[0] > 0:
        out.append(f"models/loss.py PolicyLoss rejects gating {adv.is_correction_gating} with a lower bound")
    if actor.dual_clip is not None and not actor.dual_clip > 1.0:
        out.append(f"models/loss.py PolicyLoss rejects --actor.dual_clip {actor.dual_clip} (must be > 1)")
    if train.async_enable and train.async_queue_size <= 0:
        out.append("trainer/ppo_trainer_async.py rejects --train.async_queue_size <= 0")
    return out
