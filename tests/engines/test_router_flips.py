"""Router flips that emerge from a lower-precision sampler on a mixture-of-experts LM
(``examples/study_mismatch_emerges.py``, ``docs/engines.md#mismatch-that-emerges``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "examples" / "study_mismatch_emerges.py"


@pytest.fixture(scope="module")
def study():
    spec = importlib.util.spec_from_file_location("study_mismatch_emerges_for_tests", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_router_flips_grow_with_fewer_bits_and_are_deterministic(study):
    int4 = study.router_flips("int4", 1)
    int3 = study.router_flips("int3", 1)
    bf16 = study.router_flips("bf16", 1)
    assert int4["decisions"] == int3["decisions"] == bf16["decisions"] > 500
    # coarser weights move the router's inputs and logits more: more decisions flip
    assert bf16["flip_fraction"] < int4["flip_fraction"] < int3["flip_fraction"] < 1
    assert int4["flip_fraction"] > 0.01
    assert study.router_flips("int4", 1) == int4
