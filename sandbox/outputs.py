"""The run directory: resolved scenario, metrics table, event log, jobs, summary, figures.

Every file is written atomically (temporary file in the same directory, then ``os.replace``), so
an interrupted run never leaves a half-written result that looks complete.

A whole run is written into a staging directory ``<out>/.staging-*`` and moved into place when it
is complete (:class:`StagedDir`): the previous run's entries leave first (its ``summary.json``
before anything else), the new ones come in (``summary.json`` last), and Ctrl-C during that move
is held until the move is done. A run interrupted before the move leaves the previous run as it
was. ``sandbox run`` also holds a lock file ``<out>/.sandbox.lock`` (:func:`output_lock`) so that
two processes never write the same directory.

Variant and sweep names become directory names through :func:`safe_name` (rule: ``NAME_RULE``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pandas is imported by the caller; scenario loading does not need it
    import pandas as pd


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp_path)`` and move the result to ``path`` in one step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda p: p.write_text(text))


def write_json(path: Path, obj) -> None:
    write_text(path, json.dumps(obj, indent=2, default=_json_default, allow_nan=True) + "\n")


def write_table(path: Path, df: pd.DataFrame) -> None:
    atomic_write(path, lambda p: df.to_parquet(p, index=False))


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    def w(p: Path) -> None:
        with open(p, "wb") as fh:
            np.savez_compressed(fh, **arrays)

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
RUN_FILES = ("scenario.toml", "metrics.parquet", "jobs.parquet", "events.parquet", "replicas.npz",
             "figures", "tensorboard", "wandb", "summary.json")
"""What :func:`sandbox.runner.write_run_dir` writes into a run directory."""
COMPARISON = "comparison.png"
COMPARISON_VECTOR = "comparison.svg"
TIME_TO_TARGET = "time_to_target.png"
"""Beside ``comparison.png``: the variants' time-to-target figure (docs/time_to_target.md)."""
REPORT = "report.html"
_RESERVED = {n.lower() for n in (*RUN_FILES, COMPARISON, COMPARISON_VECTOR, TIME_TO_TARGET,
                                  TIME_TO_TARGET.replace(".png", ".svg"), REPORT)}


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
            same = f"the directory name {slug!r}" if out[other] == slug else (
                f"the directory names {out[other]!r} and {slug!r}, the same on case-insensitive file systems")
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
_STAGING = ".staging-"
_REPLACED = ".replaced-"
_TMP = re.compile(r"^\.(.+)\.[a-z0-9_]{8}\.tmp$")  # atomic_write's temporary files (mkstemp names)


def is_transient_dir(name: str) -> bool:
    """Whether a directory name is one of :class:`StagedDir`'s own (a stage being written, or a
    replaced run waiting to be deleted): not where anything ends up."""
    return name.startswith((_STAGING, _REPLACED))


def remove_orphans(root: Path, recursive: bool = True, names: Iterable[str] | None = None) -> int:
    """Delete what interrupted writers left in ``root`` (temporary files of :func:`atomic_write`,
    staging directories); returns how many. ``names``: only temporary files of these files. Only
    call it on a directory of ours, while no other process writes there (hold the lock)."""
    root = Path(root)
    keep_only = set(names) if names is not None else None
    n = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for d in list(dirnames):
            if is_transient_dir(d) and keep_only is None:
                shutil.rmtree(os.path.join(dirpath, d), ignore_errors=True)
                dirnames.remove(d)
                n += 1
        for f in filenames:
            m = _TMP.match(f)
            if m and (keep_only is None or m.group(1) in keep_only):
                Path(dirpath, f).unlink(missing_ok=True)
                n += 1
        if not recursive:
            break
    return n


def _mkdir(out: Path, flag: str) -> None:
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


