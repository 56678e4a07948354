"""The export's engine row (``sandbox/export/mismatch.py``): a non-exact engine gets a PROMOTION.md line
naming the inference-engine setting; the exact engine adds nothing."""

from __future__ import annotations

import pytest
from _common import TINY_LM

from sandbox.export.api import EXPORTERS, export_scenario
from sandbox.scenario.api import validate_scenario

TIS = {"correction": {"name": "tis", "level": "token", "C": 2.0}}


@pytest.mark.parametrize("framework", sorted(EXPORTERS))
def test_precision_engine_row_in_every_framework(framework):
    scn = validate_scenario(
        {"task": TINY_LM, "engine": {"name": "precision", "dtype": "fp8_e4m3"}, "algorithm": TIS}, "t"
    )
    exp = export_scenario(scn, framework, allow_partial=True)
    rows = [r for r in exp.plan.rows if r.source == "engine"]
    assert len(rows) == 1 and "quantization = 'fp8'" in rows[0].note and "float32" in rows[0].note
    assert "quantization = 'fp8'" in exp.files["PROMOTION.md"]
    assert "no mismatch correction" not in rows[0].note  # TIS is configured


def test_processed_row_names_the_sampling_params_and_the_logprob_mode():
    scn = validate_scenario(
        {
            "task": dict(TINY_LM, temperature=0.5),
            "engine": {"name": "processed_logprobs", "temperature": 2.0, "top_p": 0.9, "logprobs": "raw"},
        },
        "t",
    )
    row = next(r for r in export_scenario(scn, "verl", allow_partial=True).plan.rows if r.source == "engine")
    assert "SamplingParams(temperature = 1, top_p = 0.9)" in row.note and "raw_logprobs" in row.note
    assert "no mismatch correction is configured" in row.note


def test_exact_engine_adds_no_row():
    exp = export_scenario(validate_scenario({"algorithm": TIS}, "t"), "verl", allow_partial=True)
    assert not any(r.source.startswith("engine") for r in exp.plan.rows)
