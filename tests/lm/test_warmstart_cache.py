"""A warm-start cache file that is truncated, corrupted or carries no checksum is detected and
rebuilt, never loaded."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from sandbox.tasks.lm import LMTask, LMTaskConfig
from sandbox.tasks.lm import warmstart as ws


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOX_CACHE_DIR", str(tmp_path / "cache"))
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _task() -> LMTask:
    return LMTask(
        LMTaskConfig.model_validate(
            dict(
                problem=dict(kind="sort", min_len=2, max_len=4),
                model=dict(d_model=16, n_layers=1, n_heads=2),
                warmstart=dict(max_steps=10, target_accuracy=None, eval_every=5, dev_size=16),
                train_size=64,
                eval_size=16,
                eval_samples=1,
            )
        )
    )


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _drop_checksum(path):
    meta_path = path.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    del meta["sha256"]
    meta_path.write_text(json.dumps(meta))


@pytest.mark.parametrize("damage", [_truncate, _flip_byte, _drop_checksum])
def test_damaged_cache_is_rebuilt_not_loaded(damage, monkeypatch):
    first = _task().init_params(torch.Generator().manual_seed(0))
    path, meta_path = ws.cache_paths(_task())
    assert json.loads(meta_path.read_text())["sha256"] == ws._sha256(path)
    damage(path)

    loads = []
    real_load = torch.load
    monkeypatch.setattr(ws.torch, "load", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    before = ws.TRAININGS
    again = _task().init_params(torch.Generator().manual_seed(0))
    assert loads == [] and ws.TRAININGS == before + 1  # detected: trained again, the bad file never loaded
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert json.loads(meta_path.read_text())["sha256"] == ws._sha256(path)  # rewritten intact
    _task().init_params(torch.Generator().manual_seed(0))
    assert len(loads) == 1 and ws.TRAININGS == before + 1  # and now a cache hit


def test_cache_dir_honours_sandbox_cache_dir_then_xdg_cache_home(tmp_path, monkeypatch):
    """$SANDBOX_CACHE_DIR wins; without it the user cache directory follows $XDG_CACHE_HOME (platformdirs)."""
    from sandbox.export.validate import wheels

    assert ws.cache_dir() == tmp_path / "cache"  # the autouse fixture's SANDBOX_CACHE_DIR
    monkeypatch.setenv("SANDBOX_WHEEL_CACHE", str(tmp_path / "w"))
    assert wheels.cache_dir() == tmp_path / "w"
    monkeypatch.delenv("SANDBOX_CACHE_DIR")
    monkeypatch.delenv("SANDBOX_WHEEL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert ws.cache_dir() == tmp_path / "xdg" / "async-rl-sandbox"
        assert wheels.cache_dir() == tmp_path / "xdg" / "async-rl-sandbox" / "wheels"
    else:  # macOS / Windows: the platform's own cache folder
        assert ws.cache_dir().name in ("async-rl-sandbox", "Cache")
        assert wheels.cache_dir().parent == ws.cache_dir()
