"""Score one published speed-up from one scenario file (``sandbox claims --score FILE``; docs/claims.md,
section published_speedups_engine, "Score a new published setup").

The file is a scenario with variants ``async`` and the baseline (as the files of ``scenarios/published/``)
and a ``[published]`` table stating the published figure, what it measures and how the setup's GPUs
become engines (:class:`PublishedTable`). It runs through the same code as the claim's rows
(:func:`sandbox.claims.published_engine.step_times`: engines from the one timing model of
``docs/system.md#hardware``, the staleness control and training time of the file), and prints the
predicted speed-up = mean baseline step time / mean asynchronous step time per seed, its Student t 95%
interval over seeds, and predicted / published with its interval; the row's kind (prediction, consistency
check, not comparable) follows from ``measure`` and ``measured`` as in the claim.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sandbox.base.errors import ScenarioError
from sandbox.claims.base import t_interval
from sandbox.claims.published import FULL_STEPS, Published, ResponseLengths
from sandbox.claims.published_engine import PROMPT_TOKENS, EngineMapping, step_times
from sandbox.scenario.api import validate_scenario
from sandbox.scenario.load import read_toml, variant_scenarios
from sandbox.system.hardware import GPUS, MODELS


class PublishedTable(BaseModel):
    """The ``[published]`` table of a scenario file to score."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    system: str = Field(description="The system and setup, for the printout.")
    low: float = Field(gt=0, description="The published speed-up (a range's low end).")
    high: float | None = Field(None, gt=0, description="A published range's high end (None = low).")
    measure: Literal["throughput", "time_to_score"] = Field(
        description="What the figure measures: same steps' wall time (throughput) or wall time to a score."
    )
    baseline: str = Field("colocated_sync", description="The variant that plays the published synchronous baseline.")
    source: str = Field(description="Where the figure is published.")
    gpu: Literal[tuple(GPUS)] = Field(description="Accelerator of the engines.")  # type: ignore[valid-type]
    model: Literal[tuple(MODELS)] = Field(description="Model of the hardware table.")  # type: ignore[valid-type]
    tp: int = Field(1, ge=1, description="GPUs per engine (tensor parallel).")
    max_sequences: int = Field(
        256, ge=1, description="Sequences in flight per engine at most (the engine's cap: vLLM's max_num_seqs)."
    )
    step_floor: float = Field(
        0.0, ge=0, description="Least seconds of a decode step of the async variant's engines (eager mode; 0 = none)."
    )
    baseline_step_floor: float = Field(
        0.0, ge=0, description="Least seconds of a decode step of the baseline's engines (eager mode; 0 = none)."
    )
    sync: Literal["drain", "abort", "partial"] = Field(description="The engines' weight-sync mode (the system's own).")
    median: float = Field(gt=0, description="Median response length, tokens.")
    sigma: float = Field(ge=0, description="σ of log response length.")
    max_tokens: int = Field(ge=1, description="Maximum response length, tokens.")
    prompt_tokens: int = Field(PROMPT_TOKENS, ge=0, description="Prompt tokens per sequence.")
    local_updates: int = Field(
        1,
        ge=1,
        description="Learner steps per published step in the async variant (verl trigger_parameter_sync_step with "
        "stream_sync): its groups_per_step and training time are split evenly over them.",
    )
    measured: str = Field("", description="The source's measured component times used as inputs ('' = none).")
    facts: str = Field("", description="The inputs that are the source's facts.")
    assumed: str = Field("", description="The inputs that are assumptions.")

    @model_validator(mode="after")
    def _range(self):
        if self.high is not None and self.high < self.low:
            raise ValueError(f"high: {self.high} is below low = {self.low}")
        return self


def load_published(path: str | Path) -> tuple[PublishedTable, dict]:
    """The ``[published]`` table and the setup's variants; a :class:`ScenarioError` naming the field."""
    raw = read_toml(Path(path))
    if "published" not in raw:
        raise ScenarioError(
            [
                "published: missing; a file to score states the published figure in a [published] "
                "table (docs/claims.md, 'Score a new published setup')"
            ],
            str(path),
        )
    table = dict(raw.pop("published"))
    try:
        pub = PublishedTable.model_validate(table)
    except ValidationError as exc:  # name each field under [published]
        problems = [f"published.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise ScenarioError(problems, str(path)) from None
    runs = variant_scenarios(validate_scenario(raw, str(path)), raw)
    for name in ("async", pub.baseline):
        if name not in runs:
            raise ScenarioError(
                [
                    f"variants.{name}: missing; the file needs variants 'async' and the baseline "
                    f"'{pub.baseline}' (published.baseline)"
                ],
                str(path),
            )
    return pub, runs


def score(path: str | Path, steps: int = FULL_STEPS, seeds: int = 8) -> dict:
    """Predicted / published for one file (module docstring), as plain numbers."""
    table, runs = load_published(path)
    G = runs["async"].algorithm.group_size
    pub = Published(
        str(path),
        table.system,
        table.low,
        table.high or table.low,
        table.baseline,
        table.measure,
        table.source,
        ResponseLengths(median=table.median, sigma=table.sigma, max_tokens=table.max_tokens, group_size=G),
    )
    mapping = EngineMapping(
        gpu=table.gpu,
        model=table.model,
        sync=table.sync,
        tp=table.tp,
        max_sequences=table.max_sequences,
        step_floor=table.step_floor,
        baseline_step_floor=table.baseline_step_floor,
        prompt_tokens=table.prompt_tokens,
        facts=table.facts,
        measured=table.measured,
        assumed=table.assumed,
    )
    if table.local_updates > 1:  # the file's own control, one published step = local_updates learner steps
        mapping = replace(
            mapping, schedule=runs["async"].system.staleness.model_dump(mode="json"), local_updates=table.local_updates
        )
    mode, base = step_times(pub, mapping, None, steps, seeds, runs=runs)
    predicted = base / mode
    m, lo, hi = t_interval(predicted)
    r, r_lo, r_hi = t_interval(predicted / pub.value)
    return {
        "system": table.system,
        "published": pub.value,
        "published_text": pub.text(),
        "measure": table.measure,
        "kind": mapping.kind(table.measure),
        "predicted": m,
        "predicted_low": lo,
        "predicted_high": hi,
        "ratio": r,
        "ratio_low": r_lo,
        "ratio_high": r_hi,
        "within_band": bool(0.8 <= r <= 1.25),
        "async_step_s": float(np.mean(mode)),
        "baseline_step_s": float(np.mean(base)),
        "steps": steps,
        "seeds": seeds,
    }