@contextmanager
def output_lock(out: Path, flag: str = "--out") -> Iterator[None]:
    """Hold ``<out>/.sandbox.lock`` (created with ``out``) for the duration; :class:`OutputError`
    at once if another process (or another writer in this one) holds it. The lock is an OS file lock
    (``filelock``: ``flock`` on POSIX, ``msvcrt`` on Windows), so it goes with the process, even on
    ``kill -9``. A lock path that is a symbolic link is refused: the lock is never taken, or its pid
    written, through a link to a file elsewhere."""
    from filelock import FileLock, Timeout

    out = Path(out)
    _mkdir(out, flag)
    path = out / LOCK
    if path.is_symlink():
        raise OutputError(
            f"{flag}: {path} is a symbolic link; the lock file is never followed to another file. "
            "Remove the link or choose another " + flag
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
def _sigint_held() -> Iterator[list]:
    """Ctrl-C is recorded, not raised, inside the block (the main thread only)."""
    got: list = []
    if threading.current_thread() is not threading.main_thread():
        yield got
        return
    prev = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        yield got
    finally:
        signal.signal(signal.SIGINT, prev)


def _looks_like_run(path: Path) -> bool:
    return path.is_dir() and any((path / f).exists() for f in ("scenario.toml", "summary.json"))


class StagedDir:
    """``with StagedDir(out) as stage:`` write a run into ``stage``; on a normal exit it replaces
    the previous run in ``out`` (see the module docstring); on an exception the stage is removed
    and ``out`` is as it was.

    ``whole=True`` (``sandbox run``): ``out`` belongs to the run. It must be empty, missing, or hold
    a previous run (recognised by the manifest ``.sandbox-run.json``, or for directories written
    before it existed by holding only run files, or ``comparison.png`` and run directories);
    anything else is refused with :class:`OutputError`. The lock is held, leftovers of interrupted
    runs are removed first, and a directory created here is removed again if nothing was kept.
    ``whole=False`` (one run directory, e.g. of a sweep): only the entries in ``RUN_FILES`` are
    replaced; other files (a sweep's ``run.json``) stay.
    """

    def __init__(self, out: str | Path, *, whole: bool = False, flag: str = "--out", writer: str = "sandbox run"):
        self.out = Path(out)
        self.whole = whole
        self.flag = flag
        self.writer = writer  # the command named in the directory's manifest
        self.previous: list[str] = []
        self.committed = False
        self._lock = None
        self._created = False
        self._had_lock = False

    # -- what the previous run is ------------------------------------------------------------------

    def _previous_entries(self) -> list[str]:
        names = sorted(p.name for p in self.out.iterdir() if not p.name.startswith("."))
        if not self.whole:
            return [n for n in names if n in RUN_FILES or n == REPORT]
        if not names:
            return []
        listed = self._manifest_entries()
        if listed is not None:
            foreign = [n for n in names if n not in listed and n != REPORT]
        elif (self.out / COMPARISON).exists():  # a multi-variant run written before the manifest
            foreign = [n for n in names if n not in (COMPARISON, COMPARISON_VECTOR, REPORT)
                       and not _looks_like_run(self.out / n)]
        elif any(n in ("summary.json", "scenario.toml") for n in names):  # a single run, same
            foreign = [n for n in names if n not in RUN_FILES and n != REPORT]
        else:
            foreign = names
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise OutputError(
                f"{self.flag}: {self.out} holds files that are not part of a sandbox run ({shown}); "
                f"choose an empty or new directory, or remove them"
            )
        return names

    def _manifest_entries(self) -> list[str] | None:
        try:
            data = json.loads((self.out / MANIFEST).read_text())
            entries = data["entries"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return [e for e in entries if isinstance(e, str)] if isinstance(entries, list) else None

    # -- the protocol ------------------------------------------------------------------------------

    def __enter__(self) -> Path:
        self._created = not self.out.exists()
        self._had_lock = (self.out / LOCK).exists()
        if self.whole:
            self._lock = output_lock(self.out, self.flag)
            self._lock.__enter__()
        else:
            _mkdir(self.out, self.flag)
        try:
            self.previous = self._previous_entries()  # refuses a directory that is not ours
            if self.whole:
                remove_orphans(self.out)
            self.stage = Path(tempfile.mkdtemp(dir=self.out, prefix=_STAGING))
        except BaseException:
            self._release(False)
            raise
        return self.stage

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc_type is None:
                self._commit()
        finally:
            shutil.rmtree(self.stage, ignore_errors=True)
            self._release(self.committed)
        return False

    def _release(self, kept: bool) -> None:
        if self._lock is None:
            return
        if not kept and not self._had_lock:  # nothing was kept: leave no lock file (or empty directory) behind
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
        with _sigint_held() as got:
            trash = Path(tempfile.mkdtemp(dir=self.out, prefix=_REPLACED))
            try:
                for name in old:
                    if os.path.lexists(self.out / name):
                        os.replace(self.out / name, trash / name)
                        moved_out.append(name)
                for name in new:
                    os.replace(self.stage / name, self.out / name)
                    moved_in.append(name)
                if self.whole:
                    write_json(self.out / MANIFEST, {"written_by": self.writer, "entries": new})
                self.committed = True
            except OSError as exc:  # e.g. a full disk: put the previous run back as it was
                for name in reversed(moved_in):
                    os.replace(self.out / name, self.stage / name)
                for name in reversed(moved_out):
                    os.replace(trash / name, self.out / name)
                raise OutputError(
                    f"{self.flag}: could not move the finished run into {self.out} ({exc.strerror or exc}); "
                    "nothing was kept" + ("; the previous run is as it was" if self.previous else "")
                ) from exc
            finally:
                shutil.rmtree(trash, ignore_errors=True)
        if got:  # Ctrl-C during the move: the run is in place, now stop
            raise KeyboardInterrupt
