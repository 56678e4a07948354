"""The run directory: resolved scenario, metrics table, event log, jobs, summary, figures.

Every file is written atomically (temporary file in the same directory, then ``os.replace``), so
an interrupted run never leaves a half-written result that looks complete. A write that fails (a
full disk, a read-only file system) is an :class:`OutputError` naming the path, not a traceback.

A whole run is written into a staging directory ``<out>/.staging-*`` and moved into place when it
is complete (:class:`StagedDir`): the stage is first renamed ``<out>/.commit-*`` with a journal of
what it replaces (from then on the new run is the one that counts), then the previous run's entries
leave (its ``summary.json`` before anything else), the new ones come in (``summary.json`` last).
Ctrl-C and SIGTERM during that move are held until the move is done. A run interrupted before the
move leaves the previous run as it was; a process killed outright (``kill -9``, power loss) during
the move leaves a ``.commit-*`` directory that the next writer of the directory completes first
(:func:`recover`), so the directory then holds the new run, complete. ``sandbox run`` also holds a
lock file ``<out>/.sandbox.lock`` (:func:`output_lock`) so that two processes never write the same
directory.

Paths and symbolic links. ``--out`` is taken as the user names it: ``~`` is expanded
(:func:`user_path`, used by every command), and it or any directory above it may be a symbolic link
(a results directory kept on another disk is legitimate) that is followed as any program would.
Inside the output directory the sandbox follows no link: everything it removes or replaces there is
an entry of its own, named by a plain name (never a path from a file it reads), and removing a link
removes the link, never its target. The lock file must be a plain file (a link there is refused),
and a directory the sandbox writes into (a sweep's ``runs/<id>``) must be a real directory.

Bookkeeping files are data from a directory anyone may have written into. The manifest and a
``.commit-*`` journal are read through the bounded reader (:mod:`sandbox.base.readfile`) relative to the
open directory without following a link (a FIFO, ``/dev/zero`` or a link there is no manifest or
journal), the foreign-file check comes before any recovery or cleanup, a journal is checked against
the directory before anything is moved on its word, and only entries shaped like a command's output
(:func:`output_entry`) are ever removed on the word of a manifest or a journal. Recovery works
relative to the open directories and creates its trash directory fresh (never through a link).

Variant and sweep names become directory names through :func:`safe_name` (rule: ``NAME_RULE``).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sandbox.base.processes import note_signal
from sandbox.base.readfile import InputFileError, read_json

if TYPE_CHECKING:  # pandas is imported by the caller; scenario loading does not need it
    import pandas as pd


def user_path(path: str | Path) -> Path:
    """A path as the user wrote it on the command line or in a file: ``~`` and ``~user`` expanded
    (the one place every command's ``--out`` and ``[sweep] out`` go through)."""
    return Path(os.path.expanduser(os.fspath(path)))


def describe_os_error(exc: OSError) -> str:
    """``No space left on device`` and the like, without errno numbers."""
    return exc.strerror or str(exc)


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp_path)`` and move the result to ``path`` in one step; :class:`OutputError`
    naming ``path`` when it cannot be written (a full disk: nothing is left behind)."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        write(Path(tmp))
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise OutputError(f"could not write {path} ({describe_os_error(exc)})") from exc
        raise


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda p: p.write_text(text))


def json_text(obj) -> str:
    """The text :func:`write_json` writes (indented, numpy scalars and arrays as plain values)."""
    return json.dumps(obj, indent=2, default=_json_default, allow_nan=True) + "\n"


def write_json(path: Path, obj) -> None:
    write_text(path, json_text(obj))


def write_table(path: Path, df: pd.DataFrame) -> None:
    atomic_write(path, lambda p: df.to_parquet(p, index=False))


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """``arrays`` as an uncompressed ``.npz`` (``np.savez``; ``np.load`` reads it as it read the compressed
    one): compression costs far more than the write for float64 metric columns, which deflate poorly
    (benchmarks/README.md)."""

    def w(p: Path) -> None:
        with open(p, "wb") as fh:
            np.savez(fh, **arrays)

    atomic_write(path, w)


def _json_default(o):
    if isinstance(o, np.generic):  # numpy scalars: bool_, integer, floating
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o)}")


# ------------------------------------------------------------------------------------------------
# names that become directories
# ------------------------------------------------------------------------------------------------

