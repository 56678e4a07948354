"""What several commands share: the console, the output directory a command stages, error reporting (:mod:`sandbox.cli` assembles the app)."""

from __future__ import annotations

import difflib
import math
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from sandbox.base.errors import ScenarioError
from sandbox.base.outputs import OutputError, StagedDir, describe_os_error, safe_name
from sandbox.base.processes import interrupted_by, terminate_as_interrupt

# Wide tables when the output is a file or a CI log (rich would otherwise wrap at 80 columns).
console = Console() if sys.stdout.isatty() else Console(width=140)


def _interrupted(kept: str) -> NoReturn:
    """Ctrl-C or SIGTERM (:func:`sandbox.base.processes.terminate_as_interrupt`): say what the
    interruption left (``kept``) and exit with status 128 + the signal (130, 143), no traceback."""
    console.print(f"[yellow]interrupted[/yellow]: {escape(kept)}")
    raise typer.Exit(128 + interrupted_by())


def _fail(message: str) -> NoReturn:
    """One line ``error: message`` (rich markup: what the user wrote escaped), exit status 2, no traceback."""
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(2)


def _deprecated(old: str, new: str) -> None:
    """One line on stderr for an old spelling that still works for one release (docs/cli.md#vocabulary)."""
    sys.stderr.write(f"warning: {old} is deprecated and will be removed in the next release; use {new}\n")


def parse_duration(text: str) -> float:
    """Seconds of a duration in the one syntax every ``--budget`` takes: ``90s``, ``10m``, ``1.5h`` or a
    plain number of seconds; a ``typer.BadParameter`` (exit status 2, the option named) otherwise."""
    raw = str(text).strip().lower()
    unit = {"s": 1, "m": 60, "h": 3600}.get(raw[-1:])
    try:
        seconds = float(raw[:-1]) * unit if unit else float(raw)
    except ValueError:
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        raise typer.BadParameter(f"{text!r} is not a duration (expected e.g. 90s, 10m, 1.5h)")
    return seconds


def _did_you_mean(name: str, known) -> str:
    """``did you mean 'x'? `` for the closest of ``known`` (difflib), else ""."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""


def _os_error(exc: OSError) -> NoReturn:
    """A file-system error no other handler named (a full disk while writing): one line naming the
    path, exit status 2, no traceback."""
    where = f" ({exc.filename})" if exc.filename else ""
    _fail(escape(describe_os_error(exc) + where))


@contextmanager
def _starting():
    """Around a command's lazy imports (the scenario layer, torch): Ctrl-C there exits with status
    130 and no traceback, as during the start-up imports."""
    try:
        yield
    except KeyboardInterrupt:
        sys.stderr.write("interrupted: nothing was kept\n")
        raise typer.Exit(130) from None


class _Output:
    """The output directory a command stages (:class:`sandbox.base.outputs.StagedDir`, replaced whole), so
    that an interruption can say what it left: the previous output intact, or nothing."""

    def __init__(self, writer: str):
        self.writer, self.staged = writer, None

    def stage(self, target: Path) -> StagedDir:
        self.staged = StagedDir(target, whole=True, writer=self.writer)
        return self.staged

    def kept(self) -> str:
        if self.staged is not None and self.staged.previous:
            return f"nothing was kept; the previous output in {self.staged.out} is unchanged"
        return "nothing was kept"


@contextmanager
def _command(writer: str, *errors: type[Exception]):
    """One error path for the commands that stage a whole output directory (plan, import, preflight,
    export): a scenario or output error or one of ``errors`` ends the command with one line and exit
    status 2, a file-system error with :func:`_os_error`, Ctrl-C or SIGTERM with :func:`_interrupted`
    saying what was kept. Yields an :class:`_Output` to stage the directory through."""
    output = _Output(writer)
    try:
        with terminate_as_interrupt():
            yield output
    except (OutputError, ScenarioError, *errors) as exc:
        _fail(escape(str(exc)))
    except OSError as exc:
        _os_error(exc)
    except KeyboardInterrupt:
        _interrupted(output.kept())


def _framework_problem(framework: str | None, known) -> str | None:
    """What is wrong with ``--framework`` (missing, or not one of ``known``, with the closest name as a
    hint); None when it names a known framework."""
    if framework is None:
        return f"--framework: required; expected one of {', '.join(known)}"
    if framework not in known:
        close = difflib.get_close_matches(framework, list(known), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"--framework: unknown framework {framework!r}; {hint}expected one of {', '.join(known)}"
    return None


def _config_slug(config: Path) -> str:
    """The default output folder's name for a config file: its stem when that is a safe name as is,
    otherwise the safe part (or ``config``) plus 8 hex digits of the stem's hash, so that ``..yaml``,
    ``名前.yaml`` and ``~.yaml`` get folders of their own and never one of the others'."""
    import hashlib

    stem = config.stem
    slug = safe_name(stem)
    if slug == stem and slug:
        return slug
    return f"{slug or 'config'}-{hashlib.sha256(stem.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}"


def _out_path(text: str | Path) -> Path:
    """An ``--out`` path as typed: an empty string is refused (``Path("")`` would be the current
    directory, which the user did not name); a default (a ``Path`` already) is kept."""
    if isinstance(text, Path):
        return text
    if not text.strip():
        raise typer.BadParameter("expected a path, got an empty string (write . for the current directory)")
    return Path(text)


def _fmt(x, spec=".3f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec)


def _final_label(field: str) -> str:
    """The table header of a summary's final value: a loss says it is one and which way is better."""
    return {
        "final_expected_reward": "final expected reward",
        "final_reward": "final reward",
        "final_loss": "final loss (lower is better)",
    }.get(field, field)
