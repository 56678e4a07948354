"""Export under a lock with the manifest moved in last (issue 42, finding 8): a second export into
the same directory is refused while the first holds it; a file that cannot be written is named; an
export whose manifest alone failed is completed by the next one instead of refusing its own
directory."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import pytest

from sandbox.export.plan import ExportError
from sandbox.export.promotion import MANIFEST, write_export

FILES = {"config.yaml": "a: 1\n", "launch.sh": "echo hi\n", "PROMOTION.md": "# p\n"}


def test_a_second_export_into_a_held_directory_is_refused(tmp_path):
    out = tmp_path / "o"
    write_export(out, FILES, {"source": "x"})
    fd = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another export at work
        with pytest.raises(ExportError, match="being written by another sandbox export"):
            write_export(out, {**FILES, "config.yaml": "a: 2\n"}, {"source": "x"})
    finally:
        os.close(fd)
    assert (out / "config.yaml").read_text() == "a: 1\n"
    assert sorted(p.name for p in out.iterdir()) == sorted([*FILES, MANIFEST])  # no lock file added


def test_a_full_disk_names_the_file_and_changes_nothing(tmp_path, monkeypatch):
    out = tmp_path / "o"
    write_export(out, FILES, {"source": "x"})
    real = Path.write_text

    def full(self, text, *a, **k):
        if self.name == "launch.sh":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, text, *a, **k)

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(ExportError, match=r"launch\.sh \(No space left on device\)"):
        write_export(out, {**FILES, "config.yaml": "a: 2\n"}, {"source": "x"})
    assert (out / "config.yaml").read_text() == "a: 1\n" and (out / MANIFEST).is_file()


def test_an_export_without_its_manifest_is_completed_not_refused(tmp_path):
    out = tmp_path / "o"
    write_export(out, FILES, {"source": "x"})
    (out / MANIFEST).unlink()  # the manifest alone failed (an older export wrote it after the files)
    write_export(out, FILES, {"source": "x"})
    assert (out / MANIFEST).is_file()
    (out / MANIFEST).unlink()
    (out / "notes.txt").write_text("mine")  # anything else: still refused
    with pytest.raises(ExportError, match="holds no previous export"):
        write_export(out, FILES, {"source": "x"})
