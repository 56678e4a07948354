"""Reading a user's input file safely: the one helper every reader of a scenario, a sweep file or a
delay trace goes through (``read_toml``, ``load_sweep``, the trace delay, ``sandbox report``).

A file the sandbox reads must be

* a **regular file**: a directory, a FIFO (which would block the reader forever), a device such as
  ``/dev/zero`` (which never ends) or a socket is refused. The file is opened with ``O_NONBLOCK``
  and checked with ``fstat`` on the opened descriptor, so a FIFO swapped in after a check cannot
  block the open;
* at most ``limit`` bytes: :data:`TOML_LIMIT` (4 MiB: a shipped scenario is a few KiB, the
  largest sweep file a few tens of KiB) for scenarios, sweep files and the JSON files a run
  writes, :data:`TRACE_LIMIT` (256 MiB: a few million measured rows) for delay traces. The read
  itself is bounded (``limit + 1`` bytes), so a file that grows or a ``/proc`` file that reports
  size 0 cannot exhaust memory;
* **UTF-8** text: a decoding error names the byte offset, the line and the byte value;
* for TOML and JSON, nested at most :data:`MAX_DEPTH` levels (arrays and tables: a scenario has
  fewer than 10), checked by a scan of the brackets *before* parsing (``tomllib`` and ``json``
  recurse once per level, and a ``RecursionError`` traceback through thousands of frames took 44 s
  to print), and again on the parsed value (dotted keys ``a.b.c...`` nest without brackets).

Every failure is an :class:`InputFileError` (a ``ValueError``) whose message starts with the path;
the callers turn it into their own error type (``ScenarioError``, ``TraceError``), and the CLI
prints it as one ``error:`` line.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import Any

TOML_LIMIT = 4 * 1024 * 1024
TRACE_LIMIT = 256 * 1024 * 1024
MAX_DEPTH = 64


class InputFileError(ValueError):
    """An input file that cannot be read as text; the message starts with the path."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n:,} bytes"


def read_bytes(
    path: str | Path,
    limit: int = TOML_LIMIT,
    what: str = "file",
    *,
    dir_fd: int | None = None,
    shown: str | Path | None = None,
) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them (module docstring).

    ``dir_fd``: ``path`` is a name inside that open directory and is opened without following a
    symbolic link (``O_NOFOLLOW``): how the sandbox reads its own bookkeeping files inside an output
    directory (``sandbox.base.outputs``), which are data from a directory anyone may have written into;
    ``shown`` is then the path named in an error."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if dir_fd is not None:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    name, path = path, Path(shown if shown is not None else path)
    try:
        fd = os.open(name, flags, dir_fd=dir_fd) if dir_fd is not None else os.open(path, flags)
    except FileNotFoundError:
        raise InputFileError(f"{path}: {what} not found") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP and dir_fd is not None:
            raise InputFileError(f"{path}: {what} is a symbolic link; expected a regular file") from None
        if exc.errno == errno.ENXIO:  # a socket, or a FIFO opened without a writer in some modes
            raise InputFileError(f"{path}: {what} is not a regular file") from None
        raise InputFileError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputFileError(f"{path}: {what} is {_kind(st.st_mode)}; expected a regular file")
        if st.st_size > limit:
            raise InputFileError(f"{path}: {what} too large ({_size(st.st_size)}; the limit is {_size(limit)})")
        os.set_blocking(fd, True)
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise InputFileError(f"{path}: {what} too large (over {_size(limit)}, the limit)")
        return b"".join(chunks)
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise InputFileError(f"{path}: {what} is a directory; expected a regular file") from None
        raise InputFileError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def decode_utf8(data: bytes, path: str | Path, what: str = "file") -> str:
    """``data`` decoded as UTF-8 (a leading byte-order mark dropped); a decoding error names the
    byte offset, the line and the byte."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        bad = data[exc.start : exc.start + 1]
        raise InputFileError(
            f"{path}: {what} is not UTF-8 text (byte 0x{bad.hex()} at offset {exc.start}, line {line}: {exc.reason})"
        ) from None
    return text[1:] if text.startswith("\ufeff") else text


def read_text(path: str | Path, limit: int = TOML_LIMIT, what: str = "file") -> str:
    """A regular file's UTF-8 text, at most ``limit`` bytes (module docstring)."""
    return decode_utf8(read_bytes(path, limit, what), path, what)


