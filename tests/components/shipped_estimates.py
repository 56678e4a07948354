"""The budget estimate and the plan's per-component facts of every shipped scenario (each variant):
what ``data/shipped_estimates.json`` holds, written on the commit before the components carried their
knowledge (issue 26). Regenerate only for an intended change: ``PYTHONPATH=. python
tests/components/shipped_estimates.py > tests/components/data/shipped_estimates.json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "data" / "shipped_estimates.json"


def shipped_facts(root: Path = ROOT) -> dict:
    from sandbox.analysis.time_to_target import is_synchronous
    from sandbox.plan import capacity as P
    from sandbox.scenario.api import load_scenario, variant_scenarios
    from sandbox.scenario.budget import estimate

    out = {}
    for path in sorted((root / "scenarios").rglob("*.toml")):
        if "sweeps" in path.parts:
            continue
        scn, raw = load_scenario(path)
        for label, v in variant_scenarios(scn, raw).items():
            b = estimate(v)
            st = v.system.staleness.model_dump(mode="json")
            out[f"{path.relative_to(root)}::{label}"] = {
                "memory": b.memory,
                "seconds": b.seconds,
                "memory_terms": [[t.what, t.amount, t.formula()] for t in b.memory_terms],
                "time_terms": [[t.what, t.amount, t.formula()] for t in b.time_terms],
                "response_tokens": list(P.response_tokens(v.task)),
                "staleness_for": [P.staleness_for(st, k) for k in (0, 1, 2, 4)],
                "describe_control": P.describe_control(st),
                "bound_field_text": P.bound_field_text(v.system.staleness),
                "is_synchronous": is_synchronous(v.system.staleness),
                "is_synchronous_dict": is_synchronous(st),
                "drops": P._drops(v),
            }
    return out


if __name__ == "__main__":
    sys.stdout.write(json.dumps(shipped_facts(), sort_keys=True, indent=0) + "\n")