NAME_RULE = (
    "ASCII letters, digits and - _ . + are kept, every run of other characters becomes one '-', "
    "leading and trailing '-' and '.' are dropped; the result must be non-empty, at most "
    "100 characters, and differ from the other names of the same kind ignoring case"
)
MAX_NAME = 100
RUN_FILES = (
    "scenario.toml",
    "metrics.parquet",
    "jobs.parquet",
    "events.parquet",
    "replicas.npz",
    "figures",
    "tensorboard",
    "wandb",
    "summary.json",
)
"""What :func:`sandbox.run.runner.write_run_dir` writes into a run directory."""
COMPARISON = "comparison.png"
COMPARISON_VECTOR = "comparison.svg"
TIME_TO_TARGET = "time_to_target.png"
"""Beside ``comparison.png``: the variants' time-to-target figure (docs/time_to_target.md)."""
REPORT = "report.html"
_RESERVED = {
    n.lower()
    for n in (*RUN_FILES, COMPARISON, COMPARISON_VECTOR, TIME_TO_TARGET, TIME_TO_TARGET.replace(".png", ".svg"), REPORT)
}


def safe_name(name: str) -> str:
    """The directory name of a variant or a sweep (see ``NAME_RULE``); may be empty."""
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", str(name)).strip(".-")


def check_names(names: Iterable[str], what: str = "variant", reserved: bool = True) -> dict[str, str]:
    """``{name: directory name}``; ``ValueError`` naming the offending name(s). ``reserved``: also
    refuse the names of a run directory's own files (a variant directory sits beside them)."""
    out: dict[str, str] = {}
    seen: dict[str, str] = {}
    for name in names:
        slug = safe_name(name)
        if not slug:
            raise ValueError(f"{what} name {name!r} leaves no directory name (rule: {NAME_RULE})")
        if len(slug) > MAX_NAME:
            raise ValueError(f"{what} name {name[:20]!r}...: {len(slug)} characters, at most {MAX_NAME}")
        if reserved and slug.lower() in _RESERVED:
            raise ValueError(f"{what} name {name!r} is reserved (a file of the run directory); rename it")
        if slug.lower() in seen:
            other = seen[slug.lower()]
            same = (
                f"the directory name {slug!r}"
                if out[other] == slug
                else (f"the directory names {out[other]!r} and {slug!r}, the same on case-insensitive file systems")
            )
            raise ValueError(f"{what} names {other!r} and {name!r} both become {same}; rename one")
        seen[slug.lower()] = name
        out[name] = slug
    return out


# ------------------------------------------------------------------------------------------------
# output directories: lock, staging, orphans
# ------------------------------------------------------------------------------------------------


class OutputError(RuntimeError):
    """An output directory that cannot be written as asked (the message names the option)."""


LOCK = ".sandbox.lock"
MANIFEST = ".sandbox-run.json"  # entries of the run `sandbox run` wrote (so a re-run knows what to replace)
JOURNAL = ".sandbox-commit.json"  # in a .commit-* directory: what the move replaces (recover)
_STAGING = ".staging-"
_COMMIT = ".commit-"
_REPLACED = ".replaced-"
_PENDING = ".pending-"  # a sweep run written by a worker, moved into runs/<id> by the sweep (sandbox.sweep.execute)
_TMP = re.compile(r"^\.(.+)\.[a-z0-9_]{8}\.tmp$")  # atomic_write's temporary files (mkstemp names)
PAUSE_ENV = "SANDBOX_TEST_COMMIT_PAUSE"
"""Tests only: seconds to sleep in the middle of a commit (old run moved out, new not yet in), so
that a signal sent then hits the move deterministically."""


def is_transient_dir(name: str) -> bool:
    """Whether a directory name is one of :class:`StagedDir`'s own (a stage being written, a stage
    being moved in, a replaced run waiting to be deleted, a sweep run waiting for the sweep): not
    where anything ends up."""
    return name.startswith((_STAGING, _COMMIT, _REPLACED, _PENDING))