# Strings and comments, whose brackets do not nest, then the brackets themselves; TOML's four kinds
# of string and JSON's double-quoted one. An unterminated string matches nothing and its quote is
# skipped: the scan is then an over-estimate, and the parser reports the error itself.
_TOKENS = re.compile(
    r'"""(?:[^"\\]|\\.|"(?!""))*"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*|[\[\]{}]'
)


def bracket_depth(text: str) -> int:
    """The deepest nesting of ``[ ]`` / ``{ }`` in TOML or JSON ``text``, outside strings and
    comments (a table header ``[a]`` or ``[[a]]`` counts 1 or 2)."""
    depth = deepest = 0
    for m in _TOKENS.finditer(text):
        tok = m.group()
        if tok in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif tok in "]}":
            depth = max(depth - 1, 0)
    return deepest


def value_depth(value: Any) -> int:
    """The nesting depth of dicts and lists in ``value`` (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        elif not isinstance(node, list):
            continue
        deepest = max(deepest, d + 1)
        if d + 1 > MAX_DEPTH:
            return d + 1
        stack.extend((v, d + 1) for v in node)
    return deepest


def check_depth(text: str, path: str | Path, what: str = "file") -> None:
    """Refuse ``text`` nested deeper than :data:`MAX_DEPTH` (before it is parsed)."""
    if bracket_depth(text) > MAX_DEPTH:
        raise InputFileError(f"{path}: {what} nested too deeply (over {MAX_DEPTH} levels of arrays or tables)")


def read_toml_text(path: str | Path, what: str = "file") -> dict:
    """A TOML file as a dict, through :func:`read_text` and both depth checks; a syntax error is an
    :class:`InputFileError` naming the line and column (``tomllib``'s message)."""
    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    text = read_text(path, TOML_LIMIT, what)
    check_depth(text, path, what)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputFileError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:  # pragma: no cover - the bracket scan refuses such files first
        raise InputFileError(f"{path}: {what} nested too deeply") from None
    if value_depth(data) > MAX_DEPTH:
        raise InputFileError(
            f"{path}: {what} nested too deeply (over {MAX_DEPTH} levels of tables, dotted keys included)"
        )
    return data


def read_json(
    path: str | Path,
    what: str = "file",
    *,
    dir_fd: int | None = None,
    shown: str | Path | None = None,
    limit: int = TOML_LIMIT,
) -> Any:
    """A JSON file (one the sandbox wrote, such as ``summary.json``) through the same checks; an
    :class:`InputFileError` naming the file, the line and the column of a syntax error. ``dir_fd``,
    ``shown``: as :func:`read_bytes` (a name in an open directory, no link followed)."""
    import json

    where = shown if shown is not None else path
    text = decode_utf8(read_bytes(path, limit, what, dir_fd=dir_fd, shown=shown), where, what)
    path = where
    check_depth(text, path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputFileError(
            f"{path}: not valid JSON ({exc.msg.removesuffix(' at')}: line {exc.lineno}, column {exc.colno}); "
            "the file is damaged: run again to rewrite it"
        ) from None
    except ValueError as exc:  # an integer over Python's 4,300-digit conversion limit
        raise InputFileError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:  # pragma: no cover - the bracket scan refuses such files first
        raise InputFileError(f"{path}: {what} nested too deeply") from None


def read_own_json(path: str | Path, what: str = "file") -> Any:
    """A JSON file the sandbox wrote into an output directory (a sweep's ``sweep.json``, a run's
    ``error.json``): :func:`read_json` on the last component opened relative to its directory without
    following a link, so a link, a FIFO or a device planted there is an :class:`InputFileError`, never
    read through."""
    path = Path(path)
    try:
        dfd = os.open(path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except FileNotFoundError:
        raise InputFileError(f"{path}: {what} not found") from None
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    try:
        return read_json(path.name, what, dir_fd=dfd, shown=path)
    finally:
        os.close(dfd)


__all__ = [
    "InputFileError",
    "MAX_DEPTH",
    "TOML_LIMIT",
    "TRACE_LIMIT",
    "bracket_depth",
    "check_depth",
    "decode_utf8",
    "read_bytes",
    "read_json",
    "read_own_json",
    "read_text",
    "read_toml_text",
    "value_depth",
]
