"""PROMOTION.md (what was mapped, converted, left to the user, or has no equivalent) and the
export directory, written so that it is never half old and half new.

Directory protocol: files are first written into ``<out>/.staging-*``; then the previous export's
manifest ``export.json`` is removed (the directory no longer claims to be complete), the previous
export's files are deleted, the new files are moved in, and ``export.json`` (written into the stage
with the rest) is moved in last. Nothing is written outside ``<out>``; a directory that holds
anything but a previous export is refused, except the files of this same export without a manifest
(an export whose last step failed: it is completed). The whole write holds an exclusive lock on the
directory itself (``flock`` on its descriptor: no lock file is added), so a second export into the
same directory is refused instead of replacing the first's files; a file that cannot be written is
an :class:`ExportError` naming it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sandbox.base.outputs import describe_os_error, json_text, signals_held
from sandbox.base.processes import note_signal
from sandbox.base.readfile import read_json
from sandbox.export.base import describe
from sandbox.export.plan import ExportError, ExportPlan, Row

MANIFEST = "export.json"

_SECTIONS: list[tuple[str, str, str]] = [
    ("no_equivalent", "No equivalent in {fw}", "Not written. Each line says what to do instead."),
    ("as_is", "Mapped as is", "Written with the scenario's value."),
    ("converted", "Converted", "Written after a unit or convention conversion."),
    (
        "pinned",
        "Pinned by the exporter",
        "Framework keys written explicitly so that the run means what the scenario meant.",
    ),
    ("implicit", "Same behaviour, no key", "The framework already behaves like the scenario here; nothing to write."),
    ("setup", "Your setup", "These describe your cluster and data: check them against the real run."),
    (
        "scale",
        "Scale-dependent: set for your model",
        "Tuned on a toy of about 1e5 parameters; they do not transfer to an LLM.",
    ),
    ("sandbox_only", "Sandbox only", "They describe the simulation; the GPU cluster replaces them."),
]


def _cell(value: Any) -> str:
    text = describe(value).replace("|", "\\|").replace("\n", " ")
    return f"`{text}`" if text else ""


def _row_line(r: Row) -> str:
    src = " + ".join(f"`{s.strip()}`" for s in r.source.split("+")) if r.source else "—"
    tgt = f"`{r.target}` = {_cell(r.target_value)}" if r.target is not None else "not written"
    note = r.note.replace("|", "\\|").replace("\n", " ")
    return f"| {src} | {_cell(r.value) if r.source else ''} | {tgt} | {note} |"


def render_promotion(plan: ExportPlan, files: dict[str, str], launch: str, provenance: str, title: str) -> str:
    counts = plan.counts()
    written = len(plan.settings)
    lines = [
        f"# Promotion to {title}",
        "",
        f"Framework **{plan.framework}** {plan.version} (keys read at {plan.release}); target: {plan.target}.",
        "",
        f"Source: {provenance}",
        "",
        f"Keys written: {written} ({counts['as_is']} as is, {counts['converted']} converted, "
        f"{counts['pinned']} pinned, {sum(1 for r in plan.rows if r.kind in ('setup', 'scale') and r.target)} "
        f"from your setup or the command line). Scenario fields without an equivalent: {counts['no_equivalent']}.",
        "",
    ]
    if counts["no_equivalent"]:
        lines += [
            f"> **Partial export.** {counts['no_equivalent']} setting(s) below cannot be expressed in {plan.framework}; "
            "the written configuration runs without them.",
            "",
        ]
    lines += ["## Files", ""]
    lines += [f"- `{name}`" for name in files]
    lines += ["", "## Launch", "", "```bash", launch.rstrip(), "```", ""]
    for kind, heading, blurb in _SECTIONS:
        rows = [r for r in plan.rows if r.kind == kind]
        if not rows:
            continue
        lines += [
            f"## {heading.format(fw=plan.framework)}",
            "",
            blurb,
            "",
            "| scenario field | scenario value | framework key | how / why |",
            "|---|---|---|---|",
        ]
        lines += [_row_line(r) for r in rows]
        lines.append("")
    if plan.metrics:
        lines += [
            "## Metrics to compare",
            "",
            "The sandbox's metric on the left, the framework's logged counterpart on the right.",
            "",
            "| sandbox | " + plan.framework + " |",
            "|---|---|",
        ]
        lines += [f"| `{k}` | {v} |" for k, v in plan.metrics.items()]
        lines.append("")
    if plan.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in plan.notes] + [""]
    return "\n".join(lines)


def _previous_files(out: Path, current: Iterable[str] = ()) -> list[str] | None:
    """Files of the previous export in ``out`` (None if ``out`` is empty or missing). Without a
    manifest, a directory holding only files named as ``current`` (this export's) is accepted: an
    export whose manifest could not be written (a full disk) is completed by the next one."""
    if not out.exists():
        return None
    if not out.is_dir():
        raise ExportError(f"--out: {out} exists and is not a directory")
    entries = [p for p in out.iterdir() if not p.name.startswith(".staging-")]
    if not entries:
        return None
    manifest = out / MANIFEST
    if not os.path.lexists(manifest) and all(
        p.name in set(current) and not p.is_symlink() and p.is_file() for p in entries
    ):
        return [p.name for p in entries]
    try:
        data = read_json(manifest, "export manifest")  # bounded, regular files only (sandbox.base.readfile)
        names = list(data["files"])
    except (OSError, ValueError, KeyError, TypeError):
        raise ExportError(
            f"--out: {out} is not empty and holds no previous export ({MANIFEST}); choose an empty or new directory"
        ) from None
    for name in names:
        # the manifest is data, never a list of paths to trust: only plain regular files directly in `out`
        if (
            not _plain_file_name(name)
            or (out / name).is_symlink()
            or ((out / name).exists() and not (out / name).is_file())
        ):
            raise ExportError(
                f"--out: {MANIFEST} in {out} lists {name!r}, which is not a file an export writes (a plain file "
                "name in that directory); nothing was changed: choose an empty or new directory"
            )
    return names


@contextmanager
def _directory_lock(out: Path) -> Iterator[None]:
    """An exclusive ``flock`` on the directory ``out`` itself for the duration (POSIX; elsewhere no
    lock): :class:`ExportError` at once if another export holds it."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    fd = os.open(out, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ExportError(
                f"--out: {out} is being written by another sandbox export; wait for it to finish or "
                "choose another --out"
            ) from None
        yield
    finally:
        os.close(fd)  # releases the lock