def plain_name(name: object) -> bool:
    """A single entry name (no separator, not ``.`` or ``..``): what may be read from a file of the
    output directory as the name of something to move or remove."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
    )


def _remove(path: str | Path) -> None:
    """Remove an entry of ours: a link or a file is unlinked (a link's target is never touched), a
    real directory removed with its contents (rmtree follows no link)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def remove_orphans(root: Path, recursive: bool = True, names: Iterable[str] | None = None) -> int:
    """Delete what interrupted writers left in ``root`` (temporary files of :func:`atomic_write`,
    staging directories); returns how many. ``names``: only temporary files of these files. Only
    call it on a directory of ours, while no other process writes there (hold the lock); call
    :func:`recover` first where a killed move may have left a ``.commit-*`` directory to complete."""
    root = Path(root)
    keep_only = set(names) if names is not None else None
    n = 0
    for dirpath, dirnames, filenames in os.walk(root):  # follows no link to a directory
        for d in list(dirnames):
            if is_transient_dir(d) and keep_only is None:
                _remove(os.path.join(dirpath, d))
                dirnames.remove(d)
                n += 1
        for f in filenames:
            m = _TMP.match(f)
            if (m and (keep_only is None or m.group(1) in keep_only)) or (keep_only is None and is_transient_dir(f)):
                Path(dirpath, f).unlink(missing_ok=True)
                n += 1
        if not recursive:
            break
    return n


def check_out_path(out: Path, flag: str = "--out") -> Path:
    """:class:`OutputError` for an ``out`` that no file system can hold (a name over the length
    limit, a path under ``/proc``), found before anything is written; returns ``out``."""
    try:
        os.lstat(out)
    except (FileNotFoundError, NotADirectoryError):
        pass
    except OSError as exc:
        raise OutputError(f"{flag}: {out} cannot be used ({describe_os_error(exc)})") from None
    except ValueError as exc:  # an embedded null byte
        raise OutputError(f"{flag}: {out!r} cannot be used ({exc})") from None
    for part in out.parts:
        if len(os.fsencode(part)) > 255:
            raise OutputError(
                f"{flag}: {str(out)[:80]}...: the name {part[:20]}... is {len(os.fsencode(part))} bytes "
                "long, longer than a file system allows (255)"
            )
    return out


def _mkdir(out: Path, flag: str) -> None:
    check_out_path(out, flag)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"{flag}: {out} exists and is not a directory") from None
    except OSError as exc:
        raise OutputError(f"{flag}: cannot create {out} ({exc.strerror or exc})") from None


