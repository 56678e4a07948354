"""The framework-wheel cache (``sandbox.export.validate.wheels``) is shared by every process on the machine:
parallel test workers (``pytest -n 2``) and two commands at once. One fetcher at a time per wheel (a file
lock beside the cache); a process that waited finds the finished directory and neither downloads again nor
replaces the directory under the first one's readers. The download itself is replaced by a stand-in here."""

from __future__ import annotations

import os
import threading

from filelock import FileLock

from sandbox.export.validate import wheels


def _fake_fetch(fetched):
    def fetch(name, version, root, target):
        fetched.append(name)
        staging = root / f".{name}-staging"
        staging.mkdir()
        (staging / ".complete").write_text(f"{name}-{version}.whl\n")
        os.replace(staging, target)

    return fetch


def test_a_second_fetcher_waits_for_the_first_and_reuses_its_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOX_WHEEL_CACHE", str(tmp_path))
    fetched: list[str] = []
    monkeypatch.setattr(wheels, "_fetch", _fake_fetch(fetched))
    version = wheels.PINNED["verl"]
    target = tmp_path / f"verl-{version}"

    first = FileLock(str(tmp_path / f".verl-{version}.lock"))  # another process is fetching verl
    first.acquire()
    got: list = []
    second = threading.Thread(target=lambda: got.append(wheels.unpacked_wheel("verl")), daemon=True)
    second.start()
    second.join(1.0)
    assert second.is_alive() and fetched == []  # it waits on the lock instead of downloading too
    target.mkdir()  # the first fetcher finishes its directory, then lets go
    (target / ".complete").write_text("verl.whl\n")
    first.release()
    second.join(30)
    assert not second.is_alive() and got == [target] and fetched == []  # reused, not fetched again


def test_a_wheel_is_fetched_once_then_served_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOX_WHEEL_CACHE", str(tmp_path))
    fetched: list[str] = []
    monkeypatch.setattr(wheels, "_fetch", _fake_fetch(fetched))
    where = wheels.unpacked_wheel("areal")
    assert where == tmp_path / f"areal-{wheels.PINNED['areal']}" and (where / ".complete").is_file()
    assert wheels.unpacked_wheel("areal") == where and fetched == ["areal"]