def previous_source(out: Path) -> str | None:
    """The ``source`` recorded in the manifest of the export in ``out`` (None: no readable export)."""
    try:
        source = read_json(Path(out) / MANIFEST, "export manifest").get("source")
    except (OSError, ValueError, AttributeError):
        return None
    return source if isinstance(source, str) else None


def _plain_file_name(name: object) -> bool:
    return (
        isinstance(name, str)
        and name not in ("", ".", "..", MANIFEST)
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
        and not name.startswith(".staging-")
    )


def write_export(out: Path, files: dict[str, str], manifest: dict[str, Any]) -> list[Path]:
    """Write ``files`` (name -> text) and the manifest into ``out``; see the module docstring."""
    out = Path(out)
    for name in files:
        if not _plain_file_name(name):
            raise AssertionError(f"exporter bug: file name {name!r} must be a plain name")
    _previous_files(out, files)  # refused before anything is created
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"--out: cannot create {out} ({describe_os_error(exc)})") from None
    with _directory_lock(out):
        previous = _previous_files(out, files)  # again, under the lock: what another export left counts
        for stale in out.glob(".staging-*"):  # left by an interrupted export
            shutil.rmtree(stale, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(dir=out, prefix=".staging-"))
        try:
            for name, text in files.items():
                _write_file(staging / name, text, 0o755 if name.endswith(".sh") else 0o644, out / name)
            _write_file(staging / MANIFEST, json_text({**manifest, "files": list(files)}), 0o644, out / MANIFEST)
            with signals_held() as got:  # Ctrl-C or SIGTERM waits until the new export is whole
                (out / MANIFEST).unlink(missing_ok=True)
                for name in previous or []:
                    (out / name).unlink(missing_ok=True)
                for name in files:
                    os.replace(staging / name, out / name)
                os.replace(staging / MANIFEST, out / MANIFEST)  # the manifest last: the export is whole
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    if got:
        note_signal(got[-1])
        raise KeyboardInterrupt
    return [out / n for n in files] + [out / MANIFEST]


def _write_file(path: Path, text: str, mode: int, shown: Path) -> None:
    """``text`` into the staged file ``path``; :class:`ExportError` naming ``shown`` (the file it becomes)
    when it cannot be written (a full disk)."""
    try:
        path.write_text(text)
        os.chmod(path, mode)
    except OSError as exc:
        raise ExportError(f"--out: could not write {shown} ({describe_os_error(exc)}); nothing was changed") from None