def _holder_pid(lock: Path) -> str:
    """The pid the holder wrote into the lock file (diagnostics only: '' when unreadable)."""
    try:
        fd = os.open(lock, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return ""
    try:
        text = os.read(fd, 32).decode(errors="replace").strip()
    except OSError:  # e.g. Windows: the holder's byte-range lock
        return ""
    finally:
        os.close(fd)
    return text if text.isdigit() else ""


def _write_pid(lock: Path) -> None:
    """Write this process's pid into the held lock file, never through a symbolic link."""
    try:
        fd = os.open(lock, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError:  # diagnostics only (Windows locks the file's bytes)
        pass
    finally:
        os.close(fd)


def out_dir(out: Path, flag: str = "--out") -> Path:
    """Create the output directory ``out`` of a command that writes a few files of its own into it
    (``claims``, ``demo``): a clear :class:`OutputError` for an impossible path (a name over 255
    bytes, under ``/proc``) or a file in its place. A link to a directory is the user's and is
    followed, as ``run`` follows one; the files go in with :func:`atomic_write`, which replaces a
    link planted at a file's name instead of writing through it. A directory it cannot write into
    (``/proc``) is refused too, found by creating and removing a file there."""
    _mkdir(out, flag)
    try:  # writable (``/proc`` is a directory): a file created there and removed, before anything runs
        fd, probe = tempfile.mkstemp(dir=out, prefix=".sandbox-probe-", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"{flag}: cannot write into {out} ({describe_os_error(exc)})") from None
    return out


def own_dir(path: Path, flag: str = "--out") -> Path:
    """Create ``path`` (a directory the sandbox writes into inside an output directory of its own)
    or check that it is one: a real directory, not a symbolic link (:class:`OutputError`)."""
    if os.path.islink(path):
        raise OutputError(
            f"{flag}: {path} is a symbolic link; the sandbox writes only into directories it created there: remove it"
        )
    _mkdir(path, flag)
    if os.path.islink(path) or not path.is_dir():
        raise OutputError(f"{flag}: {path} is not a directory the sandbox created; remove it")
    return path


@contextmanager
def output_lock(out: Path, flag: str = "--out") -> Iterator[None]:
    """Hold ``<out>/.sandbox.lock`` (created with ``out``) for the duration; :class:`OutputError`
    at once if another process (or another writer in this one) holds it. The lock is an OS file lock
    (``filelock``: ``flock`` on POSIX, ``msvcrt`` on Windows), so it goes with the process, even on
    ``kill -9``. The lock file must be a plain file of its own (one link): a symbolic link, a hard link
    to another file, a FIFO or a directory there is refused, so no file outside ``out`` is ever opened,
    truncated or written through it."""
    from filelock import FileLock, Timeout

    out = Path(out)
    _mkdir(out, flag)
    path = out / LOCK
    if path.is_symlink():
        raise OutputError(
            f"{flag}: {path} is a symbolic link, not a lock file the sandbox created; the lock file is never "
            f"followed to another file and nothing was written: remove the link or choose another {flag}"
        )
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and (not stat.S_ISREG(st.st_mode) or st.st_nlink != 1):
        raise OutputError(
            f"{flag}: {path} is not a lock file the sandbox created (a link to another file or not a "
            "plain file); nothing was written: remove it"
        )
    holder = _holder_pid(path)  # read first: an older filelock truncates the file on a failed try
    lock = FileLock(str(path), timeout=0)  # a separate OS lock per call: a second writer in this process is refused too
    try:
        lock.acquire()
    except Timeout:
        holder = _holder_pid(path) or holder
        raise OutputError(
            f"{flag}: {out} is being written by another sandbox process"
            + (f" (pid {holder})" if holder else "")
            + f"; wait for it to finish or choose another {flag}"
        ) from None
    except OSError as exc:
        raise OutputError(f"{flag}: cannot lock {path} ({exc.strerror or exc})") from None
    try:
        _write_pid(path)
        yield
    finally:
        lock.release()


@contextmanager
def signals_held() -> Iterator[list]:
    """Ctrl-C and SIGTERM are recorded, not acted on, inside the block (the main thread only)."""
    got: list = []
    if threading.current_thread() is not threading.main_thread():
        yield got
        return
    prev = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        prev[sig] = signal.signal(sig, lambda signum, frame: got.append(signum))
    try:
        yield got
    finally:
        for sig, handler in prev.items():
            signal.signal(sig, handler)


def _looks_like_run(path: Path) -> bool:
    """A real directory (not a link) holding a run's ``scenario.toml`` or ``summary.json``."""
    return (
        not os.path.islink(path)
        and path.is_dir()
        and any(os.path.lexists(path / f) for f in ("scenario.toml", "summary.json"))
    )


OUTPUT_FILE = re.compile(
    r"^(?:scenario\.toml|metrics\.parquet|jobs\.parquet|events\.parquet|replicas\.npz|summary\.json|report\.html"
    r"|(?:comparison|time_to_target)\.(?:png|svg)|(?:plan|split)\.(?:csv|json)|IMPORT\.md|preflight\.(?:md|json|html)"
    r"|q[0-9]_[a-z_]+\.(?:png|svg))$"
)
"""The names of the files ``run``, ``plan``, ``import`` and ``preflight`` write directly into their
output directory (beside them: the directories ``OUTPUT_DIRS`` and a multi-variant run's variant
directories)."""
OUTPUT_DIRS = ("figures", "tensorboard", "wandb")


def output_entry(dfd: int, name: str) -> bool:
    """Whether the entry ``name`` of the open output directory ``dfd`` has the shape of something a
    sandbox command writes there (looked at without following a link): a file named as in
    ``OUTPUT_FILE``, a real directory named as in ``OUTPUT_DIRS``, or a real directory holding a
    run (a variant's). A manifest or a journal is data anyone may have planted: only entries of this
    shape are ever removed or replaced on its word (a planted ``{"entries": ["thesis.tex"]}`` makes
    nothing of the user's deletable). A missing entry is harmless (True)."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return True
    except (OSError, ValueError):
        return False
    if OUTPUT_FILE.match(name):
        return not stat.S_ISDIR(st.st_mode)
    if not stat.S_ISDIR(st.st_mode):
        return False
    if name in OUTPUT_DIRS:
        return True
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dfd)
    except OSError:
        return False
    try:
        return any(_lexists_at(fd, f) for f in ("scenario.toml", "summary.json"))
    finally:
        os.close(fd)


def _test_pause() -> None:
    pause = os.environ.get(PAUSE_ENV)
    if pause:
        import time

        time.sleep(float(pause))


def _swap(
    out: Path,
    src: Path,
    old: list[str],
    new: list[str],
    trash: Path,
    moved_out: list[str] | None = None,
    moved_in: list[str] | None = None,
) -> None:
    """Move ``old`` entries of ``out`` into ``trash``, then ``new`` entries of ``src`` into ``out``,
    in the given orders; idempotent (what was moved already is skipped), so that a killed swap can be
    completed from its journal. Every name is a plain name (checked by the callers)."""
    moved_out = [] if moved_out is None else moved_out
    moved_in = [] if moved_in is None else moved_in
    arrived = {n for n in new if not os.path.lexists(src / n)}  # moved in by an earlier, killed try
    for name in old:
        if name not in arrived and os.path.lexists(out / name):
            if os.path.lexists(trash / name):
                _remove(trash / name)
            os.replace(out / name, trash / name)
            moved_out.append(name)
    _test_pause()
    for name in new:
        if name not in arrived:
            if os.path.lexists(out / name):  # not a run file of ours (refused before): keep nothing stale
                _remove(out / name)
            os.replace(src / name, out / name)
            moved_in.append(name)


JOURNAL_WHAT = "commit journal"


def _pending_commits(out: Path, dfd: int) -> list[tuple[str, dict]]:
    """The ``.commit-*`` directories a killed move left in ``out`` (oldest name first) with their
    journals, read and validated before anything acts on them: the journal through the bounded
    reader (:func:`sandbox.base.readfile.read_json`: a FIFO, a device, a link or a huge file there is
    refused, never read), its names plain, each ``new`` name found in the commit directory or
    already moved in, the commit directory holding nothing else, and each ``old`` name of ``out``
    shaped like an output (:func:`output_entry`). A journal that fails is an :class:`OutputError`
    naming it: nothing is moved or removed. A ``.commit-*`` directory without a journal never
    started moving in (the journal is written before the rename): ``None`` as its journal, removed
    by the caller. A ``.commit-*`` that is not a real directory is left to :func:`remove_orphans`."""
    pending: list[tuple[str, dict]] = []
    for name in sorted(n for n in os.listdir(dfd) if n.startswith(_COMMIT)):
        try:
            cfd = os.open(name, _DIR_FLAGS, dir_fd=dfd)
        except OSError:  # a link, a file: not a move of ours; removed as an orphan (the link, not its target)
            continue
        shown = out / name / JOURNAL
        try:
            if not _lexists_at(cfd, JOURNAL):
                pending.append((name, None))
                continue
            problem = None
            try:
                journal = read_json(JOURNAL, JOURNAL_WHAT, dir_fd=cfd, shown=shown)
            except InputFileError as exc:
                raise OutputError(
                    f"--out: {exc}; it is not a journal the sandbox wrote, nothing was changed: remove {out / name}"
                ) from None
            old = journal.get("old") if isinstance(journal, dict) else None
            new = journal.get("new") if isinstance(journal, dict) else None
            names = (old or []) + (new or []) if isinstance(old, list) and isinstance(new, list) else None
            if (
                names is None
                or not isinstance(journal.get("whole", False), bool)
                or not isinstance(journal.get("writer", ""), str)
                or len(journal.get("writer", "")) > 100
            ):
                problem = "it is not a journal of the sandbox's (old, new, whole, writer)"
            elif (
                not all(plain_name(x) and x not in (JOURNAL, LOCK) and not is_transient_dir(x) for x in names)
                or len(set(new)) != len(new)
                or len(set(old)) != len(old)
            ):
                problem = "it names something other than entries of the directory"
            else:
                inside = set(os.listdir(cfd)) - {JOURNAL}
                missing = [n for n in new if n not in inside and not _lexists_at(dfd, n)]
                extra = sorted(inside - set(new))
                foreign = [
                    n for n in old if n != MANIFEST and not (n in new and n not in inside) and not output_entry(dfd, n)
                ]
                if missing or extra:
                    problem = f"it does not match the directory it is in ({', '.join((missing + extra)[:3])})"
                elif foreign:
                    problem = f"it would remove {', '.join(foreign[:3])}, which no sandbox command writes"
            if problem:
                raise OutputError(f"--out: {shown}: {problem}; nothing was changed: remove {out / name}")
            pending.append((name, journal))
        finally:
            os.close(cfd)
    return pending


def recover(out: Path, pending: list[tuple[str, dict]] | None = None) -> int:
    """Complete the moves that a killed process left in ``out`` (``.commit-*`` directories, oldest
    name first): the new run they hold goes in, the run it replaced goes. Returns how many. Only
    call it holding the directory's lock. A journal is data to validate (:func:`_pending_commits`,
    or ``pending`` as it returned); every move, creation and removal is made relative to the open
    directories without following a link, and the trash directory ``.replaced-*`` is created fresh
    (a link or anything planted at its name is removed first, never written through)."""
    out = Path(out)
    try:
        dfd = os.open(out, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return 0
    n = 0
    try:
        for name, journal in _pending_commits(out, dfd) if pending is None else pending:
            if journal is None:  # the stage never started moving in; the old run is intact
                _remove_at(dfd, name)
                continue
            old, new = list(journal["old"]), list(journal["new"])
            trash = _REPLACED + name[len(_COMMIT) :]
            _remove_at(dfd, trash)  # what a killed move put there is the old run: it goes anyway
            os.mkdir(trash, 0o700, dir_fd=dfd)
            cfd = os.open(name, _DIR_FLAGS, dir_fd=dfd)
            tfd = os.open(trash, _DIR_FLAGS, dir_fd=dfd)
            try:
                _swap_at(dfd, cfd, tfd, old, new)
            finally:
                os.close(cfd)
                os.close(tfd)
            if journal.get("whole"):
                write_text_at(
                    dfd,
                    MANIFEST,
                    json.dumps({"written_by": str(journal.get("writer", "sandbox run")), "entries": new}, indent=2)
                    + "\n",
                    out / MANIFEST,
                )
            _remove_at(dfd, trash)
            _remove_at(dfd, name)
            n += 1
    finally:
        os.close(dfd)
    return n


def _swap_at(dfd: int, sfd: int, tfd: int, old: list[str], new: list[str]) -> None:
    """:func:`_swap` relative to open directories (``out``, the commit directory, the trash)."""
    arrived = {n for n in new if not _lexists_at(sfd, n)}
    for name in old:
        if name not in arrived and _lexists_at(dfd, name):
            os.replace(name, name, src_dir_fd=dfd, dst_dir_fd=tfd)
    for name in new:
        if name not in arrived:
            _remove_at(dfd, name)
            os.replace(name, name, src_dir_fd=sfd, dst_dir_fd=dfd)


class StagedDir:
    """``with StagedDir(out) as stage:`` write a run into ``stage``; on a normal exit it replaces
    the previous run in ``out`` (see the module docstring); on an exception the stage is removed
    and ``out`` is as it was.

    ``whole=True`` (``sandbox run``): ``out`` belongs to the run. It must be empty, missing, or hold
    a previous run (recognised by the manifest ``.sandbox-run.json``, or for directories written
    before it existed by holding only run files, or ``comparison.png`` and run directories);
    anything else is refused with :class:`OutputError`. The lock is held, a move a killed run left
    is completed (:func:`recover`), leftovers of interrupted runs are removed first, and a directory
    created here is removed again if nothing was kept.
    ``whole=False`` (one run directory): only the entries in ``RUN_FILES`` are replaced; other
    files stay.
    """

    def __init__(self, out: str | Path, *, whole: bool = False, flag: str = "--out", writer: str = "sandbox run"):
        self.out = Path(out)
        self.whole = whole
        self.flag = flag
        self.writer = writer  # the command named in the directory's manifest
        self.previous: list[str] = []
        self.committed = False
        self.recovered = 0
        self._lock = None
        self._created = False
        self._had_lock = False
        self._keep_stage = False  # a move that could be neither finished nor undone: recover() completes it

    # -- what the previous run is ------------------------------------------------------------------

    def _previous_entries(self, pending: list[tuple[str, dict]] = ()) -> list[str]:
        """The entries of the previous run (to replace), after the foreign-file check: with
        ``whole``, any entry that is neither listed by the manifest (or by a pending journal) nor of a
        run written before the manifest existed, or that is not shaped like an output
        (:func:`output_entry`), refuses the directory."""
        names = sorted(n for n in os.listdir(self.out) if not n.startswith("."))
        if not self.whole:
            return [n for n in names if n in RUN_FILES or n == REPORT]
        if not names:
            return []
        listed = self._manifest_entries()
        for _, journal in pending:
            if journal is not None:
                listed = (listed or []) + list(journal["old"]) + list(journal["new"])
        if listed is not None:
            foreign = [n for n in names if n not in listed and n != REPORT]
        elif (self.out / COMPARISON).exists():  # a multi-variant run written before the manifest
            foreign = [
                n
                for n in names
                if n not in (COMPARISON, COMPARISON_VECTOR, REPORT) and not _looks_like_run(self.out / n)
            ]
        elif any(n in ("summary.json", "scenario.toml") for n in names):  # a single run, same
            foreign = [n for n in names if n not in RUN_FILES and n != REPORT]
        else:
            foreign = names
        dfd = os.open(self.out, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            foreign += [n for n in names if n not in foreign and not output_entry(dfd, n)]
        finally:
            os.close(dfd)
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise OutputError(
                f"{self.flag}: {self.out} holds files that are not part of a sandbox run ({shown}); "
                f"choose an empty or new directory, or remove them"
            )
        return names

    def _manifest_entries(self) -> list[str] | None:
        """The entries the manifest lists (None: no readable manifest). Read through the bounded
        reader without following a link (a FIFO, ``/dev/zero`` or a link there is no manifest)."""
        try:
            dfd = os.open(self.out, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError:
            return None
        try:
            entries = read_json(MANIFEST, "run manifest", dir_fd=dfd, shown=self.out / MANIFEST)["entries"]
        except (InputFileError, KeyError, TypeError):
            return None
        finally:
            os.close(dfd)
        return [e for e in entries if plain_name(e)] if isinstance(entries, list) else None

    # -- the protocol ------------------------------------------------------------------------------

    def __enter__(self) -> Path:
        check_out_path(self.out, self.flag)
        self._created = not os.path.lexists(self.out)
        self._had_lock = os.path.lexists(self.out / LOCK)
        if self.whole:
            self._lock = output_lock(self.out, self.flag)
            self._lock.__enter__()
        else:
            _mkdir(self.out, self.flag)
        try:
            if self.whole:
                # the foreign-file check comes first: nothing is moved or removed in a directory that is
                # not ours, whatever journal or manifest was planted there
                dfd = os.open(self.out, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
                try:
                    pending = _pending_commits(self.out, dfd)
                finally:
                    os.close(dfd)
                self._previous_entries(pending)
                self.recovered = recover(self.out, pending)  # a move a killed run left: completed first
            self.previous = self._previous_entries()
            if self.whole:
                remove_orphans(self.out)
            self.stage = Path(tempfile.mkdtemp(dir=self.out, prefix=_STAGING))
        except OSError as exc:
            self._release(False)
            raise OutputError(f"{self.flag}: cannot write into {self.out} ({describe_os_error(exc)})") from None
        except BaseException:
            self._release(False)
            raise
        return self.stage

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc_type is None:
                self._commit()
        finally:
            if not self._keep_stage:
                _remove(self.stage)
            self._release(self.committed or self._keep_stage)
        return False

    def _release(self, kept: bool) -> None:
        if self._lock is None:
            return
        if (
            not kept and not self._had_lock and not self.recovered
        ):  # nothing kept: leave no lock file (or empty directory)
            (self.out / LOCK).unlink(missing_ok=True)
            if self._created:
                try:
                    self.out.rmdir()
                except OSError:
                    pass
        self._lock.__exit__(None, None, None)
        self._lock = None

    def _commit(self) -> None:
        new = sorted(sorted(os.listdir(self.stage)), key=lambda n: n == "summary.json")  # the marker last
        old = [MANIFEST] if self.whole else []  # the manifest first: the directory no longer claims a run
        old += sorted(self.previous, key=lambda n: n != "summary.json")  # then the marker, then the rest
        moved_out: list[str] = []
        moved_in: list[str] = []
        with signals_held() as got:
            token = self.stage.name[len(_STAGING) :]
            trash = commit = None
            try:
                # the journal, then the rename: from here on the new run is the one a recovery completes
                write_json(self.stage / JOURNAL, {"old": old, "new": new, "whole": self.whole, "writer": self.writer})
                commit = self.out / (_COMMIT + token)
                os.replace(self.stage, commit)
                self.stage = commit
                trash = self.out / (_REPLACED + token)
                trash.mkdir()
                _swap(self.out, commit, old, new, trash, moved_out, moved_in)
                if self.whole:
                    write_json(self.out / MANIFEST, {"written_by": self.writer, "entries": new})
                self.committed = True
            except (OSError, OutputError) as exc:  # e.g. a full disk: put the previous run back as it was
                try:
                    for name in reversed(moved_in):
                        os.replace(self.out / name, self.stage / name)
                    for name in reversed(moved_out):
                        os.replace(trash / name, self.out / name)
                except OSError:  # cannot undo: leave the journal, the next run completes the move
                    self._keep_stage = True
                    raise OutputError(
                        f"{self.flag}: could not move the finished run into {self.out} ({_reason(exc)}); the next "
                        f"sandbox command writing {self.out} completes the move"
                    ) from exc
                raise OutputError(
                    f"{self.flag}: could not move the finished run into {self.out} ({_reason(exc)}); "
                    "nothing was kept" + ("; the previous run is as it was" if self.previous else "")
                ) from exc
            finally:
                if trash is not None and not self._keep_stage:
                    _remove(trash)
        if got:  # Ctrl-C or SIGTERM during the move: the run is in place, now stop
            note_signal(got[-1])
            raise KeyboardInterrupt


def _reason(exc: BaseException) -> str:
    return describe_os_error(exc) if isinstance(exc, OSError) else str(exc)


def commit_run(src: Path, dest: Path, flag: str = "--out", root: Path | None = None) -> None:
    """Move the run directory ``src`` (written elsewhere, e.g. by a sweep worker) into ``dest``,
    replacing the previous result there: its markers (``summary.json``, ``error.json``) and run files
    leave first, the new markers come in last. ``dest`` must be a real directory of ours (a link is
    refused). ``src`` is removed.

    ``root`` (default: ``dest``'s parent) is the directory the caller owns (a sweep's directory):
    ``dest`` and ``src`` are reached from it one component at a time without following a link
    (:func:`open_dir`), and every listing, move and removal is made relative to the directories so
    opened (``dir_fd``). A directory replaced by a symbolic link while the sweep runs is therefore
    never written through: the link is refused when met, and once a directory is open, swapping its
    path for a link changes nothing of what is written where."""
    dest, src = Path(dest), Path(src)
    root = Path(root) if root is not None else dest.parent
    dfd = open_dir(root, dest, flag)
    sfd = pfd = -1
    try:
        src_root = root if _inside(src, root) else src.parent
        sfd = open_dir(src_root, src, flag, create=False)
        pfd = open_dir(src_root, src.parent, flag, create=False)
        markers = ("summary.json", "error.json")
        new = sorted(sorted(os.listdir(sfd)), key=lambda n: n in markers)
        ours = set(RUN_FILES) | {"run.json", "timing.json", "error.json", REPORT} | set(new)
        old = sorted((n for n in os.listdir(dfd) if n in ours), key=lambda n: n not in markers)
        with signals_held() as got:
            trash = _REPLACED + _token()
            os.mkdir(trash, 0o700, dir_fd=dfd)
            tfd = os.open(trash, _DIR_FLAGS, dir_fd=dfd)
            try:
                for name in old:
                    if _lexists_at(dfd, name):
                        os.replace(name, name, src_dir_fd=dfd, dst_dir_fd=tfd)
                _test_pause()
                for name in new:
                    if _lexists_at(dfd, name):  # not a run file of ours (refused before): keep nothing stale
                        _remove_at(dfd, name)
                    os.replace(name, name, src_dir_fd=sfd, dst_dir_fd=dfd)
            finally:
                os.close(tfd)
                _remove_at(dfd, trash)
        _remove_at(pfd, src.name)
    finally:
        for fd in (dfd, sfd, pfd):
            if fd >= 0:
                os.close(fd)
    if got:
        note_signal(got[-1])
        raise KeyboardInterrupt


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)


def _token() -> str:
    import secrets

    return secrets.token_hex(4)  # 8 characters of [0-9a-f], as the temporary names of atomic_write


def _inside(path: Path, root: Path) -> bool:
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    return rel == "." or not (rel == ".." or rel.startswith(".." + os.sep))


def open_dir(root: Path, path: Path, flag: str = "--out", create: bool = True) -> int:
    """A file descriptor of the directory ``path`` inside ``root``, reached from ``root`` one component
    at a time with ``O_NOFOLLOW | O_DIRECTORY`` (missing components created when ``create``).
    ``root`` itself is opened as named (the user's ``--out`` may be a link); below it a symbolic link
    or anything but a directory is an :class:`OutputError` naming it, and nothing is opened through
    it. The caller closes the descriptor."""
    root, path = Path(root), Path(path)
    if not _inside(path, root):
        raise OutputError(f"{flag}: {path} is not inside {root}")
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    try:
        fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        raise OutputError(f"{flag}: cannot open {root} ({describe_os_error(exc)})") from None
    try:
        walked = root
        for part in [] if rel == "." else Path(rel).parts:
            walked = walked / part
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise OutputError(
                        f"{flag}: {walked} has gone (removed or moved while the sandbox was writing)"
                    ) from None
                try:
                    os.mkdir(part, dir_fd=fd)
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise OutputError(f"{flag}: cannot create {walked} ({describe_os_error(exc)})") from None
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _not_ours(walked, flag, exc) from None
            except OSError as exc:
                raise _not_ours(walked, flag, exc) from None
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def _not_ours(path: Path, flag: str, exc: OSError) -> OutputError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):  # a link (O_NOFOLLOW), or not a directory
        what = "a symbolic link" if os.path.islink(path) else "not a directory"
        return OutputError(
            f"{flag}: {path} is {what}; the sandbox writes only into directories it created "
            "there and follows no link: remove it"
        )
    return OutputError(f"{flag}: cannot open {path} ({describe_os_error(exc)})")


def _lexists_at(dfd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _remove_at(dfd: int, name: str) -> None:
    """:func:`_remove` relative to an open directory: a link or file unlinked, a directory removed
    with its contents (rmtree with ``dir_fd`` follows no link)."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dfd, ignore_errors=True)
    else:
        try:
            os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            pass


def write_text_at(dfd: int, name: str, text: str, shown: Path) -> None:
    """:func:`write_text` into an open directory (atomic: a temporary file named as
    :func:`atomic_write`'s, then ``os.replace``, both relative to ``dfd``); ``shown``: the path named
    in an error."""
    tmp = f".{name}.{_token()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644, dir_fd=dfd)
        try:
            os.fchmod(fd, 0o644)
            data = memoryview(text.encode())
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException as exc:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise OutputError(f"could not write {shown} ({describe_os_error(exc)})") from exc
        raise
