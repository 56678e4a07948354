"""Print (or write) the ``system.generation_time`` and ``system.train_time`` of a scenario in ``scenarios/published/``.

Both come from the one timing model (docs/system.md#hardware) as the claim ``published_speedups_engine``
runs the scenario's ``async`` variant (``sandbox/claims/published_engine.py``; docs/claims.md, section
published_speedups_engine): ``generation_time`` is that variant's ``continuous_batching`` engine
(:func:`sandbox.claims.published_engine.engine_fields`: the setup's GPU, model, tensor parallel, length
model, groups per engine and weight-sync mode); ``train_time`` is ``sandbox plan``'s ``hardware`` trainer
for a prediction row (:func:`sandbox.claims.published_engine.with_trainer`) and the source's measured
seconds, left as the file states them, for a consistency check. A test keeps the files equal to this.

    python tools/published_generation.py areal_fully_async          # print the two TOML lines
    python tools/published_generation.py --write                    # rewrite every published scenario
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap

from sandbox.claims.published import ROOT, SETUPS, Published, setup_variants
from sandbox.claims.published_engine import (
    ENGINE_SETUPS,
    SCENARIO_SEQUENCES_PER_GPU,
    engine_fields,
    engine_runs,
    step_costs,
    with_trainer,
)
from sandbox.system.hardware import mean_context

GENERATION = re.compile(r"^generation_time = \{.*?\}$", re.S | re.M)
"""The ``generation_time`` line (or the older multi-line ``empirical`` block) of a file's ``[system]`` table."""
TRAIN = re.compile(r"^train_time = \{.*\}$", re.M)
MAPPING = "Mapping onto the "
"""The description's last paragraph starts so (the tool rewrites it to the end of the description)."""
WIDTH = 115


def inline(value) -> str:
    """``value`` as a TOML inline value (tables, strings, numbers)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {inline(v)}" for k, v in value.items()) + " }"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def generation_line(setup: Published) -> str:
    """``generation_time = {...}``: the engine the claim runs the ``async`` variant on."""
    mapping = ENGINE_SETUPS[setup.scenario]
    gen = engine_runs(setup, mapping).mode.generation_time
    fields = engine_fields(mapping, setup.lengths, gen.workers_per_engine, gen.sync, gen.step_floor)
    return f"generation_time = {inline(fields)}"


def train_line(setup: Published) -> str | None:
    """``train_time = {...}``: ``sandbox plan``'s trainer of the ``async`` variant for a prediction row; None for a
    row whose training time is the source's measurement (the file's own line stays)."""
    mapping = ENGINE_SETUPS[setup.scenario]
    if mapping.train_gpus is None:
        return None
    train = engine_runs(setup, mapping).mode.train_time
    fields = {"kind": "hardware", **train.model_dump(include={"gpu", "model", "gpus", "mfu", "recompute_passes"})}
    fields["tokens_per_step"] = train.tokens_per_step
    return f"train_time = {inline(fields)}"


def _train_text(train) -> str:
    if train.kind == "hardware":
        return (
            f"sandbox plan's trainer, (6 + 2·{train.recompute_passes})·N·T / ({train.gpus} {train.gpu} · peak · MFU "
            f"{train.mfu}) = {train.expected():.1f} s per step (T = {train.tokens_per_step:,} prompt and response tokens)"
        )
    return f"{train.expected():g} s per step (the source's measurement)"


def mapping_paragraph(setup: Published) -> str:
    """The description's last paragraph: how the file maps onto the one timing model, its numbers computed."""
    mapping = ENGINE_SETUPS[setup.scenario]
    runs = setup_variants(setup.scenario)
    n, G = setup.lengths, setup.lengths.group_size
    slots = max(SCENARIO_SEQUENCES_PER_GPU // G, 1)
    a, b = step_costs(mapping, n)
    context = mean_context(n.median, n.sigma, n.max_tokens, mapping.prompt_tokens)
    lines = [
        "Mapping onto the one timing model (docs/claims.md, section published_speedups_engine; docs/system.md#hardware;",
        "tools/published_generation.py writes this paragraph, generation_time and, for a prediction, train_time):",
        f"rollout GPUs = num_workers / ({SCENARIO_SEQUENCES_PER_GPU} / {G}) group slots per GPU; one {mapping.gpu} engine per "
        f"{mapping.tp} GPU(s) running {mapping.model}, at most {mapping.max_sequences} sequences in flight "
        f"({mapping.cap_source}); decode step a + b·n with a = {a * 1e3:.2f} ms and b = {b * 1e6:.1f} us per sequence "
        f"at the mean context of a sequence in flight ({context:,.0f} tokens), prefill and KV capacity from the "
        f"hardware table (eta_flop 0.5, an assumption); each sequence its own length: log-normal, median "
        f"{n.median:g} tokens, sigma {n.sigma:g}, cut at {n.max_tokens} (mean response "
        f"{n.mean_response_tokens():,.0f} tokens); {mapping.prompt_tokens} prompt tokens (an assumption); the "
        f"engines' weight sync: {mapping.sync}. One learner step = one published batch of "
        f"{runs['async'].algorithm.groups_per_step} prompts x {G} (algorithm).",
    ]
    if mapping.train_gpus is not None:
        runs = with_trainer(runs, setup, mapping)
    for name, run in runs.items():
        cfg = run.system
        lines.append(
            f"Variant '{name}': {cfg.num_workers // slots} rollout GPUs, staleness {cfg.staleness.kind}, "
            f"training {_train_text(cfg.train_time)}."
        )
    return "\n".join(lines[:2] + [textwrap.fill(line, WIDTH) for line in lines[2:]])


def rewrite(text: str, setup: Published) -> str:
    """``text`` (a scenario file) with its generation and training lines and its mapping paragraph replaced."""
    start = text.find(MAPPING)
    end = text.find('"""', start)
    if start < 0 or end < 0:
        raise SystemExit(f"{setup.scenario}: expected a description paragraph starting {MAPPING!r}")
    text = text[:start] + mapping_paragraph(setup) + text[end:]
    if len(GENERATION.findall(text)) != 1:
        raise SystemExit(f"{setup.scenario}: expected exactly one generation_time line")
    text = GENERATION.sub(lambda _: generation_line(setup), text)
    line = train_line(setup)
    if line is not None:
        if len(TRAIN.findall(text)) != 1:
            raise SystemExit(f"{setup.scenario}: expected exactly one train_time line")
        text = TRAIN.sub(lambda _: line, text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="scenario names (file stems); none = all")
    parser.add_argument("--write", action="store_true", help="replace the two lines in the scenario files")
    args = parser.parse_args(argv)
    by_name = {p.scenario: p for p in SETUPS}
    unknown = [n for n in args.names if n not in by_name]
    if unknown:
        parser.error(f"unknown scenario {unknown[0]!r}; expected one of {', '.join(by_name)}")
    for name in args.names or list(by_name):
        setup = by_name[name]
        if not args.write:
            print(generation_line(setup))
            line = train_line(setup)
            print(line if line is not None else f"# {name}: train_time is the source's measurement (kept)")
            continue
        path = ROOT / f"{name}.toml"
        path.write_text(rewrite(path.read_text(), setup))
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
